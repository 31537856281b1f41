"""A learned query map for MiniLM (issue 25, item 3), leave-one-conversation-out: does it lift the query side?

The question's vector q is moved by a low-rank map, q' = normalise(q + U Vᵀ q) (U, V: 384 x rank), fitted
(torch, Adam, a listwise softmax over the conversation's turns with the evidence as targets, L2 on U and V)
on the questions of the training conversations. Two readings, both leave-one-conversation-out on LoCoMo dev:

1. ``dense``: the evidence's recall among the top k turns by cosine alone, q against q' (k 10, 20, 40).
2. ``model``: the shipped query model (``loco_query_levers.py``'s rows, the prior and the query model refitted
   per fold) with its cosine columns computed from q' (``replace``), with z(cos(q', d)) as one more column
   (``column``), or both; the map of a training conversation's rows fitted without it (nested), so the query
   model weighs the column as it would on unseen data. And ``resid``: the map fitted on the residual of the
   fold's query model (its logit + w z(cos(q', d)), w learned). Exact knapsack over the held-out conversation
   at 1,000 / 2,000 / 4,000 tokens, paired with the shipped features.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/loco_query_map.py [--rank 16] [--lam 0.03] [--tau 0.05]

Needs torch (the ``lm`` extra) and ``loco_query_levers.py``'s cached rows (it builds them the first time).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import loco_query_levers as L  # noqa: E402
from loco_value_model import locomo_setup  # noqa: E402
from rdmem.learn.train import salience_direction, with_salience  # noqa: E402
from rdmem.scoring import ScoringContext  # noqa: E402
from rdmem.scoring.logistic import LogisticModel  # noqa: E402
from rdmem.scoring.value_features import QUERY_FEATURES, WIN_REACH, _neighbour_max, _rank_feature, _zscore  # noqa: E402
from rdmem.select import knapsack  # noqa: E402
from rdmem.units import encode_units  # noqa: E402


def vectors(path: str) -> list[dict]:
    """Per conversation: its turns' and questions' MiniLM vectors and each question's evidence positions."""
    emb, tok, convs = locomo_setup(path)
    out = []
    for c in convs:
        units = encode_units(c.messages, tok)
        e = np.asarray(ScoringContext(units, embedder=emb).embeddings, dtype=np.float32)
        pos = {u.id: i for i, u in enumerate(units)}
        probes = [p for p in c.probes if p.evidence]
        q = np.asarray(emb.embed([p.question for p in probes]), dtype=np.float32)
        out.append({"E": e, "Q": q / np.linalg.norm(q, axis=1, keepdims=True),
                    "ev": [[pos[x] for x in p.evidence if x in pos] for p in probes], "cat": [p.category for p in probes]})
    emb.save()
    return out


