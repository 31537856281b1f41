"""A database outage under load, as the fault suite and ``benchmarks/pg_outage.py`` drive it.

Clients add messages to a running ``rdmem serve`` (one message per request,
each client its own session, explicit ids, so what was acknowledged can be
looked up afterwards) while a probe asks ``/healthz``; the scenario ends
the database's connections (``pg_terminate_backend``), stops PostgreSQL,
starts it again, and records every answer with its time.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

__all__ = ["Answer", "Outage", "run_outage"]


@dataclass(frozen=True)
class Answer:
    """One request: when it was sent and answered (seconds from the scenario's start), and its status
    (0: no answer, the connection failed)."""

    client: str
    sent: float
    done: float
    status: int
    id: str | None = None


@dataclass
class Outage:
    """What happened: every answer, and when each step of the scenario was over."""

    answers: list[Answer] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)

    def acknowledged(self) -> dict[str, list[str]]:
        """The ids each writer's session was told were stored (201)."""
        out: dict[str, list[str]] = {}
        for a in self.answers:
            if a.id is not None and a.status == 201:
                out.setdefault(a.client, []).append(a.id)
        return out

    def first_ok_after(self, mark: str, client: str | None = None) -> float | None:
        """Seconds from ``mark`` to the first 2xx answered after it (of ``client``, or of anyone)."""
        t = self.marks[mark]
        done = [a.done for a in self.answers if a.done >= t and 200 <= a.status < 300
                and (client is None or a.client == client)]
        return min(done) - t if done else None

    def statuses(self, start: str | None = None, end: str | None = None, *, writes: bool = True,
                 answered: bool = False) -> Counter[int]:
        """Statuses of the requests sent (``answered``: answered) between two marks (writes, or the probe's)."""
        lo = self.marks[start] if start else 0.0
        hi = self.marks[end] if end else float("inf")
        return Counter(a.status for a in self.answers
                       if lo <= (a.done if answered else a.sent) < hi and (a.id is not None) == writes)


def _writer(url: str, name: str, begin: float, stop: threading.Event, out: list[Answer]) -> None:
    n = 0
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            mid = f"{name}-{n}"
            n += 1
            sent = time.monotonic() - begin
            try:
                status = client.post(f"/v1/sessions/{name}/messages", json={"messages": [
                    {"role": "user", "content": f"note {n} of {name}: the harbour boats leave at {n % 24}h",
                     "id": mid}]}).status_code
            except httpx.TransportError:
                status = 0
            out.append(Answer(name, sent, time.monotonic() - begin, status, mid))


def _probe(url: str, begin: float, stop: threading.Event, out: list[Answer]) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            sent = time.monotonic() - begin
            try:
                status = client.get("/healthz").status_code
            except httpx.TransportError:
                status = 0
            out.append(Answer("healthz", sent, time.monotonic() - begin, status))
            stop.wait(0.1)


def run_outage(url: str, pg: object, *, writers: int = 4, warm: float = 3.0, after_terminate: float = 3.0,
               down: float = 3.0, after_start: float = 6.0, prefix: str = "w") -> Outage:
    """Load ``url`` with ``writers`` clients and a health probe; ``pg`` (a :class:`tests._pg.OwnPostgres`)
    has its backends terminated after ``warm`` seconds, is stopped ``after_terminate`` seconds later, started
    ``down`` seconds after that, and the load goes on for ``after_start`` seconds."""
    outcome = Outage()
    stop = threading.Event()
    begin = time.monotonic()
    lists: list[list[Answer]] = [[] for _ in range(writers + 1)]
    threads = [threading.Thread(target=_writer, args=(url, f"{prefix}{i}", begin, stop, lists[i]))
               for i in range(writers)]
    threads.append(threading.Thread(target=_probe, args=(url, begin, stop, lists[-1])))
    for t in threads:
        t.start()

    def mark(name: str) -> None:
        outcome.marks[name] = time.monotonic() - begin

    try:
        time.sleep(warm)
        pg.terminate_backends()  # type: ignore[attr-defined]
        mark("terminated")
        time.sleep(after_terminate)
        mark("stopping")
        pg.stop()  # type: ignore[attr-defined]
        mark("stopped")
        time.sleep(down)
        pg.start()  # type: ignore[attr-defined]
        mark("started")  # it accepts connections from here on
        time.sleep(after_start)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        mark("end")
    outcome.answers = sorted((a for answers in lists for a in answers), key=lambda a: a.sent)
    return outcome
