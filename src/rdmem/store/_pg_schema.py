"""The PostgreSQL store's layout, its creation and upgrades, and the pgvector adapters.

Schema version 3 (recorded in ``rdmem_meta``): ``rdmem_units`` (the message
as given, as JSON text, its place ``seq`` (unique per session), token cost,
features, embedding as a pgvector ``vector``, tier, a ``tsvector`` of the
text, and ``changed``: the version of the last write that touched it),
``rdmem_sessions`` (times, ``version``, ``reset``, ``next_seq``,
``next_auto``, state JSON), ``rdmem_compactions``, and the sequence
``rdmem_clock`` that every write takes its version from, and ``rdmem_keys`` (the
service's API keys: only each secret's SHA-256). Embeddings are
indexed by HNSW with cosine distance, one partial index per dimension
(created on first use). Version 1 lacked the clock, the counters and
``changed``, and let writers choose places; upgrading renumbers them.
Version 3 added ``claimed_by``/``claimed_until`` on units: an embedding
worker's lease on a unit that has no vector yet. Version 4 kept each session's
size in its row and its places dense; version 5 added ``rdmem_words`` (how many
of a session's units hold each word, for the full-text search's choice of
words). Upgrades past 2 are numbered steps (:data:`MIGRATIONS`), applied in order.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ._types import StoreError

__all__ = ["SCHEMA_VERSION", "LOCK_KEY", "TS_CONFIG", "WORDS_IN", "WORDS_OUT", "setup", "register_vector"]

SCHEMA_VERSION = 6
LOCK_KEY = 0x7264_6D65_6D00  # "rdmem": serialises schema changes between clients
TS_CONFIG = "english"

_TABLES = (
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
    "CREATE INDEX IF NOT EXISTS rdmem_units_tsv ON rdmem_units USING gin (tsv)",
    """CREATE TABLE IF NOT EXISTS rdmem_compactions (
        n bigserial PRIMARY KEY,
        session text NOT NULL,
        time double precision NOT NULL,
        record text NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS rdmem_compactions_session ON rdmem_compactions (session, n)",
)

# Version 1 -> 2 (also run right after creating the version-1 tables above, so one path builds both).
_TO_2 = (
    "ALTER TABLE rdmem_sessions ADD COLUMN IF NOT EXISTS reset bigint NOT NULL DEFAULT 0",
    "ALTER TABLE rdmem_sessions ADD COLUMN IF NOT EXISTS next_seq bigint NOT NULL DEFAULT 0",
    "ALTER TABLE rdmem_sessions ADD COLUMN IF NOT EXISTS next_auto bigint NOT NULL DEFAULT 0",
    "ALTER TABLE rdmem_sessions ADD COLUMN IF NOT EXISTS state text NOT NULL DEFAULT '{}'",
    "ALTER TABLE rdmem_units ADD COLUMN IF NOT EXISTS changed bigint NOT NULL DEFAULT 0",
    "DROP INDEX IF EXISTS rdmem_units_session_seq",
    """UPDATE rdmem_units u SET seq = r.place FROM (
        SELECT uid, row_number() OVER (PARTITION BY session ORDER BY seq, uid) - 1 AS place FROM rdmem_units
    ) r WHERE r.uid = u.uid AND u.seq <> r.place""",
    "CREATE UNIQUE INDEX IF NOT EXISTS rdmem_units_session_place ON rdmem_units (session, seq)",
    "CREATE INDEX IF NOT EXISTS rdmem_units_session_changed ON rdmem_units (session, changed)",
    """UPDATE rdmem_sessions s SET
        next_seq = (SELECT count(*) FROM rdmem_units u WHERE u.session = s.session),
        next_auto = coalesce((SELECT max(substr(id, 2)::bigint) + 1 FROM rdmem_units u
                              WHERE u.session = s.session AND id ~ '^m[0-9]{1,18}$'), 0)""",
    "CREATE SEQUENCE IF NOT EXISTS rdmem_clock",
    """CREATE TABLE IF NOT EXISTS rdmem_keys (
        id text PRIMARY KEY,
        tenant text NOT NULL,
        name text NOT NULL,
        hash text NOT NULL UNIQUE,
        created double precision NOT NULL,
        revoked double precision)""",
    "SELECT setval('rdmem_clock', (SELECT coalesce(max(version), 0) + 1 FROM rdmem_sessions))",
)

# Version 2 -> 3: embedding workers' leases (units without a vector are found through a partial index).
_TO_3 = (
    "ALTER TABLE rdmem_units ADD COLUMN IF NOT EXISTS claimed_by text",
    "ALTER TABLE rdmem_units ADD COLUMN IF NOT EXISTS claimed_until double precision",
    "CREATE INDEX IF NOT EXISTS rdmem_units_unembedded ON rdmem_units (uid) WHERE embedding IS NULL",
)

# Version 3 -> 4: each session's size kept with it, and its working units found without reading the rest
# (a view that opens a long session reads its newest units and its working set only).
_TO_4 = (
    "ALTER TABLE rdmem_sessions ADD COLUMN IF NOT EXISTS n_units bigint NOT NULL DEFAULT 0",
    "ALTER TABLE rdmem_sessions ADD COLUMN IF NOT EXISTS n_tokens bigint NOT NULL DEFAULT 0",
    """UPDATE rdmem_sessions s SET (n_units, n_tokens) = (
        SELECT count(*), coalesce(sum(u.tokens), 0) FROM rdmem_units u WHERE u.session = s.session)""",
    "UPDATE rdmem_sessions SET next_seq = n_units",
    # Places are kept 0, 1, ... (a delete moves the units after it up; rdmem before schema 4 left gaps).
    "DROP INDEX IF EXISTS rdmem_units_session_place",
    """UPDATE rdmem_units u SET seq = r.place FROM (
        SELECT uid, row_number() OVER (PARTITION BY session ORDER BY seq) - 1 AS place FROM rdmem_units
    ) r WHERE r.uid = u.uid AND u.seq <> r.place""",
    "CREATE UNIQUE INDEX IF NOT EXISTS rdmem_units_session_place ON rdmem_units (session, seq)",
    "CREATE INDEX IF NOT EXISTS rdmem_units_working ON rdmem_units (session, seq) WHERE tier = 'working'",
)

