"""Opening an SQLite store file safely: refuse what must not be touched before anything is written."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from ._sqlite_schema import SCHEMA_VERSION, create_or_upgrade, read_version
from ._types import StoreError

__all__ = ["open_file", "refuse_if_forked", "retry", "in_transaction"]

_HEADER = b"SQLite format 3\x00"
_T = TypeVar("_T")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def retry(fn: Callable[[], _T], timeout: float, held: AbstractContextManager[object] = nullcontext()) -> _T:
    """Run ``fn`` under ``held`` (a lock), retrying while another connection holds the file's write lock (up to
    ``timeout`` seconds); ``held`` is let go between tries, so that reads of this process go on meanwhile."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            with held:
                return fn()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


#: How long ``BEGIN IMMEDIATE`` itself waits for another process's write (ms): a short wait inside SQLite,
#: the rest in :func:`retry`, which lets this process's readers in between.
_BEGIN_WAIT_MS = 20


def in_transaction(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], _T]) -> _T:
    """``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction, rolled back if it raises."""
    wait = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
    conn.execute(f"PRAGMA busy_timeout={min(wait, _BEGIN_WAIT_MS)}")
    try:
        conn.execute("BEGIN IMMEDIATE")
    finally:
        conn.execute(f"PRAGMA busy_timeout={wait}")
    try:
        out = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return out


def open_file(path: str, *, where: str, timeout: float, synchronous: str, readonly: bool,
              create: bool = True) -> sqlite3.Connection:
    """A connection to the store file ``path``, its schema created or upgraded (unless ``readonly``).

    Refused with :class:`StoreError`, before anything is written to them: a
    directory, a missing directory, a file that is not SQLite, a damaged file
    (``PRAGMA quick_check``), a database that is not an rdmem store, and one
    written by a newer rdmem.
    """
    p = Path(path)
    if p.is_dir():
        raise StoreError(f"{where}: is a directory, not a database file")
    if not p.parent.exists():
        raise StoreError(f"{where}: directory {str(p.parent)!r} does not exist")
    exists = p.exists() and p.stat().st_size > 0
    if (readonly or not create) and not exists:
        raise StoreError(f"{where}: no such store file")
    if exists:
        try:
            with open(p, "rb") as fh:
                header = fh.read(len(_HEADER))
        except OSError as exc:
            raise StoreError(f"{where}: cannot read ({exc})") from None
        if header != _HEADER:
            raise StoreError(f"{where}: not an SQLite database (corrupt, or another kind of file); nothing was changed")
    conn = _connect(p, where=where, timeout=timeout, readonly=readonly)
    try:
        # Read-only checks first: a file we must refuse is never written to (not even the WAL switch).
        version = read_version(conn, where)
        if exists:
            _quick_check(conn, where)
        if readonly:
            if version is not None and version < SCHEMA_VERSION:
                raise StoreError(f"{where} has schema version {version}; open it once for writing "
                                 f"to upgrade it to version {SCHEMA_VERSION}")
            if version is None and exists:  # an empty SQLite file: a creation cut short
                raise StoreError(f"{where}: an empty SQLite file, no rdmem store yet (its creation was "
                                 "interrupted?): open it once for writing to create one")
            return conn
        retry(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone(), timeout)
        # WAL + NORMAL: commits survive a killed process; FULL adds an fsync per commit (SQLiteStore's docstring).
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        conn.execute("PRAGMA temp_store=MEMORY")
        if version != SCHEMA_VERSION:
            retry(lambda: in_transaction(conn, lambda c: create_or_upgrade(c, where)), timeout)
    except StoreError:
        conn.close()
        raise
    except sqlite3.DatabaseError as exc:
        conn.close()
        if not readonly and not _writable(p):  # a read-only file system or file: SQLite says "unable to open"
            raise StoreError(f"{where}: cannot be written (a read-only file system, or no write permission on "
                             f"the file or its directory, which holds its journal); to read it only, open it "
                             f"read-only ({exc})") from None
        raise StoreError(f"{where}: unreadable ({exc}); nothing was changed") from None
    return conn


def _writable(p: Path) -> bool:
    """Whether this process may write the store file ``p`` and create its journal beside it."""
    probe = p.parent / f".{p.name}.rdmem-write-check-{os.getpid()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError:
        return False
    return not p.exists() or os.access(p, os.W_OK)


def _connect(p: Path, *, where: str, timeout: float, readonly: bool) -> sqlite3.Connection:
    def connect(uri: str) -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        return conn

    uri = "file:" + quote(str(p.resolve() if p.exists() else p), safe="/:")
    try:
        if not readonly:
            return connect(uri)
        conn = connect(uri + "?mode=ro")
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            # A WAL file in a directory we cannot write: SQLite cannot create its shared-memory
            # file. Nobody can write there either, so the file cannot change while we read it.
            conn.close()
            if os.access(p.parent, os.W_OK):
                raise
            wal = p.with_name(p.name + "-wal")
            if wal.exists() and wal.stat().st_size > 0:  # immutable=1 would read the file without the WAL's writes
                raise StoreError(f"{where}: its write-ahead log ({wal.name}) holds writes that a reader cannot apply "
                                 "in a directory it cannot write (the -shm file beside it is missing); open it once "
                                 "for writing, or copy the file with its -wal to a writable directory and read it "
                                 "there (nothing was read)") from None
            conn = connect(uri + "?mode=ro&immutable=1")
        return conn
    except sqlite3.Error as exc:
        journal = p.with_name(p.name + "-journal")
        if readonly and journal.exists() and journal.stat().st_size > 0:  # a hot journal: only a writer rolls back
            raise StoreError(f"{where}: a write was interrupted ({journal.name} is left beside it), which only a "
                             f"writer can roll back: open it once for writing ({exc})") from None
        raise StoreError(f"{where}: cannot open ({exc})") from None


def _quick_check(conn: sqlite3.Connection, where: str) -> None:
    """Refuse a damaged file (pages or indexes) before anything is written to it."""
    try:
        problems = [r[0] for r in conn.execute("PRAGMA quick_check(5)") if r[0] != "ok"]
    except sqlite3.DatabaseError as exc:
        problems = [str(exc)]
    if problems:
        found = " ".join("; ".join(problems).split())[:300]  # one line, whatever SQLite said
        raise StoreError(f"{where}: the file is damaged ({found}); "
                         "refusing to use it (nothing was changed). Restore it from a backup")


def refuse_if_forked(where: str, parent: int) -> None:
    """Refuse a store used in a process forked after it was opened (in ``parent``). SQLite's connection must not
    cross a fork (sqlite.org/howtocorrupt.html): used in the child, it lost the child's commits once the parent
    closed its own, and corrupted the file when a third process wrote. (A child that opened the file anew beside
    the inherited connection still corrupted it in that test: SQLite keeps per-process state of the file.)"""
    if os.getpid() == parent:
        return
    raise StoreError(f"{where}: opened in process {parent}, used in process {os.getpid()}, forked from it: an SQLite "
                     f"connection must not cross a fork (it loses or corrupts data); open the store only in the "
                     f"processes that use it (with gunicorn --preload or a Celery prefork pool: in each worker, "
                     f"never at import in the parent)")
