"""The default store: one SQLite file (WAL), FTS5 for lexical search, exact cosine search in numpy.

The layout is described in :mod:`rdmem.store._sqlite_schema`. A session's
embeddings are read once into one matrix (:class:`~rdmem.store._dense.Dense`)
and kept current from the units each write touched, also the writes of other
processes (read back by their ``changed`` version).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from ..errors import InvalidInput
from ..tokens import message_payload
from ._base import BaseStore, Encoded, allocate_ids, damaged_unit, decode_unit, dumps, searchable, state_patch
from ._dense import Dense
from ._fts import LEXICAL_ROWS, check_lexical_rows
from ._sqlite_embeddings import SQLiteEmbeddings
from ._sqlite_keys import SQLiteKeys
from ._sqlite_open import in_transaction, open_file, refuse_if_forked, retry
from ._sqlite_schema import CLOSE_UP, RETIRE, SCHEMA_VERSION, retired_next_auto, session_range
from ._sqlite_search import DENSE_ROWS, FTS_CREATE, FTS_TOKENIZE, SearchMixin, SessionCache, check_dense_rows, fts_table
from ._types import (SESSION_CACHES, Bounded, Changes, SessionInfo, StoredUnit, StoreError, Tier, VersionConflict,
                     Written, retired_digest)

__all__ = ["SQLiteStore", "SCHEMA_VERSION"]

_SYNCHRONOUS = ("full", "normal")
_T = TypeVar("_T")
_COLUMNS = "uid, id, seq, message, tokens, features, embedding, tier"
_LOG = "INSERT INTO compactions (session, time, record) VALUES (?, ?, ?)"
#: What a write returns: its outcome, whether units left the session, and how to update the search cache.
_Outcome = tuple[Written, bool, "Callable[[SessionCache], object] | None"]


class SQLiteStore(SQLiteKeys, SQLiteEmbeddings, SearchMixin, BaseStore):
    """Every unit of every session in one SQLite file.

    Parameters
    ----------
    path:
        The database file (created with its schema if absent or empty).
    synchronous:
        ``"normal"`` (default): in WAL mode every commit is written to the
        log before the call returns, so an acknowledged write survives the
        process crashing or being killed (``kill -9``). Only a crash of the
        machine itself can lose the last commits, and never corrupts the
        file. ``"full"`` also fsyncs the log on every commit (survives a
        power loss too, at one fsync per write).
    timeout:
        Seconds a write waits for another process's write before failing.
    cache_size:
        Search results kept per session (dropped on every write).
    lexical_rows, dense_rows:
        Bounds on a search's cost however long the session grows: at most ``lexical_rows`` full-text
        matches are ranked by BM25 (see :meth:`_lexical`), and the vector search ranks the session's
        ``dense_rows`` newest units exactly, by cosine (older ones are found by their words). ``None``
        for ``dense_rows``: every unit, at a cost that grows with the session (~0.1 ms per 1,000).
    readonly:
        Open for reading only (nothing is ever written, not even the WAL
        switch); works in a read-only directory too.
    create:
        ``False``: the file must exist already (else :class:`StoreError`
        "no such store file"; nothing is created).

    Opening checks the file (``PRAGMA quick_check``) before anything is written: a damaged file is refused
    with an error naming it. Several processes may open one file: writes are serialised by SQLite
    (``BEGIN IMMEDIATE``, ``busy_timeout`` and retries on ``SQLITE_BUSY``); a store opened before a fork is
    refused in the child (:class:`StoreError`): open one in each process.

    >>> import tempfile, os
    >>> from rdmem.store import NewUnit
    >>> store = SQLiteStore(os.path.join(tempfile.mkdtemp(), "mem.db"))
    >>> store.append("s1", [NewUnit({"role": "user", "content": "red apples"}, 7, id="a")]).version
    1
    >>> store.search("s1", "apples", None, k=5)
    [('a', 0.01639344262295082)]
    >>> store.close()
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "normal",
        timeout: float = 30.0,
        cache_size: int = 256,
        lexical_rows: int = LEXICAL_ROWS,
        dense_rows: int | None = DENSE_ROWS,
        readonly: bool = False,
        create: bool = True,
    ) -> None:
        if synchronous not in _SYNCHRONOUS:
            raise InvalidInput(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {synchronous!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InvalidInput(f"timeout must be a number of seconds > 0, got {timeout!r}")
        check_lexical_rows(lexical_rows)
        self._init_base(cache_size)
        self.path = os.fspath(path)
        self.where = f"SQLite store {self.path}"
        self.synchronous = synchronous
        self.timeout = float(timeout)
        self.lexical_rows, self.dense_rows = lexical_rows, check_dense_rows(dense_rows)
        self.readonly, self._pid = bool(readonly), os.getpid()
        self._caches: dict[str, SessionCache] = Bounded(SESSION_CACHES)
        self._versions: dict[str, tuple[int, int]] = {}  # session -> (version, reset), while data_version holds
        self._conn: sqlite3.Connection | None = open_file(
            self.path, where=self.where, timeout=self.timeout, synchronous=synchronous, readonly=self.readonly,
            create=create)
        self._data_version = self._pragma("data_version")

    # -- plumbing --------------------------------------------------------------
    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self.where}: used after close()")
        refuse_if_forked(self.where, self._pid)  # a forked child: its parent's connection is not to be touched there
        return self._conn

    def _close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():  # a forked child leaves it to its parent
            self._conn.close()
            self._conn = None
        self._caches.clear()
        self._versions.clear()

    @contextmanager
    def _reading(self, session: str | None = None) -> Iterator[sqlite3.Connection]:
        """One read transaction (a WAL snapshot) under the lock; database errors name the file and session."""
        with self._lock:
            db = self._db
            try:
                if db.in_transaction:
                    yield db
                    return
                # Before the snapshot begins: a commit by another connection after this point makes the
                # next read look again, so a version read from this snapshot is never trusted too long.
                dv = int(db.execute("PRAGMA data_version").fetchone()[0])
                if dv != self._data_version:
                    self._data_version = dv
                    self._versions.clear()
                db.execute("BEGIN")
                try:
                    yield db
                finally:
                    if db.in_transaction:
                        db.execute("COMMIT")  # read-only: nothing to roll back
            except sqlite3.DatabaseError as exc:
                raise self._error(exc, session, "read failed") from None

    def _error(self, exc: sqlite3.Error, session: str | None, what: str) -> StoreError:
        where = self.where + (f", session {session!r}" if session else "")
        return StoreError(f"{where}: {what} ({exc})")

    def _pragma(self, name: str) -> int:
        return int(self._db.execute(f"PRAGMA {name}").fetchone()[0])

    def _write(self, session: str, fn: Callable[[sqlite3.Connection], _T],
               then: Callable[[_T], _T] = lambda out: out) -> _T:
        """``then(fn(conn))``, ``fn`` in one ``BEGIN IMMEDIATE`` transaction, committed when this returns; the
        store's lock is let go between tries while another process writes, so this one's reads go on."""
        if self.readonly:
            raise StoreError(f"{self.where}: opened read-only; nothing was written")
        try:
            return retry(lambda: then(in_transaction(self._db, fn)), self.timeout, self._lock)
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, session, "write failed") from None

    def _write_session(self, session: str, fn: Callable[[sqlite3.Connection], _Outcome]) -> Written:
        """:meth:`_write` of a change to ``session``; this connection's caches follow once it is committed."""
        def caches(out: _Outcome) -> _Outcome:
            written, reset, apply = out
            if written.version != written.prev:
                self._written(session, written.prev, written.version, reset, apply)
            return out

        return self._write(session, fn, caches)[0]

    def _session_row(self, conn: sqlite3.Connection, session: str) -> tuple[Any, ...] | None:
        return conn.execute(
            "SELECT version, reset, next_seq, next_auto, state, n_units, n_tokens FROM sessions WHERE session = ?",
            (session,)).fetchone()

    @staticmethod
    def _tick(conn: sqlite3.Connection) -> int:
        return int(conn.execute("UPDATE clock SET n = n + 1 RETURNING n").fetchone()[0])

    def _bump(self, conn: sqlite3.Connection, session: str, row: tuple[Any, ...] | None, expect: int | None = None,
              **columns: Any) -> tuple[int, int]:
        """Take the next version for ``session`` (creating it and its FTS table if new: ``row`` is its
        :meth:`_session_row`, read in this transaction), checking ``expect``; set ``columns`` too.
        Returns ``(prev, version)``."""
        prev = int(row[0]) if row is not None else 0
        if expect is not None and prev != expect:
            raise VersionConflict(f"session {session!r} is at version {prev}, not {expect}; nothing was written")
        version, now = self._tick(conn), time.time()
        if row is None:
            conn.execute("INSERT INTO sessions (session, fts, created, updated, version, reset, next_auto) VALUES "
                         "(?, ?, ?, ?, ?, ?, ?)",  # a name written again: its deleted session's id counter on
                         (session, fts_table(session), now, now, version, version, retired_next_auto(conn, session)))
            conn.execute(FTS_CREATE.format(fts_table(session), FTS_TOKENIZE))
        sets = "".join(f", {c} = ?" for c in columns)
        conn.execute(f"UPDATE sessions SET version = ?, updated = ?{sets} WHERE session = ?",
                     (version, now, *columns.values(), session))
        return prev, version

    def _written(self, session: str, prev: int, version: int, reset: bool,
                 apply: Callable[[SessionCache], object] | None = None) -> None:
        """Keep this connection's caches of ``session`` current after its own write ``prev -> version``."""
        known = self._versions.get(session)
        self._versions[session] = (version, version if reset or known is None else known[1])
        cache = self._caches.get(session)
        if cache is None:
            return
        cache.matches.clear()
        if cache.version == prev and apply is not None and not reset:
            apply(cache)
            cache.version = version
        else:
            self._caches.pop(session, None)

    # -- writes ----------------------------------------------------------------
    def _append(self, session: str, units: list[Encoded], log: str | None = None, expect: int | None = None) -> Written:
        fts = fts_table(session)

        def write(conn: sqlite3.Connection) -> _Outcome:
            row = self._session_row(conn, session)
            next_seq, next_auto = (int(row[2]), int(row[3])) if row is not None else (0, retired_next_auto(conn, session))
            n_units, n_tokens = (int(row[5]), int(row[6])) if row is not None else (0, 0)

            def taken(ids: list[str]) -> set[str]:
                marks = ",".join("?" * len(ids))
                sql = f"SELECT id FROM units WHERE session = ? AND id IN ({marks})"
                return {r[0] for r in conn.execute(sql, (session, *ids))}

            ids, next_auto = allocate_ids(session, [u.id for u in units], next_auto, taken)
            prev, version = self._bump(conn, session, row, expect, next_seq=next_seq + len(units), next_auto=next_auto,
                                       n_units=n_units + len(units), n_tokens=n_tokens + sum(u.tokens for u in units))
            start = int(conn.execute("SELECT coalesce(max(uid), 0) FROM units").fetchone()[0]) + 1
            rows = [
                (start + n, session, uid, next_seq + n, u.message, u.tokens, u.features,
                 None if u.embedding is None else u.embedding.astype("<f4").tobytes(), u.tier, version)
                for n, (uid, u) in enumerate(zip(ids, units, strict=True))
            ]
            conn.executemany(
                "INSERT INTO units (uid, session, id, seq, message, tokens, features, embedding, tier, changed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            conn.executemany(f"INSERT INTO {fts} (rowid, body) VALUES (?, ?)",
                             [(r[0], u.text) for r, u in zip(rows, units, strict=True)])
            conn.executemany(_LOG, [(session, time.time(), log)] if log is not None else [])  # in the same transaction
            stored = [
                StoredUnit(r[2], r[3], json.loads(u.message), u.tokens, json.loads(u.features), u.embedding, u.tier)
                for r, u in zip(rows, units, strict=True)
            ]
            extend = [(r[0], r[2], r[8], r[7]) for r in rows]
            return Written(prev, version, units=stored), False, lambda c: c.dense is not None and c.dense.extend(extend)

        return self._write_session(session, write)

    def _set_tier(self, session: str, ids: list[str], tier: Tier, expect: int | None, log: str | None) -> Written:
        def write(conn: sqlite3.Connection) -> _Outcome:
            row = self._session_row(conn, session)
            if row is None:
                if expect:
                    raise VersionConflict(f"session {session!r} does not exist (expected version {expect})")
                return Written(0, 0), False, None
            prev, version = self._bump(conn, session, row, expect)
            conn.executemany("UPDATE units SET tier = ?, changed = ? WHERE session = ? AND id = ?",
                             [(tier, version, session, i) for i in ids])
            if log is not None:
                conn.execute(_LOG, (session, time.time(), log))
            return Written(prev, version), False, lambda c: c.dense is not None and c.dense.set_tier(ids, tier)

        return self._write_session(session, write)

    def _delete(self, session: str, ids: list[str]) -> Written:
        fts = fts_table(session)

        def write(conn: sqlite3.Connection) -> _Outcome:
            marks = ",".join("?" * len(ids))
            rows = conn.execute(f"SELECT uid, id, message, tokens, seq FROM units WHERE session = ? AND id IN ({marks}) "
                                "ORDER BY seq", (session, *ids)).fetchall() if ids else []
            row = self._session_row(conn, session)
            if not rows:
                v = int(row[0]) if row else 0
                return Written(v, v), False, None
            prev, version = self._bump(conn, session, row)
            conn.execute("UPDATE sessions SET reset = ?, n_units = n_units - ?, n_tokens = n_tokens - ?, "
                         "next_seq = next_seq - ? WHERE session = ?",
                         (version, len(rows), sum(r[3] for r in rows), len(rows), session))
            conn.executemany(f"INSERT INTO {fts} ({fts}, rowid, body) VALUES ('delete', ?, ?)",
                             [(uid, searchable(message_payload(json.loads(m)))) for uid, _, m, *_ in rows])
            conn.executemany("DELETE FROM units WHERE uid = ?", [(uid,) for uid, *_ in rows])
            for statement in CLOSE_UP:  # the units after move up: places stay 0, 1, ...
                conn.execute(statement, {"session": session, "first": rows[0][4]})
            return Written(prev, version, deleted=[i for _, i, *_ in rows]), True, None

        return self._write_session(session, write)

    def _update_state(self, session: str, patch: dict[str, Any], expect: int | None) -> Written:
        def write(conn: sqlite3.Connection) -> _Outcome:
            row = self._session_row(conn, session)
            state = state_patch(json.loads(row[4]) if row is not None else {}, patch)
            prev, version = self._bump(conn, session, row, expect, state=dumps(state))
            return Written(prev, version), row is None, lambda c: None

        return self._write_session(session, write)

    def _log(self, session: str, record: str) -> None:
        self._write(session, lambda conn: conn.execute(_LOG, (session, time.time(), record)))

    def _delete_session(self, session: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(f"DROP TABLE IF EXISTS {fts_table(session)}")
            conn.execute("DELETE FROM units WHERE session = ?", (session,))
            conn.execute("DELETE FROM compactions WHERE session = ?", (session,))
            conn.execute(RETIRE, (retired_digest(session), session))
            conn.execute("DELETE FROM sessions WHERE session = ?", (session,))

        self._write(session, write)
        with self._lock:
            for cache in (self._caches, self._versions):
                cache.pop(session, None)

    # -- reads -------------------------------------------------------------------
    def _decode(self, session: str, rows: list[Any], vectors: dict[int, np.ndarray | None] | None = None) -> list[StoredUnit]:
        out = []
        for uid, uid_str, seq, message, tokens, features, blob, tier in rows:
            emb = vectors.get(uid) if vectors is not None else None
            if emb is None and blob:
                if not isinstance(blob, bytes) or len(blob) % 4:
                    what = "the stored embedding is not float32 (its size is not a multiple of 4 bytes)"
                    raise damaged_unit(self.where, session, uid_str, what)
                emb = np.frombuffer(blob, dtype="<f4")
            out.append(decode_unit(self.where, session, uid_str, seq, message, tokens, features, emb, tier))
        return out

    def _load(self, session: str, offset: int, limit: int | None) -> list[StoredUnit]:
        with self._reading(session) as db:
            if offset == 0 and limit is None:
                return self._load_all(db, session)
            rows = db.execute(f"SELECT {_COLUMNS} FROM units WHERE session = ? AND seq >= ? ORDER BY seq LIMIT ?",
                              (session, offset, -1 if limit is None else limit)).fetchall()  # places: 0, 1, ...
        return self._decode(session, rows)

    def _load_all(self, db: sqlite3.Connection, session: str) -> list[StoredUnit]:
        """Every unit of ``session``; builds the session's search matrix from the same rows, and the units'
        vectors share its memory."""
        rows = db.execute(f"SELECT {_COLUMNS} FROM units WHERE session = ? ORDER BY seq", (session,)).fetchall()
        version, _ = self._current(db, session)
        if not rows:
            return []
        cache = self._caches.get(session)
        if cache is None or cache.version != version or cache.dense is None:
            cache = self._caches[session] = SessionCache(version)
            by_uid = sorted(range(len(rows)), key=lambda i: rows[i][0])
            by_uid = by_uid[-self.dense_rows:] if self.dense_rows else by_uid  # older: own vectors (decoded)
            cache.dense = Dense(self.dense_rows)
            vecs = cache.dense.extend([(rows[i][0], rows[i][1], rows[i][7], rows[i][6]) for i in by_uid])
            vectors = {rows[i][0]: v for i, v in zip(by_uid, vecs, strict=True)}
        else:
            d = cache.dense
            vectors = {int(d.uids[r]): d.vector(r) for r in range(d.n)}
        return self._decode(session, rows, vectors)

    def _current(self, db: sqlite3.Connection, session: str) -> tuple[int, int]:
        """``(version, reset)`` of ``session`` ((0, 0) if absent), cached while no one else commits
        (:meth:`_reading` drops the cache when another connection did)."""
        known = self._versions.get(session)
        if known is None:
            row = db.execute("SELECT version, reset FROM sessions WHERE session = ?", (session,)).fetchone()
            known = (int(row[0]), int(row[1])) if row is not None else (0, 0)
            self._versions[session] = known
        return known

    def _version(self, session: str) -> int:
        # The hot path of every manager call: no transaction when this connection's cache holds.
        with self._lock:
            db = self._db
            try:
                dv = int(db.execute("PRAGMA data_version").fetchone()[0])
                if dv != self._data_version:
                    self._data_version = dv
                    self._versions.clear()
                return self._current(db, session)[0]
            except sqlite3.DatabaseError as exc:
                raise self._error(exc, session, "read failed") from None

    def _changes(self, session: str, since: int, rows: int | None) -> Changes:
        with self._reading(session) as db:
            row = self._session_row(db, session)
            if row is None:
                return Changes(0, True, [], {})
            version, reset, state, size = int(row[0]), int(row[1]), json.loads(row[4]), (int(row[5]), int(row[6]))
            if since <= 0 or since < reset or since > version:
                if rows is None or int(row[2]) <= rows:
                    return Changes(version, True, self._load_all(db, session), state, 0, size)
                start = int(row[2]) - rows  # the newest places, and the working units before them (a partial index)
                found = db.execute(f"SELECT {_COLUMNS} FROM units WHERE session = ? AND tier = 'working' AND seq < ? "
                                   "ORDER BY seq", (session, start)).fetchall()
                found += db.execute(f"SELECT {_COLUMNS} FROM units WHERE session = ? AND seq >= ? ORDER BY seq",
                                    (session, start)).fetchall()
                return Changes(version, True, self._decode(session, found), state, start, size)
            if since == version:
                return Changes(version, False, [], state, size=size)
            found = db.execute(f"SELECT {_COLUMNS} FROM units WHERE session = ? AND changed > ? ORDER BY seq",
                               (session, since)).fetchall()
        return Changes(version, False, self._decode(session, found), state, size=size)

    def _pick(self, session: str, ids: list[str], places: list[int]) -> list[StoredUnit]:
        with self._reading(session) as db:  # by id, then by place, in chunks of SQLite's bound on parameters
            found = {r[0]: r for column, values in (("id", ids), ("seq", places)) for k in range(0, len(values), 500)
                     for r in db.execute(f"SELECT {_COLUMNS} FROM units WHERE session = ? AND {column} IN "
                                         f"({','.join('?' * len(values[k:k + 500]))})", (session, *values[k:k + 500]))}
        return self._decode(session, sorted(found.values(), key=lambda r: r[2]))

    def _read_log(self, session: str) -> list[tuple[float, str]]:
        with self._reading(session) as db:
            return db.execute("SELECT time, record FROM compactions WHERE session = ? ORDER BY n", (session,)).fetchall()

    def _sessions(self, prefix: str = "") -> list[SessionInfo]:  # the prefix's names only: not every unit
        within, args = session_range(prefix)
        with self._reading() as db:
            rows = db.execute("SELECT s.session, count(u.uid), coalesce(sum(u.tier = 'working'), 0), s.created, "
                              f"s.updated FROM sessions s LEFT JOIN units u ON u.session = s.session {within} "
                              "GROUP BY s.session ORDER BY s.session", args).fetchall()
        return [SessionInfo(s, n, w, n - w, c, up) for s, n, w, c, up in rows]

    # -- maintenance ---------------------------------------------------------------
    def check(self) -> list[str]:
        """Consistency problems of the file (empty when sound): see :func:`~._sqlite_check.check_file`."""
        from ._sqlite_check import check_file

        with self._lock:  # not in a snapshot: the full-text check is a command written as an INSERT
            return check_file(self._db)

    def disk_bytes(self) -> int:
        """Bytes of the database file and its WAL on disk."""
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, synchronous={self.synchronous!r})"
