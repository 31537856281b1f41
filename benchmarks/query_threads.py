"""In-process ``messages(query)`` with rdmem's one BLAS thread against numpy's default threads, one run.

Each round starts two fresh processes one after the other on the same
conversation and questions: one as rdmem runs by default (compaction, search
and a query's embedding on one BLAS thread), one with ``OPENBLAS_NUM_THREADS``
set to the machine's cores (what numpy does by default, and what rdmem did
before). Embeddings of the history come from the disk cache of ``rdmem eval``;
each question is embedded by MiniLM in the timed call.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/query_threads.py [LOCOMO_JSON] [--rounds 3] [--questions 100]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

CHILD = r"""
import json, os, sys, time
from rdmem import MemoryManager
from rdmem.datasets import load_locomo
from rdmem.embed import get_embedder
from rdmem.eval.config import cached_embedder
conv = load_locomo(sys.argv[1])[0].select([1, 2, 3, 4])
cache = cached_embedder()
cache.embed([m["content"] for m in conv.messages])  # warm: the history's vectors come from the disk cache
mm = MemoryManager(budget=2000)
mm.extend([{"role": m["role"], "content": m["content"]} for m in conv.messages])
qs = [p.question for p in conv.probes][: int(sys.argv[2])]
mm.messages("warm up")
out = []
for q in qs:
    t = time.perf_counter()
    mm.messages(q)
    out.append((time.perf_counter() - t) * 1000.0)
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--questions", type=int, default=100)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    kinds = {"rdmem's choice (1 BLAS thread)": {}, f"numpy's default ({cores} threads)": {"OPENBLAS_NUM_THREADS": str(cores)}}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    loads = []
    for r in range(args.rounds):
        for kind in (list(kinds) if r % 2 == 0 else list(kinds)[::-1]):
            loads.append(os.getloadavg()[0])
            done = subprocess.run([sys.executable, "-c", CHILD, args.path, str(args.questions)], capture_output=True,
                                  text=True, env={**clean, "HF_HUB_OFFLINE": "1", **kinds[kind]}, timeout=1800)
            if done.returncode:
                sys.exit(done.stderr)
            times[kind] += json.loads(done.stdout.strip().splitlines()[-1])
    print(f"| threads | calls | p50 ms | p95 ms |\n|---|---:|---:|---:|")
    for kind, xs in times.items():
        print(f"| {kind} | {len(xs)} | {np.percentile(xs, 50):.1f} | {np.percentile(xs, 95):.1f} |")
    print(f"\n{cores} cores; load average {min(loads):.1f}-{max(loads):.1f} at the starts")


if __name__ == "__main__":
    main()
