"""The search half of the PostgreSQL store: ``ts_rank`` full-text and pgvector HNSW rankings, fused."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any, TypeVar

import numpy as np

from ._pg_schema import TS_CONFIG
from ._search import query_terms, rank_fusion, rarest_terms
from ._types import Tier

__all__ = ["PgSearchMixin", "EXACT_DENSE"]

_T = TypeVar("_T")

#: A session of at most this many units is ranked by its vectors exactly (about 1 ms per 1,000 units), apart from
#: every other session's; a longer one through the shared HNSW index.
EXACT_DENSE = 5000


class PgSearchMixin:
    """:meth:`_search` for :class:`~rdmem.store.postgres.PostgresStore` (it provides ``_run``, ``_dims``,
    ``_ef_search`` and ``lexical_rows``)."""

    _dims: set[int]
    _ef_search: MutableMapping[Any, int]  # per connection (a session setting)
    lexical_rows: int
    lexical_window: int
    _run: Callable[..., Any]

    def _search(
        self, session: str, query: str, qvec: np.ndarray | None, k: int, tier: Tier | None
    ) -> list[tuple[str, float]]:
        def run(conn: Any) -> list[tuple[str, float]]:
            lexical = self._lexical(conn, session, query, k, tier)
            rankings, id_of = [[h[0] for h in lexical]], dict(lexical)
            if qvec is not None and qvec.shape[0] in self._dims:
                hits = self._dense(conn, session, qvec, k, tier)
                rankings.append([h[0] for h in hits])
                id_of.update(hits)
            return [(id_of[uid], score) for uid, score in rank_fusion(rankings)[:k]]

        return self._run(run, session, read=True)

    def _dense(self, conn: Any, session: str, qvec: np.ndarray, k: int, tier: Tier | None) -> list[tuple[int, str]]:
        """Cosine ranking of the session's units: exact for a session of at most :data:`EXACT_DENSE` units, by
        HNSW beyond. The HNSW index holds every session's vectors and a filtered scan stops after
        ``hnsw.max_scan_tuples``, so another session's vectors near the query could leave this one with few hits or
        none (30,000 of another tenant's left a 3,000-unit session with 0 of 50): an exact ranking cannot be
        crowded, and an HNSW scan that comes back short is topped up with the best of the session's newest
        :data:`EXACT_DENSE` units."""
        d = qvec.shape[0]
        row = conn.execute("SELECT n_units FROM rdmem_sessions WHERE session = %s", (session,)).fetchone()
        n = int(row[0]) if row is not None else 0
        tier_filt, tier_param = (" AND tier = %s", (tier,)) if tier is not None else ("", ())
        exact = (f"SELECT uid, id, embedding::vector({d}) <=> %s::vector({d}) AS dist FROM (SELECT uid, id, embedding "
                 f"FROM rdmem_units WHERE session = %s AND seq >= %s{tier_filt} AND dim = {d} OFFSET 0) s "
                 "ORDER BY dist LIMIT %s")
        if n <= EXACT_DENSE:
            return [(int(uid), i) for uid, i, _ in conn.execute(exact, (qvec, session, 0, *tier_param, k))]
        ef = min(max(k, 40), 1000)
        if self._ef_search.get(conn) != ef:
            conn.execute(f"SET hnsw.ef_search = {ef}")
            self._ef_search[conn] = ef
        hits = [(int(uid), i, float(dist)) for uid, i, dist in conn.execute(
            f"SELECT uid, id, embedding::vector({d}) <=> %s::vector({d}) AS dist FROM rdmem_units "
            f"WHERE session = %s{tier_filt} AND dim = {d} ORDER BY dist LIMIT %s", (qvec, session, *tier_param, k))]
        if len(hits) < k:  # crowded out (or a tier with fewer units): the session's newest units, exactly
            seen = {h[0] for h in hits}
            hits += [(int(uid), i, float(dist)) for uid, i, dist in conn.execute(
                exact, (qvec, session, n - EXACT_DENSE, *tier_param, k)) if int(uid) not in seen]
            hits = sorted(hits, key=lambda h: h[2])[:k]
        return [(uid, i) for uid, i, _ in hits]

    def _lexical(self, conn: Any, session: str, query: str, k: int, tier: Tier | None) -> list[tuple[int, str]]:
        """``ts_rank`` full-text ranking of the session's units, over at most ``lexical_rows`` matches.

        As in the SQLite store: the rarest query words are kept while their
        matches add up to at most ``lexical_rows`` (the rarest always), and
        if even that word is more common, its most recent matches are ranked.
        How common a word is comes from the session's own counts (``rdmem_words``, kept by every write: a
        word of several lexemes counts as its rarest), never from other sessions' units.
        """
        words = query_terms(query)
        if not words:
            return []
        cap = self.lexical_rows
        df = {
            w: max(int(n), 1)
            for w, n in conn.execute(
                f"SELECT w, (SELECT coalesce(min(coalesce((SELECT c.n FROM rdmem_words c WHERE c.session = %s "
                f"AND c.word = l), 0)), 0) FROM unnest(tsvector_to_array(to_tsvector('{TS_CONFIG}', w))) AS l) "
                f"FROM unnest(%s::text[]) AS w WHERE plainto_tsquery('{TS_CONFIG}', w)::text <> ''",
                (session, words),
            ).fetchall()
        }
        kept, total = rarest_terms(df, cap)
        if not kept:
            return []
        tsq = " or ".join(kept)
        tier_filt = " AND tier = %s" if tier is not None else ""
        tier_param: tuple[Any, ...] = (tier,) if tier is not None else ()
        if total <= cap:
            sql = (
                f"SELECT uid, id FROM rdmem_units, websearch_to_tsquery('{TS_CONFIG}', %s) q "
                f"WHERE session = %s{tier_filt} AND tsv @@ q ORDER BY ts_rank(tsv, q) DESC, uid LIMIT %s"
            )
            params: tuple[Any, ...] = (tsq, session, *tier_param, k)
        else:
            # Even the rarest word is common: rank its ``cap`` most recent matches (of any tier, as the
            # SQLite store does) among the session's newest ``lexical_window`` units, in one statement.
            # Most recent by ``seq`` (the same order as ``uid`` within a session): the planner may walk the
            # (session, seq) index backwards and stop after ``cap`` matches, or intersect the word's
            # full-text matches with the window's places; either way it reads at most the window's rows
            # (without the window, a word in 2-3 % of the messages made it read 40,000-50,000 rows of a
            # 10^6-unit session: BENCHMARKS "PostgreSQL at 10^6").
            sql = (
                f"SELECT uid, id FROM (SELECT uid, id, tier, tsv FROM rdmem_units, "
                f"websearch_to_tsquery('{TS_CONFIG}', %s) q WHERE session = %s AND tsv @@ q "
                f"AND seq >= (SELECT next_seq FROM rdmem_sessions WHERE session = %s) - %s "
                f"ORDER BY seq DESC LIMIT %s) m, websearch_to_tsquery('{TS_CONFIG}', %s) q "
                f"WHERE true{tier_filt} ORDER BY ts_rank(m.tsv, q) DESC, uid LIMIT %s"
            )
            params = (tsq, session, session, self.lexical_window, cap, tsq, *tier_param, k)
        return [(int(uid), i) for uid, i in conn.execute(sql, params).fetchall()]
