"""``MemoryManager.messages(query)`` latency, before and after a change of issue 25's, in one run.

For each LoCoMo dev conversation and budget, two managers are fed the same
messages: one with ``rd`` as it was, one with the default ``rd``. ``--compare query_weight`` (the
default): before is relevance alone (``RDPolicy(query_weight=1.0)``), after weighs the query by its
informativeness. ``--compare markers``: before sends a marker per omitted run (``markers=True``),
after one merged marker (the default since 2026-12-05). ``--compare neighbours``: before takes no archived
neighbours of the strongest hits (``rdmem._session.NEIGHBOUR_HITS = 0``), after the default. Then every question
and every user turn (as the proxy asks) is sent to both, alternating which goes
first, so machine load falls on both alike. Embeddings come from the disk
cache (warm it with ``rdmem eval`` first), so the time is rdmem's own.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/query_latency.py [LOCOMO_JSON] [--budgets 1000,2000,4000] \
        [--compare query_weight|markers|neighbours]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.simplefilter("ignore", RuntimeWarning)

from rdmem import MemoryManager, _session  # noqa: E402
from rdmem.datasets import load_locomo  # noqa: E402
from rdmem.eval.config import cached_embedder  # noqa: E402
from rdmem.policies import RDPolicy  # noqa: E402
from rdmem.tokens import get_tokenizer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--budgets", default="1000,2000,4000")
    ap.add_argument("--turns", type=int, default=60, help="user turns per conversation sent as queries")
    ap.add_argument("--compare", choices=("query_weight", "markers", "neighbours"), default="query_weight")
    args = ap.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    convs = [c.select([1, 2, 3, 4]) for c in load_locomo(args.path)]
    emb, tok = cached_embedder(), get_tokenizer("cl100k_base")
    hits = {"before": _session.NEIGHBOUR_HITS, "after": _session.NEIGHBOUR_HITS}
    if args.compare == "neighbours":
        policies = {"before": RDPolicy(), "after": RDPolicy()}
        options: dict[str, dict[str, object]] = {"before": {}, "after": {}}
        hits["before"] = 0
    elif args.compare == "markers":
        policies = {"before": RDPolicy(), "after": RDPolicy()}
        options = {"before": {"markers": True}, "after": {}}
    else:
        policies = {"before": RDPolicy(query_weight=1.0), "after": RDPolicy()}
        options = {"before": {}, "after": {}}
    times: dict[tuple[str, str], list[float]] = {(k, kind): [] for k in policies for kind in ("question", "turn")}
    t_start = time.perf_counter()
    for conv in convs:
        users = [m["content"] for m in conv.messages if m["role"] == "user"]
        step = max(len(users) // args.turns, 1)
        queries = [("question", p.question) for p in conv.probes] + [("turn", t) for t in users[::step]]
        emb.embed([q for _, q in queries])
        for budget in budgets:
            mems = {k: MemoryManager(budget=budget, policy=p, tokenizer=tok, embedder=emb, **options[k])  # type: ignore[arg-type]
                    for k, p in policies.items()}
            for mem in mems.values():
                mem.extend(conv.messages)
            for i, (kind, q) in enumerate(queries):
                order = list(mems) if i % 2 == 0 else list(mems)[::-1]
                for k in order:
                    _session.NEIGHBOUR_HITS = hits[k]
                    t0 = time.perf_counter()
                    mems[k].messages(q)
                    times[(k, kind)].append((time.perf_counter() - t0) * 1000.0)
    emb.save()
    print(f"messages(query) on {len(convs)} LoCoMo conversations x budgets {budgets}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()} "
          f"({time.perf_counter() - t_start:.0f} s)")
    print(f"{'queries':<10} {'policy':<8} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8}")
    for kind in ("question", "turn"):
        for k in policies:
            v = np.array(times[(k, kind)])
            print(f"{kind:<10} {k:<8} {len(v):>6} {np.percentile(v, 50):8.1f} {np.percentile(v, 95):8.1f} {v.mean():8.1f}")
        b, a = (np.percentile(times[(k, kind)], 95) for k in ("before", "after"))
        print(f"{kind:<10} p95 after / before: {a / b:.2f}")


if __name__ == "__main__":
    main()
