"""The PostgreSQL store's connections: a pool that replaces broken ones, and what an error tells the caller.

A server restarted, a backend terminated (``pg_terminate_backend``), a
network cut: the connections a pool holds die without it knowing. Every
call takes a connection from the pool and checks it with an empty query
first; a dead one is dropped (so are the pool's other idle ones, checked at
once), and the call goes on with a live one: nothing was sent on the dead
one, so a write is as safe to retry there as a read. A connection that dies
*during* a call fails a write (it may have committed, or not: the caller
gets a :class:`StoreError` and decides), and repeats a read (twice at most:
a server that ends every connection ends them one by one, so the next one
may be the next to go). A database that stops answering without closing its connections (a frozen server, a
paused machine, a network black hole) is found the same way: the empty query gets ``timeout`` seconds, then its
connection is cut (its socket shut down); the pool's other idle connections, each as slow to answer then, are
checked in a thread of their own, and the call goes on with a new one or ends at the next that does not answer or
cannot be made (twice ``timeout`` at most). The connection's TCP keepalives and
``tcp_user_timeout`` end one whose packets go unanswered while it is used. While the database is away, a call waits
at most ``timeout`` seconds for a connection,
asking the pool again every quarter of a second: each ask starts a
connection attempt if none is under way (the pool gives a failing attempt
up after half a second), so a connection is tried about twice a second and
the calls waiting when the database comes back are served at once.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from ..errors import InvalidInput, MissingDependency, StoreError, WriteOutcomeUnknown

__all__ = ["Connections", "check_url", "import_psycopg", "one_line", "redact", "redact_url"]

log = logging.getLogger("rdmem.store")
_T = TypeVar("_T")

#: How long the pool keeps retrying a connection it lost before it gives up and lets the next call try again.
_RECONNECT_SECONDS = 0.5
#: A call waiting for a connection asks the pool again this often (each ask may start a new attempt).
_ASK_SECONDS = 0.25
#: Dead connections a call skips before it gives up (each is dropped; the pool's other idle ones are checked too).
_DEAD_SKIPPED = 3
#: How often a read whose connection died under it is run again.
_READ_REPEATS = 2
_PASSWORD_KEYWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_URL = re.compile(r"\b(postgres(?:ql)?://)([^\s:/@]*):([^\s@]*)@")


def import_psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool  # noqa: F401 - the same extra brings both
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependency("the PostgreSQL store needs psycopg 3 and psycopg-pool: "
                                "pip install 'rdmem[postgres]'") from exc
    return psycopg


def check_url(url: str) -> None:
    """Refuse a ``postgresql://`` URL whose user name or password holds a ``/``, ``?``, ``#`` or ``@`` that is not
    percent-encoded: it cannot be read as meant (libpq took part of the password for the host, and every error
    then printed it), so it is refused without being shown.

    >>> check_url("postgresql://bob:s3c%2Fret@db/x")
    >>> check_url("postgresql://bob:s3c/ret@db/x")
    Traceback (most recent call last):
    ...
    rdmem.errors.InvalidInput: the PostgreSQL URL's user name or password holds '/', '?', '#' or '@' unencoded: \
percent-encode them (%2F, %3F, %23, %40); the URL (not shown) was not used
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("postgres", "postgresql"):
        return
    end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    tail, _, fragment = rest[end:].partition("#")
    path, _, query = tail.partition("?")
    # an '@' in the path or the fragment, or in a query parameter before its '=' ("?ss@db/x": "pa?ss"), is the rest
    # of a user name or password; one in a parameter's value (?user=admin@srv) is the value's
    if rest.count("@", 0, end) > 1 or "@" in path or "@" in fragment or any(
            "@" in part.partition("=")[0] for part in query.split("&")):
        raise InvalidInput("the PostgreSQL URL's user name or password holds '/', '?', '#' or '@' unencoded: "
                           "percent-encode them (%2F, %3F, %23, %40); the URL (not shown) was not used")


