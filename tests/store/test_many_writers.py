"""One session, many writers: real processes share one session through SQLite or PostgreSQL.

Each process has its own MemoryManager and adds messages with automatic ids
while the other does the same; nothing may be lost or stored twice, no add
may fail, and each process must see what the other wrote.
"""

from __future__ import annotations

import multiprocessing
import traceback
import warnings

import pytest

from rdmem import MemoryManager
from rdmem.store import open_store
from rdmem.tokens import get_tokenizer

_fork = multiprocessing.get_context("fork")
N = 1000


@pytest.fixture(autouse=True, scope="module")
def _warm_tokenizer():
    """Load the tokenizer before forking, so each writer starts at once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        get_tokenizer("cl100k_base")


def _writer(url: str, session: str, tag: str, other: str, n: int, start, done, results) -> None:
    try:
        errors, ids = [], []
        mem = MemoryManager(budget=300, policy="window", store=url, session=session)
        start.wait()
        for i in range(n):
            try:
                ids.append(mem.add(role="user" if i % 2 else "assistant", content=f"{tag} message {i}"))
            except Exception:  # counted: the test wants none
                errors.append(traceback.format_exc(limit=3))
        done.wait()  # both writers are finished: each now reads what the other wrote last
        history = mem.history()
        contents = [m["content"] for m in mem.messages()]
        results.put({
            "tag": tag, "ids": ids, "errors": errors[:3], "n_errors": len(errors), "total": len(mem),
            "history_has_other_last": any(h["content"] == f"{other} message {n - 1}" for h in history),
            # Whoever finished last, the newest message of the session is in both writers' contexts.
            "newest_in_context": history[-1]["content"] in contents,
        })
        mem.close()
    except BaseException:
        results.put({"tag": tag, "crash": traceback.format_exc()})
    finally:
        results.close()
        results.join_thread()  # the queue's feeder thread must deliver before the process ends
        import os

        os._exit(0)  # never run the parent's (pytest's) exit handlers in the fork


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"
        open_store(url).close()  # create the file first, so both writers only open it
        return url
    return request.getfixturevalue("pg_url")


@pytest.mark.slow
def test_two_processes_adding_with_automatic_ids_lose_nothing(shared_url, session_name):
    start, done, results = _fork.Barrier(2), _fork.Barrier(2), _fork.Queue()
    procs = [
        _fork.Process(target=_writer, args=(shared_url, session_name, tag, other, N, start, done, results))
        for tag, other in (("A", "B"), ("B", "A"))
    ]
    for p in procs:
        p.start()
    got = {r["tag"]: r for r in (results.get(timeout=300) for _ in procs)}
    for p in procs:
        p.join(timeout=60)
    assert not [r["crash"] for r in got.values() if "crash" in r]
    for tag in ("A", "B"):
        r = got[tag]
        assert r["n_errors"] == 0, r["errors"]
        assert len(r["ids"]) == N
        assert r["total"] == 2 * N
        assert r["history_has_other_last"], f"{tag} does not see the other's last message"
        assert r["newest_in_context"], f"{tag}'s context misses the session's newest message"
    with open_store(shared_url) as store:
        units = store.load(session_name)
    ids = [u.id for u in units]
    assert len(ids) == len(set(ids)) == 2 * N
    assert sorted(ids) == sorted(got["A"]["ids"] + got["B"]["ids"])
    contents = [u.message["content"] for u in units]
    for tag in ("A", "B"):
        mine = [c for c in contents if c.startswith(f"{tag} ")]
        assert mine == [f"{tag} message {i}" for i in range(N)]  # each writer's messages, in its order
    # The two writers really interleaved.
    tags = [c[0] for c in contents]
    assert sum(1 for a, b in zip(tags, tags[1:]) if a != b) > 10
    # The working set is one, not two merged: it fits the budget's high watermark.
    with MemoryManager(budget=300, policy="window", store=shared_url, session=session_name) as mem:
        working = mem.working_ids()
        assert mem.tokenizer.messages_tokens([u.message for u in units if u.id in set(working)]) <= 300


def _player(url: str, session: str, me: str, rounds: int, inbox, outbox, results) -> None:
    try:
        mem = MemoryManager(budget=200, policy="window", store=url, session=session)
        missed = []
        for k in range(rounds):
            if me == "pong" or k:
                heard = inbox.get(timeout=60)
                if heard not in [m["content"] for m in mem.messages()]:  # the other's add() has returned
                    missed.append(heard)
            said = f"{me} {k}"
            mem.add(role="user", content=said)
            outbox.put(said)
        results.put({"me": me, "missed": missed, "total": len(mem)})
        mem.close()
    except BaseException:
        results.put({"me": me, "crash": traceback.format_exc()})
    finally:
        for q in (outbox, results):
            q.close()
            q.join_thread()
        import os

        os._exit(0)


@pytest.mark.slow
def test_a_message_is_in_the_other_processes_context_as_soon_as_add_returned(shared_url, session_name):
    rounds = 40
    a_to_b, b_to_a, results = _fork.Queue(), _fork.Queue(), _fork.Queue()
    procs = [
        _fork.Process(target=_player, args=(shared_url, session_name, "ping", rounds, b_to_a, a_to_b, results)),
        _fork.Process(target=_player, args=(shared_url, session_name, "pong", rounds, a_to_b, b_to_a, results)),
    ]
    for p in procs:
        p.start()
    got = {r["me"]: r for r in (results.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(timeout=60)
    assert not [r["crash"] for r in got.values() if "crash" in r]
    assert got["ping"]["missed"] == [] and got["pong"]["missed"] == []
    assert got["pong"]["total"] == 2 * rounds
