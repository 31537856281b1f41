"""How many principal components the prior's "salience" direction should be learned in (issue 5).

Leave-one-conversation-out on the LoCoMo dev file, selection only (as
``loco_value_model.py``): for each held-out conversation, the direction is
learned on the other five (``rdmem.learn.train.salience_direction`` with
``K`` components; 0: no salience feature), the prior model is fitted on the
five, and the held-out conversation is scored by an exact knapsack on the
predicted values (per-message overhead counted, no elision markers).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/loco_salience.py [PATH] [K ...]
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.simplefilter("ignore", RuntimeWarning)

from rdmem.scoring.value_features import PRIOR_FEATURES  # noqa: E402
from rdmem.scoring.logistic import LogisticModel  # noqa: E402
from rdmem.learn.train import salience_direction, training_rows, with_salience  # noqa: E402
from rdmem.select import knapsack  # noqa: E402
from loco_value_model import locomo_setup, recall_weights  # noqa: E402  (this folder is on sys.path when run as a script)

PATH = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/locomo/locomo_dev.json"
KS = tuple(int(k) for k in sys.argv[2:]) or (0, 16, 32, 64)
BUDGETS = (1000, 2000, 4000)


def main() -> None:
    t0 = time.time()
    emb, tok, convs = locomo_setup(PATH)
    rows = [training_rows(c, tok, emb) for c in convs]
    costs, weights = recall_weights(convs, tok)
    emb.save()

    def held_out(test: int, k: int) -> list[float]:
        train = [i for i in range(len(convs)) if i != test]
        direction = salience_direction([rows[i] for i in train], components=k) if k else None
        xps = {i: with_salience(rows[i], direction) for i in (*train, test)}
        m = LogisticModel(PRIOR_FEATURES).fit(
            np.vstack([xps[i] for i in train]), np.concatenate([rows[i]["yp"] for i in train])
        )
        p = m.predict(xps[test])
        return [float(weights[test][knapsack(p, costs[test], b)].sum()) for b in BUDGETS]

    print("prior model, leave-one-conversation-out (selection only, overhead counted, no markers)")
    print("  K (0: no salience)  " + "  ".join(f"@{b:>5}" for b in BUDGETS) + "   per conversation @2000")
    for k in KS:
        res = np.array([held_out(i, k) for i in range(len(convs))])
        per = " ".join(f"{v:.3f}" for v in res[:, 1])
        print(f"  {k:>18}  " + "  ".join(f"{v:.4f}" for v in res.mean(axis=0)) + f"   {per}")
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
