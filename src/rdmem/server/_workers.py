"""``rdmem serve --workers N``: N uvicorn processes, each with its own listening socket on one port.

uvicorn's own ``--workers`` shares one listening socket among the processes,
and asyncio accepts every pending connection in one go: when a client opens
its connections at once (an async pool), one worker takes them all and the
others sit idle (measured: 32 connections, 2 workers, all on one). Here each
worker listens on its own ``SO_REUSEPORT`` socket, so the kernel spreads new
connections over them. The sockets are made as asyncio recognises TCP ones
(``IPPROTO_TCP``), so answers go out without Nagle's 40 ms delayed-ACK wait.

The caller binds every socket (:func:`bind`) before any worker starts (a
port in use is a clear error, not a worker that fails later); the parent
restarts a worker that dies (its socket closed until then, so that the
kernel hands new connections to the live workers only),
and on SIGINT or SIGTERM stops them all gracefully.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from typing import Any

from .._threads import available_cores, limit_threads, set_by_user

__all__ = ["bind", "listen", "run_workers", "share_cores", "worker_threads"]

log = logging.getLogger("rdmem.server")


def worker_threads(workers: int, cores: int | None = None) -> int:
    """Math threads (numpy's BLAS, torch) per worker: its share of the cores less one, and at least one.

    The one left is for the worker's own Python (the event loop, request threads, the store's driver). A
    BLAS thread that finds its core taken spins and waits, so more threads than free cores is slower than
    one (``benchmarks/threads_bench.py``), and N workers with every core each oversubscribe the cores N
    times (2 workers on 2 cores, 16 clients: 7 instead of 45 requests/s).
    """
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, workers) - 1)


def share_cores(workers: int) -> str:
    """Set each worker's math threads (unless the user set them) here and for the workers it starts; say what."""
    chosen = set_by_user()
    if chosen:
        return f"math threads as set ({', '.join(chosen)})"
    cores = available_cores()
    threads = worker_threads(workers, cores)
    limit_threads(threads)  # this process serves the requests itself when there is one worker
    return (f"{threads} math thread{'s' if threads > 1 else ''} per worker ({cores} cores, {workers} "
            f"worker{'s' if workers > 1 else ''}; OMP_NUM_THREADS=N to choose)")


def listen(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``OSError`` if it cannot be)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _worker(config: dict[str, Any], sock: socket.socket, parent: int) -> None:  # pragma: no cover - a child
    threading.Thread(target=_end_with, args=(parent,), name="rdmem-parent-watch", daemon=True).start()
    import uvicorn

    try:
        uvicorn.Server(uvicorn.Config(**config)).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn stopped gracefully, then raised the signal again
        pass


def _end_with(parent: int, every: float = 0.5) -> None:  # pragma: no cover - runs in a child
    """Stop this worker as SIGTERM does (uvicorn finishes what it serves) once ``parent`` (the pid
    :func:`run_workers` passed, so that a parent gone before this runs is seen) is gone: killed with SIGKILL, it
    could not stop its workers, which kept the port (a restart failed: address in use) and served on with nobody
    to restart them."""
    while os.getppid() == parent:
        time.sleep(every)
    log.warning("rdmem serve: the parent process (pid %d) is gone; worker %d stops", parent, os.getpid())
    os.kill(os.getpid(), signal.SIGTERM)


def bind(host: str, port: int, workers: int = 1) -> list[socket.socket]:
    """The listening sockets of ``workers`` processes on ``host:port`` (``OSError`` if the port is taken or
    ``host`` cannot be bound): one plain socket, or one ``SO_REUSEPORT`` socket each."""
    if workers == 1:
        return [listen(host, port)]
    probe = listen(host, port)  # fails if anything holds the port, a reuse-port group included
    port = probe.getsockname()[1]  # port 0: the workers share the one the system chose
    probe.close()
    sockets: list[socket.socket] = []
    try:
        for _ in range(workers):
            sockets.append(listen(host, port, reuse_port=True))
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


#: A worker that lived at least this many seconds ended a steady life: the next starts at once.
STEADY = 10.0


def restart_delay(short_lives: int) -> float:
    """Seconds before a worker that ended ``short_lives`` short lives in a row is started again: none after
    the first, then 1, 2, 4, ... up to 30 (a worker that cannot start, its database away, is not restarted
    five times a second, each start loading Python and the app).

    >>> [restart_delay(n) for n in (0, 1, 2, 3, 7, 8)]
    [0.0, 0.0, 1.0, 2.0, 30.0, 30.0]
    """
    return 0.0 if short_lives <= 1 else float(min(2 ** (short_lives - 2), 30))


def run_workers(config: dict[str, Any], sockets: list[socket.socket]) -> None:
    """Serve ``uvicorn.Config(**config)`` from one process per socket (:func:`bind`) until SIGINT or SIGTERM."""
    workers = len(sockets)
    spawn = multiprocessing.get_context("spawn")
    stopping = False

    def start(i: int) -> multiprocessing.process.BaseProcess:
        proc = spawn.Process(target=_worker, args=(config, sockets[i], os.getpid()), name=f"rdmem-worker-{i}")
        proc.start()
        return proc

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    procs = [start(i) for i in range(workers)]
    started = [time.monotonic()] * workers
    failures, due = [0] * workers, [0.0] * workers  # short lives in a row; when the next may start
    noticed = [False] * workers  # the worker's end was logged and its restart set
    where = [s.getsockname()[:2] for s in sockets]
    try:
        while not stopping:
            now = time.monotonic()
            for i, proc in enumerate(procs):
                if proc.is_alive() or stopping:
                    continue
                if not noticed[i]:
                    failures[i] = failures[i] + 1 if now - started[i] < STEADY else 0
                    wait = restart_delay(failures[i])
                    log.warning("rdmem serve: worker %d (pid %s) exited with %s; starting another%s", i, proc.pid,
                                proc.exitcode, f" in {wait:.0f} s ({failures[i]} short lives in a row)" if wait else "")
                    due[i], noticed[i] = now + wait, True
                    if any(p.is_alive() for p in procs):  # its socket leaves the port until a worker serves it
                        sockets[i].close()  # again: the kernel gave it new connections that no one took (a worker
                        # that cannot start, its database away, held them for as long); those it queued are reset.
                        # The last one stays: the port stays this server's.
                if now >= due[i]:
                    if sockets[i].fileno() == -1:
                        try:
                            sockets[i] = listen(*where[i], reuse_port=True)
                        except OSError as exc:
                            log.warning("rdmem serve: worker %d cannot listen again (%s); trying later", i, exc)
                            due[i] = now + STEADY
                            continue
                    procs[i], started[i], noticed[i] = start(i), time.monotonic(), False
            time.sleep(0.2)
    finally:
        for proc in procs:  # a terminal's Ctrl-C reached them already; a SIGTERM to this process did not
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
        for s, handler in previous.items():
            signal.signal(s, handler)