def redact_url(url: str) -> str:
    """``url`` with its password field masked (``postgresql://bob:***@host/db``); other text as it was.

    >>> redact_url("postgresql://bob:p@db:5432/agents?sslmode=require")
    'postgresql://bob:***@db:5432/agents?sslmode=require'
    >>> redact_url("sqlite:///memory.db")
    'sqlite:///memory.db'
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if parts.password is None:
        return redact(url)
    host = parts.netloc.rpartition("@")[2]
    user = parts.netloc.rpartition("@")[0].partition(":")[0]
    return redact(urlunsplit(parts._replace(netloc=f"{user}:***@{host}")))


def redact(text: str) -> str:
    """``text`` with every password *field* masked: a URL's ``user:password@`` and a ``password=`` keyword.

    The password's characters elsewhere are left alone: masking them
    everywhere would mangle the message (a password ``p`` turned "port"
    into "***ort") and show how short the password is.

    >>> redact('connection to "postgresql://bob:p@db/x" failed: port 5432, password=p sslmode=disable')
    'connection to "postgresql://bob:***@db/x" failed: port 5432, password=*** sslmode=disable'
    """
    text = _URL.sub(lambda m: f"{m.group(1)}{m.group(2)}:***@", str(text))
    return _PASSWORD_KEYWORD.sub(lambda m: f"{m.group(1)}***", text)


def one_line(text: str) -> str:
    return redact(" ".join(str(text).split()))


class Connections:
    """A pool of autocommit connections to one database, each set up by ``configure`` when it is opened."""

    def __init__(self, url: str, *, where: str, size: int, timeout: float, connect_timeout: float,
                 configure: Callable[[Any], None]) -> None:
        import_psycopg()

        self.where = where
        self.timeout = timeout
        self._checking, self._checking_lock = False, threading.Lock()
        self._new_pool = lambda: _pool_class()(
            url, min_size=1, max_size=size, open=False, name="rdmem", timeout=timeout, check_timeout=timeout,
            kwargs={"autocommit": True, "connect_timeout": max(int(connect_timeout), 1), **_tcp_settings(url, timeout)},
            configure=configure, reconnect_timeout=_RECONNECT_SECONDS,
        )
        self._open_pool()

    def _open_pool(self) -> None:
        pool = self._new_pool()
        pool.open(wait=False)
        self._pool, self._pid, self._closed = pool, os.getpid(), False

    def _forked(self) -> None:
        """A pool of this process's own, once (the parent's is set aside, unclosed); none for a closed one."""
        with _FORKS:
            if self._pid == os.getpid():
                return
            if self._closed:
                raise StoreError(f"{self.where}: used after close()")
            _INHERITED.append(self._pool)
            self._open_pool()

    def run(self, fn: Callable[[Any], _T], session: str | None = None, *, read: bool = False) -> _T:
        """``fn(conn)`` on a live connection; database errors become :class:`StoreError` (a value the
        database refuses: :class:`InvalidInput`). ``read``: ``fn`` only reads, and is run again (twice at most)
        if its connection dies under it."""
        psycopg = import_psycopg()
        from psycopg_pool import PoolClosed, PoolTimeout

        where = self.where + (f", session {session!r}" if session else "")
        if self._pid != os.getpid():  # a forked child: its parent's connections are the parent's (one socket used
            self._forked()  # by two processes mixes their answers), and their threads stayed there
        dead = repeated = 0
        unanswered = False
        while True:
            conn, live = None, False
            try:
                with self._lease() as conn:
                    checked(conn, self.timeout)  # it answers: nothing of fn's was sent on a dead one
                    live = True
                    return fn(conn)
            except PoolTimeout:
                raise StoreError(f"{where}: no connection to the database within {self.timeout:g} s "
                                 "(it is unreachable, or every connection is busy)") from None
            except PoolClosed:
                raise StoreError(f"{self.where}: used after close()") from None
            except psycopg.DataError as exc:
                raise InvalidInput(f"{where}: the database refused a value: {one_line(exc)}") from None
            except psycopg.Error as exc:
                lost = conn is not None and (conn.closed or conn.broken)
                if lost and not live and getattr(exc, "rdmem_unanswered", False):
                    # Checked in turn here, the pool's other idle connections would hold the call ``timeout``
                    # seconds each if the server stopped answering (40 s with eight): they are checked in a thread
                    # of their own, and the call goes on with a new connection (backends frozen, the server not),
                    # or ends at the next that does not answer or cannot be made.
                    if unanswered:
                        raise StoreError(f"{where}: the database did not answer within {self.timeout:g} s") from None
                    unanswered = True
                    self._check_later()
                    continue
                if lost and not live and dead < _DEAD_SKIPPED:
                    dead += 1
                    if dead == 1:
                        self._pool.check()  # the other idle connections died with it, most likely (each checked
                        # as above, under the watchdog)
                    continue
                if lost and live and read and repeated < _READ_REPEATS:
                    repeated += 1
                    log.info("%s: the connection was lost during a read; reading again", where)
                    continue
                if lost and live and not read:  # sent, then lost: its commit may have landed
                    raise WriteOutcomeUnknown(f"{where}: the connection was lost during a write, which may or may "
                                              f"not have been stored: {one_line(exc)}") from None
                raise StoreError(f"{where}: {one_line(exc)}") from None

    def _check_later(self) -> None:
        """The pool's idle connections checked (each as a call checks its own) in a thread, one at a time; back
        once they are out of the pool (a call's next connection is then a new one)."""
        with self._checking_lock:
            if self._checking:
                return
            self._checking = True

        def check(pool: Any) -> None:
            try:
                pool.check()
            except Exception as exc:  # noqa: BLE001 - a closed pool, say: the next call finds out again
                log.debug("%s: the pool's check failed: %s", self.where, one_line(str(exc)))
            finally:
                self._checking = False

        threading.Thread(target=check, args=(self._pool,), name="rdmem-pg-check", daemon=True).start()
        deadline = time.monotonic() + _ASK_SECONDS  # until the check took them out of the pool
        while self._pool.get_stats().get("pool_available", 0) and time.monotonic() < deadline:
            time.sleep(0.005)

    @contextmanager
    def _lease(self) -> Iterator[Any]:
        """A connection of the pool for one call (as ``pool.connection()``, waiting in short slices: a pool
        whose reconnection attempt gave up starts another only when asked)."""
        from psycopg_pool import PoolTimeout

        deadline, pool = time.monotonic() + self.timeout, self._pool  # the connection goes back where it came from
        while True:
            left = deadline - time.monotonic()
            try:
                conn = pool.getconn(timeout=max(min(_ASK_SECONDS, left), 0.001))
                break
            except PoolTimeout:
                if left <= _ASK_SECONDS:
                    raise
        try:
            with conn:  # a pooled connection is not closed here: committed or rolled back, then returned
                yield conn
        finally:
            pool.putconn(conn)

    def close(self) -> None:
        self._closed = True
        if self._pid == os.getpid():  # a child leaves its parent's pool to the parent
            self._pool.close()


#: Pools a forked child inherited: kept, never closed there (closing a connection ends its server session, the
#: parent's).
_INHERITED: list[Any] = []
_FORKS = threading.Lock()  # one new pool per store in a child, however many of its threads call at once


def checked(conn: Any, seconds: float) -> None:
    """``conn`` answers an empty query within ``seconds``, else it is cut (its socket shut down: a server that
    stopped answering without closing it) and closed; raises psycopg's ``OperationalError`` then."""
    psycopg = import_psycopg()
    ping = _WATCHDOG.watch(conn, seconds)
    try:
        conn.execute("")
    except BaseException as exc:
        if not _WATCHDOG.done(ping) and isinstance(exc, psycopg.Error):  # cut: a frozen server, most likely (not
            exc.rdmem_unanswered = True  # one that closed its connections)
        raise
    if not _WATCHDOG.done(ping):  # cut as it answered: not to be used
        conn.close()
        error = psycopg.OperationalError(f"the connection did not answer within {seconds:g} s: cut")
        error.rdmem_unanswered = True
        raise error


@functools.cache
def _pool_class() -> Any:
    """psycopg_pool's ``ConnectionPool`` whose ``check()`` checks each idle connection as a call does
    (:func:`checked`, within ``check_timeout`` seconds: under the watchdog, so that a frozen server does not
    hold it)."""
    from psycopg_pool import ConnectionPool

    class Pool(ConnectionPool):  # type: ignore[misc]
        def __init__(self, *args: Any, check_timeout: float, **kwargs: Any) -> None:
            self.check_timeout = check_timeout
            super().__init__(*args, **kwargs)

        def check_connection(self, conn: Any) -> None:  # type: ignore[override]
            checked(conn, self.check_timeout)

    return Pool


def _tcp_settings(url: str, timeout: float) -> dict[str, Any]:
    """libpq's TCP keepalives and ``tcp_user_timeout`` (ms), so that a connection whose packets go unanswered
    (a paused machine, a network black hole) fails instead of waiting for ever; those the URL sets are its own."""
    from psycopg import pq
    from psycopg.conninfo import conninfo_to_dict

    try:
        given = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - the pool's connection attempt says what is wrong with the URL
        given = {}
    wanted: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 3, "keepalives_count": 3}
    if pq.version() >= 120000:  # an option libpq 11 and older refuse
        wanted["tcp_user_timeout"] = int(max(timeout, 1.0) * 2000)
    return {k: v for k, v in wanted.items() if k not in given}


