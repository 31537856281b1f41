"""LlamaIndex: a ``BaseMemory`` kept in an rdmem session, for ``FunctionAgent.run(..., memory=...)``.

    from llama_index.core.agent.workflow import FunctionAgent
    from rdmem.integrations.llamaindex import RdmemMemory

    agent = FunctionAgent(tools=[...], llm=llm, system_prompt="You are a travel assistant.")
    memory = RdmemMemory.from_defaults(session_id="alice", store="sqlite:///memory.db", token_limit=4000,
                                       agent=agent)
    response = await agent.run(user_msg="Which restaurant is safe for me?", memory=memory)

``put`` stores each message whole (the ``ChatMessage``, its tool-call blocks
and ``tool_call_id`` included); ``get`` answers with rdmem's context for the
newest user message (the agent calls it without a query). ``token_limit``
bounds what the *model* is given, and the agent adds to what memory returns:
its system prompt (and the state it writes into the newest message), counted
once from ``agent=`` into ``reserve``, and the tool calls and results of the
run in progress, which it keeps in its scratchpad until the run ends; memory
reads that scratchpad from the running step (``Context.get_step_context``)
and counts it on every call. That is how ``FunctionAgent`` (alone or in an
``AgentWorkflow``) works; for what else an agent adds (a ReAct agent's tool
descriptions, the tool schemas and the reply where your model's limit counts
them) raise ``reserve``. An image counts as one of unknown size (1,445 tokens;
85 at ``detail="low"``); other blocks (audio, documents) as their name. Needs ``pip install 'rdmem[llamaindex]'``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInput, InvalidType, MissingDependency

try:
    from llama_index.core.base.llms.types import ChatMessage, ImageBlock, MessageRole, TextBlock, ToolCallBlock
    from llama_index.core.bridge.pydantic import Field, PrivateAttr
    from llama_index.core.memory.types import BaseMemory
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependency("rdmem.integrations.llamaindex needs LlamaIndex: pip install 'rdmem[llamaindex]'") from exc

from .._images import image_part
from .._turn import store_untrimmed
from ..manager import MemoryManager
from ..messages import parse_messages
from ..result import Compaction
from ..sessions import session_name
from ..store import redact_url
from ..tokens import Tokenizer, check_budget, content_text

__all__ = ["LI_KEY", "RdmemMemory", "to_openai", "from_openai", "from_context", "agent_overhead"]

#: The field of a stored message that holds the LlamaIndex ChatMessage it was made from (JSON).
LI_KEY = "llamaindex_message"
_ROLE = {MessageRole.SYSTEM: "system", MessageRole.DEVELOPER: "developer", MessageRole.USER: "user",
         MessageRole.ASSISTANT: "assistant", MessageRole.TOOL: "tool", MessageRole.FUNCTION: "tool",
         MessageRole.CHATBOT: "assistant", MessageRole.MODEL: "assistant"}


def _text(message: ChatMessage) -> str:
    """The message's text; a block that is neither text nor a tool call is named (``[image]``), so it
    still costs something and shows where it was."""
    parts = [b.text if isinstance(b, TextBlock) else f"[{getattr(b, 'block_type', 'block')}]"
             for b in message.blocks if not isinstance(b, ToolCallBlock)]
    return "\n".join(parts)


def _content(message: ChatMessage) -> str | list[dict[str, Any]]:
    """What rdmem counts of the message's content: its text, and each image as an ``image_url`` part (its URL
    when it has one, else none: an image of unknown size, counted as the largest; its ``detail``), so that
    images count toward the budget as they do everywhere in rdmem."""
    text = _text(message)
    images = [image_part(str(b.url or ""), b.detail or None) for b in message.blocks if isinstance(b, ImageBlock)]
    return [{"type": "text", "text": text}, *images] if images else text


def _function(cid: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False, default=str)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def _call(call: Any, i: int) -> dict[str, Any]:
    """One tool call as OpenAI has it, from a ToolCallBlock, a ToolSelection, an OpenAI dict or object."""
    if hasattr(call, "tool_name"):  # ToolCallBlock (tool_call_id) or ToolSelection (tool_id)
        cid = getattr(call, "tool_call_id", None) or getattr(call, "tool_id", None)
        return _function(cid or f"call_{i}", call.tool_name, call.tool_kwargs)
    raw = call if isinstance(call, Mapping) else call.model_dump() if hasattr(call, "model_dump") else None
    if raw is not None and isinstance(raw.get("custom"), Mapping):  # a custom tool's call: its input as one argument
        return _function(raw.get("id") or f"call_{i}", raw["custom"].get("name", ""),
                         json.dumps({"input": raw["custom"].get("input", "")}))
    if raw is None or not isinstance(raw.get("function"), Mapping):
        raise InvalidType(f"a tool call is a ToolCallBlock, a ToolSelection or an OpenAI tool call, got {call!r}")
    return _function(raw.get("id") or f"call_{i}", raw["function"].get("name", ""), raw["function"].get("arguments"))


def _chat(message: ChatMessage) -> dict[str, Any]:
    """The OpenAI chat form of a ChatMessage (what rdmem counts and compacts)."""
    role = _ROLE.get(message.role, "user")
    chat: dict[str, Any] = {"role": role, "content": _content(message)}
    # Newer LLM classes give calls as blocks; older ones in additional_kwargs. Never both: a call twice
    # would be answered once.
    calls = [b for b in message.blocks if isinstance(b, ToolCallBlock)] \
        or list(message.additional_kwargs.get("tool_calls") or ())
    if role == "assistant" and calls:
        chat["tool_calls"] = [_call(c, i) for i, c in enumerate(calls)]
        chat["content"] = chat["content"] or None
    if role == "tool":
        cid = message.additional_kwargs.get("tool_call_id")
        if not cid:
            raise InvalidInput(f"a {message.role.value} message needs additional_kwargs['tool_call_id'] (the call it "
                             f"answers), got additional_kwargs={message.additional_kwargs!r}")
        chat["tool_call_id"] = str(cid)
    return chat


def to_openai(message: ChatMessage) -> dict[str, Any]:
    """The OpenAI chat form of a ChatMessage, with the message itself (JSON) under :data:`LI_KEY`.

    >>> to_openai(ChatMessage(role="tool", content="9-18", additional_kwargs={"tool_call_id": "c1"}))["tool_call_id"]
    'c1'
    """
    try:
        whole = message.model_dump(mode="json")
    except ValueError as exc:  # pydantic's PydanticSerializationError: what a store could not keep, named
        raise InvalidInput(f"a {message.role.value} message holds a value rdmem cannot store as JSON (in its "
                           f"additional_kwargs, most likely): {str(exc).splitlines()[0]}") from None
    return {**_chat(message), LI_KEY: whole}


def from_openai(message: Mapping[str, Any]) -> ChatMessage:
    """A ChatMessage for an OpenAI chat message: tool calls as ``ToolCallBlock`` (arguments kept as the
    JSON string they were), a tool result's ``tool_call_id`` in ``additional_kwargs``.

    >>> m = from_openai({"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
    ...                  "function": {"name": "lookup", "arguments": '{"q": "tram"}'}}]})
    >>> m.blocks[0].tool_name, to_openai(m)["tool_calls"][0]["function"]["arguments"]
    ('lookup', '{"q": "tram"}')
    """
    text = content_text(message.get("content"))
    calls = message.get("tool_calls") or ()
    blocks: list[Any] = [TextBlock(text=text)] if text or not calls else []
    blocks += [ToolCallBlock(tool_call_id=c["id"], tool_name=c["custom"]["name"],  # a custom tool's: one argument
                             tool_kwargs=json.dumps({"input": c["custom"]["input"]})) if c.get("type") == "custom"
               else ToolCallBlock(tool_call_id=c["id"], tool_name=c["function"]["name"],
                                  tool_kwargs=c["function"].get("arguments") or "{}") for c in calls]
    kwargs = {"tool_call_id": message["tool_call_id"]} if message.get("role") == "tool" else {}
    return ChatMessage(role=message["role"], blocks=blocks, additional_kwargs=kwargs)


def from_context(ctx: Compaction, originals: Mapping[str, Mapping[str, Any]]) -> list[ChatMessage]:
    """ChatMessages for a context: the stored ones where a message is sent verbatim, new ones for a
    marker, the summary, a cut or compressed message (or one another front door stored)."""
    kept = set(ctx.kept_ids)
    out = []
    for msg, src in zip(ctx.messages, ctx.sources, strict=True):
        stored = originals.get(src, {}).get(LI_KEY) if src in kept else None
        out.append(ChatMessage.model_validate(stored) if stored else from_openai(msg))
    return out


def agent_overhead(agent: Any, tokenizer: Tokenizer) -> int:
    """Tokens an agent (``FunctionAgent``, ``AgentWorkflow``...) adds on every model call that memory cannot
    see: its system prompt (the largest of a multi-agent workflow's) and the state it writes into the
    newest message (as it is at the start; a tool that grows the state needs a larger ``reserve``)."""
    agents = list(getattr(agent, "agents", {}).values()) or [agent]
    system = max((tokenizer.message_tokens({"role": "system", "content": a.system_prompt})
                  for a in agents if getattr(a, "system_prompt", None)), default=0)
    state, prompt = getattr(agent, "initial_state", None), getattr(agent, "state_prompt", None)
    if not state or prompt is None:
        return system
    # +1: the state text and the message's text meet in one token more, at most, than apart.
    return system + tokenizer.count(prompt.format(state=state, msg="")) + 1


async def _in_progress(key: str) -> list[ChatMessage]:
    """The scratchpad of the agent step that is asking (the run's tool calls and results, not in memory
    yet), or nothing outside a workflow step."""
    try:
        from llama_index.core.workflow import Context

        ctx = Context.get_step_context()
    except Exception:  # noqa: BLE001 - outside a step (WorkflowRuntimeError), or a workflows without it
        return []
    pad = await ctx.store.get(key, default=None)
    if not isinstance(pad, list):  # not an agent's scratchpad: a workflow of the user's own
        return []
    return [m if isinstance(m, ChatMessage) else ChatMessage.model_validate(m)
            for m in pad if isinstance(m, (ChatMessage, Mapping))]


class RdmemMemory(BaseMemory):
    """A LlamaIndex memory whose messages live in an rdmem session (any store); thread-safe.

    ``token_limit``: tokens of everything the model is given on a call. ``reserve``: the part of them the
    agent adds that memory cannot see (``from_defaults(agent=...)`` measures it). ``scratchpad_key``:
    where the agent keeps the run's tool calls (``FunctionAgent.scratchpad_key``), counted on each call.
    Other keywords (``store``, ``policy``, ``embedder``...) go to :class:`~rdmem.MemoryManager`.
    """

    session_id: str = Field(default_factory=lambda: uuid.uuid4().hex,
                            description="the rdmem session (a new one when not given, as LlamaIndex's Memory does)")
    token_limit: int = Field(default=4000, description="tokens of what the model is given, all included")
    reserve: int = Field(default=0, description="tokens the agent adds that memory cannot see (system prompt)")
    scratchpad_key: str = Field(default="scratchpad", description="the agent's key for the run's tool calls")
    _manager: MemoryManager = PrivateAttr()
    _settings: dict[str, Any] = PrivateAttr()

    def __init__(self, **kwargs: Any) -> None:
        fields = {k: kwargs.pop(k) for k in list(kwargs) if k in type(self).model_fields}
        super().__init__(**fields)
        check_budget(self.token_limit, "token_limit")
        session_name(self.session_id, "session_id")  # the rule every front door applies
        if isinstance(self.reserve, bool) or not isinstance(self.reserve, int) or \
                not 0 <= self.reserve < self.token_limit:
            raise InvalidInput(f"reserve must be an int >= 0 and below token_limit ({self.token_limit}), "
                             f"got {self.reserve!r}")
        self._manager = MemoryManager(budget=self.token_limit, session=self.session_id, **kwargs)
        self._settings = kwargs

    @classmethod
    def class_name(cls) -> str:
        return "RdmemMemory"

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """The memory as LlamaIndex serializes a component (a workflow ``Context`` holding it, ``to_dict``):
        its fields, its store's URL and the manager's settings that are plain values (``policy="window"``...),
        so that :meth:`from_dict` gives this session in this store again (it gave a new in-memory store, where
        the next run's turn was lost). A store given as an object, or as a URL with a password, is not written:
        a ``RuntimeWarning`` says so here and when it is restored (so is an embedder object: the default)."""
        data = {**super().to_dict(**kwargs), **{k: v for k, v in self._settings.items()
                                              if k != "store" and isinstance(v, (str, int, float, bool))}}
        spec = self._settings.get("store")
        if spec is None or (isinstance(spec, str) and redact_url(spec) == spec):
            data["store"] = spec
        else:
            data["store"], data["store_not_written"] = None, redact_url(spec) if isinstance(spec, str) else "an object"
            warnings.warn(f"RdmemMemory {self.session_id!r}: its store ({data['store_not_written']}) is not written "
                          f"with it; restored, it is an in-memory store", RuntimeWarning, stacklevel=2)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> RdmemMemory:  # type: ignore[override]
        data = {**data, **kwargs}
        if (lost := data.pop("store_not_written", None)) is not None and data.get("store") is None:
            warnings.warn(f"RdmemMemory {data.get('session_id')!r} restored without its store ({lost}): it is in "
                          f"memory only; give the memory again (memory=) to keep the turn", RuntimeWarning,
                          stacklevel=2)
        return super().from_dict(data)

    @classmethod
    def from_defaults(cls, session_id: str | None = None, token_limit: int = 4000, *, agent: Any = None,
                      reserve: int = 0, **settings: Any) -> RdmemMemory:
        """A memory for ``session_id`` (a new session without one, as LlamaIndex's ``Memory.from_defaults``: two
        memories never share one by default); with ``agent``, ``reserve`` grows by what the agent adds
        (:func:`agent_overhead`). ``settings`` (``store``, ``policy``, ``embedder``...): the manager's."""
        named = {} if session_id is None else {"session_id": session_id}
        memory = cls(**named, token_limit=token_limit, reserve=reserve, **settings)
        if agent is not None:
            memory.reserve = reserve + agent_overhead(agent, memory.manager.tokenizer)
            if memory.reserve >= token_limit:
                raise InvalidInput(f"the agent's system prompt and state take {memory.reserve - reserve} tokens, "
                                 f"which leaves nothing of token_limit={token_limit} (reserve={reserve})")
        return memory

    @property
    def manager(self) -> MemoryManager:
        """The :class:`~rdmem.MemoryManager` of ``session_id`` (search, explain, stats...). A memory whose
        ``session_id`` was changed (assigned, or in a ``model_copy(update=...)``) is the new session's, in the
        same store: it kept writing to, and reading from, the session it was made for (another user's)."""
        mem = self._manager
        if mem.session != self.session_id:
            session_name(self.session_id, "session_id")
            mem = self._manager = MemoryManager(**{**self._settings, "store": mem.store}, budget=self.token_limit,
                                                session=self.session_id)
        return mem

    def get(self, input: str | ChatMessage | None = None, **kwargs: Any) -> list[ChatMessage]:  # noqa: A002
        """What the model should see besides the agent's own additions: the context for ``input``
        (else the newest user message), within ``token_limit - reserve``."""
        return self._fit(input, [])

    async def aget(self, input: str | ChatMessage | None = None, **kwargs: Any) -> list[ChatMessage]:  # noqa: A002
        """As :meth:`get`, less what the asking agent step's run already holds (its tool calls and results)."""
        pending = await _in_progress(self.scratchpad_key)
        return await asyncio.to_thread(self._fit, input, pending)

    def _fit(self, input: str | ChatMessage | None, pending: Sequence[ChatMessage]) -> list[ChatMessage]:  # noqa: A002
        mem = self.manager
        used = self.reserve + mem.tokenizer.messages_tokens([_chat(m) for m in pending])
        tail = mem.history(offset=max(0, len(mem) - 64))
        newest = next((m for m in reversed(tail) if m.get("role") == "user"), None)
        query = _text(input) if isinstance(input, ChatMessage) else input
        query = query or (content_text(newest.get("content")) if newest else None)
        ctx = mem.context(query or None, budget=max(1, self.token_limit - used))  # its notes: RuntimeWarnings
        if newest is not None and newest["id"] not in ctx.sources:
            # Not even cut does the question fit beside the run: the model gets it whole, over the limit, as
            # a model that answers without the question is of no use.
            warnings.warn(f"the agent's run in progress and reserve take {used} tokens of token_limit="
                          f"{self.token_limit}: memory gives the newest user message alone, whole",
                          RuntimeWarning, stacklevel=3)
            return [ChatMessage.model_validate(newest[LI_KEY]) if LI_KEY in newest else from_openai(newest)]
        return from_context(ctx, mem.originals([s for s in ctx.sources if s is not None]))

    def get_all(self) -> list[ChatMessage]:
        """Every message of the session, as it was put (whatever rdmem archived)."""
        return [ChatMessage.model_validate(m[LI_KEY]) if LI_KEY in m else from_openai(m)
                for m in self.manager.history()]

    def put(self, message: ChatMessage) -> None:
        self.manager.add(to_openai(message))

    def put_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Store ``messages`` in one atomic write."""
        if messages:
            self.manager.extend([to_openai(m) for m in messages])

    def set(self, messages: Sequence[ChatMessage]) -> None:
        """Replace the session's messages with ``messages`` (the old ones are deleted, not archived; what the
        session learned from feedback stays). The new ones are stored first: a list rdmem refuses changes
        nothing, and a store that fails between the two writes leaves both, never neither. The working set is
        trimmed once the old ones are gone, as if the new ones had been put on their own."""
        mem = self.manager
        old = mem.working_ids() + mem.archived_ids()
        store_untrimmed(mem, parse_messages([to_openai(m) for m in messages], json_extras=True))
        if old:
            mem.delete(old)
        mem.maintain()

    def reset(self) -> None:
        """Delete the session's messages for good."""
        self.manager.clear()
