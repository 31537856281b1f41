"""Math threads (numpy's BLAS, torch's OpenMP): the cores a process may use, and how many threads it runs."""

from __future__ import annotations

import os
import sys

from .errors import InvalidInput

__all__ = ["THREAD_VARIABLES", "available_cores", "set_by_user", "limit_threads"]

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
