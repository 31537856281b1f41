"""Leave-one-conversation-out check of query-side ranking signals (issue 25, item 3), per question category.

For each LoCoMo dev conversation: fit the prior and the query model on the
other five (as ``loco_value_model.py`` does), the query model with the
shipped query features plus the columns a variant names, and measure evidence
recall of an exact knapsack on its predictions over the held-out conversation
(selection only: overhead counted, no markers, the whole conversation as
candidates), at 1,000 / 2,000 / 4,000 tokens, overall (95% bootstrap
interval over questions) and per category (multi-hop, temporal, open-domain,
single-hop).

Signals (each computed from the question and the conversation only):
  spk_cos_rank, spk_cos_z  the question's cosine ranked / z-scored among the turns of the speaker it names
  other_spk                the turn is spoken by someone the question does not name
  prfK_B_z, prfK_B_rank    Rocchio: the question's vector moved by B x the mean of the first pass's K best turns
  rm3                      RM3: BM25-like match of the 10 best expansion words of the first pass's 5 best turns
  ppr                      personalized PageRank on the turn-word graph (words with IDF >= 2), seeded by the
                           question's words and its 5 nearest turns (HippoRAG's recipe without its LLM)
  hopK                     second hop: z-scored best cosine to one of the first pass's K best turns
  spk_x_cosz, spk_x_bm     speaker match x cosine z-score / BM25
  sess_max, sess_bm        the best cosine z-score / BM25 among the turns of the turn's session (LoCoMo's dia_id)
  sess_rank                the rank of the turn's session by its best first-pass score (cosine z + BM25 z)
  sess_mean                the mean cosine z-score of the turn's session
  winK_max                 the best cosine z-score within K turns either side (no session labels needed; K 3, 5, 10, 20)
  winK_bm                  the best BM25 within K turns either side
  winK_first               the best first-pass score (cosine z + BM25 z) within K turns either side
  nwinK_first              the same without the turn itself (as rdmem computes its window columns)
  dwin5_first_D            the best first-pass score within 5 turns, less D per turn of distance (D 0.1, 0.3)
  win5_first_rank          the rank of win5_first among the turns
  wwinK                    the first-pass score plus 0.5 x the best first-pass score within K turns either side
  wsum                     the first-pass score plus 0.5 x the session's best first-pass score
  sent_max                 the question's best cosine to one sentence of the turn (each sentence embedded
                           alone), z-scored: a fact in one sentence of a longer turn, not diluted by the rest
  sent_gain                sent_max less the whole turn's cosine z-score

A variant may end with options, each after "@":
  spreadG   (G in (0, 1)) instead of the exact knapsack, a greedy by value per token that discounts a turn's
            value by G for every turn already taken from its session (coverage over sessions)
  cwW       the training rows of multi-hop and open-domain questions weigh W (class weighting)
  gbt       gradient-boosted trees (sklearn's HistGradientBoostingClassifier, 200 trees of 15 leaves) on the same
            columns instead of the logistic model: interactions a linear model cannot draw
  qtype     question-type interactions: flags "names two or more people / says both" and "asks what would,
            might or is likely", each alone and times cos_z, bm25, nb_cos_z, speaker_match, prior_logit

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/loco_query_levers.py [--data PATH] VARIANT ...

A VARIANT is "" (the shipped features) or signals joined with "+", e.g. "spk_cos_rank+other_spk".
The per-question feature rows are cached in eval-out/loco_query_rows.pkl (--rebuild to recompute).
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.simplefilter("ignore", RuntimeWarning)

from loco_value_model import _stack, locomo_setup, recall_weights  # noqa: E402
from rdmem.features import content_words  # noqa: E402
from rdmem.learn.train import salience_direction, training_rows, with_salience  # noqa: E402
from rdmem.scoring import ScoringContext, embed_text  # noqa: E402
from rdmem.scoring.lexical import Lexical  # noqa: E402
from rdmem.scoring.logistic import LogisticModel  # noqa: E402
from rdmem.scoring.value_features import (  # noqa: E402
    PRIOR_FEATURES, QUERY_FEATURES, _neighbour_max, _rank_feature, _zscore as _z, _speaker_of, model_prior_matrix, query_entities, query_matrix,
)
from rdmem.select import knapsack  # noqa: E402
from rdmem.units import encode_units  # noqa: E402

BUDGETS = (1000, 2000, 4000)
CACHE = Path("eval-out/loco_query_rows.pkl")


def signals(ctx: ScoringContext) -> dict[str, np.ndarray]:
    """Every candidate signal for ``ctx.query``, one value per unit."""
    n, e, q = len(ctx), ctx.embeddings, ctx.query_embedding
    cos, bm = e @ q, Lexical().score(ctx)
    out: dict[str, np.ndarray] = {}
    ents = query_entities(ctx.query or "")
    spk = np.array([_speaker_of(u) for u in ctx.units])
    named = np.isin(spk, list(ents)) if ents else np.zeros(n, bool)
    if named.any() and not named.all():
        out["spk_cos_rank"] = _rank_feature(np.where(named, cos + 2, 0))
        sub = cos[named]
        out["spk_cos_z"] = np.where(named, (cos - sub.mean()) / (sub.std() if sub.std() > 1e-6 else 1.0), 0.0)
        out["other_spk"] = (~named & (spk != "")).astype(float)
    else:
        out["spk_cos_rank"], out["spk_cos_z"], out["other_spk"] = _rank_feature(cos + 2), _z(cos), np.zeros(n)
    first = _z(cos) + _z(bm)
    order = np.argsort(-first, kind="stable")
    for k, beta in ((3, 0.7), (5, 0.7), (5, 1.5)):
        q2 = q + beta * e[order[:k]].mean(axis=0)
        c2 = e @ (q2 / np.linalg.norm(q2))
        out[f"prf{k}_{beta}_z"], out[f"prf{k}_{beta}_rank"] = _z(c2), _rank_feature(c2 - c2.min() + 1e-3)
    for k in (3, 5, 10):
        sim = e @ e[order[:k]].T
        sim[order[:k], np.arange(k)] = -1.0  # a turn is not its own second hop
        out[f"hop{k}"] = _z(sim.max(axis=1))
    out["rm3"] = _rm3(ctx, order[:5])
    out["ppr"] = _ppr(ctx, cos)
    sp = np.isin(spk, list(ents)).astype(float) if ents else np.zeros(n)
    out["spk_x_cosz"], out["spk_x_bm"] = sp * _z(cos), sp * (bm / bm.max() if bm.max() > 0 else bm)
    out["sent_max"] = _z(_sentence_max(ctx, q))
    out["sent_gain"] = out["sent_max"] - _z(cos)
    return out


_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_SENTENCES: dict[int, tuple[np.ndarray, list[int]]] = {}


def _sentence_max(ctx: ScoringContext, q: np.ndarray) -> np.ndarray:
    """Each unit's best cosine to ``q`` over its sentences, each embedded alone (the embedder's disk cache
    keeps them between runs); a unit of one sentence has its own cosine."""
    key = id(ctx.units)  # one conversation's units serve all its questions
    if key not in _SENTENCES:
        texts, owner = [], []
        for i, u in enumerate(ctx.units):
            for part in _SENTENCE.split(embed_text(u)):
                if part.strip():
                    texts.append(part.strip())
                    owner.append(i)
        vecs = np.asarray(ctx._embedder.embed(texts), dtype=np.float32)
        _SENTENCES[key] = (vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9), owner)
    vecs, owner = _SENTENCES[key]
    best = np.full(len(ctx), -1.0)
    np.maximum.at(best, np.asarray(owner, dtype=int), vecs @ (q / max(float(np.linalg.norm(q)), 1e-9)))
    return best


def _rm3(ctx: ScoringContext, top: np.ndarray, words: int = 10) -> np.ndarray:
    counts, qterms, weight = ctx.word_counts, set(content_words(ctx.query or "")), {}
    for i in top:
        length = max(sum(counts[i].values()), 1)
        for w, c in counts[i].items():
            if w not in qterms and ctx.idf_of(w) > 1.0:
                weight[w] = weight.get(w, 0.0) + c / length * ctx.idf_of(w)
    expansion = sorted(weight, key=lambda w: (-weight[w], w))[:words]
    s = np.zeros(len(ctx))
    total = sum(weight[w] for w in expansion) or 1.0
    for w in expansion:
        s += weight[w] / total * ctx.idf_of(w) * np.fromiter((w in c for c in counts), float, count=len(ctx))
    return s / s.max() if s.max() > 0 else s


def _ppr(ctx: ScoringContext, cos: np.ndarray, alpha: float = 0.5, iters: int = 15) -> np.ndarray:
    vocab: dict[str, int] = {}
    rows, cols = [], []
    for i, c in enumerate(ctx.word_counts):
        for w in c:
            if ctx.idf_of(w) >= 2.0:
                rows.append(i)
                cols.append(vocab.setdefault(w, len(vocab)))
    n = len(ctx)
    if not vocab:
        return np.zeros(n)
    a = np.zeros((n, len(vocab)))
    a[rows, cols] = 1.0
    seed_t = np.zeros(len(vocab))
    for w in set(content_words(ctx.query or "")):
        if w in vocab:
            seed_t[vocab[w]] = ctx.idf_of(w)
    seed_u = np.zeros(n)
    seed_u[np.argsort(-cos, kind="stable")[:5]] = 1.0
    seed_u, seed_t = 0.5 * seed_u / seed_u.sum(), 0.5 * seed_t / max(seed_t.sum(), 1e-12)
    du, dt = np.maximum(a.sum(1), 1), np.maximum(a.sum(0), 1)
    ru, rt = seed_u.copy(), seed_t.copy()
    for _ in range(iters):
        ru, rt = (1 - alpha) * seed_u + alpha * (a @ (rt / dt)), (1 - alpha) * seed_t + alpha * (a.T @ (ru / du))
    return np.log1p(ru * n)


def session_signals(xq: np.ndarray, sess: np.ndarray) -> dict[str, np.ndarray]:
    """Signals computed from the cached query features and each turn's session label."""
    cosz, bm = xq[:, QUERY_FEATURES.index("cos_z")], xq[:, QUERY_FEATURES.index("bm25")]
    first = cosz + _z(bm)
    out = {k: np.zeros(len(sess)) for k in ("sess_max", "sess_bm", "sess_mean", "sess_best")}
    for s in np.unique(sess):
        m = sess == s
        out["sess_max"][m], out["sess_bm"][m] = cosz[m].max(), bm[m].max()
        out["sess_mean"][m], out["sess_best"][m] = cosz[m].mean(), first[m].max()
    labels = np.unique(sess)
    best = np.array([first[sess == s].max() for s in labels])
    rank = dict(zip(labels, _rank_feature(best - best.min() + 1e-3)))
    out["sess_rank"] = np.array([rank[s] for s in sess])
    out["wsum"] = first + 0.5 * out["sess_best"]
    n = len(sess)
    for k in (2, 3, 5, 7, 10, 20):
        out[f"win{k}_max"] = _window_max(cosz, k)
        out[f"win{k}_bm"] = _window_max(bm, k)
        out[f"win{k}_first"] = _window_max(first, k)
        out[f"wwin{k}"] = first + 0.5 * out[f"win{k}_first"]
        out[f"nwin{k}_first"] = _neighbour_max(first, np.arange(len(first)), reach=k)
    for decay in (0.1, 0.3):
        best = first.copy()
        for d in range(1, 6):
            best[d:] = np.maximum(best[d:], first[:-d] - decay * d)
            best[:-d] = np.maximum(best[:-d], first[d:] - decay * d)
        out[f"dwin5_first_{decay}"] = best
    out["win5_first_rank"] = _rank_feature(out["win5_first"] - out["win5_first"].min() + 1e-3)
    return out


