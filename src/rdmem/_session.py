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
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

from .features import Features, content_words
from .history import ToolGroups, resend_alignment, resend_key
from .messages import chat_fields
from .store import Changes, NewUnit, Store, StoredUnit
from .tokens import Tokenizer
from .units import MemoryUnit, make_unit

__all__ = ["SessionView", "stored_features", "COUNTED_BY", "NEIGHBOUR_HITS", "NEIGHBOUR_REACH"]

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


class SessionView:
    """The units of one session, in order, with their tiers, tool-call groups and word statistics."""

    def __init__(self, store: Store, session: str, tokenizer: Tokenizer) -> None:
        self.store = store
        self.session = session
        self.tokenizer = tokenizer
        self.version = 0
        self.state: dict[str, Any] = {}
        self._clear()

    def _clear(self) -> None:
        self.units: list[MemoryUnit] = []
        self.by_id: dict[str, MemoryUnit] = {}
        self.tier: dict[str, str] = {}
        self.df: Counter[str] = Counter()
        self.members: dict[int, list[MemoryUnit]] = {}  # group -> its units
        self.archived = 0
        self.tokens = 0  # of every unit, whatever its tier
        self._groups = ToolGroups()
        self._working: dict[str, MemoryUnit] = {}
        self._working_tokens = 0
        self._keys: dict[str, bytes] = {}  # id -> digest of its resend key

    def shareable(self, session: str, store: object, tokenizer: Tokenizer) -> bool:
        """Whether a manager of ``session`` in ``store`` (``None``: any), counting with ``tokenizer``, may read
        the session through this view (:meth:`rdmem.MemoryManager._share_session`)."""
        fingerprint = tokenizer.fingerprint
        return (session == self.session and store in (None, self.store) and fingerprint is not None
                and fingerprint == self.tokenizer.fingerprint)

    # -- following the store --------------------------------------------------------
    def sync(self) -> bool:
        """Catch up with the store (one cheap version check when nothing changed); ``True`` if anything did."""
        if self.store.version(self.session) == self.version:
            return False
        self.apply(self.store.changes(self.session, self.version))
        return True

    def apply(self, changes: Changes) -> None:
        """Apply what the store reported changed (or, ``full``, the whole session)."""
        if changes.full:
            self._clear()
        # Many units at once (a large session's first read): not worth collecting cycles while they are made
        # (a small read is not paused for: reads of many small sessions could keep the collector off).
        with _bulk() if len(changes.units) >= _BULK_READ else nullcontext():
            self._apply_units(changes)
        self.version = changes.version
        self.state = dict(changes.state)

    def _apply_units(self, changes: Changes) -> None:
        for su in changes.units:
            if su.id in self.by_id:
                self.set_tier(su.id, su.tier)
                unit = self.by_id[su.id]
                if unit.embedding is None and su.embedding is not None:  # its vector landed (a worker's)
                    unit.embedding = np.array(su.embedding, dtype=np.float32)
            else:
                self.append(self.unit_of(su), su.tier)

    def unit_of(self, su: StoredUnit) -> MemoryUnit:
        """A memory unit from a stored one, placed at the end of this view.

        A stored count made with this very tokenizer is reused
        (re-tokenising is a quarter of the time it takes to open a large
        session); any other is counted again.
        """
        fingerprint = self.tokenizer.fingerprint
        feats = Features.from_dict(su.features) if su.features else None
        counted_by = str((su.features or {}).get(COUNTED_BY))
        # rdmem 0.1 named the offline copy of an encoding in the fingerprint: the same counts.
        same = fingerprint is not None and counted_by.replace("_offline/", "/") == fingerprint
        unit = make_unit(su.id, chat_fields(su.message), len(self.units), self.tokenizer, features=feats,
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
        self.apply(self.store.changes(self.session, self.version))
        return False

    # -- the units -------------------------------------------------------------------
    def append(self, unit: MemoryUnit, tier: str) -> None:
        unit.index = len(self.units)
        self.members.setdefault(self._groups.assign(unit), []).append(unit)
        self.units.append(unit)
        self.by_id[unit.id] = unit
        self.tier[unit.id] = "archive"
        self.archived += 1
        self.tokens += unit.tokens
        self.set_tier(unit.id, tier)
        self.df.update(set(content_words(unit.text)))

    def set_tier(self, uid: str, tier: str) -> None:
        unit = self.by_id[uid]
        if tier == "working" and uid not in self._working:
            self._working[uid] = unit
            self._working_tokens += unit.tokens
        elif tier != "working" and uid in self._working:
            del self._working[uid]
            self._working_tokens -= unit.tokens
        self.archived += (tier != "working") - (self.tier[uid] != "working")
        self.tier[uid] = tier

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
        return [u.id for u in self.units if self.tier[u.id] == "archive"]

    def archived_near(self, hits: Sequence[str]) -> set[int]:
        """Positions of the archived units among a search's ``hits`` (ids, best first) and within
        :data:`NEIGHBOUR_REACH` turns of the :data:`NEIGHBOUR_HITS` best (ids the view lacks are skipped)."""
        out: set[int] = set()
        for rank, uid in enumerate(hits):
            unit = self.by_id.get(uid)
            if unit is not None:
                reach = NEIGHBOUR_REACH if rank < NEIGHBOUR_HITS else 0
                out.update(k for k in range(max(0, unit.index - reach), min(len(self.units), unit.index + reach + 1))
                           if self.tier[self.units[k].id] == "archive")
        return out

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
        start = next((u.index for u in reversed(self.units) if u.role == "user"), None)
        have = {u.id for u in cands}
        missing = [u for u in self.units[start:] if u.id not in have] if start is not None else []
        return self.whole_groups(sorted(cands + missing, key=lambda u: u.index)) if missing else cands

    def originals(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored messages ``ids`` (every field given, with the ``id``), by id, for those the view has;
        one store read per run of nearby positions."""
        wanted = {i for i in ids if i in self.by_id}
        runs: list[list[int]] = []
        for p in sorted(self.by_id[i].index for i in wanted):
            if runs and p - runs[-1][1] <= 16:
                runs[-1][1] = p
            else:
                runs.append([p, p])
        out = {su.id: {"id": su.id, **su.message}
               for start, end in runs for su in self.store.load(self.session, offset=start, limit=end - start + 1)
               if su.id in wanted}
        if len(out) < len(wanted):  # the session changed under the positions: read it whole
            out = {su.id: {"id": su.id, **su.message} for su in self.store.load(self.session) if su.id in wanted}
        return out

    def resent(self, messages: Sequence[Mapping[str, Any]], slack: int = 8) -> tuple[list[int], list[str]]:
        """For a client that resends its history: the positions of ``messages`` the session does not have,
        and the ids of the stored messages it dropped (:func:`~rdmem.history.resend_alignment`), compared
        on the fields sent to the model, against the newest ``len(messages) + slack`` stored messages."""
        total = len(self.units)
        if not total or not messages:
            return list(range(len(messages))), []
        tail = self.units[max(0, total - len(messages) - slack):]  # as stored: no store read
        m, d = resend_alignment([self._key(u) for u in tail], [_digest(resend_key(x)) for x in messages])
        return list(range(m, len(messages))), [u.id for u in tail[len(tail) - d:]] if d else []

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
