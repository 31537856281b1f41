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
