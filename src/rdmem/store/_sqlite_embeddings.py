"""The SQLite store's hooks for deferred embedding: leased claims (one ``UPDATE ... RETURNING`` in a
``BEGIN IMMEDIATE`` transaction, so two processes never claim one unit) and vectors landing."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from ._types import StoredUnit, Written

__all__ = ["SQLiteEmbeddings"]

_COLUMNS = "uid, id, seq, message, tokens, features, embedding, tier"


class SQLiteEmbeddings:
    """:meth:`_claim_unembedded` and :meth:`_set_embeddings` for :class:`~rdmem.store.sqlite.SQLiteStore`."""

    _write: Callable[..., Any]
    _reading: Callable[..., AbstractContextManager[sqlite3.Connection]]
    _write_session: Callable[..., Written]
    _session_row: Callable[..., Any]
    _bump: Callable[..., tuple[int, int]]
    _decode: Callable[..., list[StoredUnit]]

    def _claim_unembedded(self, worker: str, limit: int, lease: float) -> list[tuple[str, StoredUnit]]:
        with self._reading() as db:  # an idle worker asks every second: a read, not the file's write lock
            if db.execute("SELECT 1 FROM units WHERE embedding IS NULL AND (claimed_until IS NULL OR "
                          "claimed_until < ?) LIMIT 1", (time.time(),)).fetchone() is None:
                return []

        def write(conn: sqlite3.Connection) -> list[Any]:
            now = time.time()
            free = "SELECT uid FROM units WHERE embedding IS NULL AND (claimed_until IS NULL OR claimed_until < ?)"
            return conn.execute(  # the oldest half and the newest half (claim_unembedded), both off the index
                f"UPDATE units SET claimed_by = ?, claimed_until = ? WHERE uid IN (SELECT uid FROM ({free} "
                f"ORDER BY uid LIMIT ?) UNION SELECT uid FROM ({free} ORDER BY uid DESC LIMIT ?)) "
                f"RETURNING session, {_COLUMNS}",
                (worker, now + lease, now, limit - limit // 2, now, limit // 2)).fetchall()

        rows = sorted(self._write("", write), key=lambda r: r[1])
        return [(r[0], self._decode(r[0], [r[1:]])[0]) for r in rows]

    def _set_embeddings(self, session: str, vectors: dict[str, np.ndarray], claimed_by: str | None) -> Written:
        def write(conn: sqlite3.Connection) -> Any:
            marks = ",".join("?" * len(vectors))
            mine = "" if claimed_by is None else " AND claimed_by = ?"  # the rows claimed: not one stored since
            rows = conn.execute(f"SELECT uid, id FROM units WHERE session = ? AND id IN ({marks}) "
                                f"AND embedding IS NULL{mine}",
                                (session, *vectors, *(() if claimed_by is None else (claimed_by,)))).fetchall()
            row = self._session_row(conn, session)
            if not rows or row is None:
                v = int(row[0]) if row else 0
                return Written(v, v), False, None
            prev, version = self._bump(conn, session, row)
            blobs = [(uid, i, vectors[i].astype("<f4").tobytes()) for uid, i in rows]
            conn.executemany("UPDATE units SET embedding = ?, changed = ?, claimed_by = NULL, claimed_until = NULL "
                             "WHERE uid = ?", [(b, version, uid) for uid, _, b in blobs])
            landed = [(i, b) for _, i, b in blobs]
            return Written(prev, version), False, lambda c: c.dense is not None and c.dense.set_vectors(landed)

        return self._write_session(session, write)
