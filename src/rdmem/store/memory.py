"""An in-process store: fast, for tests and ephemeral use; gone when the process ends."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ._base import SessionInfo, StoredUnit, StoreError, Tier
from ._search import lexical_rank, rank_fusion, top_k


class MemoryStore:
    """Keeps everything in dictionaries. Search is BM25 + cosine, fused by reciprocal rank."""

    def __init__(self) -> None:
        self._units: dict[str, dict[str, StoredUnit]] = {}
        self._log: dict[str, list[dict[str, Any]]] = {}
        self._times: dict[str, tuple[float, float]] = {}

    def append(self, session: str, units: Sequence[StoredUnit]) -> None:
        bucket = self._units.setdefault(session, {})
        seen: set[str] = set()
        for u in units:
            if u.id in bucket:
                raise StoreError(f"session {session!r} already has a unit with id {u.id!r}")
            if u.id in seen:
                raise StoreError(f"session {session!r}: unit id {u.id!r} appears twice in one append")
            seen.add(u.id)
        now = time.time()
        for u in units:
            bucket[u.id] = replace(u, message=dict(u.message), features=dict(u.features))
        created = self._times.get(session, (now, now))[0]
        self._times[session] = (created, now)

    def load(self, session: str) -> list[StoredUnit]:
        return sorted((replace(u) for u in self._units.get(session, {}).values()), key=lambda u: u.seq)

    def set_tier(self, session: str, ids: Sequence[str], tier: Tier) -> None:
        if tier not in ("working", "archive"):
            raise ValueError(f"tier must be one of working, archive, got {tier!r}")
        bucket = self._units.get(session, {})
        for i in ids:
            if i in bucket:
                bucket[i].tier = tier

    def log_compaction(self, session: str, record: dict[str, Any]) -> None:
        self._log.setdefault(session, []).append(dict(record, time=time.time()))

    def compaction_log(self, session: str) -> list[dict[str, Any]]:
        return list(self._log.get(session, []))

    def search(
        self, session: str, query: str, query_embedding: np.ndarray | None, *, k: int, tier: Tier | None = None
    ) -> list[tuple[str, float]]:
        # Read the bucket in place: copying every unit (as load() does) on each search dominated query time.
        bucket = self._units.get(session, {}).values()
        units = sorted((u for u in bucket if tier is None or u.tier == tier), key=lambda u: u.seq)
        if not units or k <= 0:
            return []
        # Like the other stores: the best k of each ranking, fused.
        rankings = [lexical_rank([str(u.message.get("content") or "") for u in units], query)[:k]]
        if query_embedding is not None and all(u.embedding is not None for u in units):
            sims = np.stack([u.embedding for u in units]) @ query_embedding
            rankings.append(top_k(sims, k).tolist())
        fused = rank_fusion(rankings)[:k]
        return [(units[i].id, s) for i, s in fused]

    def sessions(self) -> list[SessionInfo]:
        out = []
        for s, bucket in sorted(self._units.items()):
            working = sum(u.tier == "working" for u in bucket.values())
            created, updated = self._times[s]
            out.append(SessionInfo(s, len(bucket), working, len(bucket) - working, created, updated))
        return out

    def delete_session(self, session: str) -> None:
        self._units.pop(session, None)
        self._log.pop(session, None)
        self._times.pop(session, None)

    def close(self) -> None:
        pass
