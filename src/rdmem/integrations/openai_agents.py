"""The OpenAI Agents SDK: a ``Session`` kept in an rdmem store, and a filter that fits every model call.

    from agents import Agent, RunConfig, Runner
    from rdmem.integrations.openai_agents import RdmemSession

    session = RdmemSession("alice", store="sqlite:///memory.db", budget=4000)
    config = RunConfig(call_model_input_filter=session.call_model_input_filter)
    result = await Runner.run(agent, "Which restaurant is safe for me?", session=session, run_config=config)

The session stores every item the runner gives it, whole (each chat message carries the SDK items it was made from),
and answers ``get_items()`` with what fits the budget: rdmem's context, the stored items where a message is sent
verbatim. ``call_model_input_filter`` does the same before *every* model call of a run (a tool loop grows the input
between two of them), with the newest user message as the query and the budget less the instructions, so archived
facts come back when the question needs them. ``get_items(limit)`` returns the newest ``limit`` items as stored, as
``SQLiteSession`` does (the runner reads the tail that way); :meth:`RdmemSession.all_items` returns all of them.

Items become chat messages this way: a user, system, developer or assistant message is one message (its text parts
joined, other parts named, as ``[input_image]``, its images counted as images); consecutive ``function_call`` (or
``custom_tool_call``) items are one assistant message with their tool calls, and each output a tool message; a
``reasoning`` item travels with the item after it; any other item (a hosted tool's call or output) is a message that
names its type. Needs ``pip install 'rdmem[openai-agents]'``.
"""

from __future__ import annotations

import copy
import json
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .._images import with_images
from ..aio import AsyncMemoryManager
from ..errors import InvalidInput, InvalidType, MissingDependency
from ..history import resend_key
from ..manager import MemoryManager
from ..messages import chat_fields
from ..reconstruct import MARKER
from ..result import Compaction
from ..sessions import first_unseen, session_name
from ..tokens import content_text

__all__ = ["ITEMS_KEY", "RdmemSession", "items_to_messages", "message_items", "context_items"]

#: The field of a stored message that holds the SDK items it was made from.
ITEMS_KEY = "agents_items"
_ROLES = ("user", "assistant", "system", "developer")
_CALLS = {"function_call": "arguments", "custom_tool_call": "input"}  # call type -> field of its arguments
#: What the runner answers with an output of the same id, and those outputs (as the SDK's own
#: ``_tool_invocation`` pairs them): the two are one group to rdmem, so no context has an output without its call.
_WAITING = 10_000  # the filter's stored messages kept for the runner's add: a run's whole input fits
_LOCAL_CALLS = ("apply_patch_call", "computer_call", "local_shell_call", "mcp_approval_request", "shell_call")
_OUTPUTS = {  # output type -> the field naming the call it answers
    "function_call_output": "call_id", "custom_tool_call_output": "call_id", "apply_patch_call_output": "call_id",
    "computer_call_output": "call_id", "local_shell_call_output": "call_id", "shell_call_output": "call_id",
    "mcp_approval_response": "approval_request_id"}
_CALL_FIELDS = ("type", "id", "call_id", "status")  # what a local tool's call has besides its arguments


def _call(item: dict[str, Any]) -> dict[str, Any] | None:
    """The chat tool call of an item the runner must answer with an output (a function call, a local tool's
    call: shell, apply_patch, computer, ...; an MCP approval request), else ``None``."""
    kind = item.get("type")
    if kind in _CALLS:
        cid, name, arguments = item["call_id"], item["name"], item.get(_CALLS[kind]) or "{}"
    elif kind in _LOCAL_CALLS:
        cid, name = item.get("id" if kind == "mcp_approval_request" else "call_id"), str(kind)
        arguments = json.dumps({k: v for k, v in item.items() if k not in _CALL_FIELDS}, ensure_ascii=False,
                               default=str)
    else:
        return None
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}} \
        if isinstance(cid, str) and cid else None


def _sdk() -> Any:
    """The Agents SDK's session settings and model input types, imported on first use."""
    try:
        from agents.memory import session_settings
        from agents.run_config import ModelInputData
    except ImportError as e:  # pragma: no cover - the extra is installed wherever tests run
        raise MissingDependency("rdmem.integrations.openai_agents needs the OpenAI Agents SDK: "
                          "pip install 'rdmem[openai-agents]'") from e
    return session_settings, ModelInputData


