"""LangChain v1 and LangGraph: a ``create_agent`` middleware and a ``pre_model_hook`` that fit every model call.

    from langchain.agents import create_agent
    from rdmem.integrations.langchain import RdmemMiddleware

    agent = create_agent(model, tools, system_prompt="...",
                         middleware=[RdmemMiddleware(budget=4000, store="sqlite:///memory.db")])

    from langgraph.prebuilt import create_react_agent  # deprecated by LangGraph 1.0 for create_agent
    from rdmem.integrations.langchain import rdmem_pre_model_hook

    hook = rdmem_pre_model_hook(budget=4000, system_prompt="...", store="sqlite:///memory.db")
    agent = create_react_agent(model, tools, pre_model_hook=hook, post_model_hook=hook.post_model_hook)

Before each model call the agent's messages are mirrored into an rdmem
session (each message once, the LangChain message kept whole with it), and
the model is given rdmem's context for the newest human message: the agent's
own messages where they are sent verbatim, tool calls with their results, and
the system prompt, all within ``budget`` tokens. The model's reply is stored
as soon as it is in the state (``after_model``, ``post_model_hook``). The
graph's state is left whole. The session is the run's ``thread_id`` unless
``session=`` names one (a name, or a callable of the run's config that returns
one); an agent run by another agent's tool (which LangGraph hands its
caller's ``thread_id``) has no memory unless ``session=`` gives it one. With a
persistent ``store`` a new process continues a thread's memory even when its
checkpointer forgot it. A run with neither (an agent without a checkpointer,
called without a ``thread_id``) has no memory:
its own messages are fitted, nothing is read or stored, as at every other
door (two users of one agent never see each other's messages). Needs
``pip install 'rdmem[langchain]'``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidInput, InvalidType, MissingDependency
from .._turn import holds_any, take_turn
from ..manager import MemoryManager
from ..messages import Message, chat_fields, parse_messages
from ..result import Compaction
from ..sessions import session_name
from ..store import Store, open_store
from ..tokens import check_budget, content_text

try:
    from langchain_core.messages import (
        BaseMessage,
        HumanMessage,
        SystemMessage,
        convert_to_messages,
        convert_to_openai_messages,
        message_to_dict,
        messages_from_dict,
    )
except ImportError as exc:  # pragma: no cover - the extra is installed wherever this module is tested
    raise MissingDependency("rdmem.integrations.langchain needs LangChain: pip install 'rdmem[langchain]'") from exc

try:
    from langchain.agents.middleware import AgentMiddleware
except ImportError:  # pragma: no cover - LangGraph alone: the hook works without the middleware
    AgentMiddleware = object  # type: ignore[assignment,misc]

__all__ = ["LC_KEY", "RdmemMiddleware", "RdmemContext", "rdmem_pre_model_hook", "to_openai", "from_openai",
           "from_context"]

#: The field of a stored message that holds the LangChain message it was made from (``message_to_dict``).
LC_KEY = "lc_message"
#: Managers kept per middleware or hook (one per thread seen lately); the store they share stays open.
_POOL = 64


#: The graph node whose agent each thread (per store) was last found the conversation of, in this process
#: (:meth:`RdmemContext._note_nested`), for so many threads at most.
_THREAD_NODES: OrderedDict[tuple[object, str], str] = OrderedDict()
_NODES_LOCK = threading.Lock()
_JOINED = 10_000


def _callers(config: Mapping[str, Any] | None = None) -> list[str]:
    """The nodes of the graphs a run is nested in, outermost first (none for a graph run on its own)."""
    if config is None:
        try:
            from langgraph.config import get_config

            config = get_config()
        except (ImportError, RuntimeError):  # outside a graph run
            return []
    ns = str((config.get("configurable") or {}).get("checkpoint_ns") or "")
    return [part.partition(":")[0] for part in ns.split("|")[:-1]]


def _check_messages(messages: object, name: str = "messages") -> list[BaseMessage]:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidType(f"{name} must be a sequence of LangChain messages, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, BaseMessage):
            raise InvalidType(f"{name}[{i}] must be a LangChain message, got {type(m).__name__}")
    return list(messages)


def to_openai(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """OpenAI chat dicts for LangChain messages, each with the LangChain message under :data:`LC_KEY`.

    An AI message's tool calls become ``tool_calls`` (content ``None`` when it has no text), a tool
    message answers its ``tool_call_id``; a legacy ``FunctionMessage`` becomes a named user message.
    The stored LangChain message is made JSON (provider metadata that is not becomes its ``str``), so
    any store can keep it.

    >>> from langchain_core.messages import AIMessage
    >>> to_openai([AIMessage("", tool_calls=[{"id": "c1", "name": "f", "args": {}}])])[0]["tool_calls"]
    [{'type': 'function', 'id': 'c1', 'function': {'name': 'f', 'arguments': '{}'}}]
    """
    out = []
    for m in _check_messages(messages):
        chat = _openai_form(m)
        if chat.get("role") == "assistant" and chat.get("tool_calls") and not chat.get("content"):
            chat["content"] = None
        if chat.get("role") == "function":  # the chat API has no such role any more; only counted and ranked
            chat["role"] = "user"
        stored = json.loads(json.dumps(message_to_dict(m), default=str, ensure_ascii=False))
        out.append({**chat, LC_KEY: stored})
    return out


def _openai_form(m: BaseMessage) -> dict[str, Any]:
    """LangChain's OpenAI form of ``m``; a content block LangChain cannot convert (a video, which Gemini takes)
    is named instead, as ``[video]``, for rdmem to count and rank (the model is given the message whole)."""
    try:
        return convert_to_openai_messages([m])[0]
    except ValueError:
        if isinstance(m.content, str):
            raise
    named = [b if isinstance(b, str) or b.get("type") == "text" else {"type": "text", "text": f"[{b.get('type')}]"}
             for b in m.content]
    try:
        return convert_to_openai_messages([m.model_copy(update={"content": named})])[0]
    except ValueError as exc:
        raise InvalidInput(f"a {m.type} message LangChain cannot put in the OpenAI form: {exc}") from None


def _lc_id(message: Mapping[str, Any]) -> str | None:
    """The id LangGraph gives a state's message (``add_messages``), from the chat dict :func:`to_openai` made."""
    stored = message.get(LC_KEY)
    data = stored.get("data") if isinstance(stored, Mapping) else None
    found = data.get("id") if isinstance(data, Mapping) else None
    return found if isinstance(found, str) and found else None


