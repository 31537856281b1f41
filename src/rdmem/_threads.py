"""Math threads (numpy's BLAS, torch's OpenMP): the cores a process may use, and how many threads it runs."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, TypeVar

from .errors import InvalidInput

__all__ = ["THREAD_VARIABLES", "available_cores", "set_by_user", "limit_threads", "one_math_thread",
           "on_one_math_thread"]

F = TypeVar("F", bound=Callable[..., Any])

#: Read by numpy's OpenBLAS, by MKL and by torch (OpenMP) when they load.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container or ``taskset`` sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def set_by_user() -> list[str]:
    """``NAME=value`` of each thread variable the environment sets (the user's choice, to be left alone)."""
    return [f"{name}={os.environ[name]}" for name in THREAD_VARIABLES if name in os.environ]


def limit_threads(threads: int) -> None:
    """``threads`` math threads in this process, whether its libraries are loaded yet or not, and in the
    processes it starts (through the environment, read before numpy or torch loads there)."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InvalidInput(f"threads must be an int >= 1, got {threads!r}")
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)
    try:  # numpy is loaded already, its BLAS pool started with the variables as they were
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads)
    except ImportError:  # pragma: no cover - a dependency of the server extra
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


class _OneThread:
    """Process-wide: numpy's BLAS on one thread while any rdmem computation runs (nested and concurrent
    entries counted), back to what it was when the last one leaves."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.limiter: Any = None
        self.controller: Any = None
        self.off = False

    def enter(self) -> None:
        with self.lock:
            self.depth += 1
            if self.depth > 1 or self.off or set_by_user():  # the environment's thread counts stand
                return
            try:
                if self.controller is None:
                    from threadpoolctl import ThreadpoolController

                    self.controller = ThreadpoolController()
                self.limiter = self.controller.limit(limits=1, user_api="blas")
            except Exception:  # pragma: no cover - no threadpoolctl, or a BLAS it cannot drive: leave it be
                self.off = True

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.limiter is not None:
                self.limiter.restore_original_limits()
                self.limiter = None


_ONE = _OneThread()


@contextmanager
def one_math_thread() -> Iterator[None]:
    """Run the block with numpy's BLAS on one thread (unless the environment sets thread counts).

    rdmem's matrices are small (a few hundred candidates by 384 dimensions; one
    text through MiniLM): a second BLAS thread barely helps on an idle machine,
    and on a busy one every product waits for its slowest thread. Measured on
    the 2-core machine with other work running: ``messages(query)`` on a LoCoMo
    conversation took 162 ms with numpy's default 2 threads against 14 ms with
    one (BENCHMARKS "Threads"). Process-wide while the block runs: other
    threads' numpy runs on one thread meanwhile.
    """
    _ONE.enter()
    try:
        yield
    finally:
        _ONE.leave()


def on_one_math_thread(fn: F) -> F:
    """Decorate ``fn`` to run under :func:`one_math_thread`."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with one_math_thread():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
