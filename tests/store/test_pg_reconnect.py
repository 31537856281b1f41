"""The PostgreSQL store outlives its connections: backends terminated, the server restarted, a read cut off."""

from __future__ import annotations

import threading
import time

import pytest

from rdmem.errors import StoreError, WriteOutcomeUnknown
from rdmem.store import NewUnit
from rdmem.store._pg_pool import Connections
from rdmem.store.postgres import PostgresStore

from .._pg import OwnPostgres

pytestmark = pytest.mark.slow  # starts its own PostgreSQL server


@pytest.fixture(scope="module")
def own_pg(tmp_path_factory):
    pg = OwnPostgres(tmp_path_factory.mktemp("own-pg"))
    yield pg
    pg.close()


@pytest.fixture
def running(own_pg):
    """The test's server, running when the test starts and when it ends."""
    if not own_pg.running:
        own_pg.start()
    yield own_pg
    if not own_pg.running:
        own_pg.start()


def _unit(i: int) -> NewUnit:
    return NewUnit({"role": "user", "content": f"note {i}"}, 3, id=f"u{i}")


def _busy(store: PostgresStore, session: str, n: int) -> None:
    """Calls from ``n`` threads at once, so the pool holds several connections."""
    barrier = threading.Barrier(n)

    def call() -> None:
        barrier.wait()
        for _ in range(5):
            store.load(session)

    threads = [threading.Thread(target=call) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_terminated_backends_are_replaced_and_no_call_fails(running, session_name):
    store = PostgresStore(running.url, pool_size=4)
    version = store.append(session_name, [_unit(0)]).version
    _busy(store, session_name, 4)
    assert running.terminate_backends() >= 2  # every connection the pool holds is dead now
    # reads and writes go on at once, on fresh connections: none was sent on a dead one
    assert store.version(session_name) == version
    store.append(session_name, [_unit(1)])
    assert [u.id for u in store.load(session_name)] == ["u0", "u1"]
    running.terminate_backends()
    store.append(session_name, [_unit(2)])
    assert [u.id for u in store.load(session_name)] == ["u0", "u1", "u2"]
    store.close()


def test_a_restarted_database_is_served_again_as_soon_as_it_is_back(running, session_name):
    store = PostgresStore(running.url, timeout=1.0)
    patient = PostgresStore(running.url, timeout=20.0)
    store.append(session_name, [_unit(0)])
    running.stop()
    with pytest.raises(StoreError, match=r"PostgreSQL store at 127\.0\.0\.1:\d+/postgres, session '.*': "
                       r"no connection to the database within 1 s \(it is unreachable"):
        store.append(session_name, [_unit(1)])
    with pytest.raises(StoreError, match="no connection to the database within 1 s"):
        store.load(session_name)
    # a call that waits through the outage is served once the database is back
    waited: dict[str, float] = {}

    def wait_for_it() -> None:
        patient.append(session_name, [_unit(1)])
        waited["done"] = time.monotonic()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    time.sleep(3)  # the pool's attempts fail meanwhile, and are given up
    running.start()
    back = time.monotonic()
    store.append(session_name, [_unit(2)])  # so is the first call after the restart
    served = time.monotonic() - back
    waiter.join(timeout=30)
    assert sorted(u.id for u in store.load(session_name)) == ["u0", "u1", "u2"]  # u1 and u2 in either order
    store.close()
    patient.close()
    assert served < 5, f"the first write after the restart took {served:.1f} s"
    assert waited["done"] - back < 5, f"the waiting write was served {waited['done'] - back:.1f} s after the return"


def test_a_read_cut_off_is_read_again_and_a_write_is_not_repeated(running):
    """A connection that dies during a call: a read runs again on a fresh one; a write fails (it may have
    committed or not), and says so."""
    conns = Connections(running.url, where="PostgreSQL store at test", size=2, timeout=5.0, connect_timeout=5.0,
                        configure=lambda conn: None)
    calls: list[int] = []

    def slow_read(conn) -> int:
        calls.append(conn.info.backend_pid)
        if len(calls) == 1:
            conn.execute("SELECT pg_sleep(3)")
        return int(conn.execute("SELECT 41 + 1").fetchone()[0])

    cutter = threading.Timer(0.5, running.terminate_backends)
    cutter.start()
    assert conns.run(slow_read, read=True) == 42
    # read again on another connection (twice at most: the next one may have been ended too)
    assert len(calls) in (2, 3) and calls[-1] != calls[0]

    calls.clear()
    cutter = threading.Timer(0.5, running.terminate_backends)
    cutter.start()
    with pytest.raises(WriteOutcomeUnknown, match=r"PostgreSQL store at test, session 'w': the connection was lost "
                       r"during a write, which may or may not have been stored: terminating connection due to "
                       "administrator command"):
        conns.run(slow_read, "w")
    assert len(calls) == 1
    conns.close()
    with pytest.raises(StoreError, match="PostgreSQL store at test: used after close"):
        conns.run(slow_read)


def test_a_connection_whose_server_stopped_answering_is_cut_not_waited_on(running):
    """Backends frozen without closing their sockets (SIGSTOP: a paused server, a network black hole's twin): the
    call that took an idle connection from the pool waited for as long as the freeze lasted, and so did the
    pool's check of its other idle connections. Each check now gets ``timeout`` seconds, then its connection is
    cut, and the call goes on with a new one."""
    import os
    import signal

    conns = Connections(running.url, where="PostgreSQL store at test", size=3, timeout=2.0, connect_timeout=5.0,
                        configure=lambda conn: None)
    barrier, held = threading.Barrier(3), set()

    def hold(conn) -> None:  # three calls at once: the pool holds three idle connections after them
        barrier.wait()
        held.add(conn.info.backend_pid)
        time.sleep(0.3)

    holders = [threading.Thread(target=conns.run, args=(hold,), kwargs={"read": True}) for _ in range(3)]
    for t in holders:
        t.start()
    for t in holders:
        t.join()
    assert len(held) == 3
    for pid in held:
        os.kill(pid, signal.SIGSTOP)
    result: dict[str, object] = {}

    def call() -> None:
        started = time.monotonic()
        try:
            result["pid"] = conns.run(lambda conn: conn.info.backend_pid, read=True)
        except StoreError as exc:  # pragma: no cover - what the test reports if it happens
            result["error"] = exc
        result["seconds"] = time.monotonic() - started

    caller = threading.Thread(target=call, daemon=True)
    try:
        caller.start()
        caller.join(20)
    finally:
        for pid in held:
            os.kill(pid, signal.SIGCONT)
    caller.join(30)
    conns.close()
    assert "seconds" in result, "the call waited on the frozen connections"
    assert result.get("pid") is not None and result["pid"] not in held, result
    assert 1.5 < float(result["seconds"]) < 12, result  # the checks' 2 s each, then a new connection


def _server_pids(pg: OwnPostgres) -> list[int]:
    """The postmaster's pid and its children's (every process of the server)."""
    import subprocess

    postmaster = int((pg.server.pgdata / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
    return [postmaster, *map(int, children)]


def test_a_frozen_server_ends_a_call_in_twice_its_timeout_however_many_connections_are_idle(running):
    """The whole server frozen (SIGSTOP of every process: a paused machine), the pool holding six idle
    connections: the call's first check was cut after ``timeout``, then the pool's check of the others took
    ``timeout`` each in the call's thread (seven checks: 7 s here, 40 s with the service's 5 s and ten
    connections). Now the others are checked in a thread of their own and the call ends at the next connection
    that does not answer or cannot be made: twice ``timeout`` at most."""
    import os
    import signal

    timeout = 1.0
    conns = Connections(running.url, where="PostgreSQL store at test", size=6, timeout=timeout, connect_timeout=1.0,
                        configure=lambda conn: None)
    barrier = threading.Barrier(6)

    def hold(conn) -> None:
        barrier.wait()
        time.sleep(0.2)

    holders = [threading.Thread(target=conns.run, args=(hold,), kwargs={"read": True}) for _ in range(6)]
    for t in holders:
        t.start()
    for t in holders:
        t.join()
    pids = _server_pids(running)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="did not answer within 1 s|no connection to the database within 1 s"):
            conns.run(lambda conn: conn.execute("SELECT 1"), read=True)
        took = time.monotonic() - started
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert took < 2 * timeout + 1.5, took  # seven checks in turn took 7 s
    assert conns.run(lambda conn: conn.execute("SELECT 1").fetchone()[0], read=True) == 1  # thawed: served again
    conns.close()


def test_a_claim_whose_answer_was_lost_is_taken_again_at_the_next_claim_not_after_its_lease(running, session_name):
    """The connection died after the embedding worker's claim committed (its answer lost: WriteOutcomeUnknown):
    the units it took stayed claimed by it for the lease (120 s in the service) and went unembedded, unsearchable
    by meaning, that long (123 s in the review's run). Its next claim takes them again."""
    from rdmem._embedding import EmbeddingWorker
    from rdmem.testing import HashingEmbedder

    store = PostgresStore(running.url, pool_size=2)
    store.append(session_name, [_unit(i) for i in range(3)])
    worker = EmbeddingWorker(store, HashingEmbedder(), lease=120.0)
    real = store._run
    calls = iter(range(10**6))

    def answer_lost(fn, *args, **kwargs):  # the first claim commits, then its answer is lost
        result = real(fn, *args, **kwargs)
        if next(calls) == 0:
            raise WriteOutcomeUnknown("the connection was lost during a write, which may or may not have been stored")
        return result

    store._run = answer_lost
    with pytest.raises(WriteOutcomeUnknown):
        worker.run_once()
    worker.drain()  # taken again at once, not after 120 s (the database may hold other tests' units too)
    assert [u.embedding is not None for u in store.load(session_name)] == [True] * 3
    store.close()
