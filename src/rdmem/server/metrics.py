"""Prometheus text metrics (no extra dependency): requests, latency histograms, compactions, tokens.

Each server process counts its own requests (with ``--workers N`` a scrape
reaches one of them; sum over processes on the Prometheus side, by the
``pid`` label).
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Metrics", "MetricsMiddleware", "BodyLimitMiddleware"]

#: The methods a request is counted under by name; any other (a client may send any token) is ``OTHER``, so
#: no client can add a series per method it makes up.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.latency: dict[tuple[str, str], list[int]] = {}
        self.latency_sum: dict[tuple[str, str], float] = defaultdict(float)
        self.counters: dict[str, float] = defaultdict(float)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, status)] += 1
            buckets = self.latency.setdefault((method, route), [0] * (len(_BUCKETS) + 1))
            for i, bound in enumerate(_BUCKETS):
                if seconds <= bound:
                    buckets[i] += 1
            buckets[-1] += 1
            self.latency_sum[(method, route)] += seconds

    def count(self, name: str, value: float = 1.0) -> None:
        with self._lock:
            self.counters[name] += value

    def render(self) -> str:
        pid = os.getpid()
        out = [
            "# HELP rdmem_requests_total HTTP requests by method, route and status.",
            "# TYPE rdmem_requests_total counter",
        ]
        with self._lock:
            for (method, route, status), n in sorted(self.requests.items()):
                out.append(f'rdmem_requests_total{{method="{method}",route="{route}",status="{status}",pid="{pid}"}} {n}')
            out += ["# HELP rdmem_request_seconds Request latency.", "# TYPE rdmem_request_seconds histogram"]
            for (method, route), buckets in sorted(self.latency.items()):
                labels = f'method="{method}",route="{route}",pid="{pid}"'
                for bound, n in zip(_BUCKETS, buckets, strict=False):
                    out.append(f'rdmem_request_seconds_bucket{{{labels},le="{bound}"}} {n}')
                out.append(f'rdmem_request_seconds_bucket{{{labels},le="+Inf"}} {buckets[-1]}')
                out.append(f"rdmem_request_seconds_sum{{{labels}}} {self.latency_sum[(method, route)]:.6f}")
                out.append(f"rdmem_request_seconds_count{{{labels}}} {buckets[-1]}")
            for name, help_text in (
                ("rdmem_compactions_total", "Contexts compacted to fit a budget (the proxy's and the memory API's)."),
                ("rdmem_tokens_in_total", "Tokens of the histories before compaction."),
                ("rdmem_tokens_out_total", "Tokens of what was sent on, after compaction."),
                ("rdmem_messages_stored_total", "Messages stored."),
                ("rdmem_proxy_fail_open_total", "Proxy requests forwarded unchanged because compaction failed."),
            ):
                out += [f"# HELP {name} {help_text}", f"# TYPE {name} counter",
                        f'{name}{{pid="{pid}"}} {self.counters.get(name, 0.0):g}']
        return "\n".join(out) + "\n"


class MetricsMiddleware:
    """Times every HTTP request, labelled by its route's template (``/v1/sessions/{session}/context``) and its
    method (one of :data:`METHODS`, else ``OTHER``)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            path = getattr(route, "path_format", None) or getattr(route, "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in METHODS else "OTHER"
            self.metrics.observe(method, path, status, time.perf_counter() - start)


class BodyLimitMiddleware:
    """Refuses a request body over ``limit`` bytes with 413, whether it announces its size or streams it
    (a streamed body is read first, up to the limit, then handed on whole)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.limit:
                await _too_large(send, self.limit)
                return
            await self.app(scope, receive, send)
            return
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limit:
                await _too_large(send, self.limit)
                return
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _too_large(send: Send, limit: int) -> None:
    import json

    from .errors import error_body

    body = json.dumps(error_body("request_too_large", f"the request body is over {limit} bytes")).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
