"""The scale-out store: PostgreSQL with pgvector (HNSW, cosine) and full-text search.

Many processes and machines may share one database: every write is one
transaction that locks its session's row (so places and ids are allocated in
commit order), versions come from one sequence, and reads that must agree
with each other run in one repeatable-read snapshot. The layout is described
in :mod:`rdmem.store._pg_schema`; the connections (a pool that replaces
broken ones, so a restarted database is served again at once) in
:mod:`rdmem.store._pg_pool`.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..errors import InvalidInput
from ._base import BaseStore, Encoded, allocate_ids, decode_unit, dumps, state_patch
from ._fts import LEXICAL_ROWS, check_lexical_rows
from ._pg_pool import Connections, check_url, import_psycopg, one_line
from ._pg_schema import CLOSE_UP, LOCK_KEY, RETIRE, SCHEMA_VERSION, TS_CONFIG, WORDS_IN, WORDS_OUT, register_vector, setup
from ._pg_embeddings import COLUMNS as _COLUMNS, PgEmbeddings
from ._pg_keys import PgKeys
from ._pg_search import PgSearchMixin
from ._types import Changes, SessionInfo, StoredUnit, StoreError, Tier, VersionConflict, Written, retired_digest

__all__ = ["PostgresStore", "SCHEMA_VERSION"]

_MAX_DIM = 2000  # pgvector's HNSW limit for the vector type
_WINDOW_PER_ROW = 50  # lexical_window's default, per full-text match ranked
_T = TypeVar("_T")


class PostgresStore(PgKeys, PgEmbeddings, PgSearchMixin, BaseStore):
    """Every unit of every session in PostgreSQL; dense search by pgvector HNSW, lexical by ``tsvector``.

    Parameters
    ----------
    url:
        A libpq URL, e.g. ``postgresql://user:pass@host:5432/db``.
    connect_timeout:
        Seconds to wait for the server when opening a connection.
    timeout:
        Seconds a call waits for a connection (the database is down, or
        every connection is busy) before :class:`StoreError`.
    pool_size:
        Connections kept at most (one is opened at first; more as calls
        overlap). A connection that breaks is replaced: a database that
        restarts is served again as soon as it is back.
    cache_size:
        Search results kept per session (checked against the session's
        version on every search, so other writers invalidate them too).
    lexical_rows:
        At most this many full-text matches are ranked per search.
    lexical_window:
        When even a query's rarest word has more than ``lexical_rows`` matches, its most recent matches
        are taken among the session's newest ``lexical_window`` units (default: 50 x ``lexical_rows``),
        so that a search reads a bounded number of rows however long the session grows.

    The role needs the right to ``CREATE EXTENSION vector`` the first time
    (or an administrator creates it beforehand). Searches are fast when the
    sessions' table and indexes stay in the server's ``shared_buffers``:
    give it about a quarter of the machine's memory, as pgvector advises
    (the default 128MB is less than a 100,000-unit session takes).
    """

    def __init__(
        self, url: str, *, connect_timeout: float = 10.0, timeout: float = 5.0, pool_size: int = 10,
        cache_size: int = 256, lexical_rows: int = LEXICAL_ROWS, lexical_window: int | None = None,
    ) -> None:
        if not isinstance(url, str) or not url:
            raise InvalidInput(f"url must be a non-empty PostgreSQL URL, got {url!r}")
        check_url(url)
        for name, seconds in (("connect_timeout", connect_timeout), ("timeout", timeout)):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
                raise InvalidInput(f"{name} must be a number of seconds > 0, got {seconds!r}")
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise InvalidInput(f"pool_size must be an int >= 1, got {pool_size!r}")
        check_lexical_rows(lexical_rows)
        if lexical_window is None:
            lexical_window = _WINDOW_PER_ROW * lexical_rows
        if isinstance(lexical_window, bool) or not isinstance(lexical_window, int) or lexical_window < lexical_rows:
            raise InvalidInput(f"lexical_window must be an int >= lexical_rows ({lexical_rows}), got {lexical_window!r}")
        self._init_base(cache_size)
        self.url = url
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.pool_size = pool_size
        self.lexical_rows = lexical_rows
        self.lexical_window = lexical_window
        self._lock = threading.RLock()
        self._claims_unsure: set[str] = set()  # workers whose last claim's answer was lost (PgEmbeddings)
        # hnsw.ef_search as last set on each connection (a session setting; connections come and go).
        self._ef_search: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.location = self._describe()
        self.where = f"PostgreSQL store at {self.location}"
        self._dims: set[int] = self._prepare()
        self._connections = Connections(url, where=self.where, size=pool_size, timeout=timeout,
                                        connect_timeout=connect_timeout, configure=self._configure)

    # -- connecting ------------------------------------------------------------
    def _describe(self) -> str:
        """``host:port/db`` for messages (never the password)."""
        import_psycopg()
        from psycopg.conninfo import conninfo_to_dict

        try:
            info = conninfo_to_dict(self.url)
        except Exception:
            raise StoreError("invalid PostgreSQL URL (could not parse it); expected postgresql://user@host:port/db") from None
        host = info.get("host") or info.get("hostaddr") or "localhost (default socket)"
        port = info.get("port") or "5432"
        return f"{host}:{port}/{info.get('dbname') or info.get('user') or 'postgres'}"

    def _prepare(self) -> set[int]:
        """Connect once (a clear error if the database cannot be reached), create or upgrade the tables, and
        read which embedding dimensions have an HNSW index."""
        psycopg = import_psycopg()
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=max(int(self.connect_timeout), 1))
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self.location}: {one_line(exc)}") from None
        try:
            setup(conn, self.where)
            return {
                int(r[0].rsplit("_", 1)[1])
                for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'rdmem_units' "
                                      "AND indexname LIKE 'rdmem_units_hnsw_%%'")
            }
        except StoreError as exc:
            raise StoreError(str(exc) if str(exc).startswith(self.where) else f"{self.where}: {exc}") from None
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: setup failed: {one_line(exc)}") from None
        finally:
            conn.close()

    @staticmethod
    def _configure(conn: Any) -> None:
        """A new connection of the pool: pgvector's adapters, and the session settings every search wants."""
        register_vector(conn)
        # Filtered HNSW scans (one session, one tier) keep going until they have enough rows.
        conn.execute("SET hnsw.iterative_scan = relaxed_order")

    # -- plumbing ----------------------------------------------------------------
    def _close(self) -> None:
        self._connections.close()

    def _run(self, fn: Callable[[Any], _T], session: str | None = None, *, read: bool = False) -> _T:
        """``fn(conn)`` on a live connection of the pool (see :class:`~._pg_pool.Connections`)."""
        return self._connections.run(fn, session, read=read)

    @contextmanager
    def _snapshot(self, conn: Any) -> Iterator[None]:
        """Reads that must agree: one repeatable-read, read-only transaction."""
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield

    def _ensure_index(self, conn: Any, dim: int) -> None:
        if dim in self._dims:
            return
        if not 0 < dim <= _MAX_DIM:
            raise InvalidInput(f"embedding dimension must be in 1..{_MAX_DIM} for pgvector HNSW, got {dim}")
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS rdmem_units_hnsw_{dim} ON rdmem_units "
                f"USING hnsw ((embedding::vector({dim})) vector_cosine_ops) WHERE dim = {dim}"
            )
        self._dims.add(dim)

    @classmethod
    def _upsert_session(cls, conn: Any, session: str) -> tuple[Any, ...]:
        """The session's row, created first if need be, locked for this transaction."""
        row = cls._lock_session(conn, session, create=True)
        if row is None:  # pragma: no cover - INSERT ... RETURNING always returns the row
            raise StoreError(f"internal error: session {session!r} has no row after its upsert")
        return row

    @staticmethod
    def _lock_session(conn: Any, session: str, *, create: bool) -> tuple[Any, ...] | None:
        """The session's row, locked for this transaction (created first if ``create``), in one statement."""
        if create:
            now = time.time()
            # DO UPDATE (not DO NOTHING) locks the row and returns it, whoever created it.
            return conn.execute(  # a name written again goes on from its deleted session's id counter (RETIRE)
                "INSERT INTO rdmem_sessions (session, created, updated, version, reset, next_auto) VALUES (%s, %s, "
                "%s, 0, 0, coalesce((SELECT next_auto FROM rdmem_retired WHERE digest = %s), 0)) "
                "ON CONFLICT (session) DO UPDATE SET session = excluded.session "
                "RETURNING version, reset, next_seq, next_auto, state, n_units, n_tokens",
                (session, now, now, retired_digest(session)),
            ).fetchone()
        return conn.execute(
            "SELECT version, reset, next_seq, next_auto, state, n_units, n_tokens FROM rdmem_sessions "
            "WHERE session = %s FOR UPDATE",
            (session,),
        ).fetchone()

    @staticmethod
    def _bump(conn: Any, session: str, row: tuple[Any, ...], expect: int | None, **columns: Any) -> tuple[int, int]:
        """Take the next version for the locked session ``row``, checking ``expect``; set ``columns`` too.
        A session created by this transaction gets it as ``reset`` as well."""
        prev = int(row[0])
        if expect is not None and prev != expect:
            raise VersionConflict(f"session {session!r} is at version {prev}, not {expect}; nothing was written")
        sets = "".join(f", {c} = %s" for c in columns)
        version = conn.execute(
            f"UPDATE rdmem_sessions s SET version = v.n, updated = %s, "
            f"reset = CASE WHEN s.version = 0 THEN v.n ELSE s.reset END{sets} "
            "FROM (SELECT nextval('rdmem_clock') AS n) v WHERE s.session = %s RETURNING s.version",
            (time.time(), *columns.values(), session),
        ).fetchone()[0]
        return prev, int(version)

    # -- writes ----------------------------------------------------------------
    def _append(self, session: str, units: list[Encoded], log: str | None = None, expect: int | None = None) -> Written:
        dims = {u.embedding.shape[0] for u in units if u.embedding is not None}

        def write(conn: Any) -> Written:
            for d in dims:
                self._ensure_index(conn, d)
            with conn.transaction():
                row = self._upsert_session(conn, session)
                next_seq, next_auto = int(row[2]), int(row[3])

                def taken(ids: list[str]) -> set[str]:
                    sql = "SELECT id FROM rdmem_units WHERE session = %s AND id = ANY(%s)"
                    return {r[0] for r in conn.execute(sql, (session, ids))}

                ids, next_auto = allocate_ids(session, [u.id for u in units], next_auto, taken)
                prev, version = self._bump(conn, session, row, expect, next_seq=next_seq + len(units),
                                           next_auto=next_auto, n_units=int(row[5]) + len(units),
                                           n_tokens=int(row[6]) + sum(u.tokens for u in units))
                rows = [
                    (session, uid, next_seq + n, u.message, u.tokens, u.features,
                     None if u.embedding is None else u.embedding.shape[0], u.embedding, u.tier, u.text, version)
                    for n, (uid, u) in enumerate(zip(ids, units, strict=True))
                ]
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO rdmem_units (session, id, seq, message, tokens, features, dim, embedding, "
                        f"tier, tsv, changed) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, "
                        f"to_tsvector('{TS_CONFIG}', %s), %s)",
                        rows,
                    )
                conn.execute(WORDS_IN, {"session": session, "first": next_seq})
                if log is not None:
                    conn.execute("INSERT INTO rdmem_compactions (session, time, record) VALUES (%s, %s, %s)",
                                 (session, time.time(), log))
            stored = [
                StoredUnit(r[1], r[2], json.loads(u.message), u.tokens, json.loads(u.features), u.embedding, u.tier)
                for r, u in zip(rows, units, strict=True)
            ]
            return Written(prev, version, units=stored)

        return self._run(write, session)

    def _set_tier(self, session: str, ids: list[str], tier: Tier, expect: int | None, log: str | None) -> Written:
        def write(conn: Any) -> Written:
            with conn.transaction():
                row = self._lock_session(conn, session, create=False)
                if row is None:
                    if expect:
                        raise VersionConflict(f"session {session!r} does not exist (expected version {expect})")
                    return Written(0, 0)
                prev, version = self._bump(conn, session, row, expect)
                conn.execute("UPDATE rdmem_units SET tier = %s, changed = %s WHERE session = %s AND id = ANY(%s)",
                             (tier, version, session, ids))
                if log is not None:
                    conn.execute("INSERT INTO rdmem_compactions (session, time, record) VALUES (%s, %s, %s)",
                                 (session, time.time(), log))
            return Written(prev, version)

        return self._run(write, session)

    def _delete(self, session: str, ids: list[str]) -> Written:
        def write(conn: Any) -> Written:
            with conn.transaction():
                row = self._lock_session(conn, session, create=False)
                if row is None:
                    return Written(0, 0)
                found = conn.execute("SELECT id, tokens, seq FROM rdmem_units WHERE session = %s AND id = ANY(%s) "
                                     "ORDER BY seq", (session, ids)).fetchall()
                gone = [r[0] for r in found]
                if not gone:
                    return Written(int(row[0]), int(row[0]))
                prev, version = self._bump(conn, session, row, None, n_units=int(row[5]) - len(gone),
                                           n_tokens=int(row[6]) - sum(r[1] for r in found),
                                           next_seq=int(row[2]) - len(gone))
                conn.execute("UPDATE rdmem_sessions SET reset = %s WHERE session = %s", (version, session))
                for statement in (*WORDS_OUT, "DELETE FROM rdmem_units WHERE session = %(session)s AND id = ANY(%(ids)s)"):
                    conn.execute(statement, {"session": session, "ids": gone})
                for statement in CLOSE_UP:  # the units after move up: places stay 0, 1, ...
                    conn.execute(statement, {"session": session, "first": found[0][2]})
            return Written(prev, version, deleted=gone)

        return self._run(write, session)

    def _update_state(self, session: str, patch: dict[str, Any], expect: int | None) -> Written:
        def write(conn: Any) -> Written:
            with conn.transaction():
                if expect:
                    row = self._lock_session(conn, session, create=False)
                    if row is None:
                        raise VersionConflict(f"session {session!r} does not exist (expected version {expect})")
                else:
                    row = self._upsert_session(conn, session)
                state = state_patch(json.loads(row[4]), patch)
                prev, version = self._bump(conn, session, row, expect, state=dumps(state))
            return Written(prev, version)

        return self._run(write, session)

    def _log(self, session: str, record: str) -> None:
        self._run(lambda conn: conn.execute(
            "INSERT INTO rdmem_compactions (session, time, record) VALUES (%s, %s, %s)", (session, time.time(), record)
        ), session)

    def _delete_session(self, session: str) -> None:
        def write(conn: Any) -> None:
            with conn.transaction():
                # The session's row first, as every other write locks it (set_embeddings, then its units): a
                # delete that took the units first could deadlock with the embedding worker.
                self._lock_session(conn, session, create=False)
                for table in ("rdmem_units", "rdmem_words", "rdmem_compactions"):
                    conn.execute(f"DELETE FROM {table} WHERE session = %s", (session,))
                conn.execute(RETIRE, (retired_digest(session), session))
                conn.execute("DELETE FROM rdmem_sessions WHERE session = %s", (session,))

        self._run(write, session)

    # -- reads -------------------------------------------------------------------
    def _decode(self, session: str, rows: list[Any]) -> list[StoredUnit]:
        return [decode_unit(self.where, session, i, seq, m, t, f, e, tier) for i, seq, m, t, f, e, tier in rows]

    def _load(self, session: str, offset: int, limit: int | None) -> list[StoredUnit]:
        def read(conn: Any) -> list[Any]:
            with conn.cursor(binary=True) as cur:
                return cur.execute(
                    f"SELECT {_COLUMNS} FROM rdmem_units WHERE session = %s AND seq >= %s ORDER BY seq LIMIT %s",
                    (session, offset, limit),  # places are 0, 1, ...: the index finds the offset
                ).fetchall()

        return self._decode(session, self._run(read, session, read=True))

    def _changes(self, session: str, since: int, rows: int | None) -> Changes:
        def read(conn: Any) -> Changes:
            with self._snapshot(conn), conn.cursor(binary=True) as cur:
                row = cur.execute("SELECT version, reset, state, next_seq, n_units, n_tokens FROM rdmem_sessions "
                                  "WHERE session = %s", (session,)).fetchone()
                if row is None or not row[0]:
                    return Changes(0, True, [], {})
                version, reset, state, size = int(row[0]), int(row[1]), json.loads(row[2]), (int(row[4]), int(row[5]))
                full = since <= 0 or since < reset or since > version
                if since == version and not full:
                    return Changes(version, False, [], state, size=size)
                # A full read of the newest ``rows`` places, and the working units before them (a partial index).
                start = max(0, int(row[3]) - rows) if full and rows is not None else 0
                where, args = ((" AND (seq >= %s OR tier = 'working')", (session, start)) if start
                               else ("", (session,)) if full else (" AND changed > %s", (session, since)))
                found = cur.execute(f"SELECT {_COLUMNS} FROM rdmem_units WHERE session = %s{where} ORDER BY seq",
                                    args).fetchall()
            return Changes(version, full, self._decode(session, found), state, start, size)

        return self._run(read, session, read=True)

    def _pick(self, session: str, ids: list[str], places: list[int]) -> list[StoredUnit]:
        def read(conn: Any) -> list[Any]:
            with conn.cursor(binary=True) as cur:
                return cur.execute(f"SELECT {_COLUMNS} FROM rdmem_units WHERE session = %s "
                                   "AND (id = ANY(%s) OR seq = ANY(%s)) ORDER BY seq", (session, ids, places)).fetchall()

        return self._decode(session, self._run(read, session, read=True))

    def _version(self, session: str) -> int:
        row = self._run(lambda conn: conn.execute(
            "SELECT version FROM rdmem_sessions WHERE session = %s", (session,)).fetchone(), session, read=True)
        return int(row[0]) if row is not None else 0

    def _read_log(self, session: str) -> list[tuple[float, str]]:
        return self._run(lambda conn: conn.execute(
            "SELECT time, record FROM rdmem_compactions WHERE session = %s ORDER BY n", (session,)).fetchall(), session,
            read=True)

    def _sessions(self, prefix: str = "") -> list[SessionInfo]:  # the prefix's names only: not every unit
        rows = self._run(lambda conn: conn.execute(
            "SELECT s.session, count(u.uid), count(u.uid) FILTER (WHERE u.tier = 'working'), s.created, s.updated "
            "FROM rdmem_sessions s LEFT JOIN rdmem_units u ON u.session = s.session WHERE s.version > 0 "
            "AND starts_with(s.session, %s) GROUP BY s.session ORDER BY s.session", (prefix,)).fetchall(), read=True)
        return [SessionInfo(s, int(n), int(w), int(n) - int(w), c, up) for s, n, w, c, up in rows]

    def disk_bytes(self) -> int:
        """Bytes of rdmem's tables and their indexes (all sessions)."""
        return int(self._run(lambda conn: conn.execute(
            "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['rdmem_units', 'rdmem_sessions', "
            "'rdmem_compactions', 'rdmem_words', 'rdmem_keys', 'rdmem_meta']::regclass[]) c").fetchone()[0], read=True))

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"
