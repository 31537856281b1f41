"""MemoryManager: a session's memory, streamed in message by message, kept in a store."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ._learning import OnlineLearning
from ._session import SessionView, new_unit
from .compaction import Compaction, compact_units
from .contract import Composed, Policy
from .embed import Embedder
from .errors import InvalidInput, InvalidType, StoreError
from .history import pending_call
from .messages import Message, check_query, parse_message, parse_messages
from .policies import for_working_set, get_policy
from .reconstruct import MERGED, Markers, check_markers
from .scoring import embed_text
from .sessions import default_low, embedder_for
from .store import Store, VersionConflict, check_session, check_store, open_store
from .summarize import Summarizer
from .tokens import Tokenizer, check_budget, get_tokenizer
from .units import MemoryUnit, make_unit

__all__ = ["MemoryManager"]

#: How often a compaction (or a proxy's turn, ``rdmem._turn``) is recomputed when other writers keep changing
#: the session under it.
_RETRIES = 8
#: A query embeds at most this many candidates not yet embedded (one batch): a fact just stored ranks by meaning.
ON_DEMAND_EMBEDDINGS = 64
_UNSET: Any = object()


class MemoryManager:
    """Working memory under a token budget, with everything else archived, never lost.

    Messages stream in with :meth:`add`. When the working set passes
    ``high × budget`` tokens it is compacted down to ``low × budget``; what
    leaves goes to the archive tier. Between compactions the working set only
    grows at its end, so the prompt prefix stays stable for inference-engine
    prefix caches. :meth:`context` builds what the model sees, from the working
    set and, for a query, the best archived units too.

    The session lives in its store, not in this object: ids and places are
    allocated by the store, and every call starts from the store's current
    state, so several managers (threads, processes, machines sharing one
    PostgreSQL) may use one session at once. A compaction is written only
    if no one changed the session while it was computed (else it is done
    again on the new state).

    Parameters
    ----------
    budget:
        Tokens the model may be sent (per-message overhead included).
    policy:
        A name from :data:`rdmem.POLICIES` or a policy object.
    store:
        ``None``/``"memory://"`` (in-process), ``"sqlite:///path.db"``,
        ``"postgresql://..."``, or a store object.
    session:
        The session id inside the store.
    high, low:
        Watermarks as fractions of ``budget`` (``0 < low <= high``). ``low=None``
        (default): :func:`default_low` (for ``rd`` 0.96, 0.98 with ``markers=True``; 0.8 for the others). A
        lower mark compacts less often, so the prompt prefix stays stable for
        longer; a higher one leaves fewer messages that arrived since the last
        compaction, which no policy has judged yet, in the working set.
    markers:
        As :func:`rdmem.compact`'s (default ``"merged"``: one marker for every omitted span).
    archive_candidates:
        How many archived units a query's search may bring back into competition (with the best ones' neighbours).
    embedding:
        ``"inline"`` (default, deterministic): a message is embedded before :meth:`add` returns. ``"deferred"``
        (``rdmem serve``): stored at once, embedded later by an :class:`~rdmem.EmbeddingWorker` on :attr:`store`;
        until then it is ranked by its lexical and prior terms, and the report says so (``embedded=False``).

    >>> mem = MemoryManager(budget=60, policy="window")
    >>> for i in range(10):
    ...     _ = mem.add(role="user", content=f"note number {i}")
    >>> [m["content"] for m in mem.messages()]
    ['[4 messages omitted]', 'note number 4', 'note number 5', 'note number 6', 'note number 7', 'note number 8', 'note number 9']
    >>> mem.archived_ids()
    ['m0', 'm1', 'm2', 'm3']
    """

    def __init__(
        self,
        *args: Any,
        budget: int = _UNSET,
        policy: str | Policy = _UNSET,
        store: str | Store | None = None,
        session: str = "default",
        tokenizer: str | Tokenizer | Callable[[str], int] = "cl100k_base",
        message_overhead: int | None = None,
        embedder: Embedder | str | None = None,
        summarizer: Summarizer | None = None,
        high: float = 1.0,
        low: float | None = None,
        markers: Markers = MERGED,
        archive_candidates: int = 200,
        embedding: str = "inline",
    ) -> None:
        if args:
            if len(args) > 2 or (len(args) >= 1 and budget is not _UNSET) or (len(args) == 2 and policy is not _UNSET):
                raise InvalidType("MemoryManager takes its settings as keywords: MemoryManager(budget=..., policy=...)")
            warnings.warn("MemoryManager(budget, policy) with positional arguments is deprecated; pass them as "
                          "keywords: MemoryManager(budget=..., policy=...)", DeprecationWarning, stacklevel=2)
            budget, policy = args[0], (args[1] if len(args) == 2 else policy)
        if budget is _UNSET:
            raise InvalidType("MemoryManager needs a budget in tokens: MemoryManager(budget=4000, ...)")
        self.budget = check_budget(budget)
        self.policy, self.markers = get_policy("rd" if policy is _UNSET else policy), check_markers(markers)
        if low is None:
            low = min(default_low(self.policy, self.markers), high)
        if not (0 < low <= high):
            raise InvalidInput(f"watermarks must satisfy 0 < low <= high, got low={low!r}, high={high!r}")
        check_session(session)
        check_store(store)  # a store URL of the wrong form fails here, not at the first add()
        if isinstance(archive_candidates, bool) or not isinstance(archive_candidates, int) or archive_candidates < 0:
            raise InvalidInput(f"archive_candidates must be an int >= 0, got {archive_candidates!r}")
        if embedding not in ("inline", "deferred"):
            raise InvalidInput(f"embedding must be 'inline' or 'deferred', got {embedding!r}")
        self.session, self.embedding = session, embedding
        self.high, self.low = float(high), float(low)
        self.archive_candidates, self.summarizer = archive_candidates, summarizer
        self._tokenizer_spec, self._overhead = tokenizer, message_overhead
        self._embedder_spec, self._store_spec = embedder, store
        self._embedder_obj: Any = _UNSET
        self._view: SessionView | None = None  # opened on first use (:meth:`_session`)
        self._lock = threading.RLock()
        self._learning = OnlineLearning(self.policy, session)
        self._settings_saved = self._closed = False

    # -- the session's state, from the store ---------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        return self._session().tokenizer

    def _session(self) -> SessionView:
        """The view of the session, created on first use (tokenizer and store are opened then)."""
        if self._view is None:
            if self._closed:  # opened again, ``memory://`` would be a new, empty store: messages silently lost
                raise StoreError(f"session {self.session!r}: this MemoryManager was closed (make a new one)")
            tok = get_tokenizer(self._tokenizer_spec, message_overhead=self._overhead)
            self._view = SessionView(open_store(self._store_spec), self.session, tok)
        return self._view

    def _sync(self) -> SessionView:
        """The view, caught up with what anyone wrote to the session (its feedback too: a shared view may have)."""
        view = self._session()
        view.sync()
        self._learning.restore(view)
        return view

    def _share_session(self, other: MemoryManager) -> None:
        """Read the session through ``other``'s view and lock, from before first use (a server pool shares one)."""
        view, tok = other._session(), get_tokenizer(self._tokenizer_spec, message_overhead=self._overhead)
        if self._view is not None or not view.shareable(self.session, self._store_spec, tok):
            raise InvalidInput("a manager shares a view of its session before its first use, with managers of "
                               "one store, session and tokenizer")
        self._view, self._lock = view, other._lock

    @property
    def store(self) -> Store:  # the store the session lives in (opened on first use)
        return self._session().store

    @property
    def _embedder(self) -> Embedder | None:  # resolved once (the check is a runtime protocol check)
        if self._embedder_obj is _UNSET:
            self._embedder_obj = embedder_for(self.policy, self._embedder_spec)
        return self._embedder_obj

    # -- writing -----------------------------------------------------------------------
    def add(self, message: Mapping[str, Any] | None = None, /, **fields: Any) -> str:
        """Append one message (a dict, or ``role=``, ``content=``, ``id=``... keywords); return its id.

        Without an ``id`` the store gives it one (``m0``, ``m1``, ..., skipping ids already taken). An ``id``
        the session already has is a :class:`ValueError` and changes nothing. Fields the chat API does not know
        are stored with the message and given back by :meth:`history`, never sent to the model. The message is
        stored before this returns; the working set is compacted if it passed the high watermark.
        """
        if message is not None and fields:
            raise InvalidType("pass either a message dict or keyword fields, not both")
        if message is None and not fields:
            raise InvalidType("add() needs a message: add({'role': 'user', 'content': '...'}) or "
                            "add(role='user', content='...')")
        if message is not None and not isinstance(message, Mapping):
            hint = f"; did you mean add(role='user', content={message!r})?" if isinstance(message, str) else ""
            raise InvalidType(f"add() takes a message dict or role=/content= keywords, got {type(message).__name__}"
                            f"{hint}")
        return self._write([parse_message(dict(message) if message is not None else fields, json_extras=True)])[0]

    def extend(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """Add several messages, in order, in one atomic write (all are checked first: if one is invalid,
        none is stored); then compact once if needed. Returns their ids."""
        return self._write(parse_messages(messages, json_extras=True))

    def _write(self, parsed: list[Message], *, trim: bool = True, log: dict[str, Any] | None = None,
               expect: int | None = None) -> list[str]:
        """Store ``parsed`` (and ``log``; ``expect``: at that version only) in one append, then trim the working set."""
        if not parsed:
            return []
        with self._lock:
            view = self._session()
            units = [make_unit(m.id or "", m.chat, 0, tok := view.tokenizer) for m in parsed]
            emb = self._embedder if self.embedding == "inline" else None
            if emb is not None:
                for u, v in zip(units, emb.embed([embed_text(u) for u in units]), strict=True):
                    u.embedding = v
            news = [new_unit(u, m.original(), tok, m.id) for u, m in zip(units, parsed, strict=True)]
            given = {k: v for k, v in (("log", log), ("expect", expect)) if v is not None}
            written = view.store.append(self.session, news, **given)
            fresh = view.written(written.prev, written.version)
            if fresh:
                for u, su in zip(units, written.units, strict=True):
                    u.id, u.index = su.id, su.seq
                    view.added(u, "working")
            self._learning.restore(view)
            fresh = self._save_settings(view) and fresh
            bound = 2 * self.high * self.budget  # deferred: trim once the working set's vectors landed (maintain)
            if (view.vectors_landed(self.policy.needs_embeddings, bound) if trim else view.working_tokens() > bound) \
                    or (trim and self.embedding == "inline"):
                self._compact_working(fresh=fresh)
            return [su.id for su in written.units]

    def _save_settings(self, view: SessionView) -> bool:
        """Record how this manager compacts the session (``rdmem sessions show``); ``False`` if another wrote."""
        if self._settings_saved and "settings" in view.state:  # (a session deleted and begun again has none)
            return True
        self._settings_saved = True
        return view.save_state("settings", {"budget": self.budget, "high": self.high, "low": self.low,
                                            "policy": self.policy.name})

    def delete(self, ids: Sequence[str]) -> list[str]:
        """Delete messages of the session for good (from both tiers); return the ids that were there.

        A tool call deleted without its results (or results without their call) are left out of every
        context from then on, so what the model sees stays a valid history.
        """
        with self._lock:
            written = self._session().store.delete(self.session, [ids] if isinstance(ids, str) else list(ids))
            self._sync()
            return written.deleted

    def unseen(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Positions of ``messages`` this session does not have yet, for a client that resends its history
        each time (a proxy, a framework's model call); see :meth:`resent`.

        >>> mem = MemoryManager(budget=100, policy="window")
        >>> mem.extend([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
        ['m0', 'm1']
        >>> mem.unseen([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        ...             {"role": "user", "content": "c"}])
        [2]
        """
        return self.resent(messages)[0]

    def resent(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[str]]:
        """``(new, dropped)`` for a resent history: the positions of ``messages`` not stored yet, and the ids of
        stored messages the client no longer has at the end (a regenerated reply, an edited last question: not
        deleted here). Messages compare on the fields sent to the model; those stored in order with others
        between them (another chat's, in a session several share) are old too (``SessionView.resent``)."""
        with self._lock:
            return self._sync().resent(messages)

    def feedback(self, ids: Sequence[str], reward: float, *, learning_rate: float = 0.5, max_shift: float = 2.0) -> None:
        """Tell the value model whether the units ``ids`` turned out to be needed (``reward`` in [0, 1]: 1
        needed, 0 not): one clipped gradient step (:class:`rdmem.learn.Feedback`), for this session only, saved
        in its state in the store (other and reopened managers use it); :meth:`reset_feedback` reverts it
        exactly. Needs a policy with a learned value model (``rd``)."""
        with self._lock:
            self._learning.saved(self._sync, lambda view: self._learning.step(
                view, ids, reward, self._embedder, learning_rate=learning_rate, max_shift=max_shift))

    def reset_feedback(self) -> None:
        """Undo all :meth:`feedback` for this session (back to the shipped or given model), in the store too."""
        with self._lock:
            self._learning.saved(self._sync, self._learning.reset)

    def clear(self) -> None:
        """Delete the whole session for good (messages, feedback, settings); the manager stays, on an empty one."""
        with self._lock:
            view = self._session()
            view.store.delete_session(self.session)
            self._sync()

    def maintain(self) -> None:
        """Trim the working set if it passed the high watermark (deferred managers' writes leave it to this)."""
        with self._lock:
            self._compact_working()

    def _compact_working(self, *, fresh: bool = False) -> None:
        """Compact the working set if it passed the high watermark; the store takes the result only if the session
        did not change meanwhile (else it is redone). ``fresh``: the view is up to date (this manager's write)."""
        for attempt in range(_RETRIES):
            view = self._session() if fresh and attempt == 0 else self._sync()
            if view.working_tokens() <= self.high * self.budget:
                return
            working = view.working_units()
            target = max(int(self.low * self.budget), 1)
            result = self._compact(working, target, self._working_policy, warn=False)
            # A message cut to fit stays in working memory (context() cuts it again): archiving it would
            # drop the newest message silently when it alone exceeds the budget.
            kept = {d.id for d in result.report if d.decision in ("kept", "truncated", "compressed")}
            # A tool call still waiting for results stays too: archiving it would orphan the results to come.
            kept |= {working[p].id for p in pending_call(working)}
            leaving = [u.id for u in working if u.id not in kept]
            if not leaving:
                return
            record = {"archived": leaving, "kept": len(kept), "budget": target, "policy": self.policy.name}
            try:
                written = view.store.set_tier(self.session, leaving, "archive", expect=view.version, log=record)
            except VersionConflict:
                continue
            view.written(written.prev, written.version)
            for i in leaving:
                view.set_tier(i, "archive")
            return

    # -- reading -------------------------------------------------------------------------
    def working_ids(self) -> list[str]:
        """Ids of the units in working memory, in order."""
        with self._lock:
            return [u.id for u in self._sync().working_units()]

    def archived_ids(self) -> list[str]:
        """Ids of the archived units, in order."""
        with self._lock:
            return self._sync().archived_ids()

    def search(self, query: str, *, k: int = 10, tier: str | None = None) -> list[dict[str, Any]]:
        """The session's ``k`` messages (of ``tier``, or both) that best match ``query`` (lexical and dense
        rankings fused): ``{"id", "score", "tier", "message"}`` each, best first."""
        check_query(query, required=True)
        with self._lock:
            view = self._sync()
            emb = self._embedder
            qvec = emb.embed([query])[0] if emb is not None else None
            hits = view.store.search(self.session, query, qvec, k=k, tier=tier)  # type: ignore[arg-type]
            view.fetch(ids=[i for i, _ in hits])
            return [{"id": i, "score": s, "tier": view.tier[i], "message": view.by_id[i].message}
                    for i, s in hits if i in view.by_id]

    def stats(self) -> dict[str, Any]:
        """How large the session is: messages and tokens, in all and in working memory."""
        with self._lock:
            working = (view := self._sync()).working_units()
            return {"units": view.size[0], "working": len(working), "archived": view.archived,
                    "tokens": view.size[1], "working_tokens": view.working_tokens(),
                    "working_ids": [u.id for u in working]}

    def history(self, *, offset: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
        """The session's messages as they were given (every field, with its ``id``), in order, from the
        ``offset``-th on, at most ``limit``: what :meth:`add` stored, whatever the tiers."""
        with self._lock:
            return [{"id": su.id, **su.message}
                    for su in self._session().store.load(self.session, offset=offset, limit=limit)]

    def originals(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The messages ``ids`` as they were given (every field, with the ``id``), by id, for those the session
        has: what an adapter needs to hand its framework back its own objects for a context's ``sources``.

        >>> mem = MemoryManager(budget=100, policy="window")
        >>> mem.extend([{"role": "user", "content": "a", "lang": "en"}, {"role": "user", "content": "b"}])
        ['m0', 'm1']
        >>> mem.originals(["m0", "nope"])
        {'m0': {'id': 'm0', 'role': 'user', 'content': 'a', 'lang': 'en'}}
        """
        with self._lock:
            return self._sync().originals(ids)

    def context(self, query: str | None = None, *, budget: int | None = None, warn: bool = True) -> Compaction:
        """What the model should see now, within ``budget`` (default: the manager's).

        Without a query: the working set, compacted if it does not fit. With a query: the working set plus
        the archived units that best match the query (lexical + dense), all competing in one budgeted
        selection. The newest user message is always in it (cut, with a visible marker, if it alone does not
        fit). Its ``warnings`` are also raised as ``RuntimeWarning`` unless ``warn=False`` (a server, whose
        threads cannot share ``warnings.catch_warnings``).
        """
        budget = self.budget if budget is None else check_budget(budget)
        check_query(query)
        with self._lock:
            return self._context(self._sync(), query, budget, warn)

    def _context(self, view: SessionView, query: str | None, budget: int, warn: bool) -> Compaction:
        """:meth:`context` on ``view`` as it is (the caller holds the lock and brought it up to date)."""
        cands = view.working_units()
        if query and self.archive_candidates and view.archived:
            emb = self._embedder
            qvec = emb.embed([query])[0] if emb is not None else None
            hits = view.store.search(self.session, query, qvec, k=self.archive_candidates, tier="archive")
            cands = view.whole_groups(sorted(cands + view.archived_near([i for i, _ in hits]), key=lambda u: u.index))
        cands = view.with_turn_in_progress(cands)
        return self._compact(cands, budget, self._learning.policy(), query, warn=warn)

    def messages(self, query: str | None = None) -> list[dict[str, Any]]:
        """The messages for the next model call (``context(query).messages``)."""
        return self.context(query).messages

    def _compact(self, units: list[MemoryUnit], budget: int, policy: Policy, query: str | None = None, *,
                 warn: bool = True) -> Compaction:
        """:func:`compact_units` with this session's tokenizer, embedder, summarizer and document frequencies
        (deferred: a query embeds up to :data:`ON_DEMAND_EMBEDDINGS` candidates whose vectors have not landed)."""
        view = self._session()
        return compact_units(
            units,
            budget=budget,
            policy=policy,
            query=query,
            tokenizer=view.tokenizer,
            embedder=self._embedder,
            summarizer=self.summarizer,
            markers=self.markers,
            now=view.next_place,
            doc_freq=(view.df, view.df_n),
            warn=warn,
            embed_missing=self.embedding == "inline" or (
                query is not None and sum(u.embedding is None for u in units) <= ON_DEMAND_EMBEDDINGS),
        )

    @property
    def _working_policy(self) -> Policy:
        """The policy that trims the working set: it holds whole messages, so a policy composed over another
        (the representation ladder over rd) trims it with its base; rd values free room (:func:`for_working_set`)."""
        policy = self._learning.policy()
        return for_working_set(policy.base if isinstance(policy, Composed) else policy, markers=self.markers)

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Close the store this manager opened (not one given as an object); using it after is a StoreError."""
        with self._lock:
            if self._view is not None and self._view.store is not self._store_spec:
                self._view.store.close()
            self._view, self._closed = None, True

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        with self._lock:
            return self._sync().size[0]
