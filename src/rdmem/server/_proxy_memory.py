"""The proxy's memory side: whose session a request is, what of it is stored, what the model is sent.

Everything here runs in a worker thread under the proxy's ``memory_timeout``;
the relay (``routes_proxy``) never waits on it longer than that.

- A session is named by ``X-Rdmem-Session`` or the request's ``user``. Without
  either, a request is compacted on its own (its own messages, the last user
  message as the query, nothing read or stored) unless the server derives
  sessions (``--derive-sessions``): then a hash of the tenant, the system
  prompt and the first user message names it.
- A message rdmem cannot keep (a legacy ``function`` message, a tool message
  without ``tool_call_id``, a bad field) is skipped and counted; the rest is
  stored, so one message never stops a session from storing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from .._images import parts_tokens
from ..errors import InvalidInput, RdmemError
from ..messages import Message, chat_fields, parse_message
from ..names import check_session_name
from .._turn import forget_newest, store_following, store_untrimmed, take_turn
from ..tokens import content_text, get_tokenizer
from .errors import ApiError
from .savings import entry
from .sessions import MEM0_PREFIX

__all__ = ["Prepared", "session_of", "readable_messages", "prepare", "store_reply", "SESSION_HEADER"]

log = logging.getLogger("rdmem.server")
SESSION_HEADER = "X-Rdmem-Session"

#: A resend that drops at most this many stored messages at the end (a regenerated or retried reply, an edited
#: last question) replaces them; a larger divergence keeps both branches (nothing is deleted but a last turn).
#: Sessions named by X-Rdmem-Session only: a ``user`` names an end user, who may hold several chats at once, and
#: a derived session may be two clients who opened alike; neither deletes what another stored.
_REPLACEABLE = 4


@dataclass(frozen=True)
class Prepared:
    """What the proxy sends: the messages, their tokens before and after, whether they were compacted, how
    many messages were skipped (not stored), and the session's record of the request (written with the
    reply, :func:`store_reply`; ``None`` without a session)."""

    messages: list[dict[str, Any]]
    before: int
    after: int
    compacted: bool
    skipped: int = 0
    saving: dict[str, Any] | None = None
    conv: tuple[Message, ...] = ()  # the request's messages as the session stores them (no system head), parsed
    note: str = ""  # why the request went on as sent though it does not fit (X-Rdmem-Warning)
    shared: bool = False  # the session's name may be shared by several chats ('user', derived): session_of
    stored: tuple[str, ...] = ()  # the ids of the messages the request stored (deleted again if the model refuses it)
    question: str | None = None  # the stored id of its last message, when it stored it (its reply follows it)


def session_of(headers: Mapping[str, str], body: Mapping[str, Any], tenant: str, derive: bool) -> tuple[str | None, bool]:
    """``(session, shared)``: the session named by the request, else (``derive``) one derived from the
    tenant, the system prompt and the first user message, else ``None`` (no memory). ``shared``: the name may
    stand for several conversations (a ``user``, OpenAI's end-user id; a derived name), so that no request of
    it replaces what another stored (:data:`_REPLACEABLE`). ``X-Rdmem-Session``'s bytes
    are read as UTF-8 (a name beyond ASCII is the same session as over REST, MCP or mem0).

    Names are taken exactly as sent (two end users whose ids differ by a space are two sessions); an empty
    or all-whitespace one is no name. ``X-Rdmem-Session`` is rdmem's own: a value that is not a session name
    is a 400, before the model is called. ``user`` is OpenAI's end-user id, any string a client sends: one
    that is not a session name (too long, control characters) gives the request no memory, as no name does
    (the route says why in ``X-Rdmem-Warning``)."""
    header = headers.get(SESSION_HEADER)
    if header is not None and header.strip():
        try:  # the header's bytes (which HTTP hands over as Latin-1) are the name in UTF-8, as in every other door
            return check_session_name(header.encode("latin-1").decode("utf-8"), SESSION_HEADER), False
        except UnicodeError:
            raise ApiError(400, f"{SESSION_HEADER} must be UTF-8 text") from None
        except RdmemError as exc:
            raise ApiError(400, str(exc)) from None
    user = body.get("user")
    if user is not None and not isinstance(user, str):  # OpenAI refuses it; an upstream that ignores it: no memory
        return None, False
    if isinstance(user, str) and user.strip():
        if user.startswith(MEM0_PREFIX):  # a mem0 scope's memories (user "mem0:user_id=bob" read bob's): by the
            return None, False  # header only, named on purpose
        try:
            return check_session_name(user, "user"), True
        except RdmemError:
            return None, False
    if not derive:
        return None, False
    # the date and time a system prompt may carry do not count (a prompt that says the time made every request a
    # new session, each storing the whole history again)
    msgs = body.get("messages") or []
    system = [m.get("content") for m in msgs if isinstance(m, dict) and m.get("role") in ("system", "developer")]
    first = next((m.get("content") for m in msgs if isinstance(m, dict) and m.get("role") == "user"), None)
    prompt = _WHEN.sub("#", json.dumps(system, sort_keys=True, default=str))
    # (not the first message's ``name`` nor a greeting before it: a client may drop the one when it resends,
    # and make the other say the time of day; one conversation must stay one session)
    digest = hashlib.sha256(json.dumps([tenant, prompt, first], sort_keys=True, default=str).encode()).hexdigest()
    return f"chat-{digest[:16]}", True


_MONTH = (r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
          r"|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\.?)")
_DAY = r"(?:(?:[012]?[1-9]|10|20|3[01])(?:st|nd|rd|th)?)"  # 1 to 31
_MM, _DD, _HH = r"(?:0?[1-9]|1[0-2])", r"(?:0?[1-9]|[12]\d|3[01])", r"(?:[01]?\d|2[0-3])"
#: What of a system prompt says when: a date (ISO, with slashes, a month's name and its day or year), a time, a
#: day's name; only values a calendar or a clock has ("4411-22-33", "99:99", "12/34/567" are an account's, a
#: locker's, a ticket's). Not part of a derived session's name; any other number is (an account's, a customer's).
_WHEN = re.compile(
    rf"\b(?:\d{{4}}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
    rf"(?:[T ]{_HH}:[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:Z|[+-]\d{{2}}:?\d{{2}})?)?"
    rf"|(?:{_MM}/{_DD}|{_DD}/{_MM})/(?:\d{{2}}|\d{{4}})|{_HH}:[0-5]\d(?::[0-5]\d)?(?:\s?[AaPp]\.?[Mm]\.?)?"
    rf"|{_MONTH}\s+{_DAY}(?:,?\s+\d{{4}})?|{_DAY}\s+{_MONTH}(?:,?\s+\d{{4}})?|{_MONTH}\s+\d{{4}}"
    rf"|(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)(?=\.?,?\s+(?:\d|{_MONTH}\b)|\.?,?\s*(?:$|[.,;:)\]])))\b")


def surely_fits(raw: bytes, messages: list[Any], budget: int) -> bool:
    """Whether a request body of ``raw`` bytes holding ``messages`` fits ``budget`` tokens, known without
    counting them: a token of the managers' tokenizer (cl100k, byte-level BPE) is at least one byte of UTF-8,
    and every text a message is counted by (content, name, a tool call's name and arguments) is in the body,
    escaped, so never longer than there; twice the body's bytes leaves room for the joins and the
    per-message overhead. Such a request can go to the model at once, while memory reads and stores it. A
    tool call whose arguments are a JSON object, not a string (they are counted re-serialised: ``9e15``
    becomes ``9000000000000000.0``), is counted exactly, as is any request that does not surely fit
    (:func:`prepare`). An image counts by its size, not its URL's (:mod:`rdmem._images`): added to the bound."""
    images = sum(parts_tokens(m.get("content")) for m in messages if isinstance(m, dict))
    if budget <= 0 or 2 * len(raw) + images + len(messages) * (
            get_tokenizer("cl100k_base").message_overhead + 2) > budget:
        return False
    return not any(isinstance(m, dict) and isinstance(m.get("tool_calls"), list) and any(
        isinstance(c, dict) and isinstance(c.get("function"), dict) and "arguments" in c["function"]
        and not isinstance(c["function"]["arguments"], str) for c in m["tool_calls"]) for m in messages)


def _tokens_as_sent(tok: Any, messages: list[Any]) -> int | None:
    """The tokens of a request's messages as the model gets them, counted before they are parsed (the same
    count as theirs once parsed: what a message is counted by, :func:`rdmem.tokens.message_payload`, is what
    the parse keeps); ``None`` when one is not a message that can be counted so (the parse says why)."""
    if not all(isinstance(m, dict) for m in messages):
        return None
    try:
        return int(tok.messages_tokens(messages))
    except (RdmemError, TypeError, ValueError, AttributeError):  # e.g. "tool_calls": 5; the parse names it
        return None


class Skipped(NamedTuple):
    """A message of the request rdmem cannot keep: its place in the request, and why."""

    index: int
    reason: str


def readable_messages(messages: list[Any]) -> tuple[list[Message], list[Skipped]]:
    """The messages rdmem can keep, and where and why each other one was skipped (``message i: ...``).

    What the chat API accepts and rdmem has no use for is not a reason: a non-string ``id`` is ignored (the
    proxy stores no client ids)."""
    kept: list[Message] = []
    skipped: list[Skipped] = []
    for i, msg in enumerate(messages):
        if isinstance(msg, dict) and "id" in msg and not isinstance(msg["id"], str):
            msg = {k: v for k, v in msg.items() if k != "id"}
        try:
            m = parse_message(msg, i, json_extras=True)
        except InvalidInput as exc:
            skipped.append(Skipped(i, str(exc)))
            continue
        kept.append(Message(None, m.chat, m.extra))
    return kept, skipped


def prepare(state: Any, tenant: str | None, session: str | None, shared: bool, body: dict[str, Any],
            budget: int, mark: int | None = None, *, fits: Callable[[Prepared], object] | None = None,
            go: Callable[[], object] | None = None) -> Prepared:
    """Store what is new and compact if needed, in one pass (:func:`rdmem._turn.take_turn`): one read of the
    session, one write of what is new, the context from the same view; the working set is trimmed later,
    off the request path (the embedding worker calls ``maintain()`` once the new vectors have landed).

    The request's leading system messages travel with every request (a client may change them each
    time): they are not stored, they are matched by nothing, and a compacted request is them followed
    by the session's context within what they leave of the budget.

    ``go()`` is called as soon as the request is known to fit as sent, counted before its messages are parsed
    (:func:`_tokens_as_sent`): the caller may forward it while this parses and stores. ``fits(sent)`` is
    called once it is parsed and counted, with what this returns then (before anything is stored): the caller
    may answer with it while this stores what is new. ``mark``: :attr:`~rdmem.server.sessions.SessionPool.deletes`
    when the request began (the session deleted since: nothing is stored)."""
    named, ctx, stored, last = tenant is not None and session is not None, None, (), None
    # not settled here: the route starts this after the session's previous reply is stored (routes_proxy._pending)
    mem = state.pool.manager(tenant, session, budget=max(budget, 1), settled=False) if named else None
    tok = mem.tokenizer if mem is not None else get_tokenizer("cl100k_base")  # the managers' tokenizer
    early = _tokens_as_sent(tok, body["messages"]) if go is not None else None
    went = early is not None and (budget <= 0 or early <= budget)
    if went and go is not None:  # it fits as sent: the model is called while its messages are parsed
        go()
    parsed, skipped = readable_messages(body["messages"])  # the one parse of the messages
    if skipped:
        log.warning("rdmem proxy: %d message(s) of session %r not stored: %s", len(skipped), session,
                    "; ".join(r for _, r in skipped)[:500])
    lead = next((i for i, m in enumerate(parsed) if m.chat["role"] not in ("system", "developer")), len(parsed))
    head, conv = [m.chat for m in parsed[:lead]], parsed[lead:]
    before = early if early is not None and not skipped else tok.messages_tokens([m.chat for m in parsed])
    as_sent = went or budget <= 0 or before <= budget
    sent = Prepared(body["messages"], before, before, False, len(skipped),
                    entry(before, before, False) if mem is not None else None, tuple(conv), shared=shared) \
        if as_sent else None
    if sent is not None and fits is not None:
        fits(sent)
    room = budget - tok.messages_tokens(head)
    # A compacted request is made of what was parsed: a skipped message of the latest exchange (a legacy function
    # result the model is about to read) would vanish from it, so the request goes as sent; an older one is left
    # out as an archived message would be (X-Rdmem-Skipped says it was not stored).
    users = [i for i, m in enumerate(body["messages"]) if isinstance(m, dict) and m.get("role") == "user"]
    recent_skip = [s for s in skipped if s.index > (users[-2] if len(users) > 1 else -1)]
    query = next((content_text(m.chat.get("content")) for m in reversed(conv) if m.chat["role"] == "user"), None)
    if mem is not None:
        assert tenant is not None
        turn = take_turn(mem, conv, replace=0 if shared else _REPLACEABLE,
                         context=None if as_sent or room <= 0 or recent_skip else (query or None, room),
                         charge=_charge(state, tenant, mem), abandon=_deleted(state, tenant, session, mark))
        if turn.new:
            state.pool.worker.wake()
            state.metrics.count("rdmem_messages_stored_total", len(turn.new))
        ctx, stored = turn.context, tuple(turn.ids)
        last = dict(zip(turn.new, turn.ids)).get(len(conv) - 1)  # the question, if this request stored it
    if sent is not None:
        return replace(sent, stored=stored, question=last) if stored else sent
    if recent_skip:
        return Prepared(body["messages"], before, before, False, len(skipped),
                        entry(before, before, False) if mem is not None else None, tuple(conv), shared=shared,
                        stored=stored, question=last,
                        note=f"not compacted: message {recent_skip[0].index} of the latest exchange is one rdmem "
                             "cannot keep (a legacy function message, a tool message without tool_call_id, ...) and "
                             "would be left out of a compacted request; sent as given")
    if room <= 0:
        raise InvalidInput(f"the system messages alone take {budget - room} of the {budget} tokens of the window")
    if mem is None:  # no identity: this request's own messages, nothing read or stored
        from .._api import compact

        ctx = compact([m.chat for m in conv], budget=room, policy=state.settings.policy, query=query or None,
                      embedder=state.pool.embedder)
    assert ctx is not None
    after = budget - room + ctx.tokens
    state.metrics.count("rdmem_compactions_total")
    state.metrics.count("rdmem_tokens_in_total", before)
    state.metrics.count("rdmem_tokens_out_total", after)
    return Prepared(head + ctx.messages, before, after, True, len(skipped),
                    entry(before, after, True) if mem is not None else None, tuple(conv), shared=shared,
                    stored=stored, question=last)


def store_reply(state: Any, tenant: str, session: str, budget: int, saving: dict[str, Any] | None,
                message: dict[str, Any] | None, conv: tuple[Message, ...] = (), shared: bool = False, *,
                mark: int | None = None, refused: tuple[str, ...] = (), question: str | None = None) -> None:
    """Store the assistant's reply and the request's record (``saving``) in one write, the working set's
    trim left to the embedding worker; without a reply, the record alone. A failure is one log line: the
    reply comes again with the next request, the record is only for looking back.

    A reply the session holds already after the request's messages ``conv`` is not stored again: the
    client's next request reached another server process first, which stored it as a resent message
    (lined up as the request was: ``shared``, :func:`~rdmem._turn.take_turn`'s ``gaps``).

    Nothing is stored when the session was deleted since the request began (``mark``, the pool's
    :attr:`~rdmem.server.sessions.SessionPool.deletes` then; through another server process: the ``question``
    the request stored, its last message, is no longer in the store, ids never being used again): lined up
    against the emptied session, the request's history would all be stored again with its reply.

    ``refused``: the messages the request stored, which the model refused (a 400, 413 or 422: something in the
    request it will not take, a bad image say): they are deleted while still the session's newest, or every
    later request that brings them back into the context is refused too (a client drops such a message and goes
    on; in a session several chats share, its resend does not replace it). The client's next request stores
    again what it still sends; once another request went on from them (:func:`~rdmem._turn.forget_newest`),
    they stay."""
    reply = message if message and message.get("role") == "assistant" else None
    if reply is None and saving is None and not refused:
        return
    try:
        mem = state.pool.manager(tenant, session, budget=max(budget, 1), settled=False)  # it is the reply waited for
        if mark is not None and state.pool.deleted_since(tenant, session, mark) or question is not None and \
                not mem.store.pick(mem.session, ids=[question]):  # deleted here, or through another process
            log.info("rdmem proxy: session %r was deleted while its request was answered; its reply is not stored",
                     session)
            return
        if refused and not forget_newest(mem, refused):
            log.info("rdmem proxy: a request of session %r was refused by the model, but another went on from its "
                     "messages: they stay", session)
        new = [parse_message(chat_fields(reply), json_extras=True)] if reply is not None else []
        if new and conv:  # another process may have stored it as a resent message
            store_following(mem, conv, new, charge=_charge(state, tenant, mem), log=saving, gaps=shared,
                            abandon=_deleted(state, tenant, session, mark))
        else:
            store_untrimmed(mem, new, charge=_charge(state, tenant, mem), log=saving)
        if new:
            state.pool.worker.wake()
            state.metrics.count("rdmem_messages_stored_total")
    except Exception as exc:
        log.warning("rdmem proxy: could not store the reply in session %r: %s", session, exc)


def _deleted(state: Any, tenant: str, session: str | None, mark: int | None) -> Callable[[], bool] | None:
    """Whether the session was deleted since the request began (``mark``): then nothing more is stored."""
    return None if mark is None or session is None else lambda: state.pool.deleted_since(tenant, session, mark)


def _charge(state: Any, tenant: str, mem: Any) -> Any:
    """The tenant's stored-tokens rate, charged for the messages a write stores (as ``SessionPool.extend``)."""
    return lambda new: state.limiter.storing(tenant, lambda: mem.tokenizer.messages_tokens([m.chat for m in new]))
