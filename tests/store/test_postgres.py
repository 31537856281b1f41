"""PostgreSQL specifics: pgvector HNSW, schema versions, unreachable servers, many writers."""

from __future__ import annotations

import threading
import time

import numpy as np
import psycopg
import pytest

from rdmem.errors import InvalidInput
from rdmem.store import NewUnit, StoreError, open_store
from rdmem.store._pg_pool import redact, redact_url
from rdmem.store.postgres import SCHEMA_VERSION, PostgresStore


def test_schema_extension_and_hnsw_index(pg_fresh_url, minilm):
    store = open_store(pg_fresh_url)
    texts = ["my cat sleeps all day", "the stock market fell"]
    vecs = minilm.embed(texts)
    store.append("s", [NewUnit({"role": "user", "content": t}, 5, {}, vecs[i], id=f"u{i}") for i, t in enumerate(texts)])
    with psycopg.connect(pg_fresh_url) as conn:
        assert conn.execute("SELECT value FROM rdmem_meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
        (indexdef,) = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (f"rdmem_units_hnsw_{vecs.shape[1]}",)
        ).fetchone()
        assert "hnsw" in indexdef and "vector_cosine_ops" in indexdef
        # The planner uses the HNSW index for the dense query once the table is not tiny.
        conn.execute("SET enable_seqscan = off")
        d = vecs.shape[1]
        plan = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN SELECT uid FROM rdmem_units WHERE session = 's' AND tier = 'working' AND dim = {d} "
            f"ORDER BY embedding::vector({d}) <=> %s::vector({d}) LIMIT 5", (str(vecs[0].tolist()),)))
        assert f"rdmem_units_hnsw_{d}" in plan
    store.close()


