"""The OpenAI Agents SDK: a ``Session`` kept in an rdmem store, and a filter that fits every model call.

    from agents import Agent, RunConfig, Runner
    from rdmem.integrations.openai_agents import RdmemSession

    session = RdmemSession("alice", store="sqlite:///memory.db", budget=4000)
    config = RunConfig(call_model_input_filter=session.call_model_input_filter)
    result = await Runner.run(agent, "Which restaurant is safe for me?", session=session, run_config=config)

The session stores every item the runner gives it, whole (each chat message
carries the SDK items it was made from), and answers ``get_items()`` with
what fits the budget: rdmem's context, the stored items where a message is
sent verbatim. ``call_model_input_filter`` does the same before *every*
model call of a run (a tool loop grows the input between two of them), with
the newest user message as the query, so archived facts come back when the
question needs them. ``get_items(limit)`` returns the newest ``limit`` items
as stored, as ``SQLiteSession`` does; :meth:`RdmemSession.all_items` all of
them.

Items become chat messages this way: a user, system, developer or assistant
message is one message (its text parts joined; other parts named, as
``[input_image]``); consecutive ``function_call`` items are one assistant
message with their tool calls, and each ``function_call_output`` a tool
message; a ``reasoning`` item travels with the item after it; any other item
(a hosted tool's call or output) is a message that names its type. Needs
``pip install 'rdmem[openai-agents]'``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..aio import AsyncMemoryManager
from ..manager import MemoryManager
from ..messages import chat_fields
from ..reconstruct import MARKER
from ..result import Compaction
from ..tokens import content_text

__all__ = ["ITEMS_KEY", "RdmemSession", "items_to_messages", "context_items"]

#: The field of a stored message that holds the SDK items it was made from.
ITEMS_KEY = "agents_items"
_ROLES = ("user", "assistant", "system", "developer")


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if dump is not None:
        return dump(exclude_unset=True)
    raise TypeError(f"an Agents SDK item is a dict or a pydantic model, got {type(item).__name__}")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for p in content or ():
        if not isinstance(p, Mapping):
            continue
        kind = p.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append(str(p.get("text", "")))
        elif kind == "refusal":
            parts.append(str(p.get("refusal", "")))
        elif kind:
            parts.append(f"[{kind}]")
    return "\n".join(parts)


def _output(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _text(output)
    return json.dumps(output, ensure_ascii=False, default=str)


def items_to_messages(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Chat messages for SDK items, each with the items it stands for under :data:`ITEMS_KEY`."""
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # reasoning items, waiting for the item they precede
    calls_open = False  # the last message is an assistant tool call that more function_call items extend
    for raw in items:
        item = _plain(raw)
        kind = item.get("type")
        if kind == "reasoning":
            pending.append(item)
            continue
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}}
            if calls_open and not pending:
                out[-1]["tool_calls"].append(call)
                out[-1][ITEMS_KEY].append(item)
                continue
            msg: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif kind == "function_call_output":
            msg = {"role": "tool", "tool_call_id": item["call_id"], "content": _output(item.get("output"))}
        elif kind in (None, "message") and item.get("role") in _ROLES:
            msg = {"role": item["role"], "content": _text(item.get("content"))}
        else:  # a hosted tool's call or its output: kept, and named for the model
            detail = item.get("output") if str(kind).endswith("_output") else item.get("action")
            text = f"[{kind}]" + (f" {_output(detail)}" if detail else "")
            msg = {"role": "user" if str(kind).endswith("_output") else "assistant", "content": text}
        msg[ITEMS_KEY] = [*pending, item]
        pending = []
        calls_open = kind == "function_call"
        out.append(msg)
    if pending:
        out.append({"role": "assistant", "content": "", ITEMS_KEY: pending})
    return out


