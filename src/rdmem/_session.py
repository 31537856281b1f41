"""A manager's view of its session: the store's units as memory units, brought up to date on every call.

The store is the source of truth. A :class:`SessionView` remembers the
version it last saw and, before each operation, applies what the store says
changed since (units appended or moved by any process); a delete makes it
start over from the whole session.
"""

from __future__ import annotations

import gc
import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

from .features import Features, content_words
from .history import ToolGroups, resend_alignment, resend_key, resend_with_gaps
from .messages import chat_fields
from .scoring._base import WordCounts
from .store import Changes, NewUnit, Store, StoredUnit
from ._images import image_parts
from .tokens import Tokenizer
from .units import MemoryUnit, make_unit

__all__ = ["SessionView", "stored_features", "COUNTED_BY", "NEIGHBOUR_HITS", "NEIGHBOUR_REACH", "VIEW_ROWS"]

#: Key of a stored unit's features that names the tokenizer its ``tokens`` were counted with
#: (:attr:`rdmem.tokens.Tokenizer.fingerprint`).
COUNTED_BY = "counted_by"


def stored_features(features: Features, tokenizer: Tokenizer) -> dict[str, Any]:
    """A unit's features as a store keeps them, naming the tokenizer its token count was made with
    (a reopened session reuses the count only with the same one)."""
    out = features.as_dict()
    if tokenizer.fingerprint is not None:
        out[COUNTED_BY] = tokenizer.fingerprint
    return out


def new_unit(unit: MemoryUnit, original: dict[str, Any], tokenizer: Tokenizer, explicit_id: str | None) -> NewUnit:
    """What the store is given for a unit: the message as the caller gave it (every field), and its id only
    if the caller chose one (else the store allocates it)."""
    return NewUnit(original, unit.tokens, stored_features(unit.features, tokenizer), unit.embedding, "working",
                   id=explicit_id)


#: A query's best archived hits bring the archived turns within this many of them into the candidates (the
#: turns around a fact are often asked about with it; BENCHMARKS "Item 3, fourth round").
NEIGHBOUR_HITS, NEIGHBOUR_REACH = 10, 2

#: How many of a session's newest places a view reads when it opens, and counts in its word statistics;
#: older units (archived) are read when a call needs them: a search's hits and their neighbours.
VIEW_ROWS = 20_000


