"""The latest-turn regime (issue 25, item 4): how much the latest user turn, taken as the query, should count.

Three ``rd`` variants on the LoCoMo dev conversations, in one ``run_eval``
(streaming and latest regimes): ``rd-relevance`` (the query model alone,
``RDPolicy(query_weight=1.0)``: rdmem before queries were weighed),
``rd-prior`` (``query_weight=0.0``: the query ignored, the prior decides over
the working set and the archived messages the query retrieved) and ``rd`` (the
default: the query's weight is its :class:`~rdmem.scoring.Informativeness`).
Prints evidence recall per budget: the streaming regime, the latest regime
over all its points, and at the last point (the streaming regime's memory,
asked the conversation's last user turn), with per-conversation figures there.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/latest_regime.py [LOCOMO_JSON] [--budgets 1000,2000,4000]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rdmem import register_policy  # noqa: E402
from rdmem.datasets import load_locomo  # noqa: E402
from rdmem.eval import EvalConfig, run_eval  # noqa: E402
from rdmem.eval.metrics import mean_ci  # noqa: E402
from rdmem.policies import RDPolicy  # noqa: E402

VARIANTS = ("rd-relevance", "rd-prior", "rd")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--budgets", default="1000,2000,4000")
    args = ap.parse_args()
    # Registered here, so the run is in this process (workers=1): spawned workers would not know the names.
    register_policy("rd-relevance", lambda: RDPolicy(name="rd-relevance", query_weight=1.0))
    register_policy("rd-prior", lambda: RDPolicy(name="rd-prior", query_weight=0.0))
    budgets = tuple(int(b) for b in args.budgets.split(","))
    cfg = EvalConfig(budgets=budgets, policies=VARIANTS, regimes=("streaming", "latest"), workers=1,
                     calibrate_embedding=False)
    t0 = time.perf_counter()
    res = run_eval(load_locomo(args.path), cfg, dataset=args.path)
    print(f"LoCoMo dev, categories 1-4, evidence recall ({time.perf_counter() - t0:.0f} s); "
          f"latest: {cfg.latest_points} points per conversation")
    print(f"{'policy':<13} {'budget':>6}  {'streaming':>22}  {'latest, all points':>22}  {'latest, last point':>22}")
    convs = sorted({q["conversation"] for q in res.questions})
    for b in budgets:
        for p in VARIANTS:
            s, lat = res.row("streaming", p, b), res.row("latest", p, b)
            recs = [q for q in res.questions if q["regime"] == "latest" and q["policy"] == p and q["budget"] == b]
            end = {c: max(q["point"] for q in recs if q["conversation"] == c) for c in convs}
            last = [q for q in recs if q["point"] == end[q["conversation"]]]
            m, lo, hi = mean_ci([q["evidence_recall"] for q in last], seed=0)
            per = " ".join(f"{np.mean([q['evidence_recall'] for q in last if q['conversation'] == c]):.3f}"
                           for c in convs)
            print(f"{p:<13} {b:>6}  {_ci(s.evidence_recall, s.evidence_recall_lo, s.evidence_recall_hi):>22}  "
                  f"{_ci(lat.evidence_recall, lat.evidence_recall_lo, lat.evidence_recall_hi):>22}  "
                  f"{_ci(m, lo, hi):>22}  per conversation at the last point: {per}")
    print("conversations:", " ".join(convs))


def _ci(m: float, lo: float, hi: float) -> str:
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]"


if __name__ == "__main__":
    main()
