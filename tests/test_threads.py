"""Math threads: the server's choice per worker, the user's choice left alone, and the limit applied in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rdmem._threads import THREAD_VARIABLES, limit_threads

pytest.importorskip("threadpoolctl", reason="the thread limit needs threadpoolctl: pip install 'rdmem[server]'")


@pytest.mark.parametrize(("workers", "cores", "threads"), [
    (1, 1, 1), (1, 2, 1), (2, 2, 1), (3, 2, 1), (1, 4, 3), (2, 4, 1), (1, 8, 7), (2, 8, 3), (4, 16, 3),
])
def test_a_worker_gets_its_share_of_the_cores_less_one(workers, cores, threads):
    from rdmem.server._workers import worker_threads

    assert worker_threads(workers, cores) == threads


SHARE = """
import json, os, sys
from threadpoolctl import threadpool_info
import numpy  # loaded first, as in rdmem serve: its BLAS pool exists before the limit
from rdmem.server._workers import share_cores, worker_threads
said = share_cores(int(sys.argv[1]))
blas = sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})
print(json.dumps({"said": said, "blas": blas, "expected": worker_threads(int(sys.argv[1])),
                  "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}}))
"""


def _share(workers: int, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    done = subprocess.run([sys.executable, "-c", SHARE, str(workers)], capture_output=True, text=True, timeout=120,
                          env={**clean, **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_share_cores_limits_the_loaded_blas_and_the_workers_to_come():
    from rdmem._threads import available_cores

    got = _share(1)
    n = got["expected"]
    assert got["blas"] == [n]
    assert got["env"] == {name: str(n) for name in THREAD_VARIABLES}
    cores = available_cores()
    assert got["said"] == (f"{n} math thread{'s' if n > 1 else ''} per worker ({cores} cores, 1 worker; "
                           "OMP_NUM_THREADS=N to choose)")
    assert _share(2)["said"].endswith(f"({cores} cores, 2 workers; OMP_NUM_THREADS=N to choose)")


def test_share_cores_leaves_the_users_choice_alone():
    got = _share(1, OMP_NUM_THREADS="2")
    assert got["said"] == "math threads as set (OMP_NUM_THREADS=2)"
    assert got["env"] == {"OPENBLAS_NUM_THREADS": None, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": None}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_limit_threads_refuses_what_is_not_a_count(bad):
    with pytest.raises(ValueError, match=rf"threads must be an int >= 1, got {bad!r}"):
        limit_threads(bad)
