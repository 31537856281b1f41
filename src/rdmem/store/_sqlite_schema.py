"""The SQLite store's layout, its version checks, and the upgrades from older layouts.

Schema version 3 (recorded in ``meta``):

- ``clock``: one row, the store's version clock (every write takes the next value).
- ``sessions``: per session its FTS table, times, current ``version``,
  ``reset`` (the version at which units last left it, or it was created),
  the next place (``next_seq``) and automatic id number (``next_auto``), and
  its state record (JSON).
- ``units``: one row per message: id, place (``seq``, unique per session),
  the message as given (JSON), token cost, features (JSON), embedding
  (float32 blob, little-endian), tier, and ``changed``: the version of the
  last write that touched it (what :meth:`changes` reads); ``claimed_by`` and
  ``claimed_until``: an embedding worker's lease on a unit that has no vector yet.
- ``fts_<hash>``: one contentless FTS5 index per session.
- ``compactions``: the compaction log.
- ``keys``: the service's API keys (id, tenant, name, the secret's SHA-256, created, revoked).

Upgrades are numbered steps (:data:`MIGRATIONS`), applied in order from the
file's version. Version 1 (rdmem 0.1) had no clock, no ``reset``/``next_*``/``state``/
``changed`` columns, and places chosen by the writing process (two processes
could share one); upgrading renumbers them in their order.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from ._types import StoreError, name_after

__all__ = ["SCHEMA_VERSION", "read_version", "create_or_upgrade", "session_range"]

#: The layout this code writes. A file with a higher version was written by a newer rdmem.
SCHEMA_VERSION = 6

_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE clock (n INTEGER NOT NULL);
CREATE TABLE sessions (
    session TEXT PRIMARY KEY,
    fts TEXT NOT NULL UNIQUE,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    reset INTEGER NOT NULL DEFAULT 0,
    next_seq INTEGER NOT NULL DEFAULT 0,
    next_auto INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE units (
    uid INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    features TEXT NOT NULL,
    embedding BLOB,
    tier TEXT NOT NULL CHECK (tier IN ('working', 'archive')),
    changed INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session, id)
);
CREATE TABLE compactions (
    n INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    time REAL NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX compactions_session ON compactions (session, n);
"""

# API keys of the service (schema 2): only each secret's hash is kept.
_KEYS = """
CREATE TABLE IF NOT EXISTS keys (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    created REAL NOT NULL,
    revoked REAL
);
"""

_INDEXES = """
CREATE UNIQUE INDEX units_session_place ON units (session, seq);
CREATE INDEX units_session_changed ON units (session, changed);
"""

# From version 1: new columns, places renumbered 0, 1, ... per session in their order, counters set past
# what is there, and the clock started past every session's version.
_FROM_1 = """
ALTER TABLE sessions ADD COLUMN reset INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN next_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN next_auto INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN state TEXT NOT NULL DEFAULT '{}';
ALTER TABLE units ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS units_session_seq;
UPDATE units SET seq = r.place FROM (
    SELECT uid, row_number() OVER (PARTITION BY session ORDER BY seq, uid) - 1 AS place FROM units
) AS r WHERE r.uid = units.uid;
UPDATE sessions SET next_seq = (SELECT count(*) FROM units WHERE units.session = sessions.session);
UPDATE sessions SET next_auto = coalesce((
    SELECT max(CAST(substr(id, 2) AS INTEGER)) + 1 FROM units
    WHERE units.session = sessions.session AND id GLOB 'm[0-9]*' AND substr(id, 2) NOT GLOB '*[^0-9]*'
), 0);
CREATE TABLE clock (n INTEGER NOT NULL);
INSERT INTO clock (n) SELECT coalesce(max(version), 0) + 1 FROM sessions;
"""


# Version 2 -> 3: embedding workers' leases (units without a vector are found through a partial index).
_TO_3 = """
ALTER TABLE units ADD COLUMN claimed_by TEXT;
ALTER TABLE units ADD COLUMN claimed_until REAL;
CREATE INDEX units_unembedded ON units (uid) WHERE embedding IS NULL;
"""

# Version 3 -> 4: each session's size kept with it, and its working units found without reading the rest
# (a view that opens a long session reads its newest units and its working set only).
# Places are kept 0, 1, ... (a delete moves the units after it up; rdmem before schema 4 left gaps).
_TO_4 = """
ALTER TABLE sessions ADD COLUMN n_units INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN n_tokens INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET n_units = (SELECT count(*) FROM units u WHERE u.session = sessions.session),
                    n_tokens = (SELECT coalesce(sum(u.tokens), 0) FROM units u WHERE u.session = sessions.session);
UPDATE sessions SET next_seq = n_units;
DROP INDEX units_session_place;
UPDATE units SET seq = r.place FROM (
    SELECT uid, row_number() OVER (PARTITION BY session ORDER BY seq) - 1 AS place FROM units
) AS r WHERE r.uid = units.uid AND units.seq <> r.place;
CREATE UNIQUE INDEX units_session_place ON units (session, seq);
CREATE INDEX units_working ON units (session, seq) WHERE tier = 'working';
"""

