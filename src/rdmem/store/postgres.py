"""The scale-out store: PostgreSQL with pgvector (HNSW, cosine) and full-text search.

Many processes and machines may share one database: every write is one
transaction, per-session version counters keep each process's search cache
honest, and schema creation is serialised by an advisory lock.

Tables (schema version 1, recorded in ``rdmem_meta``): ``rdmem_units`` (the
original message as JSON text, order, token cost, features, embedding as a
pgvector ``vector``, tier, and a ``tsvector`` of the text), ``rdmem_sessions``
and ``rdmem_compactions``. Embeddings are indexed by HNSW with cosine distance,
one partial index per embedding dimension (created on first use).
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from ..tokens import message_payload
from ._base import ConnectionLifecycle, SessionInfo, StoredUnit, StoreError, Tier, check_session, decode_unit
from ._search import query_terms, rank_fusion, rarest_terms

__all__ = ["PostgresStore", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

_TIERS = ("working", "archive")
_TS_CONFIG = "english"
_LOCK_KEY = 0x7264_6D65_6D00  # "rdmem": serialises schema changes between clients
_MAX_DIM = 2000  # pgvector's HNSW limit for the vector type
_T = TypeVar("_T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS rdmem_meta (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE IF NOT EXISTS rdmem_sessions (
        session text PRIMARY KEY,
        created double precision NOT NULL,
        updated double precision NOT NULL,
        version bigint NOT NULL DEFAULT 1)""",
    """CREATE TABLE IF NOT EXISTS rdmem_units (
        uid bigserial PRIMARY KEY,
        session text NOT NULL,
        id text NOT NULL,
        seq bigint NOT NULL,
        message text NOT NULL,
        tokens integer NOT NULL,
        features text NOT NULL,
        dim integer,
        embedding vector,
        tier text NOT NULL CHECK (tier IN ('working', 'archive')),
        tsv tsvector NOT NULL,
        UNIQUE (session, id))""",
    "CREATE INDEX IF NOT EXISTS rdmem_units_session_seq ON rdmem_units (session, seq)",
    "CREATE INDEX IF NOT EXISTS rdmem_units_tsv ON rdmem_units USING gin (tsv)",
    """CREATE TABLE IF NOT EXISTS rdmem_compactions (
        n bigserial PRIMARY KEY,
        session text NOT NULL,
        time double precision NOT NULL,
        record text NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS rdmem_compactions_session ON rdmem_compactions (session, n)",
)

# The planner's estimate of how many units match a query (from ANALYZE statistics): lets a search rank
# the rare words of a query without first counting the matches of the common ones.
_ESTIMATE_FUNCTION = """CREATE OR REPLACE FUNCTION rdmem_estimate_matches(q tsquery) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE plan json;
BEGIN
    EXECUTE format('EXPLAIN (FORMAT JSON) SELECT 1 FROM rdmem_units WHERE tsv @@ %L::tsquery', q) INTO plan;
    RETURN (plan->0->'Plan'->>'Plan Rows')::bigint;
END $$"""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the PostgreSQL store needs psycopg 3: pip install 'rdmem[postgres]'") from exc
    return psycopg


def _register_vector(conn: Any, oid: int) -> None:
    """Binary adapters between numpy float32 vectors and pgvector's ``vector`` (no extra dependency)."""
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format

    class VectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            a = np.asarray(obj, dtype=">f4").reshape(-1)
            return struct.pack(">HH", a.shape[0], 0) + a.tobytes()

    class VectorBinaryLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> np.ndarray:
            dim = struct.unpack_from(">H", data)[0]
            return np.frombuffer(bytes(data), dtype=">f4", count=dim, offset=4).astype(np.float32)

    class VectorTextLoader(Loader):
        format = Format.TEXT

        def load(self, data: Any) -> np.ndarray:
            return np.array(bytes(data).decode()[1:-1].split(","), dtype=np.float32)

    VectorDumper.oid = oid
    conn.adapters.register_dumper(np.ndarray, VectorDumper)
    conn.adapters.register_loader(oid, VectorBinaryLoader)
    conn.adapters.register_loader(oid, VectorTextLoader)


