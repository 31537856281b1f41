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


ONE_THREAD = """
import json, sys
import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits
threadpool_limits(limits=2)  # numpy's default on a 2-core machine, whatever this one has
import rdmem
from rdmem.store import MemoryStore, NewUnit

def blas():
    return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

seen = []
class Spy:  # an embedder called inside compaction (units without vectors): records the BLAS threads
    name, dim = "spy", 8
    def embed(self, texts):
        seen.append(blas())
        rng = np.random.default_rng(len(texts))
        v = rng.standard_normal((len(texts), 8)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

msgs = [{"role": "user" if i % 2 else "assistant", "content": f"note {i} about topic {i % 7}"} for i in range(60)]
rdmem.compact(msgs, budget=200, embedder=Spy(), query="topic 3?")
class SpyStore(MemoryStore):  # records the BLAS threads a search runs under
    def _search(self, *args):
        seen.append(blas())
        return super()._search(*args)

embedded = len(seen)
store = SpyStore()
store.append("s", [NewUnit(m, 5) for m in msgs])
store.search("s", "topic 3", np.ones(8, dtype=np.float32), k=5)
assert embedded >= 1 and len(seen) == embedded + 1
out = {"compaction": sorted({t for s in seen for t in s}), "after": blas()}
if len(sys.argv) > 1:  # MiniLM itself: a query alone, then a bulk batch
    from rdmem._minilm import NumpyMiniLM
    model = NumpyMiniLM()
    forward = model._forward
    model._forward = lambda *a: (seen.append(blas()), forward(*a))[1]
    seen.clear(); model.embed(["a query"]); out["one_text"] = seen[-1]
    seen.clear(); model.embed([f"text {i}" for i in range(40)]); out["bulk"] = seen[-1]
print(json.dumps(out))
"""


def _one_thread(*args: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    done = subprocess.run([sys.executable, "-c", ONE_THREAD, *args], capture_output=True, text=True, timeout=120,
                          env={**clean, "HF_HUB_OFFLINE": "1", **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_rdmem_computes_on_one_blas_thread_and_gives_the_others_back():
    """Compaction and store searches run numpy's BLAS on one thread (its matrices are small; on a busy machine a second thread
    made messages(query) 8x slower), and the process's setting is back when it returns."""
    assert _one_thread() == {"compaction": [1], "after": [2]}


def test_thread_counts_the_environment_sets_stand():
    assert _one_thread(OPENBLAS_NUM_THREADS="2") == {"compaction": [2], "after": [2]}


@pytest.mark.slow
def test_minilm_embeds_a_few_texts_on_one_thread_and_a_batch_on_numpys():
    got = _one_thread("minilm")
    assert (got["one_text"], got["bulk"], got["after"]) == ([1], [2], [2])