def _window_max(x: np.ndarray, k: int) -> np.ndarray:
    """The largest of ``x`` within ``k`` positions either side, itself included (as ``win5_first`` is made)."""
    return np.maximum(x, _neighbour_max(x, np.arange(len(x)), reach=k))


_HYP = re.compile(r"\b(?:would|might|likely|could|probably)\b", re.IGNORECASE)
_BOTH = re.compile(r"\b(?:both|and)\b", re.IGNORECASE)
_INTERACT = ("cos_z", "bm25", "nb_cos_z", "speaker_match", "prior_logit")


def qtype_columns(question: str, xq: np.ndarray) -> np.ndarray:
    """Question-type flags and their products with the main query features (see ``qtype``)."""
    many = float(len(query_entities(question)) >= 2 or bool(_BOTH.search(question)))
    flags = (many, float(bool(_HYP.search(question))))
    cols = [np.full(len(xq), f) for f in flags]
    cols += [f * xq[:, QUERY_FEATURES.index(name)] for f in flags for name in _INTERACT]
    return np.column_stack(cols)


def spread_select(p: np.ndarray, cost: np.ndarray, sess: np.ndarray, budget: int, g: float) -> np.ndarray:
    """Greedy by value per token; a turn's value shrinks by ``g`` for each turn already taken from its session."""
    taken: dict[int, int] = {}
    chosen = np.zeros(len(p), bool)
    left = budget
    dens = p / np.maximum(cost, 1)
    while True:
        eff = dens * np.power(g, [taken.get(s, 0) for s in sess])
        eff[chosen | (cost > left)] = -1.0
        i = int(np.argmax(eff))
        if eff[i] <= 0:
            return np.flatnonzero(chosen)
        chosen[i], left = True, left - cost[i]
        taken[sess[i]] = taken.get(sess[i], 0) + 1


