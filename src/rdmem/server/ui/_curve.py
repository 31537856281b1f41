"""A session's rate-distortion curve, computed by ``rdmem eval``'s JSONL mode, in the background.

The curve replays the session message by message into a fresh manager once
per policy and budget (the streaming regime) and measures what the working
set keeps with the label-free proxies (information and embedding coverage):
seconds for hundreds of messages, minutes for tens of thousands. So it runs
in one background thread per process, one curve at a time, and the page
shows its progress until it is there; a result is kept for the session's
version it was computed on.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from ...messages import chat_fields

__all__ = ["Curve", "CurveJob", "Curves", "session_curve", "curve_budgets", "CURVE_MESSAGES"]

#: The newest messages a curve replays (each one into a fresh manager: a 20,000-message session took 205 s of
#: CPU and 430 MB); a longer session's curve is of these, and says so.
CURVE_MESSAGES = 2000

log = logging.getLogger("rdmem.server")

#: The budgets a curve is drawn at: ``rdmem eval``'s, below the session's size.
BUDGETS = (500, 1000, 2000, 4000, 8000)


@dataclass(frozen=True)
class Curve:
    """Value kept against budget: per policy, (budget, information coverage, embedding coverage, tokens)."""

    points: dict[str, list[tuple[int, float, float, float]]]
    full_tokens: float
    seconds: float


@dataclass
class CurveJob:
    """A curve being computed: its progress (runs done of all), then its result or why there is none."""

    done: int = 0
    total: int = 0
    curve: Curve | None = None
    error: str | None = None
    finished: threading.Event = field(default_factory=threading.Event)
    started: bool = False
    note: str = ""  # what the curve is of, when not of the whole session


def _refused(job: CurveJob, why: str) -> CurveJob:
    """``job``, finished with ``why`` (not kept: the next look asks again)."""
    job.error = why
    job.finished.set()
    return job


def curve_budgets(total_tokens: int) -> tuple[int, ...]:
    """``rdmem eval``'s budgets below the session's size (half of it for a session smaller than all)."""
    return tuple(b for b in BUDGETS if b < total_tokens) or (max(total_tokens // 2, 1),)


def session_curve(messages: list[dict[str, Any]], name: str, *, policies: tuple[str, ...], budgets: tuple[int, ...],
                  embedder: Any, progress: Callable[[int, int], None]) -> Curve:
    """The curve of a session's messages (as the API pages them), read as one JSONL line of ``rdmem eval``."""
    from ...datasets import parse_jsonl
    from ...eval import EvalConfig, run_eval

    line = json.dumps({"id": name, "messages": [{"id": m["id"], **chat_fields(m)} for m in messages]})
    conversations = parse_jsonl([line], name=f"session {name!r}")
    config = EvalConfig(budgets=budgets, policies=policies, regimes=("streaming",), proxies=True,
                        calibrate_embedding=False)
    result = run_eval(conversations, config, embedder=embedder, progress=progress)
    points: dict[str, list[tuple[int, float, float, float]]] = {p: [] for p in policies}
    full = 0.0
    for row in result.rows:
        if row.category != "all" or row.regime != "streaming":
            continue
        if row.budget is None:
            full = row.tokens_mean
        elif row.policy in points:
            points[row.policy].append((row.budget, row.information_coverage, row.embedding_coverage,
                                       row.tokens_mean))
    return Curve({p: sorted(v) for p, v in points.items()}, full, float(result.meta["wall_seconds"]))


class Curves:
    """Curves computed one at a time in a background thread of this process, kept by key (a session's name,
    version, policies and budgets). Each owner (a tenant) has at most one curve waiting its turn: asking for
    a newer version of the same session's curve replaces the waiting one (it would be out of date when drawn),
    another session's waits until the first is drawn; so a tenant's turn comes after at most one curve of
    each other tenant. At most ``pending`` owners wait at once."""

    def __init__(self, *, keep: int = 32, pending: int = 16) -> None:
        self._jobs: OrderedDict[Hashable, CurveJob] = OrderedDict()
        self._queue: queue.Queue[tuple[CurveJob, Callable[[CurveJob], Curve]]] = queue.Queue()
        self._waiting: dict[Hashable, tuple[Hashable, Hashable, CurveJob]] = {}  # owner -> (slot, key, its job)
        self._lock = threading.Lock()
        self._keep, self._pending = keep, pending
        self._thread: threading.Thread | None = None

    def job(self, key: Hashable, compute: Callable[[CurveJob], Curve], *, owner: Hashable = None,
            slot: Hashable = None) -> CurveJob:
        """The job for ``key``: the one started before, else a new one, queued for ``owner`` (``slot``: what
        the curve is of, a session, whose newer key replaces a waiting older one; by default each key is its own
        owner and slot)."""
        owner, slot = (key, key) if owner is None else (owner, slot)
        with self._lock:
            self._waiting = {o: w for o, w in self._waiting.items() if not w[2].started}
            job = self._jobs.get(key)
            if job is not None and not (job.finished.is_set() and job.error):  # a failed one is tried again
                self._jobs.move_to_end(key)
                return job
            job = CurveJob()
            waiting = self._waiting.get(owner)  # not started (pruned above; _work starts a job under the lock)
            if waiting is not None:
                if waiting[0] != slot:
                    return _refused(job, "a curve of another of your sessions is waiting to be computed; this "
                                         "one can be asked for once it is drawn")
                waiting[2].error = "a newer version of the session was asked for"  # superseded: never drawn
                waiting[2].finished.set()
                self._jobs.pop(waiting[1], None)
            elif len(self._waiting) >= self._pending:
                return _refused(job, f"{self._pending} curves are waiting to be computed already; try again in a "
                                     "minute")
            self._waiting[owner] = (slot, key, job)
            self._jobs[key] = job
            while len(self._jobs) > self._keep:
                self._jobs.popitem(last=False)
            self._queue.put((job, compute))
            if self._thread is None:
                # A daemon: a curve being drawn never holds up the server's shutdown.
                self._thread = threading.Thread(target=self._work, name="rdmem-ui-curves", daemon=True)
                self._thread.start()
            return job

    def _work(self) -> None:
        while True:
            job, compute = self._queue.get()
            with self._lock:  # superseded while it waited (job() decides that under the same lock)
                if job.finished.is_set():
                    continue
                job.started = True
            try:
                job.curve = compute(job)
            except ImportError as exc:
                job.error = f"the curve needs rdmem's evaluation extra: pip install 'rdmem[eval]' ({exc})"
            except Exception as exc:
                log.exception("rdmem ui: the rate-distortion curve failed")
                job.error = f"the curve could not be computed: {type(exc).__name__}: {exc}"
            finally:
                job.finished.set()
