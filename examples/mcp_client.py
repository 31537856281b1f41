"""rdmem's MCP server (``rdmem mcp``), driven over stdio by the official MCP SDK client; offline.

    python examples/mcp_client.py

An agent remembers a long conversation that began with "Remember that I'm
allergic to peanuts", then asks for the context of a food question within
300 tokens: the directive is in it, the chatter is not. A second server
process on the same SQLite file (a new session of the agent, the next day)
finds the conversation there and continues it. Needs ``pip install 'rdmem[mcp]'``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

QUESTION = "What can I eat tonight near Alfama? Any restaurant that is safe for me?"
TOPICS = ["the tram to Belem", "a bookshop in Chiado", "fado in Alfama", "the ferry across the river"]


def conversation(turns: int = 60) -> list[dict[str, Any]]:
    """The directive first, then travel chatter."""
    out = [{"role": "user", "content": "Remember that I'm allergic to peanuts."},
           {"role": "assistant", "content": "Noted: no peanuts in anything I suggest."}]
    for i in range(turns):
        topic = TOPICS[i % len(TOPICS)]
        role = "user" if i % 2 == 0 else "assistant"
        text = f"tell me more about {topic}, please." if role == "user" else f"{topic} is lovely; go early."
        out.append({"role": role, "content": f"Turn {i}: {text}"})
    return out


def rdmem_mcp(store: str) -> StdioServerParameters:
    """``rdmem mcp --store STORE --session alice`` (run with this Python, so the example needs no PATH)."""
    return StdioServerParameters(command=sys.executable, env={"HF_HUB_OFFLINE": "1"},
                                 args=["-m", "rdmem", "mcp", "--store", store, "--session", "alice"])


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{Path(tmp) / 'memory.db'}"
        async with Client(rdmem_mcp(store)) as client:
            tools = await client.list_tools()
            print("tools:", ", ".join(t.name for t in tools.tools))
            await client.call_tool("remember", {"messages": conversation()})
            await client.call_tool("remember", {"content": QUESTION})
            ctx = await client.call_tool("context", {"query": QUESTION, "budget": 300})
            seen = ctx.structured_content
            print(f"context: {len(seen['messages'])} messages, {seen['tokens']} tokens (budget {seen['budget']})")
            for m in seen["messages"]:
                print(f"  {m['role']:>9}: {m['content']}")
            found = (await client.call_tool("recall", {"query": "peanut allergy", "k": 1})).structured_content
            print(f"recall 'peanut allergy': {found['results'][0]['id']} {found['results'][0]['content']}")
        async with Client(rdmem_mcp(store)) as client:  # a new process: the memory is in the file
            await client.call_tool("remember", {"messages": [
                {"role": "assistant", "content": "Try the grilled fish at a tasca; ask them about peanut oil."},
                {"role": "user", "content": "Thanks! And a dessert without nuts?"}]})
            seen = (await client.call_tool("context", {"query": "dessert without nuts", "budget": 300})
                    ).structured_content
            print(f"second process: {len(seen['messages'])} messages, {seen['tokens']} tokens, "
                  f"newest: {seen['messages'][-1]['content']}")
            sessions = await client.read_resource("rdmem://sessions")
            print("sessions:", sessions.contents[0].text)


if __name__ == "__main__":
    asyncio.run(main())
