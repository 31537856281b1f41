"""rdmem as a LlamaIndex agent's memory: history in SQLite, each model call within 600 tokens (offline:
LlamaIndex's mock LLM, scripted to look restaurants up, then answer). Needs 'rdmem[llamaindex]'."""

import asyncio
import tempfile

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall as MockLLM

from rdmem.integrations.llamaindex import RdmemMemory


def restaurants(area: str) -> str:
    """Restaurants open tonight in an area of Lisbon."""
    return f"Open tonight in {area}: Tasca do Chico (grilled fish), Pateo 13 (sardines)."


def model(messages: list[ChatMessage], **kwargs: object) -> ChatMessage:  # look it up, then answer
    if messages[-1].role == "user":
        return ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_call_id="c1", tool_name="restaurants",
                                                                   tool_kwargs={"area": "Alfama"})])
    return ChatMessage(role="assistant", content=f"{messages[-1].content} No peanuts, as you asked.")


async def main() -> None:
    llm = MockLLM(response_generator=model)
    agent = FunctionAgent(tools=[restaurants], llm=llm, system_prompt="You are a travel assistant for Lisbon.")
    store = f"sqlite:///{tempfile.mkdtemp()}/memory.db"
    memory = RdmemMemory.from_defaults(session_id="alice", token_limit=600, store=store, agent=agent)
    memory.put(ChatMessage(role="user", content="Remember that I'm allergic to peanuts."))
    memory.put_messages([ChatMessage(role=("user", "assistant")[i % 2], content=f"Turn {i}: the tram to Belem.")
                         for i in range(80)])
    print(await agent.run(user_msg="Where can I eat tonight near Alfama?", memory=memory))
    seen = [m.content or "" for m in llm.last_chat_messages]
    print(f"{len(memory.get_all())} messages stored; the model saw {len(seen)}, the peanut allergy among them:",
          any("peanuts" in text for text in seen))


asyncio.run(main())
