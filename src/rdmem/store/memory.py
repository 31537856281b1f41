"""An in-process store: fast, for tests and ephemeral use; gone when the process ends.

The same contract as the databases, for the managers of one process: ids
and places allocated under a lock, versions from one clock, conditional
writes.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ._base import BaseStore, Encoded, allocate_ids, state_patch
from ._fts import LEXICAL_ROWS, MemoryIndex, check_lexical_rows
from ._search import rank_fusion, top_k
from ._types import ApiKey, Changes, SessionInfo, StoredUnit, Tier, VersionConflict, Written

__all__ = ["MemoryStore"]


@dataclass
class _Session:
    created: float
    updated: float
    version: int = 0
    reset: int = 0  # the version at which units last left the session (or it was created)
    next_seq: int = 0
    next_auto: int = 0
    tokens: int = 0  # of all its units
    state: dict[str, Any] = field(default_factory=dict)
    units: dict[str, StoredUnit] = field(default_factory=dict)  # in order of seq
    changed: dict[str, int] = field(default_factory=dict)  # id -> version of its last write
    text: dict[str, tuple[int, str]] = field(default_factory=dict)  # id -> (rowid, text) in the full-text index
    log: list[tuple[float, str]] = field(default_factory=list)
    claims: dict[str, tuple[float, str]] = field(default_factory=dict)  # id -> (until, worker): a claim (no vector yet)


class MemoryStore(BaseStore):
    """Keeps everything in dictionaries. Search is BM25 + cosine, fused by reciprocal rank, ranked as the
    SQLite store ranks (the same FTS5 index, in an in-memory SQLite database; ``lexical_rows`` as there).

    >>> from rdmem.store import NewUnit
    >>> store = MemoryStore()
    >>> store.append("s", [NewUnit({"role": "user", "content": "red apples"}, 7)]).units[0].id
    'm0'
    """

    where = "memory store"

    def __init__(self, *, cache_size: int = 256, lexical_rows: int = LEXICAL_ROWS) -> None:
        check_lexical_rows(lexical_rows)
        self._init_base(cache_size)
        self._index = MemoryIndex(lexical_rows)
        self._rowid = 0
        self._sessions_: dict[str, _Session] = {}
        self._retired: dict[str, int] = {}  # a deleted session's id counter, by its name (this process's own)
        self._clock = 0
        self._api_keys: dict[str, tuple[ApiKey, str]] = {}  # id -> (key, hash)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _open(self, session: str) -> tuple[_Session, int, int]:
        """The session (created if new), its version before this write, and the write's version."""
        s = self._sessions_.get(session)
        version = self._tick()
        if s is None:
            now = time.time()
            s = self._sessions_[session] = _Session(created=now, updated=now, reset=version,
                                                    next_auto=self._retired.get(session, 0))
        prev, s.version, s.updated = s.version, version, time.time()
        return s, prev, version

    def _check(self, session: str, expect: int | None) -> None:
        s = self._sessions_.get(session)
        current = s.version if s is not None else 0
        if expect is not None and current != expect:
            raise VersionConflict(f"session {session!r} is at version {current}, not {expect}; nothing was written")

    # -- writes ------------------------------------------------------------------
    def _append(self, session: str, units: list[Encoded], log: str | None = None, expect: int | None = None) -> Written:
        with self._lock:
            self._check(session, expect)
            existing = self._sessions_.get(session)
            have = existing.units if existing is not None else {}
            ids, next_auto = allocate_ids(
                session, [u.id for u in units], existing.next_auto if existing else self._retired.get(session, 0),
                lambda wanted: {i for i in wanted if i in have},
            )
            s, prev, version = self._open(session)
            stored = []
            for uid, u in zip(ids, units, strict=True):
                su = StoredUnit(uid, s.next_seq, json.loads(u.message), u.tokens, json.loads(u.features),
                                u.embedding, u.tier)
                s.next_seq += 1
                s.tokens += u.tokens
                self._rowid += 1
                s.units[uid], s.changed[uid], s.text[uid] = su, version, (self._rowid, u.text)
                stored.append(_copy(su))
            self._index.add(session, (s.text[uid] for uid in ids))
            s.next_auto = next_auto
            if log is not None:
                s.log.append((time.time(), log))
            return Written(prev, version, units=stored)

    def _set_tier(self, session: str, ids: list[str], tier: Tier, expect: int | None, log: str | None) -> Written:
        with self._lock:
            self._check(session, expect)
            if session not in self._sessions_:
                return Written(0, 0)
            s, prev, version = self._open(session)
            for i in ids:
                u = s.units.get(i)
                if u is not None:
                    u.tier = tier
                    s.changed[i] = version
            if log is not None:
                s.log.append((time.time(), log))
            return Written(prev, version)

    def _delete(self, session: str, ids: list[str]) -> Written:
        with self._lock:
            s = self._sessions_.get(session)
            gone = [i for i in dict.fromkeys(ids) if s is not None and i in s.units]
            if not gone:
                v = s.version if s is not None else 0
                return Written(v, v)
            s, prev, version = self._open(session)
            self._index.remove(session, [s.text[i] for i in gone])
            first = min(s.units[i].seq for i in gone)
            for i in gone:
                s.tokens -= s.units[i].tokens
                del s.units[i], s.changed[i], s.text[i]
                s.claims.pop(i, None)
            for place, u in enumerate(s.units.values()):  # the units after move up: places stay 0, 1, ...
                if place >= first:
                    u.seq = place
            s.next_seq = len(s.units)
            s.reset = version
            return Written(prev, version, deleted=gone)

    def _claim_unembedded(self, worker: str, limit: int, lease: float) -> list[tuple[str, StoredUnit]]:
        with self._lock:  # one session after another, a unit each: a session behind another's backlog goes on
            now, out = time.time(), []
            waiting = [(name, s, iter([(uid, u) for uid, u in s.units.items()
                                       if u.embedding is None and s.claims.get(uid, (0.0, ""))[0] < now]))
                       for name, s in self._sessions_.items()]
            while waiting and len(out) < limit:
                for entry in list(waiting):
                    name, s, units = entry
                    uid, u = next(units, (None, None))
                    if u is None:
                        waiting.remove(entry)
                        continue
                    s.claims[uid] = (now + lease, worker)
                    out.append((name, _copy(u)))
                    if len(out) >= limit:
                        break
            return out

    def _set_embeddings(self, session: str, vectors: dict[str, np.ndarray], claimed_by: str | None) -> Written:
        with self._lock:
            s = self._sessions_.get(session)
            landing = [i for i in vectors if s is not None and i in s.units and s.units[i].embedding is None
                       and (claimed_by is None or s.claims.get(i, (0.0, ""))[1] == claimed_by)]
            if s is None or not landing:
                v = s.version if s is not None else 0
                return Written(v, v)
            s, prev, version = self._open(session)
            for i in landing:
                s.units[i].embedding = vectors[i]
                s.changed[i] = version
                s.claims.pop(i, None)
            return Written(prev, version)

    def _update_state(self, session: str, patch: dict[str, Any], expect: int | None) -> Written:
        with self._lock:
            self._check(session, expect)
            s, prev, version = self._open(session)
            s.state = state_patch(s.state, copy.deepcopy(patch))
            return Written(prev, version)

    def _log(self, session: str, record: str) -> None:
        with self._lock:
            s = self._sessions_.get(session)
            if s is None:
                s, _, _ = self._open(session)
            s.log.append((time.time(), record))

    def _delete_session(self, session: str) -> None:
        with self._lock:
            gone = self._sessions_.pop(session, None)
            if gone is not None:  # the name written again goes on from its counter: an old id names nothing new
                self._retired[session] = max(self._retired.get(session, 0), gone.next_auto)
            self._index.drop(session)

    # -- reads -------------------------------------------------------------------
    def _load(self, session: str, offset: int, limit: int | None) -> list[StoredUnit]:
        with self._lock:
            s = self._sessions_.get(session)
            units = list(s.units.values()) if s is not None else []
            end = None if limit is None else offset + limit
            return [_copy(u) for u in units[offset:end]]

    def _changes(self, session: str, since: int, rows: int | None) -> Changes:
        with self._lock:
            s = self._sessions_.get(session)
            if s is None:
                return Changes(0, True, [], {})
            state, size = copy.deepcopy(s.state), (len(s.units), s.tokens)
            if since <= 0 or since < s.reset or since > s.version:
                start = max(0, s.next_seq - rows) if rows is not None else 0
                units = [_copy(u) for u in s.units.values() if u.seq >= start or u.tier == "working"]
                return Changes(s.version, True, units, state, start, size)
            moved = [_copy(u) for i, u in s.units.items() if s.changed[i] > since]
            return Changes(s.version, False, moved, state, size=size)

    def _pick(self, session: str, ids: list[str], places: list[int]) -> list[StoredUnit]:
        with self._lock:
            s = self._sessions_.get(session)
            if s is None:
                return []
            found = {i: s.units[i] for i in ids if i in s.units}
            if places:  # everything is in memory here: a scan of the places, copying only what is asked
                at = set(places)
                found.update((u.id, u) for u in s.units.values() if u.seq in at)
            return [_copy(u) for u in sorted(found.values(), key=lambda u: u.seq)]

    def _version(self, session: str) -> int:
        with self._lock:
            s = self._sessions_.get(session)
            return s.version if s is not None else 0

    def _read_log(self, session: str) -> list[tuple[float, str]]:
        with self._lock:
            s = self._sessions_.get(session)
            return list(s.log) if s is not None else []

    def _search(
        self, session: str, query: str, qvec: np.ndarray | None, k: int, tier: Tier | None
    ) -> list[tuple[str, float]]:
        s = self._sessions_.get(session)
        units = [u for u in (s.units.values() if s is not None else ()) if tier is None or u.tier == tier]
        if not units:
            return []
        # Like the other stores: the best k of each ranking, fused. The full-text index holds every tier:
        # over-fetch by the units of the other tier, as the SQLite store does.
        position = {s.text[u.id][0]: i for i, u in enumerate(units)}  # type: ignore[union-attr]
        ranked = self._index.rank(session, query, k + len(s.units) - len(units))  # type: ignore[union-attr]
        rankings = [[position[r] for r in ranked if r in position][:k]]
        if qvec is not None:
            dims = np.array([u.embedding is not None and u.embedding.shape[0] == qvec.shape[0] for u in units])
            if dims.any():
                matrix = np.zeros((len(units), qvec.shape[0]), dtype=np.float32)
                matrix[dims] = np.stack([np.asarray(u.embedding) for u, ok in zip(units, dims, strict=True) if ok])
                rankings.append(top_k(matrix @ qvec, k, dims).tolist())
        return [(units[i].id, score) for i, score in rank_fusion(rankings)[:k]]

    def _sessions(self, prefix: str = "") -> list[SessionInfo]:
        with self._lock:
            out = []
            for name, s in sorted(self._sessions_.items()):
                if not name.startswith(prefix):
                    continue
                working = sum(u.tier == "working" for u in s.units.values())
                out.append(SessionInfo(name, len(s.units), working, len(s.units) - working, s.created, s.updated))
            return out

    def _insert_key(self, key: ApiKey, digest: str) -> None:
        with self._lock:
            self._api_keys[key.id] = (key, digest)

    def _keys(self) -> list[ApiKey]:
        with self._lock:
            return sorted((k for k, _ in self._api_keys.values()), key=lambda k: (k.created, k.id))

    def _revoke_key(self, key_id: str, when: float) -> bool:
        with self._lock:
            found = self._api_keys.get(key_id)
            if found is None or found[0].revoked is not None:
                return False
            self._api_keys[key_id] = (replace(found[0], revoked=when), found[1])
            return True

    def _key_tenant(self, digest: str) -> str | None:
        with self._lock:
            return next((k.tenant for k, h in self._api_keys.values() if h == digest and k.revoked is None), None)

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._sessions_)} sessions)"


def _copy(u: StoredUnit) -> StoredUnit:
    """A copy the caller may change without changing the store (vectors are read-only views)."""
    emb = u.embedding
    if emb is not None:
        emb = emb.view()
        emb.flags.writeable = False
    return replace(u, message=copy.deepcopy(u.message), features=copy.deepcopy(u.features), embedding=emb)
