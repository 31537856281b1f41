"""A store opened before the process forks (gunicorn --preload, a Celery prefork pool, multiprocessing's "fork").

SQLite's connection must not cross a fork: the child's acknowledged writes were lost once the parent closed its
own, and the file was corrupted when another process wrote. PostgreSQL's pool did cross it: parent and child
shared its sockets, and each got the other's answers (session B's reader was given session A's messages).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest

from rdmem import MemoryManager
from rdmem.store import open_store

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")


def _in_child(work) -> dict:
    """Run ``work()`` in a forked child; what it returned (JSON) or the error it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        try:
            out = {"result": work()}
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            out = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(answer)


def test_an_sqlite_store_opened_before_a_fork_is_refused_in_the_child(tmp_path):
    path = tmp_path / "m.db"
    mem = MemoryManager(budget=10_000, policy="window", store=f"sqlite:///{path}", session="s")
    mem.add(role="user", content="before the fork", id="p0")
    child = _in_child(lambda: mem.add(role="user", content="in the child", id="c0"))
    assert "opened in process" in child["error"] and "must not cross a fork" in child["error"]
    closed = _in_child(lambda: mem.close())  # the child's close leaves the parent's connection alone
    assert closed == {"result": None}
    mem.add(role="user", content="after the fork", id="p1")
    mem.close()
    with sqlite3.connect(path) as db:
        assert [r[0] for r in db.execute("SELECT id FROM units ORDER BY seq")] == ["p0", "p1"]
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_postgresql_store_used_across_a_fork_keeps_each_process_s_answers_its_own(pg_url, session_name):
    store = open_store(pg_url)
    a = MemoryManager(budget=100_000, policy="window", store=store, session=f"{session_name}-a")
    b = MemoryManager(budget=100_000, policy="window", store=store, session=f"{session_name}-b")
    a.extend([{"role": "user", "content": f"alpha {i}"} for i in range(5)])
    b.extend([{"role": "user", "content": f"bravo {i}"} for i in range(3)])
    want_a, want_b = [f"alpha {i}" for i in range(5)], [f"bravo {i}" for i in range(3)]

    def reads(mem, want, seconds=2.0) -> list[int]:
        right = wrong = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if [m["content"] for m in mem.history()] == want:
                right += 1
            else:
                wrong += 1
        return [right, wrong]

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            out = reads(b, want_b)
        except Exception as exc:  # noqa: BLE001
            out = [0, -1, f"{type(exc).__name__}: {exc}"]
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    parent = reads(a, want_a)
    with os.fdopen(read) as pipe:
        child = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert parent[1] == 0 and child[1] == 0, (parent, child)  # every answer the reader's own session's
    assert parent[0] > 10 and child[0] > 10, (parent, child)
    b.add(role="user", content="bravo 3")  # the parent's pool still serves it
    assert [m["content"] for m in b.history()][-1] == "bravo 3"
    store.close()
    closed = _in_child(lambda: store.version(f"{session_name}-b"))  # closed before the fork: closed in the child
    assert "used after close()" in closed["error"]