class SessionView:
    """The units of one session a manager needs, in order, with their tiers, tool-call groups and word
    statistics: every unit from place :attr:`start` on (the newest ``rows`` places when it opened, and
    everything since), the working set wherever it is, and older units as calls fetch them.

    A unit's ``index`` is its place in the session (the store's ``seq``: 0, 1, ..., a delete moves
    the later units up and the view reads its window again). The word statistics count the units of the newest ``rows`` places, so they
    are the same whenever a view opens; a session shorter than ``rows`` is held whole.
    """

    def __init__(self, store: Store, session: str, tokenizer: Tokenizer, rows: int | None = None) -> None:
        self.store = store
        self.session = session
        self.tokenizer = tokenizer
        self.rows = VIEW_ROWS if rows is None else rows
        self.version = 0
        self.state: dict[str, Any] = {}
        self._clear()

    def _clear(self, start: int = 0) -> None:
        self.start = start  # every place from here on is held
        self.units: list[MemoryUnit] = []  # the units from ``start`` on, in order
        self.by_id: dict[str, MemoryUnit] = {}
        self.at: dict[int, MemoryUnit] = {}  # place -> unit, for every unit held
        self.tier: dict[str, str] = {}
        self.df = WordCounts()
        self.df_n = 0  # the units the word statistics count
        self._df_from = start  # the lowest place they may count
        self.members: dict[int, list[MemoryUnit]] = {}  # group -> its units
        self.size = (0, 0)  # the session's units and tokens
        self.next_place = start  # the place after the newest unit held
        self._groups = ToolGroups()
        self._working: dict[str, MemoryUnit] = {}
        self._working_tokens = 0
        self._older: list[str] = []  # ids of the units held from before ``start`` (fetched, or working)
        self._keys: dict[str, bytes] = {}  # id -> digest of its resend key

    def shareable(self, session: str, store: object, tokenizer: Tokenizer) -> bool:
        """Whether a manager of ``session`` in ``store`` (``None``: any), counting with ``tokenizer``, may read
        the session through this view (:meth:`rdmem.MemoryManager._share_session`)."""
        fingerprint = tokenizer.fingerprint
        return (session == self.session and store in (None, self.store) and fingerprint is not None
                and fingerprint == self.tokenizer.fingerprint)

    # -- following the store --------------------------------------------------------
    def sync(self) -> bool:
        """Catch up with the store (one cheap version check when nothing changed); ``True`` if anything did.
        Every call of a manager begins here: the view also lets go of what it need not hold (:meth:`_bound`)."""
        self._bound()
        if self.store.version(self.session) == self.version:
            return False
        self.apply(self.store.changes(self.session, self.version, rows=self.rows))
        return True

    def apply(self, changes: Changes) -> None:
        """Apply what the store reported changed (or, ``full``, the session from ``changes.start`` on)."""
        if changes.full:
            self._clear(changes.start)
        # Many units at once (a large session's first read): not worth collecting cycles while they are made
        # (a small read is not paused for: reads of many small sessions could keep the collector off).
        with _bulk() if len(changes.units) >= _BULK_READ else nullcontext():
            self._apply_units(changes.units)
        self.version = changes.version
        self.state = dict(changes.state)
        self.size = changes.size

    def _apply_units(self, units: Iterable[StoredUnit]) -> None:
        for su in units:
            if su.id in self.by_id:
                self.set_tier(su.id, su.tier)
                unit = self.by_id[su.id]
                if unit.embedding is None and su.embedding is not None:  # its vector landed (a worker's)
                    unit.embedding = np.array(su.embedding, dtype=np.float32)
            else:
                self.append(self.unit_of(su), su.tier)

    def unit_of(self, su: StoredUnit) -> MemoryUnit:
        """A memory unit from a stored one, at its place.

        A stored count made with this very tokenizer is reused
        (re-tokenising is a quarter of the time it takes to open a large
        session); any other is counted again.
        """
        fingerprint = self.tokenizer.fingerprint
        feats = Features.from_dict(su.features) if su.features else None
        counted_by = str((su.features or {}).get(COUNTED_BY))
        # rdmem 0.1 named the offline copy of an encoding in the fingerprint: the same counts. An assistant's
        # refusal is sent (and counted) since 2026-12-05, images since 2026-12-06: a message stored before was
        # counted without them (rare: recounted).
        same = fingerprint is not None and counted_by.replace("_offline/", "/") == fingerprint and not (
            su.message.get("role") == "assistant" and isinstance(su.message.get("refusal"), str)) \
            and not image_parts(su.message.get("content"))
        unit = make_unit(su.id, chat_fields(su.message), su.seq, self.tokenizer, features=feats,
                         tokens=su.tokens if same else None)
        if su.embedding is not None:
            # Archived vectors may share the store's search matrix (SQLite: one column-major array);
            # the working set's few take part in every selection, so they get compact copies of
            # their own instead of being gathered out of that matrix on every call.
            unit.embedding = (np.array if su.tier == "working" else np.asarray)(su.embedding, dtype=np.float32)
        return unit

    def written(self, prev: int, version: int) -> bool:
        """After this view's own write ``prev -> version``: ``True`` if no one else wrote in between (the
        caller then applies its write itself), else the view catches up from the store."""
        if prev == self.version:
            self.version = version
            return True
        self.apply(self.store.changes(self.session, self.version, rows=self.rows))
        return False

    def fetch(self, ids: Iterable[str] = (), places: Iterable[int] = ()) -> None:
        """Hold the units ``ids`` and those at ``places`` too (one store read for those not held yet; ids
        and places the session does not have are left out)."""
        ids = [i for i in dict.fromkeys(ids) if i not in self.by_id]
        places = [p for p in dict.fromkeys(places) if p not in self.at and 0 <= p < self.start]
        if ids or places:
            self._apply_units(su for su in self.store.pick(self.session, ids=ids, places=places)
                              if su.id not in self.by_id)

    # -- the units -------------------------------------------------------------------
    def append(self, unit: MemoryUnit, tier: str) -> None:
        """Hold ``unit`` (its ``index`` is its place): one after the newest, or one from before :attr:`start`."""
        self.members.setdefault(self._groups.assign(unit), []).append(unit)
        self.by_id[unit.id] = unit
        self.at[unit.index] = unit
        self.tier[unit.id] = "archive"
        if unit.index >= self.start:
            self.units.append(unit)
            self.next_place = unit.index + 1
            self._count_words(unit)
        else:
            self._older.append(unit.id)
        self.set_tier(unit.id, tier)

    def added(self, unit: MemoryUnit, tier: str) -> None:
        """Hold a unit this view's manager just stored (the session grew by it)."""
        self.append(unit, tier)
        self.size = (self.size[0] + 1, self.size[1] + unit.tokens)

    def _count_words(self, unit: MemoryUnit) -> None:
        """Count the unit's words in the statistics; those of units that left the newest ``rows`` places go."""
        self.df.update(set(content_words(unit.text)))
        self.df_n += 1
        while self._df_from <= unit.index - self.rows:
            old = self.at.get(self._df_from)
            if old is not None:
                self.df.remove(set(content_words(old.text)))
                self.df_n -= 1
            self._df_from += 1

    def _bound(self) -> None:
        """Let go of archived units outside the newest ``rows`` places once twice as many are held (and of
        fetched ones past ``rows``), so a long-running view's memory does not grow with its session. Run as a
        call begins (:meth:`sync`): what a call fetches stays for the call."""
        if len(self.units) > 2 * self.rows:
            cut = self._df_from
            keep = [u for u in self.units if u.index < cut and self.tier[u.id] == "working"]
            gone = [u for u in self.units if u.index < cut and self.tier[u.id] != "working"]
            self.units = [u for u in self.units if u.index >= cut]
            self.start = cut
            self._older += [u.id for u in keep]
            self._drop(gone)
        if len(self._older) > self.rows:
            gone = [self.by_id[i] for i in self._older if self.tier[i] != "working"]
            self._older = [i for i in self._older if self.tier[i] == "working"]
            self._drop(gone)

    def _drop(self, gone: list[MemoryUnit]) -> None:
        for u in gone:
            del self.by_id[u.id], self.at[u.index], self.tier[u.id]
            self._keys.pop(u.id, None)
            group = self.members.get(u.group)
            if group is not None:
                group[:] = [m for m in group if m.id != u.id]
                if not group:
                    del self.members[u.group]

    def set_tier(self, uid: str, tier: str) -> None:
        unit = self.by_id[uid]
        if tier == "working" and uid not in self._working:
            self._working[uid] = unit
            self._working_tokens += unit.tokens
        elif tier != "working" and uid in self._working:
            del self._working[uid]
            self._working_tokens -= unit.tokens
        self.tier[uid] = tier

    @property
    def archived(self) -> int:
        """How many units of the session are archived (every unit is working or archived)."""
        return self.size[0] - len(self._working)

    def save_state(self, key: str, value: Any) -> bool:
        """Set ``key`` of the session's state record to ``value`` (nothing written if it is already);
        ``False`` if someone else wrote the session meanwhile (this view then caught up)."""
        if self.state.get(key) == value:
            return True
        written = self.store.update_state(self.session, {key: value})
        if self.written(written.prev, written.version):
            self.state[key] = value
            return True
        return False

    def vectors_landed(self, needed: bool, bound: float) -> bool:
        """Whether a deferred manager may trim the working set now: every working unit has its vector (or
        the policy needs none), or the working set passed ``bound`` tokens (it must not grow without end
        when no worker runs)."""
        return (not needed or self._working_tokens > bound
                or all(u.embedding is not None for u in self._working.values()))

    def working_units(self) -> list[MemoryUnit]:
        return sorted(self._working.values(), key=lambda u: u.index)

    def working_tokens(self) -> int:
        return self._working_tokens

    def archived_ids(self) -> list[str]:
        if self.start == 0:
            return [u.id for u in self.units if self.tier[u.id] == "archive"]
        return [su.id for su in self.store.load(self.session) if su.tier == "archive"]  # a listing: all of it

    def archived_near(self, hits: Sequence[str]) -> list[MemoryUnit]:
        """The archived units among a search's ``hits`` (ids, best first) and within :data:`NEIGHBOUR_REACH`
        places of the :data:`NEIGHBOUR_HITS` best, fetched if not held (ids the session lacks are skipped)."""
        self.fetch(ids=hits)
        best = [self.by_id[i].index for i in hits[:NEIGHBOUR_HITS] if i in self.by_id]
        near = {p + d for p in best for d in range(-NEIGHBOUR_REACH, NEIGHBOUR_REACH + 1)}
        self.fetch(places=near)
        found = {u.index: u for u in (self.by_id.get(i) for i in hits) if u is not None}
        found.update((p, self.at[p]) for p in near if p in self.at)
        return [found[p] for p in sorted(found) if self.tier[found[p].id] == "archive"]

    def whole_groups(self, cands: list[MemoryUnit]) -> list[MemoryUnit]:
        """``cands`` with the rest of any tool-call group one of them belongs to, in order."""
        have = {u.id for u in cands}
        extra = [m for g in {u.group for u in cands} for m in self.members.get(g, ()) if m.id not in have]
        return sorted(cands + extra, key=lambda u: u.index) if extra else cands

    def with_turn_in_progress(self, cands: list[MemoryUnit]) -> list[MemoryUnit]:
        """``cands`` and, when the session ends with tool results, its newest user message and every unit
        after it, whatever their tier: working-set compaction aims below a context's budget and may have
        archived the question an agent is in the middle of answering (``compaction._settle`` keeps it)."""
        if not self.units or self.units[-1].role != "tool":
            return cands
        start = next((k for k in range(len(self.units) - 1, -1, -1) if self.units[k].role == "user"), None)
        have = {u.id for u in cands}
        missing = [u for u in self.units[start:] if u.id not in have] if start is not None else []
        return self.whole_groups(sorted(cands + missing, key=lambda u: u.index)) if missing else cands

    def originals(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored messages ``ids`` (every field given, with the ``id``), by id, for those the session has;
        one store read."""
        return {su.id: {"id": su.id, **su.message} for su in self.store.pick(self.session, ids=list(dict.fromkeys(ids)))}

    def resent(self, messages: Sequence[Mapping[str, Any]], slack: int = 8, *,
               gaps: bool = True, anchor: int | None = None) -> tuple[list[int], list[str]]:
        """For a client that resends its history: the positions of ``messages`` the session does not have,
        and the ids of the stored messages it dropped (:func:`~rdmem.history.resend_alignment`), compared
        on the fields sent to the model, against the newest ``len(messages) + slack`` stored messages.

        With ``gaps`` (a session several chats write to: one end user's, an adapter's), a resend that does not
        line up so is looked for among the newest ``4 * len(messages) + 64``, as a run there or with other
        messages between its own (:func:`~rdmem.history.resend_with_gaps`); what that finds is stored. So a
        chat whose turns another chat's follow is not stored again, nor is one that went on from an older turn
        (its new messages are stored after the newest). Without (one conversation per session), such a resend
        is new from where it diverged, so a conversation forked at an older turn is stored whole, in order.
        ``anchor``: the position of a message known stored (a reply's question, stored by its own request),
        which a run may reach alone after a gap."""
        if not self.size[0] or not messages:
            return list(range(len(messages))), []
        tail, given = self._tail(len(messages) + slack), [_digest(resend_key(x)) for x in messages]
        m, d = resend_alignment([k for _, k in tail], given)
        if gaps and (d or not m):
            wide = self._tail(4 * len(messages) + 64)
            keys = [k for _, k in wide]
            # two messages at least: one alone ("hi" opening a new chat) is too weak a sign that it is stored
            if (gapped := resend_with_gaps(keys, given, anchor)) > max(m, 1):
                w, d = resend_alignment(keys, given)
                if w >= gapped:  # a plain run explains as much: what follows it was dropped (a regenerate)
                    return list(range(w, len(messages))), [i for i, _ in wide[len(wide) - d:]] if d else []
                return list(range(gapped, len(messages))), []
        return list(range(m, len(messages))), [i for i, _ in tail[len(tail) - d:]] if d else []

    def newest_is(self, message: Mapping[str, Any]) -> bool:
        """Whether the session's newest message is ``message``, compared on the fields sent to the model."""
        return bool(self.units) and self._key(self.units[-1]) == _digest(resend_key(message))

    def _tail(self, want: int) -> list[tuple[str, bytes]]:
        """The ids and resend digests of the session's newest ``want`` messages (as held; the places before
        the view's read from the store only when it holds fewer)."""
        tail = [(u.id, self._key(u)) for u in self.units[-want:]]
        if len(tail) < want and self.start > 0:
            older = self.store.pick(self.session, places=range(max(0, self.start - (want - len(tail))), self.start))
            tail = [(su.id, _digest(resend_key(chat_fields(su.message)))) for su in older] + tail
        return tail[-want:]

    def resent_by(self, messages: Sequence[Mapping[str, Any]], identity: Callable[[Mapping[str, Any]], str | None],
                  slack: int = 8) -> tuple[list[int], list[int]] | None:
        """For a client whose messages carry ids of their own (LangGraph's), resending a history it may have
        edited (a message removed or rewritten, a summary in place of the oldest): ``(new, inserted)``, the
        positions after the last of ``messages`` that the newest ``len(messages) + slack`` stored messages hold
        (compared on ``identity`` of the message as given, and on what it sends the model) that the session
        does not have, and those before it that it does not have (put into the past: they cannot be stored
        there). ``None`` when it holds none of them."""
        held = [i for i, _ in self._tail(len(messages) + slack)]
        # held as sent: a message edited under its id (LangGraph replaces a message given with an id it has) is new
        keys = {(identity(su.message), _digest(resend_key(su.message)))
                for su in self.store.pick(self.session, ids=held)}
        mine = [(identity(m), _digest(resend_key(m))) for m in messages]
        known = [i for i, k in enumerate(mine) if k[0] is not None and k in keys]
        if not known:
            return None
        last = known[-1]
        return ([i for i in range(last + 1, len(messages)) if mine[i] not in keys],
                [i for i in range(last) if mine[i] not in keys])

    def _key(self, unit: MemoryUnit) -> bytes:
        """The digest of the unit's :func:`~rdmem.history.resend_key` (its fields sent to the model), made once
        (16 bytes a unit, not a second copy of every message)."""
        key = self._keys.get(unit.id)
        if key is None:
            key = self._keys[unit.id] = _digest(resend_key(unit.message))
        return key


#: Units read at once from which the garbage collector is paused while they are made into the view's.
_BULK_READ = 5000
_GC = threading.Lock()
_gc_paused = [0, False]  # readers under way, and whether the collector was on when the first began


@contextmanager
def _bulk() -> Iterator[None]:
    """Build many units with Python's cyclic garbage collector paused: their millions of new objects hold no
    cycles, and the collections their allocation triggers took a third of a large session's first read
    (100,000 units: 5.0 -> 3.9 s). Concurrent builders are counted; the collector comes back as it was when
    the last ends."""
    with _GC:
        if _gc_paused[0] == 0:
            _gc_paused[1] = gc.isenabled()
            gc.disable()
        _gc_paused[0] += 1
    try:
        yield
    finally:
        with _GC:
            _gc_paused[0] -= 1
            if _gc_paused[0] == 0 and _gc_paused[1]:
                gc.enable()


def _digest(key: str) -> bytes:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
