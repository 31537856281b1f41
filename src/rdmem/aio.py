"""``MemoryManager`` for asyncio code: the same session and store, every call awaited.

Framework hooks are coroutines, and a manager's calls block: on the store, on
the embedding model, on a compaction. :class:`AsyncMemoryManager` runs each
call of a :class:`~rdmem.MemoryManager` in a worker thread
(``asyncio.to_thread``), so the event loop keeps serving other tasks
meanwhile. It is safe for any number of coroutines to share one: a manager
serialises its own calls (each runs under its lock, on the session as the
store has it at that moment), and several managers of one session, in this
process or others, meet in the store, which orders their writes.

A manager's calls wait their turn on the event loop, not in threads: however
many coroutines call one manager at once, at most one thread of asyncio's
default executor (shared with the whole process: DNS lookups, other sessions,
other libraries) works or waits for it, so a session stuck on its store (a
locked SQLite file, a PostgreSQL restart) holds up that session's calls only.

A cancelled call (``asyncio.wait_for``'s timeout, a task cancelled) stops
waiting, but its thread cannot be stopped: the call still runs to its end (the
manager's next call begins after it), and an ``add`` still stores its message. To retry a write safely, give the
message an ``id``: the retry of a message already stored is then a
:class:`~rdmem.errors.DuplicateIdError` instead of a second copy.

>>> import asyncio
>>> async def main():
...     mem = AsyncMemoryManager(budget=100, policy="window")
...     await asyncio.gather(*(mem.add(role="user", content=f"note {i}") for i in range(3)))
...     return sorted(await mem.working_ids())
>>> asyncio.run(main())
['m0', 'm1', 'm2']
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from .errors import InvalidType
from .contract import Policy
from .manager import MemoryManager
from .reconstruct import Markers
from .result import Compaction
from .store import Store
from .summarize import Summarizer
from .tokens import Tokenizer

__all__ = ["AsyncMemoryManager"]

T = TypeVar("T")


class OneAtATime:
    """Run blocking calls in asyncio's default executor one after another, queued on the event loop: at most one
    thread works or waits for them at a time, and a cancelled caller's call (which goes on in its thread) ends
    before the next begins. One queue per event loop (a lock is bound to its loop). A call must not wait, from
    its thread, for another call of the same queue through the loop (``run_coroutine_threadsafe``): that call
    waits for this one to end."""

    def __init__(self) -> None:
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        await lock.acquire()
        try:  # as asyncio.to_thread: the caller's context variables go with the call
            done = loop.run_in_executor(None, functools.partial(contextvars.copy_context().run, fn, *args, **kwargs))
        except BaseException:
            lock.release()
            raise
        def ended(call: asyncio.Future[T]) -> None:
            lock.release()
            if not call.cancelled():
                call.exception()  # retrieved: a cancelled caller no longer awaits it (its error is not logged twice)

        done.add_done_callback(ended)
        return await asyncio.shield(done)


class AsyncMemoryManager:
    """The awaitable face of a :class:`~rdmem.MemoryManager` (built from the same keywords, or wrapping one).

    >>> AsyncMemoryManager(MemoryManager(budget=100)).sync.budget
    100
    """

    def __init__(self, manager: MemoryManager | None = None, /, **settings: Any) -> None:
        if manager is not None and settings:
            raise InvalidType("give a MemoryManager or its settings (budget=..., store=...), not both")
        if manager is not None and not isinstance(manager, MemoryManager):
            raise InvalidType(f"expected a MemoryManager, got {type(manager).__name__}")
        self.sync = manager if manager is not None else MemoryManager(**settings)
        self._queue = OneAtATime()  # the manager's calls, one thread at a time

    # The manager's settings, read as its attributes (``tests/test_aio.py`` keeps the two faces in step).
    @property
    def session(self) -> str:
        return self.sync.session

    @property
    def budget(self) -> int:
        return self.sync.budget

    @property
    def policy(self) -> Policy:
        return self.sync.policy

    @property
    def high(self) -> float:
        return self.sync.high

    @property
    def low(self) -> float:
        return self.sync.low

    @property
    def markers(self) -> Markers:
        return self.sync.markers

    @property
    def archive_candidates(self) -> int:
        return self.sync.archive_candidates

    @property
    def summarizer(self) -> Summarizer | None:
        return self.sync.summarizer

    @property
    def embedding(self) -> str:
        return self.sync.embedding

    @property
    def store(self) -> Store:
        """The session's store (the first read opens it, as with ``MemoryManager``)."""
        return self.sync.store

    @property
    def tokenizer(self) -> Tokenizer:
        """The session's tokenizer (the first read opens the session's store, as with ``MemoryManager``)."""
        return self.sync.tokenizer

    async def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a thread, in its turn among this manager's calls: for a step that uses
        :attr:`sync` several times and must not be split by another call (an adapter's read-then-write)."""
        return await self._queue(fn, *args, **kwargs)

    async def add(self, message: Mapping[str, Any] | None = None, /, **fields: Any) -> str:
        return await self._queue(self.sync.add, message, **fields)

    async def extend(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        return await self._queue(self.sync.extend, messages)

    async def delete(self, ids: Sequence[str]) -> list[str]:
        return await self._queue(self.sync.delete, ids)

    async def context(self, query: str | None = None, *, budget: int | None = None, warn: bool = True) -> Compaction:
        return await self._queue(self.sync.context, query, budget=budget, warn=warn)

    async def messages(self, query: str | None = None) -> list[dict[str, Any]]:
        return await self._queue(self.sync.messages, query)

    async def search(self, query: str, *, k: int = 10, tier: str | None = None) -> list[dict[str, Any]]:
        return await self._queue(self.sync.search, query, k=k, tier=tier)

    async def history(self, *, offset: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
        return await self._queue(self.sync.history, offset=offset, limit=limit)

    async def originals(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return await self._queue(self.sync.originals, ids)

    async def unseen(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        return await self._queue(self.sync.unseen, messages)

    async def resent(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[str]]:
        return await self._queue(self.sync.resent, messages)

    async def maintain(self) -> None:
        return await self._queue(self.sync.maintain)

    async def working_ids(self) -> list[str]:
        return await self._queue(self.sync.working_ids)

    async def archived_ids(self) -> list[str]:
        return await self._queue(self.sync.archived_ids)

    async def stats(self) -> dict[str, Any]:
        return await self._queue(self.sync.stats)

    async def feedback(self, ids: Sequence[str], reward: float, *, learning_rate: float = 0.5,
                       max_shift: float = 2.0) -> None:
        await self._queue(self.sync.feedback, ids, reward, learning_rate=learning_rate, max_shift=max_shift)

    async def reset_feedback(self) -> None:
        await self._queue(self.sync.reset_feedback)

    async def clear(self) -> None:
        await self._queue(self.sync.clear)

    async def close(self) -> None:
        await self._queue(self.sync.close)

    async def __aenter__(self) -> AsyncMemoryManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
