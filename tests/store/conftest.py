"""Store fixtures: stores of every kind (the PostgreSQL server is started once per run: tests/conftest.py)."""

from __future__ import annotations

import uuid

import pytest

from rdmem.store import MemoryStore, open_store


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