def test_newer_schema_version_is_refused_and_nothing_written(pg_fresh_url):
    PostgresStore(pg_fresh_url).close()
    with psycopg.connect(pg_fresh_url, autocommit=True) as conn:
        conn.execute("UPDATE rdmem_meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
        before = conn.execute("SELECT count(*) FROM pg_class").fetchone()[0]
    with pytest.raises(StoreError, match=rf"newer rdmem \(schema version {SCHEMA_VERSION + 1}\); "
                       rf"this rdmem reads schema version {SCHEMA_VERSION} at most"):
        PostgresStore(pg_fresh_url)
    with psycopg.connect(pg_fresh_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_class").fetchone()[0] == before
        assert conn.execute("SELECT value FROM rdmem_meta WHERE key = 'schema_version'").fetchone()[0] == str(
            SCHEMA_VERSION + 1)


def test_unreachable_database_names_the_host_not_the_password():
    with pytest.raises(StoreError, match=r"cannot connect to PostgreSQL at 127\.0\.0\.1:1/agents") as info:
        open_store("postgresql://rdmem:s3cr3t-pw@127.0.0.1:1/agents")
    assert "s3cr3t-pw" not in str(info.value)


def test_a_password_is_redacted_as_a_field_not_as_its_letters():
    """A password ``p`` masked every "p" of the message ("***ort 1 failed ... acce***ting"), which also told
    how short it is; only the URL's password field is masked, wherever a URL or ``password=`` appears."""
    with pytest.raises(StoreError) as info:
        open_store("postgresql://rdmem:p@127.0.0.1:1/agents")
    assert 'connection to server at "127.0.0.1", port 1 failed: Connection refused' in str(info.value)
    assert "accepting" in str(info.value) and "***" not in str(info.value)
    assert redact_url("postgresql://rdmem:p@127.0.0.1:1/agents") == "postgresql://rdmem:***@127.0.0.1:1/agents"
    assert redact("dsn postgres://u:s3cr3t@h/db and host=h password='a b' user=u") == \
        "dsn postgres://u:***@h/db and host=h password=*** user=u"


def test_unknown_host_is_a_store_error():
    with pytest.raises(StoreError, match=r"cannot connect to PostgreSQL at no-such-host\.invalid:5432/db"):
        PostgresStore("postgresql://u:pw@no-such-host.invalid/db", connect_timeout=2)


def test_many_writers_lose_nothing(pg_url, session_name):
    """Eight threads, each with its own connection, append to one session at once."""
    n_threads, per_thread = 8, 25
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(n_threads * per_thread, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    errors: list[BaseException] = []
    barrier = threading.Barrier(n_threads)

    def writer(t: int) -> None:
        store = PostgresStore(pg_url)
        try:
            barrier.wait()
            for j in range(per_thread):
                n = t * per_thread + j
                store.append(session_name, [NewUnit({"role": "user", "content": f"note {n}"}, 5, {}, vecs[n],
                                                    id=f"t{t}-{j}")])
                if j % 5 == 4:
                    store.set_tier(session_name, [f"t{t}-{j - 4}"], "archive")
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    store = PostgresStore(pg_url)
    ids = [u.id for u in store.load(session_name)]
    assert len(ids) == len(set(ids)) == n_threads * per_thread
    info = {i.session: i for i in store.sessions()}[session_name]
    assert info.archived == n_threads * (per_thread // 5)
    hits = store.search(session_name, "unmatched", vecs[7], k=3)
    assert hits[0][0] == "t0-7"
    store.delete_session(session_name)
    store.close()


def test_lexical_search_ranks_rare_words_first_on_large_sessions(pg_url, session_name):
    store = PostgresStore(pg_url, lexical_rows=50)
    unit = lambda i, t: NewUnit({"role": "user", "content": t}, 5, {}, None, "archive", id=f"u{i}")  # noqa: E731
    store.append(session_name, [unit(i, f"Caroline talked about her day number {i}") for i in range(200)])
    store.append(session_name, [unit(200, "Caroline went to the pottery workshop"), unit(201, "the pottery class was fun")])
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the statistics autovacuum would gather
        conn.execute("ANALYZE rdmem_units")
    hits = [i for i, _ in store.search(session_name, "When did Caroline go to pottery?", None, k=5, tier="archive")]
    assert set(hits) == {"u200", "u201"}
    hits = [i for i, _ in store.search(session_name, "Caroline", None, k=3, tier="archive")]
    assert hits and all(int(h[1:]) >= 150 for h in hits)
    store.delete_session(session_name)
    store.close()


def test_a_common_words_matches_are_looked_for_among_the_newest_units_only(pg_url, session_name):
    """When even the rarest query word has more than ``lexical_rows`` matches, its most recent ones are taken
    among the session's newest ``lexical_window`` units: a search reads a bounded number of rows however long
    the session is (matches older than the window are left to the vector side)."""
    unit = lambda i, t: NewUnit({"role": "user", "content": t}, 5, {}, None, "archive", id=f"u{i}")  # noqa: E731
    herons = [unit(i, f"the heron flew over the pond, sighting {i}") for i in range(100)]
    filler = [unit(100 + i, f"Caroline wrote note {i}") for i in range(300)]
    PostgresStore(pg_url).append(session_name, herons + filler)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the statistics autovacuum would gather
        conn.execute("ANALYZE rdmem_units")
    narrow = PostgresStore(pg_url, lexical_rows=20, lexical_window=150)  # units 250..399
    assert narrow.search(session_name, "heron", None, k=5, tier="archive") == []
    wide = PostgresStore(pg_url, lexical_rows=20, lexical_window=400)
    hits = [i for i, _ in wide.search(session_name, "heron", None, k=5, tier="archive")]
    assert len(hits) == 5 and all(80 <= int(h[1:]) < 100 for h in hits)  # among the 20 most recent matches
    for bad in (10, 0, 2.5, True):
        with pytest.raises(InvalidInput, match="lexical_window must be an int >= lexical_rows"):
            PostgresStore(pg_url, lexical_rows=20, lexical_window=bad)
    assert PostgresStore(pg_url, lexical_rows=20).lexical_window == 1000
    for store in (narrow, wide):
        store.close()
    wide = PostgresStore(pg_url)
    wide.delete_session(session_name)
    wide.close()


def _word_counts(conn, session: str) -> tuple[dict[str, int], dict[str, int]]:
    """The session's kept word counts, and the same counted afresh from its units."""
    kept = dict(conn.execute("SELECT word, n FROM rdmem_words WHERE session = %s", (session,)).fetchall())
    fresh = dict(conn.execute("SELECT t.lexeme, count(*) FROM rdmem_units u, unnest(u.tsv) t WHERE u.session = %s "
                              "GROUP BY 1", (session,)).fetchall())
    return kept, fresh


def test_another_sessions_words_do_not_change_what_a_search_returns(pg_url, session_name):
    """Which query words a full-text search ranks is chosen by how many of *this* session's units hold them: a
    tenant who fills its own session with a word changed another tenant's results when the choice read the
    planner's statistics of the whole table."""
    unit = lambda i, t: NewUnit({"role": "user", "content": t}, 5, {}, None, "archive", id=f"u{i}")  # noqa: E731
    mine, theirs = f"{session_name}\x1fmine", f"{session_name}\x1ftheirs"
    store = PostgresStore(pg_url, lexical_rows=100)
    store.append(mine, [unit(i, f"we planned a trip to the coast, day {i}" if i % 3 else f"the zebra slept, day {i}")
                        for i in range(60)] + [unit(60, "a zebra on our coast trip")])

    def hits() -> list[str]:
        with psycopg.connect(pg_url, autocommit=True) as conn:  # the statistics autovacuum would gather
            conn.execute("ANALYZE rdmem_units")
        fresh = PostgresStore(pg_url, lexical_rows=100)  # no cached result
        try:
            return [i for i, _ in fresh.search(mine, "zebra trip", None, k=5)]
        finally:
            fresh.close()

    before = hits()
    assert before[:2] == ["u60", "u0"]  # the zebra notes rank: the session holds few
    store.append(theirs, [unit(i, f"zebra zebra {i}") for i in range(1000)])
    assert hits() == before
    for s in (mine, theirs):
        store.delete_session(s)
    store.close()


def test_another_sessions_vectors_do_not_crowd_a_session_out_of_its_dense_hits(pg_fresh_url, monkeypatch):
    """The HNSW index holds every session's vectors, and a filtered scan stops after ``hnsw.max_scan_tuples``
    (200 here, on a database whose planner takes the index as a large table's does; 20,000 by default): another tenant's vectors near the query left a session
    with no dense hits at all. A session of up to EXACT_DENSE units is ranked exactly; a longer one's short HNSW
    answer is topped up from its newest units."""
    from psycopg.conninfo import conninfo_to_dict

    import rdmem.store._pg_search as pg_search

    name = conninfo_to_dict(pg_fresh_url)["dbname"]
    with psycopg.connect(pg_fresh_url, autocommit=True) as conn:  # what a large table's planner would choose
        conn.execute(f"ALTER DATABASE {name} SET hnsw.max_scan_tuples = 200")
        conn.execute(f"ALTER DATABASE {name} SET enable_seqscan = off")
        conn.execute(f"ALTER DATABASE {name} SET enable_sort = off")
    rng = np.random.default_rng(7)
    unit_vectors = lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    query = unit_vectors(rng.normal(size=(1, 384)))[0]
    mine = unit_vectors(rng.normal(size=(400, 384)))
    theirs = unit_vectors(query + 0.8 * rng.normal(size=(1500, 384)) / np.sqrt(384))  # all nearer than mine
    store = PostgresStore(pg_fresh_url)
    store.append("mine", [NewUnit({"role": "user", "content": f"m{i}"}, 5, {}, v, "archive", id=f"m{i}")
                          for i, v in enumerate(mine)])
    store.append("theirs", [NewUnit({"role": "user", "content": f"t{i}"}, 5, {}, v, "archive", id=f"t{i}")
                            for i, v in enumerate(theirs)])
    with psycopg.connect(pg_fresh_url, autocommit=True) as conn:
        conn.execute("ANALYZE rdmem_units")
    best = [f"m{i}" for i in np.argsort(-(mine @ query))[:50]]
    assert [i for i, _ in store.search("mine", "", query, k=50)] == best  # exact: theirs play no part
    monkeypatch.setattr(pg_search, "EXACT_DENSE", 100)  # "mine" is now a long session: HNSW, then topped up
    fresh = PostgresStore(pg_fresh_url)  # no cached result
    hits = [i for i, _ in fresh.search("mine", "", query, k=50)]
    newest = {f"m{i}" for i in range(300, 400)}
    assert len(hits) == 50 and all(h.startswith("m") for h in hits)
    assert set(best) & newest <= set(hits)  # the newest units' best are all there
    for s in (store, fresh):
        s.close()


def test_a_sessions_word_counts_follow_its_appends_and_deletes(pg_url, session_name):
    unit = lambda i, t: NewUnit({"role": "user", "content": t}, 5, {}, None, "working", id=f"u{i}")  # noqa: E731
    store = PostgresStore(pg_url)
    store.append(session_name, [unit(i, f"the heron flew over pond {i % 4}") for i in range(12)])
    store.append(session_name, [unit(12, "Herons! A heron, again."), unit(13, "")])
    store.delete(session_name, ["u0", "u5", "u13"])
    store.append(session_name, [unit(14, "ponds and herons")])
    with psycopg.connect(pg_url) as conn:
        kept, fresh = _word_counts(conn, session_name)
        assert kept == fresh and kept["heron"] == 12 and kept["pond"] == 11
        store.delete_session(session_name)
        assert _word_counts(conn, session_name) == ({}, {})
    store.close()


def test_search_fuses_both_rankings_and_close_releases_the_connection(pg_url, session_name):
    """The full-text and the HNSW ranking both reach the fusion; close() ends the store's connection."""
    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(40, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    store = PostgresStore(pg_url)
    texts = [f"filler note {i}" for i in range(40)]
    texts[3] = "the kayak trip on the lake"
    store.append(session_name, [NewUnit({"role": "user", "content": t}, 5, {}, vecs[i], "archive", id=f"u{i}")
                                for i, t in enumerate(texts)])
    hits = [i for i, _ in store.search(session_name, "kayak", vecs[17], k=2, tier="archive")]
    assert sorted(hits) == ["u17", "u3"]  # the lexical best (u3) and the dense best (u17)

    def backends() -> int:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            return conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()[0]

    before = backends()
    store.delete_session(session_name)
    store.close()
    deadline = time.monotonic() + 5  # a backend leaves pg_stat_activity a moment after its client disconnects
    while backends() > before - 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backends() <= before - 1  # the store's connection is gone
    with pytest.raises(StoreError, match="used after close"):
        store.search(session_name, "kayak", vecs[17], k=2)


def test_damaged_row_is_a_clear_error_naming_the_unit(pg_url, session_name):
    store = open_store(pg_url)
    store.append(session_name, [NewUnit({"role": "user", "content": f"text {i}"}, 5, id=f"u{i}") for i in range(2)])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE rdmem_units SET message = '{broken' WHERE session = %s AND id = 'u1'", (session_name,))
    with pytest.raises(StoreError, match=rf"PostgreSQL store at .*session '{session_name}', unit 'u1': "
                       "stored JSON does not parse .*damaged"):
        store.load(session_name)
    store.delete_session(session_name)  # a damaged unit left behind would be claimed by other tests' workers
    store.close()
