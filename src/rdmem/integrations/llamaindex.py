"""LlamaIndex: a ``BaseMemory`` kept in an rdmem session, for ``FunctionAgent.run(..., memory=...)``.

    from llama_index.core.agent.workflow import FunctionAgent
    from rdmem.integrations.llamaindex import RdmemMemory

    memory = RdmemMemory.from_defaults(session_id="alice", store="sqlite:///memory.db", token_limit=4000)
    response = await agent.run(user_msg="Which restaurant is safe for me?", memory=memory)

``put`` stores each message whole (the ``ChatMessage``, its tool-call blocks
and ``tool_call_id`` included); ``get`` answers with rdmem's context within
``token_limit - reserve`` tokens (``reserve``: what the agent adds to it on
every call, its system prompt and the tool calls of the run in progress,
which it keeps apart from memory until the run ends). The agent calls
``get()`` without a query, so the query is the newest user message. Needs
``pip install 'rdmem[llamaindex]'``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.memory.types import BaseMemory
from pydantic import Field, PrivateAttr

from ..manager import MemoryManager
from ..result import Compaction
from ..tokens import content_text

__all__ = ["LI_KEY", "RdmemMemory", "to_openai", "from_context"]

#: The field of a stored message that holds the LlamaIndex ChatMessage it was made from (JSON).
LI_KEY = "llamaindex_message"
_ROLE = {MessageRole.SYSTEM: "system", MessageRole.DEVELOPER: "developer", MessageRole.USER: "user",
         MessageRole.ASSISTANT: "assistant", MessageRole.TOOL: "tool", MessageRole.FUNCTION: "tool",
         MessageRole.CHATBOT: "assistant", MessageRole.MODEL: "assistant"}


def _text(message: ChatMessage) -> str:
    return "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock))


def to_openai(message: ChatMessage) -> dict[str, Any]:
    """The OpenAI chat form of a ChatMessage, with the message itself under :data:`LI_KEY`."""
    role = _ROLE.get(message.role, "user")
    chat: dict[str, Any] = {"role": role, "content": _text(message)}
    calls = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
    legacy = message.additional_kwargs.get("tool_calls") or []
    if role == "assistant" and (calls or legacy):
        chat["tool_calls"] = [
            {"id": b.tool_call_id or f"call_{i}", "type": "function",
             "function": {"name": b.tool_name, "arguments": b.tool_kwargs if isinstance(b.tool_kwargs, str)
                          else json.dumps(b.tool_kwargs, ensure_ascii=False, default=str)}}
            for i, b in enumerate(calls)
        ] + [_legacy_call(c) for c in legacy]
        chat["content"] = chat["content"] or None
    if role == "tool":
        chat["tool_call_id"] = str(message.additional_kwargs.get("tool_call_id") or "")
    return {**chat, LI_KEY: message.model_dump(mode="json")}


def _legacy_call(call: Any) -> dict[str, Any]:
    """A tool call given the older way (``additional_kwargs["tool_calls"]``: OpenAI dicts or ToolSelection)."""
    if isinstance(call, Mapping):
        return dict(call)
    kwargs = getattr(call, "tool_kwargs", {})
    return {"id": getattr(call, "tool_id", "call"), "type": "function",
            "function": {"name": getattr(call, "tool_name", ""), "arguments": json.dumps(kwargs, default=str)}}


def from_context(ctx: Compaction, originals: Mapping[str, Mapping[str, Any]]) -> list[ChatMessage]:
    """ChatMessages for a context: the stored ones where a message is sent verbatim, new ones for a
    marker, the summary or a cut or compressed message."""
    kept = set(ctx.kept_ids)
    out = []
    for msg, src in zip(ctx.messages, ctx.sources, strict=True):
        stored = originals.get(src, {}).get(LI_KEY) if src in kept else None
        if stored:
            out.append(ChatMessage.model_validate(stored))
            continue
        kwargs = {"tool_call_id": msg["tool_call_id"]} if msg["role"] == "tool" else {}
        blocks: list[Any] = [TextBlock(text=content_text(msg.get("content")))]
        for call in msg.get("tool_calls") or ():
            blocks.append(ToolCallBlock(tool_call_id=call["id"], tool_name=call["function"]["name"],
                                        tool_kwargs=call["function"]["arguments"]))
        out.append(ChatMessage(role=msg["role"], blocks=blocks, additional_kwargs=kwargs))
    return out


class RdmemMemory(BaseMemory):
    """A LlamaIndex memory whose messages live in an rdmem session (any store); thread-safe."""

    session_id: str = Field(default="default", description="the rdmem session")
    token_limit: int = Field(default=4000, description="tokens of what the model is given, all included")
    reserve: int = Field(default=1000, description="tokens left to the agent's system prompt and its run's "
                         "tool calls, which it adds to what get() returns")
    _manager: MemoryManager = PrivateAttr()

    def __init__(self, *, manager: MemoryManager | None = None, store: Any = None, policy: str = "rd",
                 **data: Any) -> None:
        super().__init__(**data)
        if self.reserve >= self.token_limit:
            raise ValueError(f"reserve ({self.reserve}) must be smaller than token_limit ({self.token_limit})")
        self._manager = manager or MemoryManager(budget=self.token_limit, policy=policy, store=store,
                                                 session=self.session_id)

    @classmethod
    def class_name(cls) -> str:
        return "RdmemMemory"

    @classmethod
    def from_defaults(cls, session_id: str = "default", token_limit: int = 4000, reserve: int = 1000, *,
                      store: Any = None, policy: str = "rd", **kwargs: Any) -> RdmemMemory:
        return cls(session_id=session_id, token_limit=token_limit, reserve=reserve, store=store, policy=policy,
                   **kwargs)

    @property
    def manager(self) -> MemoryManager:
        return self._manager

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:  # noqa: A002 - LlamaIndex's name
        """What the model should see: the context for ``input`` (else the newest user message)."""
        mem = self._manager
        query = input or next((m["content"] for m in reversed(mem.history(offset=max(0, len(mem) - 64)))
                               if m.get("role") == "user" and isinstance(m.get("content"), str)), None)
        ctx = mem.context(query or None, budget=self.token_limit - self.reserve, warn=False)
        return from_context(ctx, mem.originals([s for s in ctx.sources if s is not None]))

    def get_all(self) -> list[ChatMessage]:
        return [ChatMessage.model_validate(m[LI_KEY]) if LI_KEY in m else
                ChatMessage(role=m["role"], content=content_text(m.get("content")))
                for m in self._manager.history()]

    def put(self, message: ChatMessage) -> None:
        self._manager.add(to_openai(message))

    def put_messages(self, messages: Sequence[ChatMessage]) -> None:
        if messages:
            self._manager.extend([to_openai(m) for m in messages])

    def set(self, messages: Sequence[ChatMessage]) -> None:
        self._manager.clear()
        self.put_messages(messages)

    def reset(self) -> None:
        self._manager.clear()
