"""The search half of the SQLite store: FTS5 BM25 over each session's index, exact cosine over its matrix."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np

from ..errors import InvalidInput
from ._dense import Dense
from ._fts import FTS_CREATE, FTS_TOKENIZE, fts_table, ranked_match, ranked_rows
from ._search import rank_fusion
from ._types import Tier

__all__ = ["SessionCache", "SearchMixin", "fts_table", "check_dense_rows", "FTS_CREATE", "FTS_TOKENIZE", "DENSE_ROWS"]

#: Full-text search ranks the index alone (no join) when at most this many units are of the other tier.
_LEXICAL_OVERFETCH = 2000
#: The vector search's default window: the most recent units it ranks (see ``SQLiteStore(dense_rows=...)``).
DENSE_ROWS = 100_000


def check_dense_rows(dense_rows: object) -> int | None:
    """``SQLiteStore(dense_rows=...)``, checked: an int >= 1 or ``None``."""
    if dense_rows is None or (isinstance(dense_rows, int) and not isinstance(dense_rows, bool) and dense_rows >= 1):
        return dense_rows
    raise InvalidInput(f"dense_rows must be an int >= 1 or None, got {dense_rows!r}")


class SessionCache:
    """This connection's search state of one session, valid for one version of it."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.dense: Dense | None = None
        self.matches: dict[str, int] = {}  # full-text matches per word (capped), for _lexical


class SearchMixin:
    """:meth:`_search` for :class:`~rdmem.store.sqlite.SQLiteStore` (it provides ``_reading``,
    ``_current``, ``_caches`` and ``lexical_rows``)."""

    _caches: dict[str, SessionCache]
    lexical_rows: int
    dense_rows: int | None
    _reading: Callable[..., AbstractContextManager[sqlite3.Connection]]
    _current: Callable[[sqlite3.Connection, str], tuple[int, int]]

    def _search(
        self, session: str, query: str, qvec: np.ndarray | None, k: int, tier: Tier | None
    ) -> list[tuple[str, float]]:
        with self._reading(session) as db:
            cache = self._cache(db, session)
            if cache is None:
                return []
            if qvec is not None:
                self._dense(db, session, cache)  # loaded first: the full-text ranking uses it too
            try:
                lexical = self._lexical(db, session, query, k, tier, cache)
            except sqlite3.OperationalError as exc:  # its full-text table dropped: the session was deleted as the
                if "no such table" not in str(exc):  # version this read trusted was cached (a 503 "read failed")
                    raise
                self._caches.pop(session, None)
                return []
            rankings, id_of = [[uid for uid, _ in lexical]], dict(lexical)
            if cache.dense is not None and qvec is not None:
                hits = cache.dense.search(qvec, k, tier)
                rankings.append([uid for uid, _ in hits])
                id_of.update(hits)
            return [(id_of[uid], score) for uid, score in rank_fusion(rankings)[:k]]

    def _cache(self, db: sqlite3.Connection, session: str) -> SessionCache | None:
        """The session's search state, brought up to its current version (``None``: no such session).

        Units written since the cached version (by anyone) are read back by
        their ``changed`` version and applied to the matrix; only a delete
        makes it start over.
        """
        version, reset = self._current(db, session)
        if not version:
            return None
        cache = self._caches.get(session)
        if cache is not None and cache.version != version:
            if cache.dense is not None and reset <= cache.version:
                rows = db.execute("SELECT uid, id, tier, embedding FROM units WHERE session = ? AND changed > ? "
                                  "ORDER BY uid", (session, cache.version)).fetchall()
                dense = cache.dense
                moved = [r for r in rows if r[1] in dense.row_of]
                # Units older than the window (a tier change, a vector landing) stay out of it.
                last = int(dense.uids[dense.n - 1]) if dense.n else -1
                dense.extend([r for r in rows if r[1] not in dense.row_of and r[0] > last])
                for tier in ("working", "archive"):
                    dense.set_tier([r[1] for r in moved if r[2] == tier], tier)
                dense.set_vectors([(r[1], r[3]) for r in moved if r[3] and not dense.has[dense.row_of[r[1]]]])
                cache.version, cache.matches = version, {}
            else:
                cache = None
        if cache is None:
            cache = self._caches[session] = SessionCache(version)
        return cache

    def _dense(self, db: sqlite3.Connection, session: str, cache: SessionCache) -> Dense:
        if cache.dense is None:
            # The window's rows only, read backwards along the session's (session, seq) index: bounded.
            rows = db.execute("SELECT uid, id, tier, embedding FROM units WHERE session = ? ORDER BY seq DESC "
                              "LIMIT ?", (session, -1 if self.dense_rows is None else self.dense_rows)).fetchall()
            cache.dense = Dense(self.dense_rows)
            cache.dense.extend(sorted(rows))
        return cache.dense

    def _lexical(
        self, db: sqlite3.Connection, session: str, query: str, k: int, tier: Tier | None, cache: SessionCache
    ) -> list[tuple[int, str]]:
        """BM25 (FTS5 ``bm25()``) over the session's units, ranking at most ``lexical_rows`` matches
        (see :func:`~._fts.ranked_match`; ``cache.matches`` memoises each word's match count until the
        session is written to).

        With the session's matrix loaded, ids and tiers come from it instead
        of a join with ``units`` (half the time): the full-text index alone
        ranks, over-fetching by the number of units of the other tier when
        that is small, so the result is the same.
        """
        dense, fts = cache.dense, fts_table(session)
        found = ranked_match(db, fts, query, self.lexical_rows, cache.matches)
        if found is None:
            return []
        match, since = found
        others = 0 if dense is None or tier is None else dense.count_not_in(tier)
        if dense is not None and others <= _LEXICAL_OVERFETCH:
            known = dense.identify(ranked_rows(db, fts, match, since, k + others), tier)
            if known is not None:
                return known[:k]
        sql = (
            f"SELECT u.uid, u.id FROM {fts} JOIN units u ON u.uid = {fts}.rowid WHERE {fts} MATCH ? "
            + (f"AND {fts}.rowid >= ? " if since else "")
            + ("AND u.tier = ? " if tier is not None else "")
            + f"ORDER BY bm25({fts}), u.uid LIMIT ?"
        )
        params = (match, *since, *((tier,) if tier is not None else ()), k)
        return [(int(uid), i) for uid, i in db.execute(sql, params)]