def fit_map(D: list[dict], convs: list[int], rank: int, lam: float, tau: float, epochs: int,
            base: dict | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """U, V (and w, with ``base``: each question's logits from the query model, the map fitted on its residual)."""
    import torch

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    U = (torch.randn(384, rank, generator=g) * 0.01).requires_grad_()
    V = (torch.randn(384, rank, generator=g) * 0.01).requires_grad_()
    w = torch.tensor(0.5, requires_grad=True)
    opt = torch.optim.Adam([U, V, w] if base else [U, V], lr=3e-3)
    data = []
    for i in convs:
        Y = torch.zeros(len(D[i]["ev"]), len(D[i]["E"]))
        for k, ev in enumerate(D[i]["ev"]):
            Y[k, ev] = 1.0 / len(ev)
        B = torch.tensor(np.stack(base[i]), dtype=torch.float32) if base else None
        data.append((torch.tensor(D[i]["E"]), torch.tensor(D[i]["Q"]), B, Y))
    for _ in range(epochs):
        opt.zero_grad()
        loss = torch.tensor(0.0)
        for E, Q, B, Y in data:
            q = Q + (Q @ V) @ U.T
            c = (q / q.norm(dim=1, keepdim=True)) @ E.T
            s = c / tau if B is None else B + w * (c - c.mean(1, keepdim=True)) / c.std(1, keepdim=True)
            loss = loss - (Y * torch.log_softmax(s, dim=1)).sum(1).mean()
        (loss / len(data) + lam * ((U ** 2).sum() + (V ** 2).sum())).backward()
        opt.step()
    return U.detach().numpy(), V.detach().numpy(), float(w.detach())


def moved(m: tuple, Q: np.ndarray) -> np.ndarray:
    q = Q + (Q @ m[1]) @ m[0].T
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def cos_columns(xq: np.ndarray, cos: np.ndarray) -> np.ndarray:
    """``xq`` with its cosine columns recomputed from ``cos`` (the candidates: the whole conversation)."""
    x, idx, cz = xq.copy(), np.arange(len(cos)), _zscore(cos)
    x[:, 0], x[:, 1], x[:, 2] = cos, cz, _rank_feature(cos)
    x[:, 5], x[:, 13] = _neighbour_max(cz, idx), _neighbour_max(cz, idx, reach=WIN_REACH)
    first = cz + _zscore(x[:, 3])
    x[:, 14] = np.maximum(first, _neighbour_max(first, idx, reach=WIN_REACH))
    return x


def show(name: str, recs: list, first: np.ndarray | None) -> np.ndarray:
    got, cats = np.array([r[1] for r in recs]), np.array([r[0] for r in recs])
    first = got if first is None else first
    cells = []
    for j, b in enumerate(L.BUDGETS):
        v, d = got[:, j], got[:, j] - first[:, j]
        pick = np.random.default_rng(0).integers(0, len(v), (1000, len(v)))
        per = " ".join(f"{v[cats == c].mean():.3f}" for c in (1, 2, 3, 4))
        cells.append(f"{b}: {v.mean():.3f} d{d.mean():+.3f} [{np.percentile(d[pick].mean(1), 2.5):+.3f}, "
                     f"{np.percentile(d[pick].mean(1), 97.5):+.3f}] ({per})")
    print(f"{name:<8} " + " | ".join(cells), flush=True)
    return first


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--lam", type=float, default=0.03)
    ap.add_argument("--tau", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=100)
    args = ap.parse_args()
    hp = (args.rank, args.lam, args.tau, args.epochs)
    t0 = time.time()
    D = vectors(args.data)
    folds = range(len(D))
    print(f"dense recall@k by cosine, q -> q' (multi-hop temporal open-domain single-hop), rank {args.rank}, "
          f"lambda {args.lam}, tau {args.tau}:")
    got: dict = {}
    for t in folds:
        m = fit_map(D, [i for i in folds if i != t], *hp)
        for name, S in (("q", D[t]["Q"] @ D[t]["E"].T), ("q'", moved(m, D[t]["Q"]) @ D[t]["E"].T)):
            for j, ev in enumerate(D[t]["ev"]):
                top = np.argsort(-S[j])
                got.setdefault(name, []).append((D[t]["cat"][j], [len(set(top[:k]) & set(ev)) / len(ev)
                                                                   for k in (10, 20, 40)]))
    for k, col in zip((10, 20, 40), range(3)):
        line = []
        for name in ("q", "q'"):
            v = np.array([r[1][col] for r in got[name]])
            cats = np.array([r[0] for r in got[name]])
            line.append(f"{name} {v.mean():.3f} (" + " ".join(f"{v[cats == c].mean():.3f}" for c in (1, 2, 3, 4)) + ")")
        print(f"  @{k}: " + "  ->  ".join(line), flush=True)

    rows, costs, data = L.load_rows(args.data)
    qi = QUERY_FEATURES.index("prior_logit")
    maps = {frozenset([t]): fit_map(D, [i for i in folds if i != t], *hp) for t in folds}
    for t in folds:
        for i in folds:
            if i != t and frozenset([t, i]) not in maps:
                maps[frozenset([t, i])] = fit_map(D, [j for j in folds if j not in (t, i)], *hp)
    print(f"query model over the whole conversation ({len(maps)} maps, {time.time() - t0:.0f} s so far):", flush=True)
    logits = {}
    for test in folds:
        train = [j for j in folds if j != test]
        direction = salience_direction([rows[i] for i in train])
        xps = {i: with_salience(rows[i], direction) for i in folds}
        prior = LogisticModel(L.PRIOR_FEATURES).fit(np.vstack([xps[i] for i in train]),
                                                    np.concatenate([rows[i]["yp"] for i in train]))
        logits[test] = {i: prior.decision(xps[i]) for i in folds}

    def matrices(ci: int, lg: dict, variant: str, key: frozenset | None) -> list[np.ndarray]:
        Qm = moved(maps[key], D[ci]["Q"]) if key is not None else None
        out = []
        for k in range(len(data[ci])):
            xq = data[ci][k][0].copy()
            xq[:, qi] = lg[ci]
            if variant in ("replace", "both"):
                xq = cos_columns(xq, D[ci]["E"] @ Qm[k])
            if variant == "column":
                xq = np.hstack([xq, _zscore(D[ci]["E"] @ Qm[k])[:, None]])
            if variant == "both":
                xq = np.hstack([xq, _zscore(data[ci][k][0][:, 0])[:, None]])
            out.append(xq)
        return out

    first = None
    for variant in ("shipped", "replace", "column", "both", "resid"):
        recs = []
        for test in folds:
            train, lg = [j for j in folds if j != test], logits[test]
            plain = variant in ("shipped", "resid")
            X = [m for i in train for m in matrices(i, lg, variant, None if plain else frozenset([test, i]))]
            y = np.concatenate([data[i][k][2] for i in train for k in range(len(data[i]))])
            names = QUERY_FEATURES + (("lq_cos_z",) if variant in ("column", "both") else ())
            model = LogisticModel(names).fit(np.vstack(X), y)
            held = matrices(test, lg, variant, None if plain else frozenset([test]))
            scores = [model.decision(x) for x in held]
            if variant == "resid":
                base = {i: [model.decision(x) for x in matrices(i, lg, variant, None)] for i in train}
                U, V, w = fit_map(D, train, args.rank, args.lam, 1.0, args.epochs, base=base)
                Qm = moved((U, V), D[test]["Q"])
                scores = [s + w * _zscore(D[test]["E"] @ Qm[k]) for k, s in enumerate(scores)]
            for k, s in enumerate(scores):
                y_k, cat = data[test][k][2], data[test][k][3]
                p = 1 / (1 + np.exp(-s))
                recs.append((cat, [y_k[knapsack(p, costs[test], b)].sum() / y_k.sum() for b in L.BUDGETS]))
        first = show(variant, recs, first)
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