# Version 4 -> 5: how many of each session's units hold each word, kept with the session. A search chooses the
# words it ranks by these counts; before, it read the planner's statistics, which count every tenant's units, so
# one tenant's words changed what another's searches returned.
_TO_5 = (
    "CREATE TABLE IF NOT EXISTS rdmem_words (session text NOT NULL, word text NOT NULL, n bigint NOT NULL, "
    "PRIMARY KEY (session, word))",
    "INSERT INTO rdmem_words (session, word, n) SELECT u.session, t.lexeme, count(*) FROM rdmem_units u, "
    "unnest(u.tsv) t GROUP BY 1, 2 ON CONFLICT (session, word) DO UPDATE SET n = excluded.n",
    "DROP FUNCTION IF EXISTS rdmem_estimate_matches(tsquery)",
)

# Version 5 -> 6: a deleted session's id counter, kept under a digest of its name (RETIRE), so that a session
# written again under that name never gives a new message an id an old one had.
_TO_6 = ("CREATE TABLE IF NOT EXISTS rdmem_retired (digest text PRIMARY KEY, next_auto bigint NOT NULL)",)

#: Before a session's row is deleted: its id counter kept. Parameters: digest, session.
RETIRE = ("INSERT INTO rdmem_retired (digest, next_auto) SELECT %s, next_auto FROM rdmem_sessions WHERE session = %s "
          "ON CONFLICT (digest) DO UPDATE SET next_auto = greatest(rdmem_retired.next_auto, excluded.next_auto)")

#: After an append, the words of its units (places ``first`` on) are counted in. Parameters: session, first.
WORDS_IN = (
    "INSERT INTO rdmem_words (session, word, n) SELECT %(session)s, t.lexeme, count(*) FROM rdmem_units u, "
    "unnest(u.tsv) t WHERE u.session = %(session)s AND u.seq >= %(first)s GROUP BY t.lexeme "
    "ON CONFLICT (session, word) DO UPDATE SET n = rdmem_words.n + excluded.n"
)

#: Before a delete, the words of the units going are counted out. Parameters: session, ids.
WORDS_OUT = (
    "UPDATE rdmem_words w SET n = w.n - g.n FROM (SELECT t.lexeme AS word, count(*) AS n FROM rdmem_units u, "
    "unnest(u.tsv) t WHERE u.session = %(session)s AND u.id = ANY(%(ids)s) GROUP BY 1) g "
    "WHERE w.session = %(session)s AND w.word = g.word",
    "DELETE FROM rdmem_words WHERE session = %(session)s AND n <= 0",
)

#: After a delete, the units from place ``first`` on move up so that places stay 0, 1, ... (in two steps: a
#: place is unique at every moment). Parameters: session, first, first, session.
CLOSE_UP = (
    "UPDATE rdmem_units SET seq = -1 - seq WHERE session = %(session)s AND seq > %(first)s",
    "UPDATE rdmem_units u SET seq = r.place FROM (SELECT uid, %(first)s + row_number() OVER (ORDER BY seq DESC) - 1 "
    "AS place FROM rdmem_units WHERE session = %(session)s AND seq < 0) r WHERE r.uid = u.uid",
)

#: The upgrade to each version from the one before, applied in order.
MIGRATIONS: dict[int, tuple[str, ...]] = {3: _TO_3, 4: _TO_4, 5: _TO_5, 6: _TO_6}



def _read_version(conn: Any, where: str) -> int | None:
    if conn.execute("SELECT to_regclass('rdmem_meta')").fetchone()[0] is None:
        return None
    row = conn.execute("SELECT value FROM rdmem_meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        return None
    version = int(row[0])
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{where} was written by a newer rdmem (schema version {version}); this rdmem reads schema "
            f"version {SCHEMA_VERSION} at most. Upgrade rdmem; nothing was changed"
        )
    return version


def setup(conn: Any, where: str) -> None:
    """Create or upgrade rdmem's tables (serialised between clients by an advisory lock)."""
    # Read-only check first: a newer schema is refused before anything is created.
    if _read_version(conn, where) == SCHEMA_VERSION:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        version = _read_version(conn, where)
        if version == SCHEMA_VERSION:
            return
        if version is None:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            for statement in _TABLES:
                conn.execute(statement)
        if version is None or version < 2:
            for statement in _TO_2:
                conn.execute(statement)
        for step in range(max(version or 0, 2) + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute(
            "INSERT INTO rdmem_meta (key, value) VALUES ('schema_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )


def register_vector(conn: Any) -> None:
    """Binary adapters between numpy float32 vectors and pgvector's ``vector`` (no extra dependency)."""
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format
    from psycopg.types import TypeInfo

    info = TypeInfo.fetch(conn, "vector")
    if info is None:
        raise StoreError("the pgvector extension is missing")

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

    VectorDumper.oid = info.oid
    conn.adapters.register_dumper(np.ndarray, VectorDumper)
    conn.adapters.register_loader(info.oid, VectorBinaryLoader)
    conn.adapters.register_loader(info.oid, VectorTextLoader)
