"""Does a history give the same selections in-process (the in-memory store) and through the service (SQLite)?

For each LoCoMo dev conversation, two managers are fed the same messages, one
on a ``MemoryStore`` and one on a ``SQLiteStore`` file; then every question is
asked of both (``context(query)``, the query regime) and the kept sets are
compared, with each side's evidence recall. Embeddings come from the disk
cache of ``rdmem eval`` (the same vectors for both sides).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/one_ranking.py [LOCOMO_JSON] [--budgets 2000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.simplefilter("ignore", RuntimeWarning)

from rdmem import MemoryManager  # noqa: E402
from rdmem.datasets import load_locomo  # noqa: E402
from rdmem.eval.config import cached_embedder  # noqa: E402
from rdmem.eval.metrics import evidence_recall  # noqa: E402
from rdmem.store import MemoryStore  # noqa: E402
from rdmem.store.sqlite import SQLiteStore  # noqa: E402
from rdmem.tokens import get_tokenizer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--budgets", default="2000")
    args = ap.parse_args()
    convs = [c.select([1, 2, 3, 4]) for c in load_locomo(args.path)]
    emb, tok = cached_embedder(), get_tokenizer("cl100k_base")
    t0 = time.perf_counter()
    print("| budget | questions | same kept set | evidence recall: memory store | SQLite store |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for budget in (int(b) for b in args.budgets.split(",")):
            same, recall = 0, {"memory": [], "sqlite": []}
            for conv in convs:
                emb.embed([p.question for p in conv.probes])
                stores = {"memory": MemoryStore(), "sqlite": SQLiteStore(os.path.join(tmp, f"{conv.id}-{budget}.db"))}
                mems = {k: MemoryManager(budget=budget, policy="rd", tokenizer=tok, embedder=emb, store=s, session=conv.id)
                        for k, s in stores.items()}
                for mem in mems.values():
                    mem.extend(conv.messages)
                for probe in (p for p in conv.probes if p.evidence):
                    kept = {k: set(m.context(query=probe.question).kept_ids) for k, m in mems.items()}
                    same += kept["memory"] == kept["sqlite"]
                    for k, ids in kept.items():
                        recall[k].append(evidence_recall(probe.evidence, ids))
                stores["sqlite"].close()
            n = len(recall["memory"])
            print(f"| {budget:,} | {n} | {same} ({same / n:.0%}) | {np.mean(recall['memory']):.3f} | "
                  f"{np.mean(recall['sqlite']):.3f} |")
    emb.save()
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