def build(path: str) -> tuple[list[dict], list[np.ndarray], list[list[tuple]]]:
    emb, tok, convs = locomo_setup(path)
    rows = [training_rows(c, tok, emb) for c in convs]
    boot = LogisticModel(PRIOR_FEATURES).fit(*_stack(rows, "xp", "yp"))
    costs, _ = recall_weights(convs, tok)
    data = []
    for c in convs:
        units = encode_units(c.messages, tok)
        ctx = ScoringContext(units, embedder=emb)
        pos = {u.id: i for i, u in enumerate(units)}
        logit = boot.decision(model_prior_matrix(boot, ctx))
        per = []
        for p in (p for p in c.probes if p.evidence):
            q = ScoringContext(units, query=p.question, embedder=emb)
            q.__dict__["embeddings"] = ctx.embeddings
            y = np.zeros(len(units))
            y[[pos[e] for e in p.evidence if e in pos]] = 1.0
            per.append((query_matrix(q, logit), signals(q), y, p.category))
        data.append(per)
    emb.save()
    return rows, costs, data


def load_rows(path: str, rebuild: bool = False) -> tuple[list[dict], list[np.ndarray], list[list[tuple]]]:
    """:func:`build`'s rows, from the cache (:data:`CACHE`) when it is there."""
    if CACHE.is_file() and not rebuild:
        return pickle.loads(CACHE.read_bytes())
    built = build(path)
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    CACHE.write_bytes(pickle.dumps(built))
    return built


