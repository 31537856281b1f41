"""Servers for the service tests: rdmem's app under a real uvicorn on 127.0.0.1, driven by real clients."""

from __future__ import annotations

import socket
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="the server tests need the server extra: pip install 'rdmem[server]'")


class LiveServer:
    """An ASGI app served by uvicorn in a thread of this process, on a free loopback port."""

    def __init__(self, app) -> None:
        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._sock = sock
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)

    @property
    def app(self):
        return self.server.config.app

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()


@pytest.fixture
def serve():
    """``serve(app)`` starts a live server for the test; all are stopped when it ends."""
    started: list[LiveServer] = []

    def start(app) -> LiveServer:
        live = LiveServer(app)
        started.append(live)
        return live

    yield start
    for live in started:
        live.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _without_thread_settings(environ) -> dict[str, str]:
    """The environment less the math-thread variables: an in-process ``rdmem serve`` test (a refused port, say)
    sets them in this process, and a server started afterwards would take them as the user's choice."""
    from rdmem._threads import THREAD_VARIABLES

    return {k: v for k, v in environ.items() if k not in THREAD_VARIABLES}


class ServeProcess:
    """``rdmem serve ARGS`` as a user starts it: a separate process on a free loopback port."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, log_dir=None, timeout: float = 90,
                 port: int | None = None) -> None:
        import os
        import subprocess
        import sys
        import tempfile

        import httpx

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix="rdmem-serve-", suffix=".log", dir=log_dir, delete=False)
        cmd = [sys.executable, "-m", "rdmem.cli", "serve", "--port", str(self.port), "--log-level", "warning", *args]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env={**_without_thread_settings(os.environ), **(env or {})})
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rdmem serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"rdmem serve did not answer within {timeout} s:\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self) -> int:
        """Stop it as Ctrl-C does; its exit status."""
        import signal
        import subprocess

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.proc.returncode


@pytest.fixture
def rdmem_serve(tmp_path):
    """``rdmem_serve(*args)`` starts ``rdmem serve`` processes for the test; all are stopped when it ends."""
    started: list[ServeProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, port: int | None = None) -> ServeProcess:
        proc = ServeProcess(*args, env={"RDMEM_DATA_DIR": str(tmp_path / "data"), **(env or {})}, log_dir=tmp_path,
                            port=port)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def settle_embeddings(app, *, quiet: float = 1.0, timeout: float = 120.0) -> None:
    """Wait until the app's embedding worker has landed every vector and trimmed the working sets (it writes the
    session when it does): a test that checks that reading writes nothing starts after it."""
    worker = app.state.rdmem.pool.worker
    deadline = time.monotonic() + timeout
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        worker.drain()  # what is left, in this thread; a batch the worker's thread holds ends on its own
        if worker.embedded != seen:
            seen, since = worker.embedded, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.1)
    raise AssertionError(f"the embedding worker did not settle in {timeout} s")