class _Watchdog:
    """One thread that cuts the socket of a connection whose check has not answered by its deadline (a socket
    shut down wakes the thread that waits on it with an error; the connection is then broken, and dropped)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._due: list[tuple[float, int]] = []  # (deadline, token), a heap
        self._conns: dict[int, Any] = {}  # token -> connection, while its check runs
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, conn: Any, seconds: float) -> int:
        with self._cv:
            token = next(self._tokens)
            self._conns[token] = conn
            heapq.heappush(self._due, (time.monotonic() + seconds, token))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="rdmem-pg-watchdog", daemon=True)
                self._thread.start()
            elif self._due[0][1] == token:  # the thread waits for a later deadline, or for none (else: no wake-up)
                self._cv.notify()
            return token

    def done(self, token: int) -> bool:
        """The check ended: ``False`` if it was cut meanwhile (it may have answered as it was: its connection
        must not be used)."""
        with self._cv:
            answered = self._conns.pop(token, None) is not None
            self._answered()
            return answered

    def _answered(self) -> None:
        """Drop the checks that answered from the head of the heap (it holds only those under way, then)."""
        while self._due and self._due[0][1] not in self._conns:
            heapq.heappop(self._due)

    def _run(self) -> None:
        with self._cv:
            while True:
                self._answered()
                if not self._due:
                    self._cv.wait(60)
                    if not self._due:
                        self._thread = None
                        return
                    continue
                deadline, token = self._due[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                heapq.heappop(self._due)
                conn = self._conns.pop(token)
                log.warning("rdmem store: a PostgreSQL connection did not answer its check in time: cut")
                try:
                    with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
                        sock.shutdown(socket.SHUT_RDWR)
                except Exception:  # noqa: BLE001 - closed meanwhile (psycopg's error): the watchdog goes on
                    pass


_WATCHDOG = _Watchdog()


def _after_fork_in_child() -> None:
    """A forked child starts with no watchdog thread and free locks (one held at the fork would stay held)."""
    global _FORKS
    _WATCHDOG.__init__()  # type: ignore[misc]
    _FORKS = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

