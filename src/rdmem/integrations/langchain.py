"""LangChain v1 and LangGraph: a ``create_agent`` middleware and a ``pre_model_hook`` that fit every model call.

    from langchain.agents import create_agent
    from rdmem.integrations.langchain import RdmemMiddleware

    agent = create_agent(model, tools, system_prompt="...",
                         middleware=[RdmemMiddleware(budget=4000, store="sqlite:///memory.db")])

    from langgraph.prebuilt import create_react_agent
    from rdmem.integrations.langchain import rdmem_pre_model_hook

    agent = create_react_agent(model, tools, pre_model_hook=rdmem_pre_model_hook(budget=4000))

Before each model call the agent's messages are mirrored into an rdmem
session (each message once, the LangChain message kept whole with it), and
the model is given rdmem's context for the newest human message within the
budget (less the system prompt): the agent's own messages where they are
sent verbatim, tool calls with their results. The graph's state is left
whole. The session is the run's ``thread_id`` (``"default"`` without one)
unless ``session=`` names one; with a persistent ``store`` a new process
continues a thread's memory even when its checkpointer forgot it. Needs
``pip install 'rdmem[langchain]'``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..manager import MemoryManager
from ..messages import chat_fields
from ..result import Compaction
from ..tokens import content_text

try:
    from langchain.agents.middleware import AgentMiddleware
except ImportError:  # LangGraph alone: the hook works without the middleware
    AgentMiddleware = object  # type: ignore[assignment,misc]

__all__ = ["LC_KEY", "RdmemMiddleware", "RdmemContext", "rdmem_pre_model_hook", "to_openai", "from_context"]

#: The field of a stored message that holds the LangChain message it was made from (``message_to_dict``).
LC_KEY = "lc_message"


def to_openai(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """OpenAI chat dicts for LangChain messages, each with the LangChain message under :data:`LC_KEY`."""
    from langchain_core.messages import convert_to_openai_messages, message_to_dict

    out = []
    for m in messages:
        chat = convert_to_openai_messages([m])[0]
        if chat.get("role") == "assistant" and chat.get("tool_calls") and not chat.get("content"):
            chat["content"] = None
        out.append({**chat, LC_KEY: message_to_dict(m)})
    return out


def from_context(ctx: Compaction, originals: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """LangChain messages for a context: the stored ones where a message is sent verbatim, new ones (a
    marker, the summary, a cut or compressed message) from their chat form."""
    from langchain_core.messages import convert_to_messages, messages_from_dict

    kept = set(ctx.kept_ids)
    out = []
    for msg, src in zip(ctx.messages, ctx.sources, strict=True):
        stored = originals.get(src, {}).get(LC_KEY) if src in kept else None
        out.extend(messages_from_dict([stored]) if stored else convert_to_messages([msg]))
    return out


class RdmemContext:
    """What the middleware and the hook share: the sessions' managers and the rule that fits a call."""

    def __init__(self, budget: int, *, store: Any = None, policy: str = "rd", session: str | None = None,
                 **settings: Any) -> None:
        self.budget = budget
        self.session = session
        self._settings = {"budget": budget, "policy": policy, "store": store, **settings}
        self._managers: dict[str, MemoryManager] = {}
        self._lock = threading.Lock()
        MemoryManager(**{**self._settings, "store": None})  # bad settings fail here, not at the first call

    def manager(self, session: str) -> MemoryManager:
        with self._lock:
            if session not in self._managers:
                self._managers[session] = MemoryManager(**self._settings, session=session)
            return self._managers[session]

    def _session(self) -> str:
        if self.session:
            return self.session
        try:
            from langgraph.config import get_config

            thread = (get_config().get("configurable") or {}).get("thread_id")
        except (ImportError, RuntimeError):  # outside a graph run
            thread = None
        return str(thread) if thread else "default"

    def fit(self, messages: Sequence[Any], system: Any = None) -> list[Any]:
        """The messages the model should see, for the agent's ``messages`` (and its system message)."""
        mem = self.manager(self._session())
        chats = to_openai(messages)
        fresh = mem.unseen([chat_fields(m) for m in chats])
        if fresh:
            mem.extend([chats[i] for i in fresh])
        reserve = mem.tokenizer.message_tokens({"role": "system", "content": content_text(system.content)}) \
            if system is not None else 0
        query = next((content_text(m.get("content")) for m in reversed(chats) if m["role"] == "user"), None)
        ctx = mem.context(query or None, budget=max(1, self.budget - reserve), warn=False)
        return from_context(ctx, mem.originals([s for s in ctx.sources if s is not None]))


class RdmemMiddleware(AgentMiddleware):  # type: ignore[misc,valid-type]
    """A LangChain v1 agent middleware: every model call gets what fits ``budget`` tokens (the system
    prompt included); the agent's state keeps every message. Settings as for :class:`~rdmem.MemoryManager`
    (``store``, ``policy``, ...); ``session`` fixes the rdmem session (default: the run's thread)."""

    def __init__(self, budget: int = 4000, **settings: Any) -> None:
        if AgentMiddleware is object:
            raise ImportError("RdmemMiddleware needs LangChain v1: pip install 'rdmem[langchain]'")
        super().__init__()
        self.rdmem = RdmemContext(budget, **settings)

    def _request(self, request: Any) -> Any:
        return request.override(messages=self.rdmem.fit(request.messages, getattr(request, "system_message", None)))

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(self._request(request))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        import asyncio

        return await handler(await asyncio.to_thread(self._request, request))


def rdmem_pre_model_hook(budget: int = 4000, **settings: Any) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A LangGraph ``pre_model_hook`` (``create_react_agent(..., pre_model_hook=...)``): returns
    ``{"llm_input_messages": ...}``, what fits ``budget`` tokens, and leaves the state's messages whole.
    The agent's prompt is not in the state: keep its tokens out of ``budget``."""
    rdmem = RdmemContext(budget, **settings)

    def hook(state: Mapping[str, Any]) -> dict[str, Any]:
        return {"llm_input_messages": rdmem.fit(list(state["messages"]))}

    hook.rdmem = rdmem  # type: ignore[attr-defined]
    return hook
