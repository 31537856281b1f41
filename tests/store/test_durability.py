"""Crash safety and concurrency of the SQLite store, with real processes and SIGKILL."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import time
import warnings
from pathlib import Path

import pytest

from rdmem.store.sqlite import SQLiteStore
from rdmem.tokens import get_tokenizer

from ._writer import run, text_for

_fork = multiprocessing.get_context("fork")


@pytest.fixture(autouse=True, scope="module")
def _warm_tokenizer():
    """Load the tokenizer before forking, so each writer starts at once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        get_tokenizer("cl100k_base")


class Writer:
    """A forked writer process and the pipe it acknowledges on."""

    def __init__(self, db: Path, session: str, prefix: str, n: int, start_file: Path | None = None) -> None:
        r, w = os.pipe()
        self.proc = _fork.Process(target=_child, args=(str(db), session, prefix, n, w, start_file and str(start_file)))
        self.proc.start()
        os.close(w)
        self.out = os.fdopen(r, "r")

    def wait_ready(self) -> None:
        assert self.out.readline().strip() == "ready"

    def acknowledged(self) -> list[str]:
        """Ids acknowledged before the process ended (reads to the end of the pipe)."""
        ids = [line.strip() for line in self.out if line.strip()]
        self.out.close()
        self.proc.join()
        return ids


def _child(db, session, prefix, n, fd, start_file) -> None:
    try:
        run(db, session, prefix, n, fd, start_file)
    finally:
        os._exit(0)  # never run the parent's (pytest's) exit handlers in the fork


def check_store(db: Path, session: str, acknowledged: list[str]) -> list[str]:
    with SQLiteStore(db) as store:
        assert store.check() == []  # PRAGMA integrity_check, FTS rows == units, sessions rows
        units = store.load(session)
    ids = [u.id for u in units]
    assert len(ids) == len(set(ids)), "a message was stored twice"
    missing = set(acknowledged) - set(ids)
    assert not missing, f"acknowledged but lost: {sorted(missing)[:5]}"
    for u in units:
        assert u.message["content"] == text_for(u.id)
    return ids


def test_sigkill_at_random_moments_loses_no_acknowledged_message(tmp_path):
    db, session = tmp_path / "crash.db", "crashy"
    rng = random.Random(4)
    acknowledged: list[str] = []
    for _ in range(22):
        writer = Writer(db, session, "w", 100_000)
        writer.wait_ready()
        time.sleep(rng.uniform(0.0, 0.2))  # somewhere in an add(), a commit or a compaction
        os.kill(writer.proc.pid, signal.SIGKILL)
        acknowledged += writer.acknowledged()
        assert writer.proc.exitcode == -signal.SIGKILL
    assert len(acknowledged) > 22
    ids = check_store(db, session, acknowledged)
    # Reopening through the manager works and continues the session where it stopped.
    from rdmem import MemoryManager

    with MemoryManager(budget=300, policy="window", store=f"sqlite:///{db}", session=session) as mem:
        assert len(mem) == len(ids)
        assert mem.context().tokens <= 300


def test_two_processes_writing_one_session_lose_nothing(tmp_path):
    db, session, n = tmp_path / "shared.db", "together", 150
    SQLiteStore(db).close()  # create the file first, so both writers only open it
    go = tmp_path / "go"
    writers = [Writer(db, session, prefix, n, go) for prefix in ("a", "b")]
    for w in writers:
        w.wait_ready()
    go.touch()
    acknowledged = [i for w in writers for i in w.acknowledged()]
    assert [w.proc.exitcode for w in writers] == [0, 0]
    assert len(acknowledged) == 2 * n
    ids = check_store(db, session, acknowledged)
    assert sorted(ids) == sorted(acknowledged)
    # The writes really interleaved (both processes were writing at the same time), in commit order.
    with sqlite3.connect(db) as conn:
        order = [r[0] for r in conn.execute("SELECT id FROM units ORDER BY uid")]
    first_b = min(i for i, x in enumerate(order) if x.startswith("b"))
    assert any(x.startswith("a") for x in order[first_b:])
