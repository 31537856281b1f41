"""In-process ``MemoryManager.messages(query)`` against mem0's in-process ``Memory.search``, one session, one run.

mem0 (2.2.1) runs offline: every turn of one LoCoMo conversation is added raw
(``add(infer=False)``: no LLM), embedded by the same all-MiniLM-L6-v2 weights
(sentence-transformers, as mem0 loads them) into its default local Qdrant.
rdmem gets the same turns (``MemoryManager.extend``; the default store and
policy). Then every question of the conversation is asked of both, in
alternating order so the machine's load falls on both alike; each call's
wall time is recorded. mem0 answers its default ``top_k=20`` hits; rdmem
answers a whole context within the budget.

mem0 is not a dependency of rdmem: install it for this script only, e.g.
``pip install --target /tmp/mem0pkgs --no-deps mem0ai==2.2.1 qdrant-client posthog backoff portalocker grpcio
protobuf h2 hpack hyperframe`` and run with ``PYTHONPATH=/tmp/mem0pkgs``.

    HF_HUB_OFFLINE=1 MEM0_TELEMETRY=False .venv/bin/python benchmarks/mem0_side_by_side.py \
        [LOCOMO_JSON] [--conversation 0] [--budget 2000] [--top-k 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
import warnings

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("OPENAI_API_KEY", "unused")  # mem0 builds its LLM client; infer=False never calls it
warnings.simplefilter("ignore")

from rdmem import MemoryManager  # noqa: E402
from rdmem.datasets import load_locomo  # noqa: E402
from rdmem.embed import _resolve_model_path  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--conversation", type=int, default=0)
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--top-k", type=int, default=20)
    args = ap.parse_args()
    from mem0 import Memory  # noqa: PLC0415 (installed for this script only)
    import mem0  # noqa: PLC0415

    conv = load_locomo(args.path)[args.conversation].select([1, 2, 3, 4])
    messages = [{"role": m["role"], "content": m["content"]} for m in conv.messages]
    questions = [p.question for p in conv.probes]
    tmp = tempfile.mkdtemp()
    model = _resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")  # the packaged copy, offline
    m0 = Memory.from_config({
        "embedder": {"provider": "huggingface", "config": {"model": model}},
        "vector_store": {"provider": "qdrant", "config": {"path": os.path.join(tmp, "qdrant"), "on_disk": False,
                                                          "embedding_model_dims": 384, "collection_name": "bench"}},
        "history_db_path": os.path.join(tmp, "history.db"),
    })
    t0 = time.perf_counter()
    for m in messages:
        m0.add([m], user_id="u", infer=False)
    t_m0_add = time.perf_counter() - t0
    mm = MemoryManager(budget=args.budget)
    t0 = time.perf_counter()
    mm.extend(messages)
    t_rd_add = time.perf_counter() - t0
    # Warm both (first calls load lazily), with questions not timed below.
    for q in ("What did they talk about?", "When was the trip?"):
        m0.search(q, filters={"user_id": "u"}, top_k=args.top_k)
        mm.messages(q)
    times: dict[str, list[float]] = {"rdmem": [], "mem0": []}
    calls = {
        "rdmem": lambda q: mm.messages(q),
        "mem0": lambda q: m0.search(q, filters={"user_id": "u"}, top_k=args.top_k),
    }
    for i, q in enumerate(questions):
        for name in (("rdmem", "mem0") if i % 2 == 0 else ("mem0", "rdmem")):
            t = time.perf_counter()
            calls[name](q)
            times[name].append((time.perf_counter() - t) * 1000.0)
    print(f"conversation {conv.id}: {len(messages)} turns, {len(questions)} questions; rdmem budget {args.budget}, "
          f"mem0 {getattr(mem0, '__version__', '?')} top_k {args.top_k}")
    print(f"adding every turn: rdmem extend {t_rd_add:.1f} s, mem0 add(infer=False) one by one {t_m0_add:.1f} s")
    print("| call | p50 ms | p95 ms |")
    print("|---|---:|---:|")
    for name in times:
        print(f"| {name} | {pct(times[name], 50):.1f} | {pct(times[name], 95):.1f} |")
    print(f"| rdmem / mem0 | {pct(times['rdmem'], 50) / pct(times['mem0'], 50):.2f}x | "
          f"{pct(times['rdmem'], 95) / pct(times['mem0'], 95):.2f}x |")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
