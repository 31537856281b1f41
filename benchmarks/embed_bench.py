"""MiniLM in numpy against sentence-transformers, in one run: bulk throughput, one text's latency, the vectors.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/embed_bench.py [--texts 1024] [--rounds 5] [--threads 1 2]

The texts are LoCoMo turns (``../shared/data/locomo/locomo_dev.json``), the
first ``--texts`` distinct ones. Both embedders encode the same texts in the
same process, in alternating rounds (numpy, then sentence-transformers, then
numpy ...), for each thread count: numpy's BLAS limited with threadpoolctl,
torch with ``torch.set_num_threads``. Each embedder gets every text once per
round, in its own batches of 64 (sentence-transformers' ``encode`` and
``NumpyMiniLM`` sort texts by length the same way). Prints texts per second
(median of the rounds) and the ratio (the median of each round's ratio: a round runs both under
the same load), then one text's latency
(median and p95 of ``--single`` texts, one at a time), then how far the
vectors are apart. Exits 1 if numpy's median bulk throughput falls below
sentence-transformers' / 1.5 at any thread count (the issue's target).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"
TARGET = 1.5  # sentence-transformers' throughput may be at most this many times numpy's


def locomo_texts(path: Path, n: int) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    texts = [t["text"] for c in data for k, v in c["conversation"].items()
             if k.startswith("session_") and isinstance(v, list) for t in v]
    return list(dict.fromkeys(texts))[:n]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--single", type=int, default=100, help="texts embedded one at a time for the latency")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    ap.add_argument("--locomo", type=Path, default=LOCOMO)
    args = ap.parse_args()
    for name in ("texts", "rounds", "single"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if not args.locomo.is_file():
        ap.error(f"LoCoMo not found at {args.locomo} (--locomo PATH)")

    import numpy as np
    import torch
    from threadpoolctl import threadpool_limits

    from rdmem._minilm import NumpyMiniLM
    from rdmem.embed import SentenceTransformerEmbedder

    import sentence_transformers

    texts = locomo_texts(args.locomo, args.texts)
    ours, theirs = NumpyMiniLM(), SentenceTransformerEmbedder()
    print(f"machine: {os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__}, sentence-transformers {sentence_transformers.__version__}; "
          f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
    ours.embed(texts[:8])
    theirs.embed(texts[:8])  # both loaded before anything is timed
    print(f"{len(texts)} LoCoMo texts, {args.rounds} rounds per thread count; texts per second:", flush=True)
    failed = False
    for threads in args.threads:
        torch.set_num_threads(threads)
        rates: dict[str, list[float]] = {"numpy": [], "st": []}
        with threadpool_limits(limits=threads, user_api="blas"):
            for _ in range(args.rounds):
                for name, model in (("numpy", ours), ("st", theirs)):
                    start = time.perf_counter()
                    model.embed(texts)
                    rates[name].append(len(texts) / (time.perf_counter() - start))
            single: dict[str, list[float]] = {"numpy": [], "st": []}
            for text in texts[:args.single]:
                for name, model in (("numpy", ours), ("st", theirs)):
                    start = time.perf_counter()
                    model.embed([text])
                    single[name].append((time.perf_counter() - start) * 1000)
        n, s = statistics.median(rates["numpy"]), statistics.median(rates["st"])
        paired = [b / a for a, b in zip(rates["numpy"], rates["st"], strict=True)]  # one round: the same load
        ratio = statistics.median(paired)
        print(f"  {threads} thread(s): numpy {n:.1f}, sentence-transformers {s:.1f} (median); "
              f"sentence-transformers / numpy = {ratio:.2f}, the median of the rounds' "
              f"({', '.join(f'{r:.2f}' for r in paired)}; target <= {TARGET})")
        for name in ("numpy", "st"):
            ms = sorted(single[name])
            print(f"    one text, {name}: p50 {statistics.median(ms):.1f} ms, p95 {ms[int(0.95 * (len(ms) - 1))]:.1f} ms")
        failed |= ratio > TARGET
    a, b = ours.embed(texts), theirs.embed(texts)
    print(f"vectors: max |numpy - sentence-transformers| = {float(np.abs(a - b).max()):.2e}, "
          f"min cosine = {float((a * b).sum(axis=1).min()):.9f}; load average {os.getloadavg()[0]:.1f} at the end")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
