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
restarts a worker that dies,
and on SIGINT or SIGTERM stops them all gracefully.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import time
from typing import Any

__all__ = ["bind", "listen", "run_workers", "share_cores"]

log = logging.getLogger("rdmem.server")

_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def share_cores(workers: int) -> None:
    """Each worker's numpy gets its share of the cores (unless the user set it): with every worker's BLAS
    using all of them, N workers' matrix products oversubscribe the cores N times, and OpenBLAS's
    spinning threads then slow everything (measured, 2 workers on 2 cores, 16 clients: 7 instead of 45
    requests/s). The workers are new interpreters, so the variables reach them before numpy loads."""
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    for name in _BLAS_THREADS:
        os.environ.setdefault(name, threads)


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


def _worker(config: dict[str, Any], sock: socket.socket) -> None:  # pragma: no cover - runs in a child
    import uvicorn

    try:
        uvicorn.Server(uvicorn.Config(**config)).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn stopped gracefully, then raised the signal again
        pass


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


def run_workers(config: dict[str, Any], sockets: list[socket.socket]) -> None:
    """Serve ``uvicorn.Config(**config)`` from one process per socket (:func:`bind`) until SIGINT or SIGTERM."""
    workers = len(sockets)
    spawn = multiprocessing.get_context("spawn")
    stopping = False

    def start(i: int) -> multiprocessing.process.BaseProcess:
        proc = spawn.Process(target=_worker, args=(config, sockets[i]), name=f"rdmem-worker-{i}")
        proc.start()
        return proc

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    procs = [start(i) for i in range(workers)]
    try:
        while not stopping:
            for i, proc in enumerate(procs):
                if not proc.is_alive() and not stopping:
                    log.warning("rdmem serve: worker %d (pid %s) exited with %s; starting another",
                                i, proc.pid, proc.exitcode)
                    procs[i] = start(i)
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
