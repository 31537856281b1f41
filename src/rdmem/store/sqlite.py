"""The default store: one SQLite file (WAL), FTS5 for lexical search, exact cosine search in numpy.

Layout (schema version 1, recorded in the ``meta`` table):

- ``units``: one row per message of every session: the original message
  (JSON), its order, token cost, features (JSON), embedding (float32 blob,
  little-endian) and tier.
- ``fts_<hash>``: one contentless FTS5 index per session of its units' text
  (BM25 statistics per session; a query ranks only its own session).
- ``sessions``: creation/update times, the session's FTS table, and a version
  counter bumped by every write, which keeps each process's caches honest when
  several share a file.
- ``compactions``: the compaction log.

Embeddings of a session are read once into a numpy matrix and kept, extended
on appends and refreshed when another connection wrote to the session.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..tokens import message_payload
from ._base import (
    ConnectionLifecycle, SessionInfo, StoredUnit, StoreError, Tier, check_session, damaged_unit, decode_unit,
)
from ._search import query_terms, rank_fusion, rarest_terms, top_k

__all__ = ["SQLiteStore", "SCHEMA_VERSION"]

#: The layout this code writes. A file with a higher version was written by a newer rdmem.
SCHEMA_VERSION = 1

_HEADER = b"SQLite format 3\x00"
_TIERS = ("working", "archive")
_SYNCHRONOUS = ("full", "normal")
_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    session TEXT PRIMARY KEY,
    fts TEXT NOT NULL UNIQUE,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    version INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS units (
    uid INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    features TEXT NOT NULL,
    embedding BLOB,
    tier TEXT NOT NULL CHECK (tier IN ('working', 'archive')),
    UNIQUE (session, id)
);
CREATE INDEX IF NOT EXISTS units_session_seq ON units (session, seq);
CREATE TABLE IF NOT EXISTS compactions (
    n INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    time REAL NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS compactions_session ON compactions (session, n);
"""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _fts_table(session: str) -> str:
    """The name of a session's FTS5 table (session names may contain anything; this is plain hex)."""
    return "fts_" + hashlib.blake2b(session.encode("utf-8"), digest_size=10).hexdigest()


_FTS_CREATE = "CREATE VIRTUAL TABLE IF NOT EXISTS {} USING fts5(body, content='', tokenize='{}')"
_FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"
_FTS_WORD = re.compile(r"\w+")
#: Full-text search ranks the index alone (no join) when at most this many units are of the other tier.
_LEXICAL_OVERFETCH = 2000


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