class _Trees:
    """Gradient-boosted trees with the logistic model's ``predict`` (the ``@gbt`` option)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> None:
        from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: PLC0415 (this option only)

        self.model = HistGradientBoostingClassifier(max_iter=200, max_leaf_nodes=15, learning_rate=0.05,
                                                    l2_regularization=1.0, random_state=0)
        self.model.fit(x, y, sample_weight=w)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.model.predict_proba(x)[:, 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="*", default=[""])
    ap.add_argument("--data", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    rows, costs, data = load_rows(args.data, rebuild=args.rebuild)
    from rdmem.datasets import load_locomo
    from rdmem.tokens import get_tokenizer

    tok = get_tokenizer("cl100k_base")
    sessions = [np.array([int(u.id.split(":")[0].lstrip("D")) for u in encode_units(c.select([1, 2, 3, 4]).messages, tok)])
                for c in load_locomo(args.data)]
    questions = [[p.question for p in c.select([1, 2, 3, 4]).probes if p.evidence] for c in load_locomo(args.data)]
    for ci, per in enumerate(data):
        for xq, sig, _, _ in per:
            sig.update(session_signals(xq, sessions[ci]))
    qi = QUERY_FEATURES.index("prior_logit")
    folds = range(len(rows))
    logits = {}
    for test in folds:  # the prior of each fold, with its salience direction learned on the other five
        train = [j for j in folds if j != test]
        direction = salience_direction([rows[i] for i in train])
        xps = {i: with_salience(rows[i], direction) for i in folds}
        prior = LogisticModel(PRIOR_FEATURES).fit(np.vstack([xps[i] for i in train]),
                                                  np.concatenate([rows[i]["yp"] for i in train]))
        logits[test] = {i: prior.decision(xps[i]) for i in folds}
    print(f"query model, leave-one-conversation-out ({len(rows)} conversations, features built in "
          f"{time.time() - t0:.0f} s); recall [95% CI] (multi-hop temporal open-domain single-hop)")
    first = None  # the first variant's recall per question and budget: later ones are paired with it
    for variant in args.variants:
        label = variant or "shipped features"
        variant, *opts = variant.split("@")
        spread = next((o[6:] for o in opts if o.startswith("spread")), "")
        cw = float(next((o[2:] for o in opts if o.startswith("cw")), "1"))
        qtype = "qtype" in opts
        gbt = "gbt" in opts
        extra = [v for v in variant.split("+") if v]
        names = QUERY_FEATURES + tuple(extra)
        if qtype:
            names += ("q_many", "q_hyp") + tuple(f"q_{f}_x_{n}" for f in ("many", "hyp") for n in _INTERACT)

        def matrix(ci: int, k: int, logit: np.ndarray) -> np.ndarray:
            xq, sig, _, _ = data[ci][k]
            xq = xq.copy()
            xq[:, qi] = logit
            cols = [xq] + [sig[s][:, None] for s in extra]
            if qtype:
                cols.append(qtype_columns(questions[ci][k], data[ci][k][0]))
            return np.hstack(cols)

        recs = []
        for test in folds:
            train = [j for j in folds if j != test]
            lg = logits[test]
            fit_args = (
                np.vstack([matrix(i, k, lg[i]) for i in train for k in range(len(data[i]))]),
                np.concatenate([data[i][k][2] for i in train for k in range(len(data[i]))]),
                np.concatenate([np.full(len(data[i][k][2]), cw if data[i][k][3] in (1, 3) else 1.0)
                                for i in train for k in range(len(data[i]))]),
            )
            model = _Trees(*fit_args) if gbt else LogisticModel(names).fit(*fit_args)
            for k, (_, _, y, cat) in enumerate(data[test]):
                p = model.predict(matrix(test, k, lg[test]))
                if spread:
                    picks = [spread_select(p, costs[test], sessions[test], b, float(spread)) for b in BUDGETS]
                else:
                    picks = [knapsack(p, costs[test], b) for b in BUDGETS]
                recs.append((cat, [y[ix].sum() / y.sum() for ix in picks]))
        cells = []
        got = np.array([r[1] for r in recs])
        first = got if first is None else first
        for j, b in enumerate(BUDGETS):
            v = got[:, j]
            pick = np.random.default_rng(0).integers(0, len(v), (1000, len(v)))
            per = " ".join(f"{np.mean([r[1][j] for r in recs if r[0] == c]):.3f}" for c in (1, 2, 3, 4))
            cell = f"{b}: {v.mean():.3f} [{np.percentile(v[pick].mean(1), 2.5):.3f}, {np.percentile(v[pick].mean(1), 97.5):.3f}]"
            if got is not first:  # paired with the first variant, question by question
                d = v - first[:, j]
                cell += f" d{d.mean():+.3f} [{np.percentile(d[pick].mean(1), 2.5):+.3f}, {np.percentile(d[pick].mean(1), 97.5):+.3f}]"
            cells.append(f"{cell} ({per})")
        print(f"{label:<34} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
