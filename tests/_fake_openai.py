"""A real HTTP server on 127.0.0.1 that speaks enough of the OpenAI API for tests: the one fake endpoint.

Every request is recorded (path, headers, JSON body). What it answers is up
to the test: ``server.respond`` is a function of the recorded request that
returns a :class:`Reply` (a status, a JSON body or raw bytes, an optional
delay, or a list of server-sent events to stream). The default answers every
chat completion with ``server.text``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # a dict (sent as JSON) or bytes
    content_type: str = "application/json"
    delay: float = 0.0  # seconds before answering (a timeout test sleeps past the client's timeout)
    events: list[str] | None = None  # server-sent events (each a JSON string, or "[DONE]"), streamed one by one
    event_delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    cut: bytes | None = None  # the stream breaks off after its events and these bytes (half an event, say)
    raw: bool = False  # each of ``events`` is sent as it is (whole server-sent events, their lines and blank line)


def completion(text: str, model: str = "fake-model") -> dict[str, Any]:
    """A chat.completion body whose first choice says ``text``."""
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def chunks(text: str, model: str = "fake-model", pieces: int = 3) -> list[str]:
    """The server-sent events of a streamed completion of ``text`` (split in ``pieces``), then ``[DONE]``."""
    step = max(1, -(-len(text) // pieces))
    parts = [text[i:i + step] for i in range(0, len(text), step)] or [""]
    out = []
    for k, part in enumerate(parts):
        delta = {"role": "assistant", "content": part} if k == 0 else {"content": part}
        out.append(json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model,
                               "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}))
    out.append(json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model,
                           "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    out.append("[DONE]")
    return out


class FakeOpenAI(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.text = "ok"
        self.respond: Callable[[dict[str, Any]], Reply] | None = None
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The base URL clients take (``http://127.0.0.1:PORT/v1``)."""
        return f"http://127.0.0.1:{self.server_port}/v1"

    def reset(self) -> None:
        self.requests.clear()
        self.text = "ok"
        self.respond = None

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: FakeOpenAI
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes: no 40 ms wait for an ACK

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def _record(self, body: Any) -> dict[str, Any]:
        req = {"path": self.path, "method": self.command, "headers": dict(self.headers),
               "auth": self.headers.get("Authorization"), "body": body}
        self.server.requests.append(req)
        return req

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        req = self._record(None)
        if self.server.respond is not None:
            return self._send(self.server.respond(req))
        model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "tests"}
        if self.path.rstrip("/").endswith("/models"):
            return self._send(Reply(body={"object": "list", "data": [model]}))
        if self.path.endswith("/models/fake-model") or self.path.endswith("/models/org/fake-model"):
            return self._send(Reply(body={**model, "id": self.path.split("/models/", 1)[1]}))
        self._send(Reply(404, {"error": {"message": "not found", "type": "invalid_request_error"}}))

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        req = self._record(body)
        if self.server.respond is not None:
            return self._send(self.server.respond(req))
        if not self.path.endswith("/chat/completions"):
            return self._send(Reply(404, {"error": {"message": "not found", "type": "invalid_request_error"}}))
        if isinstance(body, dict) and body.get("stream"):
            return self._send(Reply(events=chunks(self.server.text)))
        self._send(Reply(body=completion(self.server.text)))

    def _send(self, reply: Reply) -> None:
        if reply.delay:
            time.sleep(reply.delay)
        try:
            if reply.events is not None:
                self.send_response(reply.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                for event in reply.events:
                    data = event.encode() if reply.raw else f"data: {event}\n\n".encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                    if reply.event_delay:
                        time.sleep(reply.event_delay)
                if reply.cut is not None:  # no last chunk: the connection closes mid-stream
                    if reply.cut:
                        self.wfile.write(f"{len(reply.cut):x}\r\n".encode() + reply.cut + b"\r\n")
                        self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(b"0\r\n\r\n")
                return
            payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(payload)))
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            pass