def context_items(ctx: Compaction, stored: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """SDK input items for a context: a message sent verbatim gives back its stored items; a marker, the
    summary, or a cut or compressed message becomes an input message (a tool result stays an output of its
    call)."""
    kept = set(ctx.kept_ids)
    out: list[dict[str, Any]] = []
    for msg, src in zip(ctx.messages, ctx.sources, strict=True):
        items = stored.get(src, {}).get(ITEMS_KEY) if src in kept else None
        if items:
            out.extend(dict(i) for i in items)
        elif msg["role"] == "tool":
            out.append({"type": "function_call_output", "call_id": msg["tool_call_id"],
                        "output": content_text(msg.get("content"))})
        elif msg.get("tool_calls"):
            out.extend({"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                        "arguments": c["function"]["arguments"]} for c in msg["tool_calls"])
        else:
            role = msg["role"] if msg["role"] in _ROLES else "user"
            out.append({"role": role, "content": content_text(msg.get("content"))})
    return out


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    for m in reversed(messages):
        if m.get("role") == "user":
            text = content_text(m.get("content"))
            if text and not MARKER.match(text):
                return text
    return None


class RdmemSession:
    """An Agents SDK session (the ``Session`` protocol) whose items live in an rdmem session.

    ``store``, ``budget`` (tokens of what the model is given), ``policy`` and
    any other :class:`~rdmem.MemoryManager` keyword configure the session; or
    pass a ``manager``. Safe to share between coroutines (each call runs in a
    worker thread, one at a time per session).
    """

    session_settings: Any = None

    def __init__(self, session_id: str, *, store: Any = None, budget: int = 4000, policy: str = "rd",
                 manager: MemoryManager | None = None, session_settings: Any = None, **settings: Any) -> None:
        if manager is None:
            manager = MemoryManager(budget=budget, policy=policy, store=store, session=session_id, **settings)
        elif manager.session != session_id:
            raise ValueError(f"the manager's session is {manager.session!r}, not {session_id!r}")
        self.session_id = session_id
        self.memory = AsyncMemoryManager(manager)
        self.session_settings = session_settings

    @property
    def budget(self) -> int:
        return self.memory.budget

    async def _tail(self, n: int) -> list[dict[str, Any]]:
        """The newest ``n`` stored messages."""
        total = await asyncio.to_thread(len, self.memory.sync)
        return await self.memory.history(offset=max(0, total - n)) if total and n > 0 else []

    async def _context_items(self, query: str | None, budget: int | None = None) -> list[dict[str, Any]]:
        ctx = await self.memory.context(query, budget=budget, warn=False)
        return context_items(ctx, await self.memory.originals([s for s in ctx.sources if s is not None]))

    async def all_items(self) -> list[dict[str, Any]]:
        """Every item of the session, as stored, in order."""
        return [dict(i) for m in await self.memory.history() for i in m.get(ITEMS_KEY, ())]

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """What the model should see (``limit=None``): the session's context within the budget, its newest
        user message as the query; or the newest ``limit`` items as stored, oldest first."""
        if limit is None:
            limit = getattr(self.session_settings, "limit", None)
        if limit is not None:
            items = [dict(i) for m in await self._tail(limit) for i in m.get(ITEMS_KEY, ())]
            return items[-limit:] if limit > 0 else []
        return await self._context_items(_last_user_text(await self._tail(64)))

    async def add_items(self, items: list[Any]) -> None:
        if items:
            await self.memory.extend(items_to_messages(items))

    async def pop_item(self) -> dict[str, Any] | None:
        """Remove the newest item and return it (a message made of several items keeps the others)."""
        stored = await self._tail(1)
        if not stored:
            return None
        last = stored[-1]
        items = [dict(i) for i in last.get(ITEMS_KEY, ())]
        await self.memory.delete([last["id"]])
        if len(items) > 1:
            await self.memory.extend(items_to_messages(items[:-1]))
        return items[-1] if items else None

    async def clear_session(self) -> None:
        await self.memory.clear()

    async def call_model_input_filter(self, data: Any) -> Any:
        """For ``RunConfig(call_model_input_filter=...)``: the input of this model call replaced by the
        session's context for its newest user message, within the budget less the instructions. Items of
        the input the session does not have yet (a run without this session) are stored first."""
        from agents.run import ModelInputData

        model_data = data.model_data
        messages = items_to_messages(list(model_data.input))
        # What follows the last marker of a context this session gave is contiguous in the session.
        start = max((i + 1 for i, m in enumerate(messages)
                     if m["role"] in ("user", "system") and MARKER.match(content_text(m.get("content")) or "")),
                    default=0)
        fresh = await self.memory.unseen([chat_fields(m) for m in messages[start:]])
        if fresh:
            await self.memory.extend([messages[start + i] for i in fresh])
        tok = self.memory.sync.tokenizer
        reserve = tok.message_tokens({"role": "system", "content": model_data.instructions}) \
            if model_data.instructions else 0
        items = await self._context_items(_last_user_text(messages), max(1, self.budget - reserve))
        return ModelInputData(input=items, instructions=model_data.instructions)
