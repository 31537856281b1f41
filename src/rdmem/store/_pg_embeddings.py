"""The PostgreSQL store's hooks for deferred embedding: leased claims (``FOR UPDATE SKIP LOCKED``, so two
workers never claim one unit) and vectors landing; :class:`~rdmem.store._sqlite_embeddings.SQLiteEmbeddings`'s
twin."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import WriteOutcomeUnknown
from ._types import StoredUnit, Written

__all__ = ["COLUMNS", "PgEmbeddings"]

#: A unit's columns, as the store decodes them.
COLUMNS = "id, seq, message, tokens, features, embedding, tier"


class PgEmbeddings:
    """:meth:`_claim_unembedded` and :meth:`_set_embeddings` for :class:`~rdmem.store.postgres.PostgresStore`.
    A claim whose answer was lost (the connection died after its commit) leaves the worker's claims free at its
    next claim, instead of waiting for their lease."""

    _run: Callable[..., Any]
    _decode: Callable[..., list[StoredUnit]]
    _ensure_index: Callable[..., None]
    _lock_session: Callable[..., Any]
    _bump: Callable[..., tuple[int, int]]
    _claims_unsure: set[str]

    def _claim_unembedded(self, worker: str, limit: int, lease: float) -> list[tuple[str, StoredUnit]]:
        unsure = worker in self._claims_unsure

        def write(conn: Any) -> list[Any]:
            now = time.time()
            with conn.transaction(), conn.cursor(binary=True) as cur:
                if unsure:  # this worker's last claim may have landed, its answer lost: what it took is free again
                    cur.execute("UPDATE rdmem_units SET claimed_until = NULL WHERE claimed_by = %s AND "
                                "embedding IS NULL", (worker,))
                # SKIP LOCKED: two workers claiming at once take different units instead of waiting.
                free = "SELECT uid FROM rdmem_units WHERE embedding IS NULL AND (claimed_until IS NULL OR " \
                       "claimed_until < %s) ORDER BY uid {} LIMIT %s FOR UPDATE SKIP LOCKED"
                return cur.execute(  # the oldest half and the newest half (claim_unembedded)
                    f"WITH old AS ({free.format('')}), new AS ({free.format('DESC')}) "
                    "UPDATE rdmem_units u SET claimed_by = %s, claimed_until = %s FROM (SELECT uid FROM old UNION "
                    "SELECT uid FROM new) c WHERE u.uid = c.uid "
                    f"RETURNING u.uid, u.session, {', '.join('u.' + c for c in COLUMNS.split(', '))}",
                    (now, limit - limit // 2, now, limit // 2, worker, now + lease)).fetchall()

        try:
            rows = sorted(self._run(write), key=lambda r: r[0])
        except WriteOutcomeUnknown:  # without this, what it took would wait for the lease (120 s in the service)
            self._claims_unsure.add(worker)
            raise
        self._claims_unsure.discard(worker)
        return [(r[1], self._decode(r[1], [r[2:]])[0]) for r in rows]

    def _set_embeddings(self, session: str, vectors: dict[str, np.ndarray], claimed_by: str | None) -> Written:
        dims = {v.shape[0] for v in vectors.values()}

        def write(conn: Any) -> Written:
            for d in dims:
                self._ensure_index(conn, d)
            with conn.transaction():
                row = self._lock_session(conn, session, create=False)
                if row is None:
                    return Written(0, 0)
                ids = [r[0] for r in conn.execute(  # the rows claimed, when said: not one stored since
                    "SELECT id FROM rdmem_units WHERE session = %s AND id = ANY(%s) AND embedding IS NULL AND "
                    "(%s::text IS NULL OR claimed_by = %s)", (session, list(vectors), claimed_by, claimed_by))]
                if not ids:
                    return Written(int(row[0]), int(row[0]))
                prev, version = self._bump(conn, session, row, None)
                with conn.cursor() as cur:
                    cur.executemany(
                        "UPDATE rdmem_units SET embedding = %s, dim = %s, changed = %s, claimed_by = NULL, "
                        "claimed_until = NULL WHERE session = %s AND id = %s",
                        [(vectors[i], vectors[i].shape[0], version, session, i) for i in ids])
            return Written(prev, version)

        return self._run(write, session)