def from_openai(messages: Sequence[Mapping[str, Any]]) -> list[BaseMessage]:
    """LangChain messages for OpenAI chat dicts: the LangChain message under :data:`LC_KEY` where there
    is one (as it was given), else one made from the chat fields (a marker, a summary, a cut message)."""
    out: list[BaseMessage] = []
    for m in messages:
        stored = m.get(LC_KEY)
        out.extend(messages_from_dict([stored]) if stored else convert_to_messages([chat_fields(m)]))
    return out


def from_context(ctx: Compaction, originals: Mapping[str, Mapping[str, Any]]) -> list[BaseMessage]:
    """LangChain messages for a context: the stored ones (``originals``, by id) where a message is sent
    verbatim, new ones from the chat form where rdmem changed or made it."""
    kept = set(ctx.kept_ids)
    return from_openai([
        originals[src] if src in kept and src in originals else chat_fields(msg)
        for msg, src in zip(ctx.messages, ctx.sources, strict=True)
    ])


class RdmemContext:
    """What the middleware and the hook share: one store, a manager per session, and the rule that fits a
    call. ``settings`` are :class:`~rdmem.MemoryManager`'s (``policy``, ``embedder``, ...)."""

    def __init__(self, budget: int, *, store: Any = None, session: str | Callable[[Any], str | None] | None = None,
                 **settings: Any) -> None:
        if session is not None and not callable(session):
            session_name(session)  # the rule every front door applies
        self.budget = check_budget(budget)
        self.session = session
        self._settings = {"budget": self.budget, **settings}
        MemoryManager(**self._settings)  # bad settings fail here, not at the first model call
        self._store_spec = store
        self._store: Store | None = None
        self._managers: OrderedDict[str, MemoryManager] = OrderedDict()
        self._lock = threading.Lock()
        self._warned_nested = self._warned_apart = False
        self._warned_inserted = False

    def manager(self, session: str) -> MemoryManager:
        """The manager of ``session``, over the one store of this context (opened on first use)."""
        with self._lock:
            if self._store is None:
                self._store = open_store(self._store_spec)
            mem = self._managers.get(session)
            if mem is None:
                mem = self._managers[session] = MemoryManager(**self._settings, store=self._store, session=session)
            self._managers.move_to_end(session)
            while len(self._managers) > _POOL:
                self._managers.popitem(last=False)
            return mem

    def current_session(self) -> str | None:
        """``session=`` (a name, or what a callable of the run's config returns), else the running graph's
        ``thread_id``, else ``None``: no identity, no memory. An agent invoked from a tool (LangChain's
        sub-agents as tools: a run under a ``tools`` node) is handed its caller's ``thread_id`` by LangGraph,
        but is another conversation: it has no memory unless ``session=`` names one (so that the sub-agent
        never sees the caller's messages, nor stores its own among them); an agent made a node of a graph
        shares the graph's messages, and its thread's memory."""
        if isinstance(self.session, str):
            return self.session
        try:
            from langgraph.config import get_config

            config = get_config()
        except (ImportError, RuntimeError):  # outside a graph run
            config = {}
        if self.session is not None:
            name = self.session(config)
            return None if name is None else session_name(name, "the session= callable's result")
        configurable = config.get("configurable") or {}
        thread = configurable.get("thread_id")
        callers = _callers(config)
        if thread and "tools" in callers:  # run by a tool of another agent
            if not self._warned_nested:
                self._warned_nested = True
                warnings.warn("rdmem: an agent run by another agent's tool gets no memory of its own thread (its "
                              "caller's thread_id is the caller's conversation): give its middleware session= (a "
                              "name, or a callable of the run's config) to remember its runs", RuntimeWarning,
                              stacklevel=2)
            return None
        return session_name(str(thread), "the run's thread_id") if thread else None

    def remember(self, messages: Sequence[BaseMessage]) -> MemoryManager | None:
        """Store those of the agent's ``messages`` the current session does not have yet (the agent resends
        its whole state each time: :meth:`~rdmem.MemoryManager.unseen`); its manager. ``None``, nothing
        stored, without a session (:meth:`current_session`)."""
        session = self.current_session()
        if session is None:
            return None
        mem = self.manager(session)
        parsed = parse_messages(to_openai(messages), json_extras=True)
        self._note_nested(session, mem, parsed)
        # Lined up and written in one step under the manager's lock, the write conditional on the version read:
        # two calls of one thread at once (threads, tasks, processes) store each message once, not twice. A
        # state edited (RemoveMessage, a summary in place of the oldest) is lined up by LangGraph's message ids.
        turn = take_turn(mem, parsed, identity=_lc_id)
        if turn.new:
            mem.maintain()  # the working set's trim, as extend() does it
        if turn.inserted and not self._warned_inserted:
            self._warned_inserted = True
            warnings.warn(f"rdmem: {len(turn.inserted)} message(s) of the agent's state come before messages its "
                          f"session holds (a summary that replaced older messages, an edited state): they are not "
                          f"stored, and the model is given the session's context, which holds the messages "
                          f"themselves; a message removed from the state stays in the session (delete it there "
                          f"too)", RuntimeWarning, stacklevel=2)
        return mem

    def _note_nested(self, session: str, mem: MemoryManager, messages: Sequence[Message]) -> None:
        """For an agent run inside a node of another graph, under the thread's name: note the node whose agent
        is the thread's conversation (its state holds the thread's messages), and warn once when an agent of
        another node runs with input of its own (a helper that titles or classifies: it is given the thread's
        memory, and its prompts and answers are stored among the thread's). Its memory is not taken away: an
        agent made a node of a graph without a checkpointer looks the same (its state holds only the new
        message), and must keep the thread's memory."""
        callers = _callers()
        if self.session is not None or not callers:
            return
        where = (self._store_spec if isinstance(self._store_spec, str) else id(self._store), session)
        if holds_any(mem, messages, _lc_id):  # the first node found so in this process (a helper's own messages,
            with _NODES_LOCK:  # stored in the thread, are held by the end of its run)
                _THREAD_NODES.setdefault(where, callers[-1])
                _THREAD_NODES.move_to_end(where)
                while len(_THREAD_NODES) > _JOINED:
                    _THREAD_NODES.popitem(last=False)
            return
        with _NODES_LOCK:
            known = _THREAD_NODES.get(where)
        if known is not None and known != callers[-1] and not self._warned_apart:
            self._warned_apart = True
            warnings.warn(f"rdmem: an agent run inside the graph node {callers[-1]!r}, with input of its own, is "
                          f"given the memory of thread {session!r} (the conversation of the agent of node {known!r}) "
                          f"and its messages are stored there: if it is a helper with a conversation of its own, "
                          f"give its middleware session= (a name, or a callable of the run's config; one that "
                          f"returns None: no memory)", RuntimeWarning, stacklevel=3)

    def fit(self, messages: Sequence[BaseMessage], system: SystemMessage | None = None) -> list[BaseMessage]:
        """The messages the model should see for the agent's ``messages``, such that they and ``system``
        (sent first by the caller) fit the budget. New messages are stored first."""
        mem = self.remember(messages)
        if mem is None:  # no identity: this call's messages alone, in a store of their own that nothing keeps
            mem = MemoryManager(**self._settings)
            mem.extend(to_openai(messages))
        reserve = mem.tokenizer.message_tokens({"role": "system", "content": content_text(system.content)}) \
            if system is not None else 0
        if reserve >= self.budget:
            raise InvalidInput(f"the system prompt alone is {reserve} tokens, budget={self.budget} leaves the "
                             f"conversation nothing: raise the budget or shorten the prompt")
        query = next((content_text(m.content) for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        ctx = mem.context(query or None, budget=self.budget - reserve)  # its notes: RuntimeWarnings
        return from_context(ctx, mem.originals(s for s in ctx.sources if s is not None))


class RdmemMiddleware(AgentMiddleware):  # type: ignore[misc,valid-type]
    """A LangChain v1 agent middleware: every model call gets what fits ``budget`` tokens, the system
    prompt included; the agent's state keeps every message. Settings as for :class:`~rdmem.MemoryManager`
    (``store``, ``policy``, ``embedder``, ...); ``session`` fixes the rdmem session, or names it from the
    run's config when it is a callable (default: the run's ``thread_id``, none for an agent run by another
    agent's tool: :meth:`RdmemContext.current_session`).

    >>> RdmemMiddleware(budget=0)
    Traceback (most recent call last):
    ...
    rdmem.errors.InvalidInput: budget must be > 0 tokens, got 0
    """

    def __init__(self, budget: int = 4000, **settings: Any) -> None:
        if AgentMiddleware is object:  # pragma: no cover
            raise MissingDependency("RdmemMiddleware needs LangChain v1: pip install 'rdmem[langchain]'")
        super().__init__()
        self.rdmem = RdmemContext(budget, **settings)

    def _fitted(self, request: Any) -> Any:
        return request.override(messages=self.rdmem.fit(request.messages, request.system_message))

    def after_model(self, state: Any, runtime: Any) -> None:
        """Store the model's reply now: the run may end with it, and the next process should know it."""
        self.rdmem.remember(state["messages"])

    async def aafter_model(self, state: Any, runtime: Any) -> None:
        await asyncio.to_thread(self.rdmem.remember, state["messages"])

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(self._fitted(request))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        # The store and the embedder block: off the event loop (the run's config travels with the context).
        return await handler(await asyncio.to_thread(self._fitted, request))


def rdmem_pre_model_hook(budget: int = 4000, *, system_prompt: str | SystemMessage | None = None,
                         **settings: Any) -> Callable[[Any], dict[str, Any]]:
    """A LangGraph ``pre_model_hook`` for ``create_react_agent(..., pre_model_hook=...)``: returns
    ``{"llm_input_messages": ...}``, what fits ``budget`` tokens, and leaves the state's messages whole.

    LangGraph adds ``create_react_agent``'s ``prompt`` after the hook, where it cannot be counted: give
    the prompt here as ``system_prompt`` instead; it is sent first and counted in ``budget``.
    (LangGraph 1.0 deprecates ``create_react_agent`` for ``langchain.agents.create_agent``: there, use
    :class:`RdmemMiddleware`.) Settings as for :class:`RdmemMiddleware`. The hook's
    ``post_model_hook`` (for ``create_react_agent(..., post_model_hook=...)``) stores the model's reply
    as soon as it is made, so a run that ends with it leaves it in the session.
    """
    if system_prompt is not None and not isinstance(system_prompt, (str, SystemMessage)):
        raise InvalidType(f"system_prompt must be a string, a SystemMessage or None, got {type(system_prompt).__name__}")
    system = SystemMessage(system_prompt) if isinstance(system_prompt, str) else system_prompt
    rdmem = RdmemContext(budget, **settings)

    def hook(state: Any) -> dict[str, Any]:
        messages = state["messages"] if isinstance(state, Mapping) else state.messages
        fitted = rdmem.fit(messages, system)
        return {"llm_input_messages": [system, *fitted] if system is not None else fitted}

    def post_model_hook(state: Any) -> dict[str, Any]:
        rdmem.remember(state["messages"] if isinstance(state, Mapping) else state.messages)
        return {}

    hook.rdmem = rdmem  # type: ignore[attr-defined]
    hook.post_model_hook = post_model_hook  # type: ignore[attr-defined]
    return hook
