"""Stores written by rdmem 0.1 (schema 1) are upgraded in place: nothing lost, places made unique, ids and
the feedback shift carried over. The version-1 files are built here with rdmem 0.1's own statements."""

from __future__ import annotations

import json
import sqlite3
import time

import psycopg
import pytest

from rdmem import MemoryManager
from rdmem.store import open_store
from rdmem.store._pg_schema import SCHEMA_VERSION as PG_SCHEMA_VERSION
from rdmem.store._sqlite_schema import SCHEMA_VERSION
from rdmem.store._sqlite_search import fts_table

V1_SQLITE = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sessions (session TEXT PRIMARY KEY, fts TEXT NOT NULL UNIQUE, created REAL NOT NULL,
    updated REAL NOT NULL, version INTEGER NOT NULL DEFAULT 1);
CREATE TABLE units (uid INTEGER PRIMARY KEY, session TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL,
    message TEXT NOT NULL, tokens INTEGER NOT NULL, features TEXT NOT NULL, embedding BLOB,
    tier TEXT NOT NULL CHECK (tier IN ('working', 'archive')), UNIQUE (session, id));
CREATE INDEX units_session_seq ON units (session, seq);
CREATE TABLE compactions (n INTEGER PRIMARY KEY, session TEXT NOT NULL, time REAL NOT NULL, record TEXT NOT NULL);
CREATE INDEX compactions_session ON compactions (session, n);
INSERT INTO meta VALUES ('schema_version', '1'), ('created_by', 'rdmem');
"""

# Two 0.1 processes writing one session could give two units one place (seq 2 here, twice).
ROWS = [("m0", 0, "working"), ("m1", 1, "archive"), ("m2", 2, "working"), ("mine", 2, "working"), ("m5", 4, "working")]
# A shift for the shipped value model (feedback saved for another model is ignored, with a warning).
FEEDBACK = [0.25] * len(MemoryManager(budget=1000, policy="rd")._learning.feedback.base.weights_)


def _v1_sqlite(path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(V1_SQLITE)
    now = time.time()
    fts = fts_table("s")
    conn.execute("INSERT INTO sessions VALUES ('s', ?, ?, ?, 7)", (fts, now, now))
    conn.execute(f"CREATE VIRTUAL TABLE {fts} USING fts5(body, content='', tokenize='porter unicode61 remove_diacritics 2')")
    for uid, (i, seq, tier) in enumerate(ROWS, 1):
        msg = {"role": "user", "content": f"note {i} about the harbour"}
        conn.execute("INSERT INTO units VALUES (?, 's', ?, ?, ?, 9, '{}', NULL, ?)", (uid, i, seq, json.dumps(msg), tier))
        conn.execute(f"INSERT INTO {fts} (rowid, body) VALUES (?, ?)", (uid, msg["content"]))
    conn.execute("INSERT INTO compactions (session, time, record) VALUES ('s', ?, ?)",
                 (now, json.dumps({"value_feedback": FEEDBACK})))
    conn.commit()
    conn.close()


def _check_upgraded(url: str) -> None:
    with open_store(url) as store:
        units = store.load("s")
        assert [u.id for u in units] == ["m0", "m1", "m2", "mine", "m5"]  # nothing lost, order kept
        assert [u.seq for u in units] == [0, 1, 2, 3, 4]  # places made unique
        assert store.version("s") > 0
        assert [h[0] for h in store.search("s", "harbour", None, k=10)]
        assert store.changes("s").size == (5, 45)  # the session's size, counted by the upgrade
        got = store.append("s", [__import__("rdmem").store.NewUnit({"role": "user", "content": "after"}, 5)])
        assert got.units[0].id == "m6" and got.units[0].seq == 5  # after the largest m<n>, at the end
        assert store.changes("s").size == (6, 50)
    with MemoryManager(budget=1000, policy="rd", store=url, session="s") as mem:
        assert mem.working_ids() == ["m0", "m2", "mine", "m5", "m6"]
        assert list(mem._learning.feedback.delta_) == FEEDBACK  # the shift 0.1 kept in the log only


def test_an_sqlite_store_of_schema_1_is_upgraded(tmp_path):
    path = tmp_path / "old.db"
    _v1_sqlite(path)
    with pytest.raises(Exception, match="has schema version 1; open it once for writing"):
        open_store(f"sqlite:///{path}", readonly=True)
    _check_upgraded(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    conn.close()


V1_POSTGRES = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    "CREATE TABLE rdmem_meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE rdmem_sessions (session text PRIMARY KEY, created double precision NOT NULL, "
    "updated double precision NOT NULL, version bigint NOT NULL DEFAULT 1)",
    "CREATE TABLE rdmem_units (uid bigserial PRIMARY KEY, session text NOT NULL, id text NOT NULL, seq bigint NOT NULL, "
    "message text NOT NULL, tokens integer NOT NULL, features text NOT NULL, dim integer, embedding vector, "
    "tier text NOT NULL CHECK (tier IN ('working', 'archive')), tsv tsvector NOT NULL, UNIQUE (session, id))",
    "CREATE INDEX rdmem_units_session_seq ON rdmem_units (session, seq)",
    "CREATE INDEX rdmem_units_tsv ON rdmem_units USING gin (tsv)",
    "CREATE TABLE rdmem_compactions (n bigserial PRIMARY KEY, session text NOT NULL, time double precision NOT NULL, "
    "record text NOT NULL)",
    "INSERT INTO rdmem_meta VALUES ('schema_version', '1')",
)


@pytest.mark.slow
def test_a_postgres_store_of_schema_1_is_upgraded(pg_fresh_url):
    with psycopg.connect(pg_fresh_url, autocommit=True) as conn:
        for statement in V1_POSTGRES:
            conn.execute(statement)
        now = time.time()
        conn.execute("INSERT INTO rdmem_sessions VALUES ('s', %s, %s, 7)", (now, now))
        for i, seq, tier in ROWS:
            text = f"note {i} about the harbour"
            conn.execute("INSERT INTO rdmem_units (session, id, seq, message, tokens, features, tier, tsv) "
                         "VALUES ('s', %s, %s, %s, 9, '{}', %s, to_tsvector('english', %s))",
                         (i, seq, json.dumps({"role": "user", "content": text}), tier, text))
        conn.execute("INSERT INTO rdmem_compactions (session, time, record) VALUES ('s', %s, %s)",
                     (now, json.dumps({"value_feedback": FEEDBACK})))
    _check_upgraded(pg_fresh_url)
    with psycopg.connect(pg_fresh_url) as conn:
        assert conn.execute("SELECT value FROM rdmem_meta WHERE key = 'schema_version'").fetchone() == (str(PG_SCHEMA_VERSION),)
        # schema 5: the session's word counts, made from its units
        words = dict(conn.execute("SELECT word, n FROM rdmem_words WHERE session = 's'").fetchall())
        assert words["harbour"] == len(ROWS) and words["note"] == len(ROWS)


def test_a_schema_4_file_gets_its_full_text_indexes_made_again(tmp_path):
    """Found by a review of the day's own diff: the index is contentless, so a delete gives it the very text it
    indexed; the indexed text changed in schema 5 (a message's first 100,000 characters, an assistant's refusal
    with it), and deleting a message an older rdmem indexed was "database disk image is malformed"."""
    from rdmem.store import NewUnit

    path = tmp_path / "m.db"
    url = f"sqlite:///{path}"
    refusal = {"role": "assistant", "content": None, "refusal": "I cannot share the vault code."}
    long = {"role": "user", "content": "alpha " * 20_000 + "zebraword at the very end"}
    with open_store(url) as store:
        store.append("s", [NewUnit(refusal, 9, id="r"), NewUnit(long, 9, id="l"),
                           NewUnit({"role": "user", "content": "keep me"}, 3, id="k")])
    conn = sqlite3.connect(path)  # as schema 4 wrote it: the refusal not indexed, the long text whole
    fts = fts_table("s")
    conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('delete-all')")
    for uid, message in conn.execute("SELECT uid, message FROM units").fetchall():
        m = json.loads(message)
        conn.execute(f"INSERT INTO {fts} (rowid, body) VALUES (?, ?)", (uid, m["content"] or ""))
    conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with open_store(url) as store:
        assert store.search("s", "zebraword", None, k=3) == []  # past the indexed part now
        store.delete("s", ["r", "l"])  # was "database disk image is malformed"
        assert [u.id for u in store.load("s")] == ["k"] and store.search("s", "keep", None, k=3)[0][0] == "k"
        assert store.search("s", "alpha", None, k=3) == [] and store.search("s", "vault", None, k=3) == []
    assert sqlite3.connect(path).execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
