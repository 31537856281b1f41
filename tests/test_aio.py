"""``AsyncMemoryManager`` stays in step with ``MemoryManager``: every public name, with the same parameters."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from rdmem import AsyncMemoryManager, MemoryManager

from ._checks import HashingEmbedder

#: What the async face cannot have, and why.
NOT_AWAITABLE = {"__len__": "len() cannot await: await mem.stats()"}
#: Sync names and their async counterparts.
RENAMED = {"__enter__": "__aenter__", "__exit__": "__aexit__"}


def public_names() -> set[str]:
    settings = {name for name in vars(MemoryManager(budget=100, policy="window")) if not name.startswith("_")}
    methods = {name for name in dir(MemoryManager) if not name.startswith("_")}
    dunders = {name for name in vars(MemoryManager) if name.startswith("__") and name.endswith("__")
               and name not in ("__init__", "__doc__", "__module__", "__dict__", "__weakref__", "__annotations__")}
    return settings | methods | dunders


def test_every_public_name_has_its_async_counterpart():
    missing = sorted(n for n in public_names() - set(NOT_AWAITABLE)
                     if not hasattr(AsyncMemoryManager, RENAMED.get(n, n)))
    assert missing == [], f"AsyncMemoryManager lacks {missing}"


@pytest.mark.parametrize("name", sorted(n for n in public_names() if callable(getattr(MemoryManager, n, None))
                                        and n not in NOT_AWAITABLE and n not in RENAMED))
def test_each_method_is_a_coroutine_with_the_same_parameters(name):
    sync, aio = getattr(MemoryManager, name), getattr(AsyncMemoryManager, name)
    assert inspect.iscoroutinefunction(aio), f"AsyncMemoryManager.{name} is not a coroutine function"
    s, a = inspect.signature(sync), inspect.signature(aio)
    assert list(s.parameters.values()) == list(a.parameters.values()), f"{name}: {s} != {a}"
    assert s.return_annotation == a.return_annotation, f"{name} returns {s.return_annotation}, async {a.return_annotation}"


@pytest.mark.parametrize("name", sorted(n for n in public_names() if not callable(getattr(MemoryManager, n, None))))
def test_each_setting_reads_the_same(name):
    mem = MemoryManager(budget=100, policy="window", embedder=HashingEmbedder())
    assert isinstance(getattr(AsyncMemoryManager, name), property), f"AsyncMemoryManager.{name} is not a property"
    assert getattr(AsyncMemoryManager(mem), name) is getattr(mem, name)


def test_the_parity_test_sees_a_missing_method(monkeypatch):
    monkeypatch.delattr(AsyncMemoryManager, "resent")
    with pytest.raises(AssertionError, match=r"AsyncMemoryManager lacks \['resent'\]"):
        test_every_public_name_has_its_async_counterpart()


def test_the_new_methods_await_the_managers():
    async def main():
        async with AsyncMemoryManager(budget=100, policy="window") as mem:
            await mem.extend([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
            resent = await mem.resent([{"role": "user", "content": "a"}, {"role": "assistant", "content": "c"}])
            return resent, mem.tokenizer.message_tokens({"role": "user", "content": "a"})

    (new, dropped), tokens = asyncio.run(main())
    assert (new, dropped, tokens) == ([1], ["m1"], 5)


def test_reset_feedback_is_awaited(hashing_embedder):
    async def main():
        mem = AsyncMemoryManager(budget=200, policy="rd", embedder=hashing_embedder)
        ids = await mem.extend([{"role": "user", "content": f"My locker is number {i}."} for i in range(6)])
        await mem.feedback(ids[:2], 1.0, learning_rate=0.5, max_shift=2.0)
        shifted = mem.sync._learning.feedback.values()
        await mem.reset_feedback()
        return shifted, mem.sync._learning.feedback.values()

    shifted, reset = asyncio.run(main())
    assert any(v != 0 for v in shifted) and not any(reset)


def test_a_cancelled_add_still_stores_and_a_retry_with_its_id_is_refused():
    """Found by the seventh review (undocumented): wait_for's timeout cancels the wait, not the add; a retry of a
    message with an id is a DuplicateIdError, not a second copy."""
    import threading

    from rdmem.errors import DuplicateIdError
    from rdmem.store import MemoryStore

    gate, writing = threading.Event(), threading.Event()

    class SlowStore(MemoryStore):
        def append(self, *args, **kwargs):
            writing.set()
            gate.wait(10)
            return super().append(*args, **kwargs)

    async def main():
        mem = AsyncMemoryManager(budget=100, policy="window", store=SlowStore())
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(mem.add(role="user", content="pay invoice 7", id="pay-7"), 0.2)
        assert writing.is_set()
        gate.set()  # the cancelled add goes on in its thread and stores
        for _ in range(500):
            if await mem.working_ids():
                break
            await asyncio.sleep(0.01)
        with pytest.raises(DuplicateIdError):
            await mem.add(role="user", content="pay invoice 7", id="pay-7")
        return [m["content"] for m in await mem.history()]

    assert asyncio.run(main()) == ["pay invoice 7"]


def test_a_session_stuck_on_its_store_holds_up_its_own_calls_only(tmp_path):
    """Every call went to asyncio's default executor, where a manager's calls waited on its lock: twelve calls
    on a session whose SQLite file another connection had locked held every thread of the executor, so an
    unrelated ``asyncio.to_thread`` (a DNS lookup, another session) waited for the lock too. Now a manager's
    calls queue on the event loop: one thread waits for the store, the others stay free."""
    import concurrent.futures
    import sqlite3

    from rdmem.store.sqlite import SQLiteStore

    path = tmp_path / "alice.db"
    alice = AsyncMemoryManager(budget=500, policy="window", store=SQLiteStore(path, timeout=30), session="alice")

    async def main() -> list[str]:
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(2))
        await alice.add(role="user", content="warm")
        locker = sqlite3.connect(path, isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")  # another writer holds the file
        try:
            adds = [asyncio.create_task(alice.add(role="user", content=f"note {i}")) for i in range(12)]
            await asyncio.sleep(0.3)
            # an unrelated call finds a free thread (before: both were waiting for alice's file, up to 30 s)
            assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 10) == "free"
            assert not any(a.done() for a in adds)
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        await asyncio.gather(*adds)
        return [m["content"] for m in await alice.history()]

    assert asyncio.run(main()) == ["warm", *(f"note {i}" for i in range(12))]  # each once, in the order called