class _Cache:
    def __init__(self, version: int) -> None:
        self.version = version
        self.results: OrderedDict[tuple[Any, ...], list[tuple[str, float]]] = OrderedDict()


class PostgresStore(ConnectionLifecycle):
    """Every unit of every session in PostgreSQL; dense search by pgvector HNSW, lexical by ``tsvector``.

    Parameters
    ----------
    url:
        A libpq URL, e.g. ``postgresql://user:pass@host:5432/db``.
    connect_timeout:
        Seconds to wait for the server before :class:`StoreError`.
    cache_size:
        Search results kept per session (checked against the session's
        version on every search, so other writers invalidate them too).
    lexical_rows:
        At most this many full-text matches are ranked per search.

    The role needs the right to ``CREATE EXTENSION vector`` the first time
    (or an administrator creates it beforehand). Searches are fast when the
    sessions' table and indexes stay in the server's ``shared_buffers``:
    give it about a quarter of the machine's memory, as pgvector advises
    (the default 128MB is less than a 100,000-unit session takes).
    """

    def __init__(
        self, url: str, *, connect_timeout: float = 10.0, cache_size: int = 256, lexical_rows: int = 1000
    ) -> None:
        if not isinstance(url, str) or not url:
            raise ValueError(f"url must be a non-empty PostgreSQL URL, got {url!r}")
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)) or connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be a number of seconds > 0, got {connect_timeout!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an int >= 0, got {cache_size!r}")
        self.url = url
        self.connect_timeout = connect_timeout
        if isinstance(lexical_rows, bool) or not isinstance(lexical_rows, int) or lexical_rows < 1:
            raise ValueError(f"lexical_rows must be an int >= 1, got {lexical_rows!r}")
        self.cache_size = cache_size
        self.lexical_rows = lexical_rows
        self._lock = threading.RLock()
        self._caches: dict[str, _Cache] = {}
        self._dims: set[int] = set()
        self._ef_search: int | None = None
        self._where = self._describe()
        self._conn: Any = self._connect()

    # -- connecting ------------------------------------------------------------
    def _describe(self) -> str:
        """``host:port/db`` for messages (never the password)."""
        _import_psycopg()
        from psycopg.conninfo import conninfo_to_dict

        try:
            info = conninfo_to_dict(self.url)
        except Exception:
            raise StoreError("invalid PostgreSQL URL (could not parse it); expected postgresql://user@host:port/db") from None
        host = info.get("host") or info.get("hostaddr") or "localhost (default socket)"
        port = info.get("port") or "5432"
        return f"{host}:{port}/{info.get('dbname') or info.get('user') or 'postgres'}"

    def _scrub(self, text: str) -> str:
        from psycopg.conninfo import conninfo_to_dict

        password = conninfo_to_dict(self.url).get("password")
        text = " ".join(str(text).split())
        return text.replace(password, "***") if password else text

    def _connect(self) -> Any:
        psycopg = _import_psycopg()
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=max(int(self.connect_timeout), 1))
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self._where}: {self._scrub(str(exc))}") from None
        try:
            self._setup(conn)
        except StoreError:
            conn.close()
            raise
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"PostgreSQL store at {self._where}: setup failed: {self._scrub(str(exc))}") from None
        return conn

    def _read_version(self, conn: Any) -> int | None:
        if conn.execute("SELECT to_regclass('rdmem_meta')").fetchone()[0] is None:
            return None
        row = conn.execute("SELECT value FROM rdmem_meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            return None
        version = int(row[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"PostgreSQL store at {self._where} was written by a newer rdmem (schema version {version}); "
                f"this rdmem reads schema version {SCHEMA_VERSION} at most. Upgrade rdmem; nothing was changed"
            )
        return version

    def _setup(self, conn: Any) -> None:
        # Read-only check first: a newer schema is refused before anything is created.
        if self._read_version(conn) is None:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                if self._read_version(conn) is None:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    for statement in (*_SCHEMA, _ESTIMATE_FUNCTION):
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO rdmem_meta (key, value) VALUES ('schema_version', %s) ON CONFLICT DO NOTHING",
                        (str(SCHEMA_VERSION),),
                    )
        from psycopg.types import TypeInfo

        info = TypeInfo.fetch(conn, "vector")
        if info is None:
            raise StoreError(f"PostgreSQL store at {self._where}: the pgvector extension is missing")
        _register_vector(conn, info.oid)
        # Filtered HNSW scans (one session, one tier) keep going until they have enough rows.
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        self._dims = {
            int(r[0].rsplit("_", 1)[1])
            for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'rdmem_units' AND indexname LIKE 'rdmem_units_hnsw_%%'"
            )
        }

    # -- plumbing ----------------------------------------------------------------
    @property
    def _db(self) -> Any:
        if self._conn is None:
            raise StoreError(f"PostgreSQL store at {self._where}: used after close()")
        return self._conn

    def _run(self, fn: Callable[[Any], _T]) -> _T:
        """Run ``fn(conn)`` under the lock, turning database errors into :class:`StoreError`."""
        psycopg = _import_psycopg()
        with self._lock:
            try:
                return fn(self._db)
            except psycopg.errors.UniqueViolation as exc:
                raise StoreError(f"PostgreSQL store at {self._where}: {self._scrub(exc.diag.message_detail or str(exc))}") from None
            except psycopg.OperationalError as exc:
                raise StoreError(f"PostgreSQL store at {self._where}: {self._scrub(str(exc))}") from None

    def _ensure_index(self, conn: Any, dim: int) -> None:
        if dim in self._dims:
            return
        if not 0 < dim <= _MAX_DIM:
            raise ValueError(f"embedding dimension must be in 1..{_MAX_DIM} for pgvector HNSW, got {dim}")
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS rdmem_units_hnsw_{dim} ON rdmem_units "
                f"USING hnsw ((embedding::vector({dim})) vector_cosine_ops) WHERE dim = {dim}"
            )
        self._dims.add(dim)

    @staticmethod
    def _bump(conn: Any, session: str) -> int:
        now = time.time()
        return int(
            conn.execute(
                "INSERT INTO rdmem_sessions (session, created, updated, version) VALUES (%s, %s, %s, 1) "
                "ON CONFLICT (session) DO UPDATE SET updated = excluded.updated, "
                "version = rdmem_sessions.version + 1 RETURNING version",
                (session, now, now),
            ).fetchone()[0]
        )

    def _written(self, session: str, version: int) -> None:
        cache = self._caches.get(session)
        if cache is not None:
            cache.results.clear()
            cache.version = version

    # -- the protocol --------------------------------------------------------------
    def append(self, session: str, units: Sequence[StoredUnit]) -> None:
        """Add units to ``session`` in one transaction (durable when this returns)."""
        check_session(session)
        if not units:
            return
        rows = []
        seen: set[str] = set()
        dims = set()
        for u in units:
            if u.tier not in _TIERS:
                raise ValueError(f"tier must be one of {', '.join(_TIERS)}, got {u.tier!r}")
            if u.id in seen:
                raise StoreError(f"session {session!r}: unit id {u.id!r} appears twice in one append")
            seen.add(u.id)
            emb = None if u.embedding is None else np.asarray(u.embedding, dtype=np.float32).reshape(-1)
            if emb is not None:
                dims.add(emb.shape[0])
            rows.append((
                session, u.id, int(u.seq), _dumps(u.message), int(u.tokens), _dumps(u.features),
                None if emb is None else emb.shape[0], emb, u.tier, message_payload(u.message),
            ))

        def write(conn: Any) -> int:
            for d in dims:
                self._ensure_index(conn, d)
            with conn.transaction():
                with conn.cursor() as cur:
                    try:
                        cur.executemany(
                            "INSERT INTO rdmem_units (session, id, seq, message, tokens, features, dim, embedding, "
                            f"tier, tsv) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, to_tsvector('{_TS_CONFIG}', %s))",
                            rows,
                        )
                    except _import_psycopg().errors.UniqueViolation:
                        raise StoreError(f"session {session!r} already has a unit with one of these ids") from None
                return self._bump(conn, session)

        version = self._run(write)
        with self._lock:
            self._written(session, version)

    def load(self, session: str) -> list[StoredUnit]:
        """All units of ``session`` in order (by ``seq``, then arrival)."""
        check_session(session)

        def read(conn: Any) -> list[Any]:
            with conn.cursor(binary=True) as cur:
                return cur.execute(
                    "SELECT id, seq, message, tokens, features, embedding, tier FROM rdmem_units "
                    "WHERE session = %s ORDER BY seq, uid",
                    (session,),
                ).fetchall()

        where = f"PostgreSQL store at {self._where}"
        return [decode_unit(where, session, i, seq, m, t, f, e, tier) for i, seq, m, t, f, e, tier in self._run(read)]

    def set_tier(self, session: str, ids: Sequence[str], tier: Tier) -> None:
        check_session(session)
        if tier not in _TIERS:
            raise ValueError(f"tier must be one of {', '.join(_TIERS)}, got {tier!r}")
        ids = list(ids)
        if not ids:
            return

        def write(conn: Any) -> int:
            with conn.transaction():
                conn.execute(
                    "UPDATE rdmem_units SET tier = %s WHERE session = %s AND id = ANY(%s)", (tier, session, ids)
                )
                return self._bump(conn, session)

        version = self._run(write)
        with self._lock:
            self._written(session, version)

    def log_compaction(self, session: str, record: dict[str, Any]) -> None:
        check_session(session)
        text = _dumps(record)
        self._run(
            lambda conn: conn.execute(
                "INSERT INTO rdmem_compactions (session, time, record) VALUES (%s, %s, %s)",
                (session, time.time(), text),
            )
        )

    def compaction_log(self, session: str) -> list[dict[str, Any]]:
        rows = self._run(
            lambda conn: conn.execute(
                "SELECT time, record FROM rdmem_compactions WHERE session = %s ORDER BY n", (session,)
            ).fetchall()
        )
        return [dict(json.loads(rec), time=t) for t, rec in rows]

    def search(
        self, session: str, query: str, query_embedding: np.ndarray | None, *, k: int, tier: Tier | None = None
    ) -> list[tuple[str, float]]:
        """Best ``k`` units of ``session`` (of ``tier``, or all): ``ts_rank`` full-text and HNSW cosine,
        fused by reciprocal rank. ``(id, score)`` pairs, best first; cached until the session changes."""
        check_session(session)
        if tier is not None and tier not in _TIERS:
            raise ValueError(f"tier must be one of {', '.join(_TIERS)} or None, got {tier!r}")
        if k <= 0:
            return []
        qvec = None if query_embedding is None else np.asarray(query_embedding, dtype=np.float32).reshape(-1)
        key = (query, None if qvec is None else hashlib.blake2b(qvec.tobytes(), digest_size=16).digest(), k, tier)

        def run(conn: Any) -> list[tuple[str, float]]:
            row = conn.execute("SELECT version FROM rdmem_sessions WHERE session = %s", (session,)).fetchone()
            if row is None:
                return []
            cache = self._caches.get(session)
            if cache is None or cache.version != row[0]:
                cache = self._caches[session] = _Cache(row[0])
            if key in cache.results:
                cache.results.move_to_end(key)
                return list(cache.results[key])
            lexical = self._lexical(conn, session, query, k, tier)
            rankings = [[h[0] for h in lexical]]
            id_of = dict(lexical)
            if qvec is not None and qvec.shape[0] in self._dims:
                hits = self._dense(conn, session, qvec, k, tier)
                rankings.append([h[0] for h in hits])
                id_of.update(hits)
            result = [(id_of[uid], score) for uid, score in rank_fusion(rankings)[:k]]
            if self.cache_size:
                cache.results[key] = result
                while len(cache.results) > self.cache_size:
                    cache.results.popitem(last=False)
            return list(result)

        return self._run(run)

    def _dense(self, conn: Any, session: str, qvec: np.ndarray, k: int, tier: Tier | None) -> list[tuple[int, str]]:
        """HNSW cosine ranking of the session's units."""
        d = qvec.shape[0]
        ef = min(max(k, 40), 1000)
        if ef != self._ef_search:
            conn.execute(f"SET hnsw.ef_search = {ef}")
            self._ef_search = ef
        tier_filt = " AND tier = %s" if tier is not None else ""
        return [
            (int(uid), i)
            for uid, i in conn.execute(
                f"SELECT uid, id FROM rdmem_units WHERE session = %s{tier_filt} AND dim = {d} "
                f"ORDER BY embedding::vector({d}) <=> %s::vector({d}) LIMIT %s",
                (session, *((tier,) if tier is not None else ()), qvec, k),
            ).fetchall()
        ]

    def _lexical(self, conn: Any, session: str, query: str, k: int, tier: Tier | None) -> list[tuple[int, str]]:
        """``ts_rank`` full-text ranking of the session's units, over at most ``lexical_rows`` matches.

        As in the SQLite store: the rarest query words are kept while their
        matches add up to at most ``lexical_rows`` (the rarest always), and
        if even that word is more common, its most recent matches are ranked.
        How common a word is comes from the planner's statistics (counting
        the matches of a common word would cost as much as ranking them).
        """
        words = query_terms(query)
        if not words:
            return []
        cap = self.lexical_rows
        df = {
            w: max(int(n), 1)
            for w, n in conn.execute(
                f"SELECT w, rdmem_estimate_matches(q) FROM unnest(%s::text[]) AS w, plainto_tsquery('{_TS_CONFIG}', w) q "
                "WHERE q::text <> ''",
                (words,),
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
                f"SELECT uid, id FROM rdmem_units, websearch_to_tsquery('{_TS_CONFIG}', %s) q "
                f"WHERE session = %s{tier_filt} AND tsv @@ q ORDER BY ts_rank(tsv, q) DESC, uid LIMIT %s"
            )
            params: tuple[Any, ...] = (tsq, session, *tier_param, k)
        else:
            # Even the rarest word is common: rank its ``cap`` most recent matches (of any tier, as the
            # SQLite store does), in one statement.
            sql = (
                f"SELECT uid, id FROM (SELECT uid, id, tier, tsv FROM rdmem_units, "
                f"websearch_to_tsquery('{_TS_CONFIG}', %s) q WHERE session = %s AND tsv @@ q "
                f"ORDER BY uid DESC LIMIT %s) m, websearch_to_tsquery('{_TS_CONFIG}', %s) q "
                f"WHERE true{tier_filt} ORDER BY ts_rank(m.tsv, q) DESC, uid LIMIT %s"
            )
            params = (tsq, session, cap, tsq, *tier_param, k)
        return [(int(uid), i) for uid, i in conn.execute(sql, params).fetchall()]

    def sessions(self) -> list[SessionInfo]:
        rows = self._run(
            lambda conn: conn.execute(
                "SELECT s.session, count(u.uid), count(u.uid) FILTER (WHERE u.tier = 'working'), s.created, s.updated "
                "FROM rdmem_sessions s LEFT JOIN rdmem_units u ON u.session = s.session "
                "GROUP BY s.session ORDER BY s.session"
            ).fetchall()
        )
        return [SessionInfo(s, int(n), int(w), int(n) - int(w), c, up) for s, n, w, c, up in rows]

    def delete_session(self, session: str) -> None:
        """Delete ``session``: its units and its compaction log. Irreversible."""
        check_session(session)

        def write(conn: Any) -> None:
            with conn.transaction():
                conn.execute("DELETE FROM rdmem_units WHERE session = %s", (session,))
                conn.execute("DELETE FROM rdmem_compactions WHERE session = %s", (session,))
                conn.execute("DELETE FROM rdmem_sessions WHERE session = %s", (session,))

        self._run(write)
        with self._lock:
            self._caches.pop(session, None)

    def disk_bytes(self) -> int:
        """Bytes of rdmem's tables and their indexes (all sessions)."""
        return int(
            self._run(
                lambda conn: conn.execute(
                    "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['rdmem_units', 'rdmem_sessions', "
                    "'rdmem_compactions', 'rdmem_meta']::regclass[]) c"
                ).fetchone()[0]
            )
        )

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r})"

