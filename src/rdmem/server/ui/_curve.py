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

__all__ = ["Curve", "CurveJob", "Curves", "session_curve", "curve_budgets"]

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
    version, policies and budgets); at most ``pending`` wait their turn."""

    def __init__(self, *, keep: int = 32, pending: int = 4) -> None:
        self._jobs: OrderedDict[Hashable, CurveJob] = OrderedDict()
        self._queue: queue.Queue[tuple[CurveJob, Callable[[CurveJob], Curve]]] = queue.Queue()
        self._lock = threading.Lock()
        self._keep, self._pending = keep, pending
        self._thread: threading.Thread | None = None

    def job(self, key: Hashable, compute: Callable[[CurveJob], Curve]) -> CurveJob:
        """The job for ``key``: the one started before, else a new one, queued."""
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and not (job.finished.is_set() and job.error):  # a failed one is tried again
                self._jobs.move_to_end(key)
                return job
            job = CurveJob()
            if self._queue.qsize() >= self._pending:
                job.error = f"{self._pending} curves are waiting to be computed already; try again in a minute"
                job.finished.set()
                return job  # not kept: the next look tries again
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
            try:
                job.curve = compute(job)
            except ImportError as exc:
                job.error = f"the curve needs rdmem's evaluation extra: pip install 'rdmem[eval]' ({exc})"
            except Exception as exc:
                log.exception("rdmem ui: the rate-distortion curve failed")
                job.error = f"the curve could not be computed: {type(exc).__name__}: {exc}"
            finally:
                job.finished.set()