#: After a delete, the units from place ``:first`` on move up so that places stay 0, 1, ... (in two steps: a
#: place is unique at every moment).
CLOSE_UP = (
    "UPDATE units SET seq = -1 - seq WHERE session = :session AND seq > :first",
    "UPDATE units SET seq = r.place FROM (SELECT uid, :first + row_number() OVER (ORDER BY seq DESC) - 1 AS place "
    "FROM units WHERE session = :session AND seq < 0) AS r WHERE r.uid = units.uid",
)

def _to_5(conn: sqlite3.Connection) -> None:
    """Version 4 -> 5: every session's full-text index made again from its messages. A contentless index
    deletes a row only when given the very text it indexed, and that text changed (a message's first 100,000
    characters; an assistant's refusal, now sent, is indexed with it): a delete of an older message was
    "database disk image is malformed"."""
    from ._base import searchable
    from ..tokens import message_payload

    for session, fts in conn.execute("SELECT session, fts FROM sessions").fetchall():
        conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('delete-all')")
        conn.executemany(f"INSERT INTO {fts} (rowid, body) VALUES (?, ?)", (
            (uid, searchable(message_payload(json.loads(message))))
            for uid, message in conn.execute("SELECT uid, message FROM units WHERE session = ?", (session,))))


# Version 5 -> 6: a deleted session's id counter, kept under a digest of its name (RETIRE), so that a session
# written again under that name never gives a new message an id an old one had.
_TO_6 = "CREATE TABLE IF NOT EXISTS retired (digest TEXT PRIMARY KEY, next_auto INTEGER NOT NULL);"

#: Before a session's row is deleted: its id counter kept. Parameters: digest, session.
RETIRE = ("INSERT INTO retired (digest, next_auto) SELECT ?, next_auto FROM sessions WHERE session = ? "
          "ON CONFLICT (digest) DO UPDATE SET next_auto = max(retired.next_auto, excluded.next_auto)")


def retired_next_auto(conn: sqlite3.Connection, session: str) -> int:
    """Where a new session's id counter starts: where a deleted session of that name left it, else 0."""
    from ._types import retired_digest

    row = conn.execute("SELECT next_auto FROM retired WHERE digest = ?", (retired_digest(session),)).fetchone()
    return int(row[0]) if row else 0


#: The upgrade to each version from the one before, applied in order (a new file is created at version 2
#: and brought up through them too, so one path builds both): SQL, or a function of the connection.
MIGRATIONS: dict[int, str | Callable[[sqlite3.Connection], None]] = {3: _TO_3, 4: _TO_4, 5: _to_5, 6: _TO_6}


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def read_version(conn: sqlite3.Connection, where: str) -> int | None:
    """The file's schema version (``None`` for an empty file); refuses foreign or newer files."""
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
                raise StoreError(f"{where}: invalid schema_version {row[0]!r} in table meta") from None
    if version is None:
        raise StoreError(
            f"{where}: an SQLite database but not an rdmem store (tables: {', '.join(sorted(tables)[:5])}); "
            "refusing to write to it"
        )
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{where} was written by a newer rdmem (schema version {version}); this rdmem reads schema "
            f"version {SCHEMA_VERSION} at most. Upgrade rdmem; nothing was changed"
        )
    return version


def create_or_upgrade(conn: sqlite3.Connection, where: str) -> None:
    """Create the schema in an empty file, or upgrade an older one, in one transaction (the caller's)."""
    version = read_version(conn, where)  # again, inside the write lock: another process may have won
    if version == SCHEMA_VERSION:
        return
    if version is None:
        for statement in _statements(_TABLES) + _statements(_INDEXES) + _statements(_KEYS):
            conn.execute(statement)
        conn.execute("INSERT INTO clock (n) VALUES (0)")
        conn.execute("INSERT INTO meta (key, value) VALUES ('created_by', 'rdmem')")
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '2')")
        version = 2
    elif version == 1:
        for statement in _statements(_FROM_1) + _statements(_INDEXES) + _statements(_KEYS):
            conn.execute(statement)
        version = 2
    for step in range(version + 1, SCHEMA_VERSION + 1):
        migration = MIGRATIONS[step]
        if callable(migration):
            migration(conn)
            continue
        for statement in _statements(migration):
            conn.execute(statement)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def session_range(prefix: str) -> tuple[str, tuple[str, ...]]:
    """A ``WHERE`` on the sessions table's name (``s.session``) for the names that start with ``prefix``, as a
    range of its primary key (SQLite compares text by its UTF-8 bytes, which orders it by code point), and its
    parameters; nothing for ``""``."""
    if not prefix:
        return "", ()
    after = name_after(prefix)
    return ("WHERE s.session >= ?", (prefix,)) if after is None else \
        ("WHERE s.session >= ? AND s.session < ?", (prefix, after))
