"""Leave-one-conversation-out check of the value models (issue 5).

For each LoCoMo dev conversation: fit the prior and query models on the other
five, then measure evidence recall (categories 1-4) of an exact knapsack on
the predicted values over the held-out conversation, against the same
knapsack on the models fitted on all six (in-sample) and against simple
baselines. Selection only (per-message overhead counted, no elision markers).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/loco_value_model.py [PATH]
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.simplefilter("ignore", RuntimeWarning)

from rdmem.embed import CachedEmbedder, SentenceTransformerEmbedder  # noqa: E402
from rdmem.datasets import Conversation, load_locomo  # noqa: E402
from rdmem.eval.metrics import oracle_values  # noqa: E402
from rdmem.scoring.value_features import PRIOR_FEATURES, QUERY_FEATURES  # noqa: E402
from rdmem.scoring.logistic import LogisticModel  # noqa: E402
from rdmem.learn.train import salience_direction, training_rows, with_salience  # noqa: E402
from rdmem.select import knapsack  # noqa: E402
from rdmem.tokens import get_tokenizer  # noqa: E402

PATH = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/locomo/locomo_dev.json"
CACHE = os.environ.get("RDMEM_CACHE_DIR", os.path.expanduser("~/.cache/rdmem"))
STREAM_BUDGETS = (2000, 4000)
QUERY_BUDGETS = (1000, 2000, 4000)


def main() -> None:
    t0 = time.time()
    emb, tok, convs = locomo_setup(PATH)
    boot = LogisticModel(PRIOR_FEATURES).fit(*_stack([training_rows(c, tok, emb) for c in convs], "xp", "yp"))
    rows = [training_rows(c, tok, emb, boot) for c in convs]
    emb.save()
    costs, weights = recall_weights(convs, tok)

    def evaluate(train_idx: list[int], test: int) -> dict[str, float]:
        # The salience direction is learned on the training conversations only, like the weights.
        direction = salience_direction([rows[i] for i in train_idx])
        xps = {i: with_salience(rows[i], direction) for i in (*train_idx, test)}
        prior = LogisticModel(PRIOR_FEATURES).fit(
            np.vstack([xps[i] for i in train_idx]), np.concatenate([rows[i]["yp"] for i in train_idx])
        )
        qi = QUERY_FEATURES.index("prior_logit")
        xs, ys = [], []
        for i in train_idx:
            xq = rows[i]["xq"].copy()
            n = len(xps[i])
            xq[:, qi] = np.tile(prior.decision(xps[i]), len(xq) // n)
            xs.append(xq)
            ys.append(rows[i]["yq"])
        query = LogisticModel(QUERY_FEATURES).fit(np.vstack(xs), np.concatenate(ys))
        out = {}
        xp, cost = xps[test], costs[test]
        p = prior.predict(xp)
        for b in STREAM_BUDGETS:
            out[f"prior@{b}"] = float(weights[test][knapsack(p, cost, b)].sum())
        xq = rows[test]["xq"].copy()
        n = len(xp)
        xq[:, qi] = np.tile(prior.decision(xp), len(xq) // n)
        pq = query.predict(xq).reshape(-1, n)
        yq = rows[test]["yq"].reshape(-1, n)
        for b in QUERY_BUDGETS:
            rec = [yq[k][knapsack(pq[k], cost, b)].sum() / max(yq[k].sum(), 1) for k in range(len(pq))]
            out[f"query@{b}"] = float(np.mean(rec))
        return out

    loco = [evaluate([j for j in range(len(convs)) if j != i], i) for i in range(len(convs))]
    insample = [evaluate(list(range(len(convs))), i) for i in range(len(convs))]
    keys = list(loco[0])
    print(f"value models, leave-one-conversation-out on {os.path.basename(PATH)} (selection only, overhead counted, no markers)")
    print(f"{'held out':>10} " + " ".join(f"{k:>11}" for k in keys))
    for c, r in zip(convs, loco, strict=True):
        print(f"{c.id:>10} " + " ".join(f"{r[k]:11.3f}" for k in keys))
    print(f"{'LOCO mean':>10} " + " ".join(f"{np.mean([r[k] for r in loco]):11.3f}" for k in keys))
    print(f"{'in-sample':>10} " + " ".join(f"{np.mean([r[k] for r in insample]):11.3f}" for k in keys))
    print(f"({time.time() - t0:.0f} s)")


def locomo_setup(path: str) -> tuple[CachedEmbedder, object, list[Conversation]]:
    """The cached MiniLM embedder, the cl100k tokenizer and the conversations (categories 1-4) at ``path``."""
    emb = CachedEmbedder(SentenceTransformerEmbedder(), cache_dir=CACHE)
    return emb, get_tokenizer("cl100k_base"), [c.select([1, 2, 3, 4]) for c in load_locomo(path)]


def recall_weights(convs: list[Conversation], tok: object) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per conversation: each message's token cost, and its share of the mean evidence recall over questions."""
    from rdmem.units import encode_units

    costs, weights = [], []
    for c in convs:
        units = encode_units(c.messages, tok)  # type: ignore[arg-type]
        costs.append(np.array([u.tokens for u in units]))
        probes = [p for p in c.probes if p.evidence]
        weights.append(oracle_values([u.id for u in units], [p.evidence for p in probes]) / max(len(probes), 1))
    return costs, weights


def _stack(rows: list[dict], x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    return np.vstack([r[x] for r in rows]), np.concatenate([r[y] for r in rows])


if __name__ == "__main__":
    main()