class _Dense:
    """A session's embeddings as one matrix, one *column* per unit (insertion order), with ids and tiers.

    Columns, not rows: ``q @ M`` over a ``(dim, n)`` matrix streams memory in
    order and took half the CPU time of ``M @ q`` over ``(n, dim)`` rows in our
    measurements (100,000 x 384: 8.5 ms against 16 ms on one core). It grows by
    doubling, so appends are amortised O(1); units without an embedding (or
    with another dimension) are masked out of searches.
    """

    def __init__(self) -> None:
        self.dim: int | None = None
        self.n = 0
        self.uids = np.zeros(0, dtype=np.int64)
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.archived = np.zeros(0, dtype=bool)
        self.has = np.zeros(0, dtype=bool)
        self.columns = np.zeros((1, 0), dtype=np.float32)

    def _reserve(self, extra: int) -> None:
        need = self.n + extra
        cap = len(self.uids)
        if need <= cap and self.columns.shape[0] == (self.dim or 1):
            return
        cap = max(need, 2 * cap, 64) if need > cap else cap
        for name in ("uids", "archived", "has"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)
        columns = np.zeros((self.dim or 1, cap), dtype=np.float32)
        if self.columns.shape[0] == columns.shape[0]:
            columns[:, : self.n] = self.columns[:, : self.n]
        self.columns = columns

    def extend(self, rows: Sequence[tuple[int, str, str, bytes | None]]) -> list[np.ndarray | None]:
        """Add ``(uid, id, tier, blob)`` rows; return each one's vector (a read-only view) or ``None``."""
        if self.dim is None:
            self.dim = next((len(blob) // 4 for *_, blob in rows if blob), None)
        self._reserve(len(rows))
        start, d = self.n, self.dim
        with_vec = [i for i, (*_, blob) in enumerate(rows) if blob and d is not None and len(blob) == 4 * d]
        if with_vec:
            block = np.frombuffer(b"".join(rows[i][3] for i in with_vec), dtype="<f4").reshape(len(with_vec), -1)
            cols = np.asarray(with_vec, dtype=np.int64) + start
            self.columns[:, cols] = block.T
            self.has[cols] = True
        for i, (uid, uid_str, tier, _) in enumerate(rows):
            self.uids[start + i] = uid
            self.ids.append(uid_str)
            self.row_of[uid_str] = start + i
            self.archived[start + i] = tier == "archive"
        self.n += len(rows)
        return [self.vector(start + i) for i in range(len(rows))]

    def vector(self, r: int) -> np.ndarray | None:
        if not self.has[r]:
            return None
        v = self.columns[:, r]
        v.flags.writeable = False
        return v

    def count_not_in(self, tier: str) -> int:
        """How many units are not of ``tier``."""
        archived = int(np.count_nonzero(self.archived[: self.n]))
        return self.n - archived if tier == "archive" else archived

    def identify(self, uids: Sequence[int], tier: str | None) -> list[tuple[int, str]] | None:
        """``(uid, id)`` of the given units that are of ``tier`` (or any), in the given order;
        ``None`` if one of them is not in this cache."""
        rows = np.searchsorted(self.uids[: self.n], np.asarray(uids, dtype=np.int64)).tolist()
        want = tier == "archive"
        out = []
        for uid, r in zip(uids, rows, strict=True):
            if r >= self.n or int(self.uids[r]) != uid:
                return None
            if tier is None or bool(self.archived[r]) == want:
                out.append((uid, self.ids[r]))
        return out

    def set_tier(self, ids: Sequence[str], tier: str) -> None:
        for i in ids:
            r = self.row_of.get(i)
            if r is not None:
                self.archived[r] = tier == "archive"

    def search(self, query_embedding: np.ndarray, k: int, tier: str | None) -> list[tuple[int, str]]:
        """``(uid, id)`` of the best ``k`` units of ``tier`` (or any) by cosine, best first."""
        q = np.asarray(query_embedding, dtype=np.float32).reshape(-1)
        if self.dim is None or q.shape[0] != self.dim or self.n == 0:
            return []
        allowed = self.has[: self.n]
        if tier is not None:
            allowed = allowed & (self.archived[: self.n] == (tier == "archive"))
        rows = top_k(q @ self.columns[:, : self.n], k, allowed)
        return [(int(self.uids[r]), self.ids[r]) for r in rows]


class _SessionCache:
    def __init__(self, version: int) -> None:
        self.version = version
        self.stale = False
        self.dense: _Dense | None = None
        self.results: OrderedDict[tuple[Any, ...], list[tuple[str, float]]] = OrderedDict()
        self.matches: dict[str, int] = {}  # full-text matches per word (capped), for _lexical


class SQLiteStore(ConnectionLifecycle):
    """Every unit of every session in one SQLite file.

    Parameters
    ----------
    path:
        The database file (created with its schema if absent or empty).
    synchronous:
        ``"normal"`` (default): in WAL mode every commit is written to the
        log before the call returns, so an acknowledged :meth:`append`
        survives the process crashing or being killed (``kill -9``): the
        operating system holds the write. Only a crash of the machine itself
        (power loss, kernel panic) can lose the last commits, and never
        corrupts the file. ``"full"`` also fsyncs the log on every commit,
        so acknowledged writes survive a power loss too, at the price of one
        fsync per write (4-8 ms on our test machine, above the 5 ms budget
        of an ``add()``).
    timeout:
        Seconds a write waits for another process's write before failing.
    cache_size:
        Search results kept per session (invalidated on every write).
    lexical_rows:
        At most this many full-text matches are ranked by BM25 per search
        (see :meth:`_lexical`); bounds the cost on very large sessions.

    Several processes may open the same file: writes are serialised by SQLite
    (``BEGIN IMMEDIATE``, ``busy_timeout`` and a retry loop on ``SQLITE_BUSY``).

    >>> import tempfile, os
    >>> store = SQLiteStore(os.path.join(tempfile.mkdtemp(), "mem.db"))
    >>> store.append("s1", [StoredUnit("a", 0, {"role": "user", "content": "red apples"}, 7)])
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
        lexical_rows: int = 1000,
    ) -> None:
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {synchronous!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an int >= 0, got {cache_size!r}")
        self.path = os.fspath(path)
        self.synchronous = synchronous
        self.timeout = float(timeout)
        if isinstance(lexical_rows, bool) or not isinstance(lexical_rows, int) or lexical_rows < 1:
            raise ValueError(f"lexical_rows must be an int >= 1, got {lexical_rows!r}")
        self.cache_size = cache_size
        self.lexical_rows = lexical_rows
        self._lock = threading.RLock()
        self._caches: dict[str, _SessionCache] = {}
        self._conn: sqlite3.Connection | None = self._open()
        self._data_version = self._pragma("data_version")

    # -- opening -------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        p = Path(self.path)
        if p.is_dir():
            raise StoreError(f"SQLite store {self.path}: is a directory, not a database file")
        if not p.parent.exists():
            raise StoreError(f"SQLite store {self.path}: directory {str(p.parent)!r} does not exist")
        if p.exists() and p.stat().st_size > 0:
            try:
                with open(p, "rb") as fh:
                    header = fh.read(len(_HEADER))
            except OSError as exc:
                raise StoreError(f"SQLite store {self.path}: cannot read ({exc})") from None
            if header != _HEADER:
                raise StoreError(
                    f"SQLite store {self.path}: not an SQLite database (corrupt, or another kind of file); "
                    "nothing was changed"
                )
        try:
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path}: cannot open ({exc})") from None
        try:
            # Read-only checks first: a file we must refuse is never written to (not even the WAL switch).
            self._check_version(conn)
            self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone())
            # WAL + NORMAL: commits survive a killed process; FULL adds an fsync per commit (class docstring).
            conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            conn.execute("PRAGMA temp_store=MEMORY")
            self._retry(lambda: self._create_schema(conn))
        except StoreError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"SQLite store {self.path}: unreadable ({exc}); nothing was changed") from None
        return conn

    def _check_version(self, conn: sqlite3.Connection) -> int | None:
        """The file's schema version (``None`` for an empty file); refuse foreign or newer files."""
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        if not tables:
            return None
        version = None
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None:
                try:
                    version = int(row[0])
                except ValueError:
                    raise StoreError(
                        f"SQLite store {self.path}: invalid schema_version {row[0]!r} in table meta"
                    ) from None
        if version is None:
            raise StoreError(
                f"SQLite store {self.path}: an SQLite database but not an rdmem store "
                f"(tables: {', '.join(sorted(tables)[:5])}); refusing to write to it"
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"SQLite store {self.path} was written by a newer rdmem (schema version {version}); "
                f"this rdmem reads schema version {SCHEMA_VERSION} at most. Upgrade rdmem; nothing was changed"
            )
        return version

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = self._check_version(conn)  # again, inside the lock: another process may have won
            if version is None:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
                conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('created_by', 'rdmem')")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    # -- plumbing --------------------------------------------------------------
    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"SQLite store {self.path}: used after close()")
        return self._conn

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction: everything read inside sees the same state of the file (WAL snapshot)."""
        db = self._db
        if db.in_transaction:
            yield
            return
        db.execute("BEGIN")
        try:
            yield
        finally:
            if db.in_transaction:
                db.execute("COMMIT")  # read-only: nothing to roll back

    def _pragma(self, name: str) -> int:
        return int(self._db.execute(f"PRAGMA {name}").fetchone()[0])

    def _retry(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn``, retrying while another connection holds the lock (up to ``timeout`` seconds)."""
        deadline = time.monotonic() + self.timeout
        delay = 0.001
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _write(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``fn`` in one ``BEGIN IMMEDIATE`` transaction; committed (and synced) when this returns."""
        conn = self._db

        def attempt() -> _T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return out

        try:
            return self._retry(attempt)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"SQLite store {self.path}: write failed ({exc})") from None

    def _bump(self, conn: sqlite3.Connection, session: str, now: float) -> int:
        """Mark ``session`` written (creating it and its FTS table if new); return its new version."""
        fts = _fts_table(session)
        row = conn.execute(
            "INSERT INTO sessions (session, fts, created, updated, version) VALUES (?, ?, ?, ?, 1) "
            "ON CONFLICT (session) DO UPDATE SET updated = excluded.updated, version = version + 1 "
            "RETURNING version",
            (session, fts, now, now),
        ).fetchone()
        if row[0] == 1:
            conn.execute(_FTS_CREATE.format(fts, _FTS_TOKENIZE))
        return int(row[0])

    def _after_write(self, session: str, version: int, apply: Callable[[_SessionCache], None]) -> None:
        """Keep this process's cache of ``session`` current after its own write of ``version``."""
        cache = self._caches.get(session)
        if cache is None:
            return
        cache.results.clear()
        cache.matches.clear()
        if cache.version == version - 1 and not cache.stale:
            apply(cache)
            cache.version = version
        else:  # someone else wrote in between: rebuild on next use
            self._caches.pop(session, None)

    # -- the protocol -----------------------------------------------------------
    def append(self, session: str, units: Sequence[StoredUnit]) -> None:
        """Add units to ``session`` (durable when this returns). Ids must be new to the session."""
        check_session(session)
        if not units:
            return
        fts = _fts_table(session)
        rows = []
        seen: set[str] = set()
        for u in units:
            if u.tier not in _TIERS:
                raise ValueError(f"tier must be one of {', '.join(_TIERS)}, got {u.tier!r}")
            if u.id in seen:
                raise StoreError(f"session {session!r}: unit id {u.id!r} appears twice in one append")
            seen.add(u.id)
            blob = None
            if u.embedding is not None:
                blob = np.ascontiguousarray(np.asarray(u.embedding, dtype="<f4").reshape(-1)).tobytes()
            rows.append(
                (session, u.id, int(u.seq), _dumps(u.message), int(u.tokens), _dumps(u.features), blob, u.tier)
            )

        def write(conn: sqlite3.Connection) -> tuple[int, list[int]]:
            version = self._bump(conn, session, time.time())
            start = int(conn.execute("SELECT coalesce(max(uid), 0) FROM units").fetchone()[0]) + 1
            uids = list(range(start, start + len(rows)))
            try:
                conn.executemany(
                    "INSERT INTO units (uid, session, id, seq, message, tokens, features, embedding, tier) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(uid, *r) for uid, r in zip(uids, rows, strict=True)],
                )
            except sqlite3.IntegrityError:
                dup = conn.execute(
                    f"SELECT id FROM units WHERE session = ? AND id IN ({','.join('?' * len(rows))}) LIMIT 1",
                    (session, *(r[1] for r in rows)),
                ).fetchone()
                raise StoreError(
                    f"session {session!r} already has a unit with id {dup[0] if dup else '?'!r}"
                ) from None
            conn.executemany(
                f"INSERT INTO {fts} (rowid, body) VALUES (?, ?)",
                [(uid, message_payload(u.message)) for uid, u in zip(uids, units, strict=True)],
            )
            return version, uids

        with self._lock:
            version, uids = self._write(write)

            def apply(cache: _SessionCache) -> None:
                if cache.dense is not None:
                    cache.dense.extend([(uid, r[1], r[7], r[6]) for uid, r in zip(uids, rows, strict=True)])

            self._after_write(session, version, apply)

    def load(self, session: str) -> list[StoredUnit]:
        """All units of ``session`` in order (by ``seq``, then arrival)."""
        check_session(session)
        with self._lock, self._snapshot():
            self._sync(session)
            version = self._session_version(session)
            rows = self._db.execute(
                "SELECT uid, id, seq, message, tokens, features, embedding, tier FROM units "
                "WHERE session = ? ORDER BY seq, uid",
                (session,),
            ).fetchall()
            if not rows:
                return []
            cache = self._caches.get(session)
            if cache is None or cache.version != version or cache.dense is None:
                # Build the session's search matrix now, from the rows already read; units share its memory.
                cache = _SessionCache(version)
                dense = _Dense()
                by_uid = sorted(range(len(rows)), key=lambda i: rows[i][0])
                vecs = dense.extend([(rows[i][0], rows[i][1], rows[i][7], rows[i][6]) for i in by_uid])
                vec_of = {rows[i][0]: v for i, v in zip(by_uid, vecs, strict=True)}
                cache.dense = dense
                self._caches[session] = cache
            else:
                dense = cache.dense
                vec_of = {int(dense.uids[r]): dense.vector(r) for r in range(dense.n)}
        out = []
        where = f"SQLite store {self.path}"
        for uid, uid_str, seq, message, tokens, features, blob, tier in rows:
            emb = vec_of.get(uid)
            if emb is None and blob:  # another dimension than the session's matrix
                if not isinstance(blob, bytes) or len(blob) % 4:
                    what = "the stored embedding is not float32 (its size is not a multiple of 4 bytes)"
                    raise damaged_unit(where, session, uid_str, what)
                emb = np.frombuffer(blob, dtype="<f4")
            out.append(decode_unit(where, session, uid_str, seq, message, tokens, features, emb, tier))
        return out

    def set_tier(self, session: str, ids: Sequence[str], tier: Tier) -> None:
        """Move units to ``tier`` (unknown ids are ignored)."""
        check_session(session)
        if tier not in _TIERS:
            raise ValueError(f"tier must be one of {', '.join(_TIERS)}, got {tier!r}")
        ids = list(ids)
        if not ids:
            return

        def write(conn: sqlite3.Connection) -> int | None:
            row = conn.execute(
                "UPDATE sessions SET updated = ?, version = version + 1 WHERE session = ? RETURNING version",
                (time.time(), session),
            ).fetchone()
            if row is None:  # no such session: nothing to move
                return None
            conn.executemany(
                "UPDATE units SET tier = ? WHERE session = ? AND id = ?", [(tier, session, i) for i in ids]
            )
            return int(row[0])

        with self._lock:
            version = self._write(write)
            if version is None:
                return

            def apply(cache: _SessionCache) -> None:
                if cache.dense is not None:
                    cache.dense.set_tier(ids, tier)

            self._after_write(session, version, apply)

    def log_compaction(self, session: str, record: dict[str, Any]) -> None:
        check_session(session)
        text = _dumps(record)
        with self._lock:
            self._write(
                lambda conn: conn.execute(
                    "INSERT INTO compactions (session, time, record) VALUES (?, ?, ?)", (session, time.time(), text)
                )
            )

    def compaction_log(self, session: str) -> list[dict[str, Any]]:
        """The compaction records of ``session``, oldest first, each with its ``time``."""
        with self._lock:
            rows = self._db.execute(
                "SELECT time, record FROM compactions WHERE session = ? ORDER BY n", (session,)
            ).fetchall()
        return [dict(json.loads(rec), time=t) for t, rec in rows]

    def search(
        self, session: str, query: str, query_embedding: np.ndarray | None, *, k: int, tier: Tier | None = None
    ) -> list[tuple[str, float]]:
        """Best ``k`` units of ``session`` (of ``tier``, or all) for the query: BM25 (FTS5) and exact cosine,
        fused by reciprocal rank. Returns ``(id, score)`` pairs, best first; cached until the session changes."""
        check_session(session)
        if tier is not None and tier not in _TIERS:
            raise ValueError(f"tier must be one of {', '.join(_TIERS)} or None, got {tier!r}")
        if k <= 0:
            return []
        qkey = None if query_embedding is None else hashlib.blake2b(
            np.ascontiguousarray(query_embedding, dtype=np.float32).tobytes(), digest_size=16
        ).digest()
        key = (query, qkey, k, tier)
        with self._lock, self._snapshot():
            cache = self._sync(session)
            if cache is not None and key in cache.results:
                cache.results.move_to_end(key)
                return list(cache.results[key])
            if cache is None:
                version = self._session_version(session)
                if version is None:
                    return []
                cache = self._caches[session] = _SessionCache(version)
            rankings: list[list[int]] = []
            id_of: dict[int, str] = {}
            if query_embedding is not None:
                self._dense(session, cache)  # loaded first: the full-text ranking uses it too
            lexical = self._lexical(session, query, k, tier, cache)
            rankings.append([uid for uid, _ in lexical])
            id_of.update(lexical)
            if cache.dense is not None and query_embedding is not None:
                hits = cache.dense.search(query_embedding, k, tier)
                rankings.append([uid for uid, _ in hits])
                id_of.update(hits)
            result = [(id_of[uid], score) for uid, score in rank_fusion(rankings)[:k]]
            if self.cache_size:
                cache.results[key] = result
                while len(cache.results) > self.cache_size:
                    cache.results.popitem(last=False)
            return list(result)

    def _lexical(
        self, session: str, query: str, k: int, tier: Tier | None, cache: _SessionCache
    ) -> list[tuple[int, str]]:
        """BM25 (FTS5 ``bm25()``) over the session's units, ranking at most ``lexical_rows`` matches.

        Ranking costs a few microseconds per matching row, and a common word
        ("Caroline" in Caroline's chats) can match a third of 100,000 units.
        So, like Lucene's common-terms query, the rarest query words are kept
        while their matches add up to at most ``lexical_rows`` (the rarest is
        always kept); the words left out are the ones that carry the least
        BM25 weight. If even the rarest word is that common, only its most
        recent ``lexical_rows`` matches are ranked. ``cache.matches`` memoises
        each word's (capped) match count until the session is written to.

        With the session's matrix (``cache.dense``) loaded, ids and tiers come from it
        instead of a join with ``units`` (half the time): the full-text index
        alone ranks, over-fetching by the number of units of the other tier
        when that is small, so the result is the same.
        """
        db, matches, dense = self._db, cache.matches, cache.dense
        fts = _fts_table(session)
        words = list(dict.fromkeys(w for t in query_terms(query) for w in _FTS_WORD.findall(t)))
        if not words:
            return []
        cap = self.lexical_rows
        count_sql = f"SELECT count(*) FROM (SELECT rowid FROM {fts} WHERE {fts} MATCH ? LIMIT {cap + 1})"
        try:
            for w in words:
                if w not in matches:
                    matches[w] = int(db.execute(count_sql, (f'"{w}"',)).fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        kept, total = rarest_terms({w: matches[w] for w in words}, cap)
        if not kept:
            return []
        match = " OR ".join(f'"{w}"' for w in kept)
        since: tuple[int, ...] = ()
        if total > cap:
            row = db.execute(
                f"SELECT rowid FROM {fts} WHERE {fts} MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET {cap - 1}", (match,)
            ).fetchone()
            since = (int(row[0]),) if row else ()
        others = 0 if dense is None or tier is None else dense.count_not_in(tier)
        if dense is not None and others <= _LEXICAL_OVERFETCH:
            sql = f"SELECT rowid FROM {fts} WHERE {fts} MATCH ? " + ("AND rowid >= ? " if since else "")
            sql += f"ORDER BY bm25({fts}), rowid LIMIT ?"
            found = dense.identify([int(r[0]) for r in db.execute(sql, (match, *since, k + others))], tier)
            if found is not None:
                return found[:k]
        sql = (
            f"SELECT u.uid, u.id FROM {fts} JOIN units u ON u.uid = {fts}.rowid WHERE {fts} MATCH ? "
            + (f"AND {fts}.rowid >= ? " if since else "")
            + ("AND u.tier = ? " if tier is not None else "")
            + f"ORDER BY bm25({fts}), u.uid LIMIT ?"
        )
        params = (match, *since, *((tier,) if tier is not None else ()), k)
        return [(int(uid), i) for uid, i in db.execute(sql, params)]

    def _dense(self, session: str, cache: _SessionCache) -> _Dense:
        if cache.dense is None:
            rows = self._db.execute(
                "SELECT uid, id, tier, embedding FROM units WHERE session = ? ORDER BY uid", (session,)
            ).fetchall()
            dense = _Dense()
            dense.extend(rows)
            cache.dense = dense
        return cache.dense

    def _session_version(self, session: str) -> int | None:
        row = self._db.execute("SELECT version FROM sessions WHERE session = ?", (session,)).fetchone()
        return None if row is None else int(row[0])

    def _sync(self, session: str) -> _SessionCache | None:
        """This process's cache of ``session``, dropped if another connection changed the session."""
        dv = self._pragma("data_version")
        if dv != self._data_version:  # someone else committed: re-check every cached session lazily
            self._data_version = dv
            for c in self._caches.values():
                c.stale = True
        cache = self._caches.get(session)
        if cache is not None and cache.stale:
            if self._session_version(session) == cache.version:
                cache.stale = False
            else:
                self._caches.pop(session, None)
                cache = None
        return cache

    def sessions(self) -> list[SessionInfo]:
        with self._lock:
            rows = self._db.execute(
                "SELECT s.session, count(u.uid), coalesce(sum(u.tier = 'working'), 0), s.created, s.updated "
                "FROM sessions s LEFT JOIN units u ON u.session = s.session GROUP BY s.session ORDER BY s.session"
            ).fetchall()
        return [SessionInfo(s, n, w, n - w, c, up) for s, n, w, c, up in rows]

    def delete_session(self, session: str) -> None:
        """Delete ``session``: its units, their index entries and its compaction log. Irreversible."""
        check_session(session)
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(f"DROP TABLE IF EXISTS {_fts_table(session)}")
            conn.execute("DELETE FROM units WHERE session = ?", (session,))
            conn.execute("DELETE FROM compactions WHERE session = ?", (session,))
            conn.execute("DELETE FROM sessions WHERE session = ?", (session,))

        with self._lock:
            self._write(write)
            self._caches.pop(session, None)

    def check(self) -> list[str]:
        """Consistency problems of the file (empty when sound): SQLite's integrity check, and each
        session's full-text index holding exactly the session's units."""
        with self._lock:
            db = self._db
            problems = [r[0] for r in db.execute("PRAGMA integrity_check") if r[0] != "ok"]
            orphans = db.execute(
                "SELECT count(DISTINCT session) FROM units WHERE session NOT IN (SELECT session FROM sessions)"
            ).fetchone()[0]
            if orphans:
                problems.append(f"{orphans} sessions have units but no sessions row")
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE name GLOB 'fts_*'")}
            for session, fts in db.execute("SELECT session, fts FROM sessions").fetchall():
                if fts not in tables:
                    problems.append(f"session {session!r}: full-text table {fts} is missing")
                    continue
                try:
                    db.execute(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")
                except sqlite3.DatabaseError as exc:
                    problems.append(f"session {session!r}: full-text index: {exc}")
                missing = db.execute(
                    f"SELECT count(*) FROM units WHERE session = ? AND uid NOT IN (SELECT rowid FROM {fts})", (session,)
                ).fetchone()[0]
                extra = db.execute(
                    f"SELECT count(*) FROM {fts} WHERE rowid NOT IN (SELECT uid FROM units WHERE session = ?)", (session,)
                ).fetchone()[0]
                if missing or extra:
                    problems.append(
                        f"session {session!r}: {missing} units not in the full-text index, {extra} index rows without a unit"
                    )
            known = {r[0] for r in db.execute("SELECT fts FROM sessions")}
            stray = {t.split("_")[0] + "_" + t.split("_")[1] for t in tables} - known
            if stray:
                problems.append(f"full-text tables without a session: {', '.join(sorted(stray))}")
        return problems

    def disk_bytes(self) -> int:
        """Bytes of the database file and its WAL on disk."""
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, synchronous={self.synchronous!r})"