def _plain(item: Any) -> dict[str, Any]:
    """A deep copy of an item as a JSON-able dict (the caller's item is never shared with the store)."""
    if isinstance(item, Mapping):
        return copy.deepcopy(dict(item))
    dump = getattr(item, "model_dump", None)
    if dump is not None:
        return dump(exclude_unset=True, mode="json")
    raise InvalidType(f"items must be dicts or pydantic models (Agents SDK items), got {type(item).__name__}")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for p in content or ():
        if not isinstance(p, Mapping):
            continue
        kind = p.get("type")
        if kind in ("input_text", "output_text", "text", "refusal"):
            parts.append(str(p.get("refusal" if kind == "refusal" else "text", "")))
        elif kind:  # named (a message's images are counted as images too: with_images)
            parts.append(f"[{kind}]")
    return "\n".join(parts)


def _output(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(isinstance(p, Mapping) and p.get("type") for p in output):
        return _text(output)  # content parts
    if _records(output):
        return "\n".join(filter(None, (str(p.get(k) or "") for p in output for k in ("stdout", "stderr"))))
    return json.dumps(output, ensure_ascii=False, default=str)


def _message(item: dict[str, Any]) -> dict[str, Any]:
    """The chat message of one item that is not a tool call."""
    kind = item.get("type")
    answers = item.get(_OUTPUTS[kind]) if kind in _OUTPUTS else None
    if isinstance(answers, str) and answers:
        detail = item.get("output", {k: v for k, v in item.items() if k not in _CALL_FIELDS})
        return {"role": "tool", "tool_call_id": answers, "content": _output(detail)}
    if kind in (None, "message") and item.get("role") in _ROLES:
        return {"role": item["role"], "content": with_images(_text(item.get("content")), item.get("content"))}
    # A hosted tool's call or its output: kept whole in the store, and named for the model.
    output = str(kind).endswith("_output")
    detail = item.get("output") if output else item.get("action")
    return {"role": "user" if output else "assistant", "content": f"[{kind}]" + (f" {_output(detail)}" if detail else "")}


def items_to_messages(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Chat messages for SDK items, each with the items it stands for under :data:`ITEMS_KEY` (in order:
    flattening those lists gives the items back).

    >>> msgs = items_to_messages([{"role": "user", "content": "Weather in Lisbon?"},
    ...     {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
    ...     {"type": "function_call_output", "call_id": "c1", "output": "22 C"}])
    >>> [(m["role"], m["content"]) for m in msgs]
    [('user', 'Weather in Lisbon?'), ('assistant', None), ('tool', '22 C')]
    >>> msgs[1]["tool_calls"][0]["function"]
    {'name': 'weather', 'arguments': '{}'}
    """
    if isinstance(items, (str, bytes, Mapping)):
        raise InvalidType(f"items must be a list of Agents SDK items, got {type(items).__name__}")
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # reasoning items, waiting for the item they precede
    calls_open = False  # the last message is an assistant tool call that more calls extend
    for raw in items:
        item = _plain(raw)
        kind = item.get("type")
        if kind == "reasoning":
            pending.append(item)
            continue
        call = _call(item)
        if call is not None:
            if calls_open:  # one turn's calls (reasoning between them included) are one message
                out[-1]["tool_calls"].append(call)
                out[-1][ITEMS_KEY] += [*pending, item]
                pending = []
                continue
            msg: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        else:
            msg = _message(item)
        msg[ITEMS_KEY] = [*pending, item]
        pending = []
        calls_open = call is not None
        out.append(msg)
    if pending:
        out.append({"role": "assistant", "content": "", ITEMS_KEY: pending})
    return out


def message_items(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """SDK input items for one chat message: the items it was made from if it has them, else new ones
    (a message written to the session by another front door, or rendered by rdmem: a marker, the summary,
    a cut or compressed message)."""
    stored = message.get(ITEMS_KEY)
    if stored:
        return [dict(i) for i in stored]
    if message["role"] == "tool":
        return [{"type": "function_call_output", "call_id": message["tool_call_id"],
                 "output": content_text(message.get("content"))}]
    calls = [{"type": "custom_tool_call", "call_id": c["id"], **c["custom"]} if c.get("type") == "custom" else
             {"type": "function_call", "call_id": c["id"], **c["function"]} for c in message.get("tool_calls") or ()]
    text = content_text(message.get("content"))
    role = message["role"] if message["role"] in _ROLES else "user"
    return ([{"role": role, "content": text}] if text or not calls else []) + calls


def context_items(ctx: Compaction, stored: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """SDK input items for a context: a message sent verbatim gives back its stored items (``stored``: the
    context's sources as :meth:`~rdmem.MemoryManager.originals` gives them); any other message its own."""
    kept = set(ctx.kept_ids)
    out: list[dict[str, Any]] = []
    for msg, src in zip(ctx.messages, ctx.sources, strict=True):
        original = stored.get(src) if src is not None else None
        items = original.get(ITEMS_KEY) if original is not None else None
        if items and src in kept:
            out += message_items(original)  # type: ignore[arg-type]
        elif items and msg["role"] == "tool":  # a cut output: its own type, as its call expects
            out.append(_cut_output(dict(items[-1]), content_text(msg.get("content"))))
        else:  # rendered by rdmem: its stored items would not be what the budget was counted on
            out += message_items(chat_fields(msg))
    return out


def _cut_output(item: dict[str, Any], text: str) -> dict[str, Any]:
    """A tool output item with its output cut to ``text`` (a shell's as its stdout record; one that is not text,
    a screenshot, whole)."""
    output = item.get("output")
    if isinstance(output, str) or item.get("type") in ("function_call_output", "custom_tool_call_output"):
        return {**item, "output": text}
    if _records(output) and output:
        return {**item, "output": [{**output[0], "stdout": text, "stderr": ""}]}
    return item


def _records(output: Any) -> bool:
    """Whether ``output`` is a shell's: a list of records with ``stdout`` (and ``stderr``, ``outcome``)."""
    return isinstance(output, list) and all(isinstance(p, Mapping) and "stdout" in p for p in output)


def _opens_run(messages: list[dict[str, Any]], reads: list[tuple[str, ...]]) -> bool:
    """Whether a model call's input is what a run read from the session (``reads``: resend keys), or its end, then
    new input: a run's first call. An agent's run as a tool has its own input (another conversation)."""
    keys = [resend_key(m) for m in messages]
    return any(keys[:len(read) - j] == list(read[j:]) and len(keys) > len(read) - j
               for read in reads for j in range(len(read)) if keys and read[j] == keys[0])


def _agent_name(agent: Any) -> Any:
    """The name of an agent, of a ``Handoff`` (its agent's), or the name itself."""
    return agent if isinstance(agent, str) else getattr(agent, "agent_name", None) or getattr(agent, "name", None)


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    for m in reversed(messages):
        if m.get("role") == "user":
            text = content_text(m.get("content"))
            if text and not MARKER.match(text):
                return text
    return None


class RdmemSession:
    """An Agents SDK session (the ``Session`` protocol) whose items live in an rdmem session.

    ``store`` (``None``: in memory; ``"sqlite:///path.db"``; a PostgreSQL URL), ``budget`` (tokens of what the model
    is given; default 4000), ``policy`` (default ``"rd"``) and any other :class:`~rdmem.MemoryManager` keyword
    configure it; or pass a ``manager`` of the session ``session_id`` instead. ``session_settings`` are the SDK's
    (``limit``: the runner then reads the newest items as stored, uncompacted). Safe to share between coroutines;
    several processes meet in the store.
    """

    def __init__(self, session_id: str, *, store: Any = None, budget: int | None = None,
                 policy: str | None = None, manager: MemoryManager | None = None,
                 session_settings: Any = None, agents: Sequence[Any] | None = None, **settings: Any) -> None:
        session_name(session_id, "session_id")  # the rule every front door applies
        if agents is not None and (isinstance(agents, (str, bytes)) or not isinstance(agents, Sequence)
                                   or not all(isinstance(_agent_name(a), str) for a in agents)):
            raise InvalidType("agents must be a list of agents (or their names), the session's conversation's")
        sdk_settings, _ = _sdk()
        if manager is None:
            manager = MemoryManager(budget=4000 if budget is None else budget, policy=policy or "rd",
                                    store=store, session=session_id, **settings)
        elif store is not None or budget is not None or policy is not None or settings:
            raise InvalidType("give RdmemSession a manager or its settings (store=, budget=, policy=...), not both")
        elif not isinstance(manager, MemoryManager):
            raise InvalidType(f"manager must be a MemoryManager, got {type(manager).__name__}")
        elif manager.session != session_id:
            raise InvalidInput(f"manager is of session {manager.session!r}, not session_id={session_id!r}")
        self._session_id = session_id
        self.session_settings = sdk_settings.coerce_session_settings(session_settings) \
            if session_settings is not None else sdk_settings.SessionSettings()
        self.memory = AsyncMemoryManager(manager)
        self._writes = threading.Lock()  # a pop (read the last message, delete it) is not split by a write
        self._mirrored: list[str] = []  # messages the filter stored that the runner has yet to add (_WAITING)
        self._rendered: frozenset[str] = frozenset()  # the last context's messages (their resend keys)
        # The agents whose model calls the filter fits (names): those given, else the first it serves; with
        # the agents each of them hands off to. Another's call (an agent run as a tool) passes through.
        self._given = {_agent_name(a) for a in agents} if agents is not None else None
        self._agents: set[str] | None = set(self._given) if self._given is not None else None
        self._passed: set[str] = set()  # agents already warned about
        self._openings: list[tuple[str, ...]] = []  # the messages the last runs read (resend keys, in order)

    @property
    def session_id(self) -> str:
        return self._session_id

    @session_id.setter
    def session_id(self, value: object) -> None:  # it went on reading and writing the first session (a user's)
        raise InvalidInput(f"an RdmemSession is the session {self._session_id!r} for good: make one per session "
                           f"(RdmemSession({value!r}, store=...)) rather than changing its session_id")

    @property
    def budget(self) -> int:
        return self.memory.budget

    # -- the Session protocol ---------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """What the model should see (no limit, in the call or the session settings): the session's context
        within the budget, its newest user message as the query. With a ``limit``: the newest ``limit``
        items as stored, oldest first (all of them for a negative one, as ``SQLiteSession``)."""
        sdk_settings, _ = _sdk()
        limit = sdk_settings.resolve_session_limit(limit, self.session_settings)
        if limit is None:
            items = await self._context_items(_last_user_text(await self._tail(64)))
        elif limit < 0:
            items = await self.all_items()
        else:
            items = [i for m in await self._tail(limit) for i in message_items(m)][-limit:] if limit else []
        self._openings = [*self._openings, tuple(map(resend_key, items_to_messages(items)))][-8:]
        return items

    async def add_items(self, items: list[Any]) -> None:
        """Store items at the end of the session (one atomic write; compacts the working set if needed)."""
        messages = items_to_messages(items)
        if messages:
            await self.memory.call(self._locked, self._add, messages)

    async def pop_item(self) -> dict[str, Any] | None:
        """Remove the newest item and return it (``None`` on an empty session); a message made of several
        items keeps the others."""
        return await self.memory.call(self._locked, self._pop)

    async def clear_session(self) -> None:
        """Delete every item of the session, for good."""
        await self.memory.call(self._locked, self._clear)

    # -- beyond the protocol ------------------------------------------------------------------
    async def all_items(self) -> list[dict[str, Any]]:
        """Every item of the session, as stored, in order."""
        return [i for m in await self.memory.history() for i in message_items(m)]

    async def call_model_input_filter(self, data: Any) -> Any:
        """For ``RunConfig(call_model_input_filter=...)``: the input of this model call replaced by the session's
        context for its newest user message, within the budget less the instructions.

        The input's items the session does not have yet are stored first, so the context holds them: the new
        question of a streamed run (whose runner stores it after the call, and is then not stored twice), every
        item of a run without this session (a resent history is recognised)."""
        _, model_input = _sdk()
        model_data = data.model_data
        messages = items_to_messages(list(model_data.input))
        if not self._serves(data.agent, messages):
            return model_data
        await self._store_unseen(messages)
        reserve = 0
        if model_data.instructions:
            reserve = self.memory.sync.tokenizer.message_tokens({"role": "system", "content": model_data.instructions})
        if reserve >= self.budget:  # as LangChain's middleware: a model given no input would answer nothing asked
            raise InvalidInput(f"the agent's instructions alone are {reserve} tokens, budget={self.budget} leaves "
                               f"the conversation nothing: raise the budget or shorten the instructions")
        items = await self._context_items(_last_user_text(messages), self.budget - reserve)
        return model_input(input=items, instructions=model_data.instructions)

    # -- helpers --------------------------------------------------------------------------------
    def _serves(self, agent: Any, messages: list[dict[str, Any]]) -> bool:
        """Whether the filter fits ``agent``'s model call: one of the session's agents (``agents=``, else the
        first agent the filter serves and each whose call begins with the context a run read: a run's first),
        or one they hand off to. The SDK runs an agent made a tool
        (``Agent.as_tool``) with its caller's ``RunConfig``, so its calls reach this filter too: their input
        is another conversation's, passed through untouched (neither fitted nor stored), with a warning."""
        name = _agent_name(agent)
        if self._agents is None or (self._given is None and name not in self._agents
                                    and _opens_run(messages, self._openings)):
            self._agents = {*(self._agents or ()), name}
        if name not in self._agents:
            if name not in self._passed:
                self._passed.add(name)
                warnings.warn(f"RdmemSession {self.session_id!r}: agent {name!r} is not one of this session's "
                              f"agents {sorted(self._agents)} nor handed off to by one, so its model input is "
                              f"passed through unchanged (an agent run as a tool); name it in agents= to give it "
                              f"this session's memory", RuntimeWarning, stacklevel=3)
            return False
        for h in getattr(agent, "handoffs", None) or ():  # an Agent, or a Handoff object naming its agent
            target = _agent_name(h)
            if isinstance(target, str):
                self._agents.add(target)
        return True

    def _locked(self, fn: Any, *args: Any) -> Any:
        with self._writes:
            return fn(*args)

    def _clear(self) -> None:
        self.memory.sync.clear()
        self._mirrored = []  # a session begun again: its agent learned again, as a new session's
        self._agents, self._openings = set(self._given) if self._given is not None else None, []

    def _pop(self) -> dict[str, Any] | None:
        mem = self.memory.sync
        total = len(mem)
        if not total:
            return None
        last = mem.history(offset=total - 1)[-1]
        items = message_items(last)
        if len(items) > 1:  # the items kept are stored before the message goes: a failure between the two
            mem.extend(items_to_messages(items[:-1]))  # writes leaves them twice, never loses them
        mem.delete([last["id"]])
        return items[-1]

    async def _tail(self, n: int) -> list[dict[str, Any]]:
        """The newest ``n`` stored messages."""
        total = await self.memory.call(len, self.memory.sync)
        return await self.memory.history(offset=max(0, total - n)) if total and n > 0 else []

    async def _context_items(self, query: str | None, budget: int | None = None) -> list[dict[str, Any]]:
        ctx = await self.memory.context(query, budget=budget)  # its notes: RuntimeWarnings
        items = context_items(ctx, await self.memory.originals([s for s in ctx.sources if s is not None]))
        # A model call's input starts with them again: what follows is new (first_unseen).
        self._rendered = frozenset(resend_key(m) for m in items_to_messages(items))
        return items

    async def _store_unseen(self, messages: list[dict[str, Any]]) -> None:
        """Store the messages at the end of a model call's input that the session does not have: none when
        the runner stored them first, the new question when it stores it after the call (a streamed run),
        what follows the resent history in a run without this session."""
        if messages:
            await self.memory.call(self._locked, self._mirror_unseen, messages)

    def _mirror_unseen(self, messages: list[dict[str, Any]]) -> None:
        """:meth:`_store_unseen`'s find and write, one step under ``_writes`` (two calls at once stored it twice)."""
        mem = self.memory.sync
        total = len(mem)
        newest = mem.history(offset=total - 1)[-1] if total else None
        start = first_unseen(messages, newest, mem.unseen, self._rendered)
        if start < len(messages):
            mem.extend(messages[start:])
            self._mirrored = [*self._mirrored, *(resend_key(m) for m in messages[start:])][-_WAITING:]

    def _add(self, messages: list[dict[str, Any]]) -> None:
        """Store messages, less those the filter stored for the runner (which adds them after the call in a
        streamed run), each matched once wherever it waits: two runs at once add theirs in either order."""
        new = []
        for m, key in zip(messages, map(resend_key, messages)):
            if key in self._mirrored:
                self._mirrored.remove(key)
            else:
                new.append(m)
        if new:
            self.memory.sync.extend(new)
