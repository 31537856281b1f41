"""One resent turn in one pass: what a client that resends its history each time (the proxy) costs memory.

A chat client sends its whole history with every request. :func:`take_turn`
reads the session's state once (the manager's view, brought up to date with
one version check), lines the request up against it in memory (no store
read: the view holds the stored messages), decides once, stores what is new
in one append, and builds the context from the same view. The working set is
not trimmed here: the write leaves that to :meth:`MemoryManager.maintain`,
which the embedding worker's owner calls once the new vectors have landed,
off the request path (only a working set past twice its high watermark is
trimmed in line, so that it stays bounded when no worker runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from .compaction import Compaction
from .errors import StoreError, VersionConflict
from .manager import _RETRIES, MemoryManager
from .messages import Message

__all__ = ["Turn", "take_turn", "store_following", "store_untrimmed", "forget_newest", "holds_any"]


@dataclass(frozen=True)
class Turn:
    """What :func:`take_turn` did: the positions of the messages it stored (``new``) and their ids, the ids
    of stored messages the client no longer has at the end (``dropped``; deleted when ``replace`` allowed
    it), the context (``None`` when none was asked for), and the positions of messages not stored because
    they came before messages the session holds (``inserted``: only with ``identity``)."""

    new: list[int] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    deleted: bool = False
    context: Compaction | None = None
    inserted: list[int] = field(default_factory=list)


def take_turn(
    mem: MemoryManager,
    messages: Sequence[Message],
    *,
    replace: int = 0,
    context: tuple[str | None, int] | None = None,
    charge: Callable[[list[Message]], AbstractContextManager[object]] | None = None,
    log: dict[str, Any] | None = None,
    follows: int = 0,
    identity: Callable[[Mapping[str, Any]], str | None] | None = None,
    gaps: bool | None = None,
    abandon: Callable[[], bool] | None = None,
) -> Turn:
    """Store what ``messages`` (a resent history, parsed once by the caller) adds to ``mem``'s session, and
    build the context ``(query, budget)`` if asked, from one read of the session.

    ``replace``: a resend that drops at most this many stored messages at the end (a regenerated reply, an
    edited last question) replaces them (deleted, one more write), the session being one conversation; 0 never
    deletes. ``gaps`` (default: ``not replace``): line the resend up with its own messages where others lie
    between them (several chats in one session: :meth:`~rdmem._session.SessionView.resent`). ``charge(new)``: a
    context manager around the store's write of the new messages (a rate limit's charge). ``log``: a record
    for the session's compaction log, in the same write. The write is conditional on the version read (a
    session written by another process meanwhile is read and lined up again, :data:`~rdmem.manager._RETRIES`
    times at most, the last write unconditional).

    ``follows``: the first this many of ``messages`` are the history the rest (a reply) follows. When the
    session holds only part of that history and went on after it (the client edited or dropped its last
    messages, on another server process, before this reply was stored), nothing is stored: the reply answers
    a history the client abandoned (storing it put the abandoned messages back after the edit). When the
    session holds the whole history followed by another reply (the client retried the request, and the
    retry's reply was stored first), nothing is stored either: one question, one reply (the later one, which
    the client went on with). A reply whose question is the session's newest message is stored after it,
    however the rest of the history lines up (a question edited further back than ``replace`` is stored
    after the newest turn, and its reply was lost).

    ``identity``: the id a message carries of its own (a LangGraph message's), for a client that may edit the
    history it resends. When the resend is not the stored history followed by new messages (a message
    removed from the middle, a summary in place of the oldest), the messages are lined up by it instead
    (:meth:`~rdmem._session.SessionView.resent_by`): new are those after the last one the session holds;
    those before it that it does not hold are not stored (``Turn.inserted``); nothing is deleted.

    ``abandon()``, asked after each read of the session, says the session was deleted since the caller began:
    nothing is written then (:class:`~rdmem.errors.StoreError`), rather than the history lined up against the
    emptied session and stored again.
    """
    gaps = not replace if gaps is None else gaps
    anchor = follows - 1 if follows else None  # the message the reply follows: stored by its own request
    with mem._lock:
        for attempt in range(_RETRIES):
            view = mem._sync()  # the one read: a version check, and what others wrote since, if anything
            if abandon is not None and abandon():
                raise StoreError(f"session {mem.session!r} was deleted meanwhile: nothing is stored")
            new, dropped = view.resent([m.chat for m in messages], gaps=gaps, anchor=anchor)
            inserted: list[int] = []
            if identity is not None and (dropped or (new[:1] == [0] and view.size[0])):  # not a plain resend
                by_id = view.resent_by([m.original() for m in messages], identity)
                if by_id is not None:
                    (new, inserted), dropped = by_id, []
                elif dropped and (new[0] if new else len(messages)) == 1 \
                        and identity(messages[0].original()) is not None:
                    # One message lined up by its text alone with an older stored one ("yes" again), under an id
                    # the session does not hold: a new message, not the client going back to that one (a state
                    # without the thread's past: no checkpointer, one that forgot it, its messages removed). The
                    # price: a client that gives fresh ids each time and resends only its first message (the first
                    # reply regenerated) stores that message twice, where losing "yes" lost the user's turn.
                    new, dropped = list(range(len(messages))), []
            if follows and new and view.newest_is(messages[follows - 1].chat):  # it answers the newest message
                new, dropped = list(range(follows, len(messages))), []
            if follows and dropped and new and (new[0] < follows or _answered(view, dropped[0])):  # superseded
                store_untrimmed(mem, [], log=log)  # the request's record alone
                return Turn([], [], dropped)
            deleted = bool(dropped) and len(dropped) <= replace
            if deleted:  # the client went on from an earlier point: its history is the one kept (rare)
                view.store.delete(mem.session, dropped)
                view = mem._sync()
                new, _ = view.resent([m.chat for m in messages], gaps=gaps, anchor=anchor)
            try:  # the one write, if no one wrote the session since the read (another process may have
                # stored some of these messages meanwhile: they are lined up again)
                ids = store_untrimmed(mem, [messages[i] for i in new], charge=charge, log=log,
                                      expect=view.version if attempt < _RETRIES - 1 else None)
                break
            except VersionConflict:
                continue
        ctx = None
        if context is not None:
            query, budget = context
            ctx = mem._context(view, query, budget, warn=False)
        return Turn(new, ids, dropped, deleted, ctx, inserted)


def _answered(view: Any, first: str) -> bool:
    """Whether the stored message ``first``, the first after the history a reply follows, is a reply itself."""
    unit = view.by_id.get(first)
    return unit is not None and unit.role == "assistant"


def store_following(
    mem: MemoryManager, history: Sequence[Message], messages: Sequence[Message], *,
    charge: Callable[[list[Message]], AbstractContextManager[object]] | None = None,
    log: dict[str, Any] | None = None, gaps: bool = True, abandon: Callable[[], bool] | None = None,
) -> list[str]:
    """Store ``messages`` (a reply) after the resent ``history`` it follows, unless the session holds them
    there already (another server process stored them as resent messages first), lined up and written as
    :func:`take_turn` does (``gaps`` as the request was, ``abandon``), with ``log`` in the same write. Returns
    the ids stored."""
    return take_turn(mem, [*history, *messages], charge=charge, log=log, follows=len(history), gaps=gaps,
                     abandon=abandon).ids


def store_untrimmed(
    mem: MemoryManager, messages: Sequence[Message], *,
    charge: Callable[[list[Message]], AbstractContextManager[object]] | None = None,
    log: dict[str, Any] | None = None, expect: int | None = None,
) -> list[str]:
    """Append ``messages`` (parsed) to ``mem``'s session in one write, with ``log`` in the session's
    compaction log in the same transaction, and return their ids; the working set is left for
    :meth:`~rdmem.MemoryManager.maintain` to trim (unless it passed twice its high watermark)."""
    if not messages:
        if log is not None:
            mem.store.log_compaction(mem.session, log)
        return []
    with mem._lock, charge(list(messages)) if charge is not None else nullcontext():
        return mem._write(list(messages), trim=False, log=log, expect=expect)


def forget_newest(mem: MemoryManager, ids: Sequence[str]) -> bool:
    """Delete the messages ``ids`` if they are still the session's newest, in order (nothing was stored after
    them since); whether they were. For a request's new messages that the model refused: once another request
    has gone on from them (a chat of a shared session that opened alike, a retry the model answered), they are
    that request's history too, and stay."""
    if not ids:
        return False
    with mem._lock:
        view = mem._sync()
        if [u.id for u in view.units[-len(ids):]] != list(ids):
            return False
        view.store.delete(mem.session, list(ids))
        mem._sync()
        return True


def holds_any(mem: MemoryManager, messages: Sequence[Message], identity: Callable[[Mapping[str, Any]], str | None]) -> bool:
    """Whether the session is empty, or holds one of ``messages`` among its newest (the same ``identity``, and the
    same fields sent to the model: :meth:`~rdmem._session.SessionView.resent_by`): a client's messages that
    continue the session's conversation, not another's."""
    with mem._lock:
        view = mem._sync()
        return not view.size[0] or view.resent_by([m.original() for m in messages], identity) is not None
