"""Candidate prior features, leave one conversation out on LoCoMo dev (issue 25 item 1).

Each candidate is added alone to the shipped prior features (with the salience direction learned per fold,
as in loco_value_model.py); ``set A,B,..`` measures a set and drops each of its features in turn. Exact
knapsack on the predicted values, overhead counted, no markers. Figures: LOCO mean over conversations
[95% bootstrap interval over questions] and the paired difference against the reference. The word-rarity
candidates need ``pip install wordfreq`` (not an rdmem dependency: they were dropped). The reference is PRIOR_FEATURES as they are now (the figures in BENCHMARKS were measured at
e928ecb, before proper_nouns and first_person_events joined them). Rows are cached in $TMPDIR: delete
loco_prior_features.pkl after changing the features.

    HF_HUB_OFFLINE=1 LOCOMO=../shared/data/locomo/locomo_dev.json .venv/bin/python benchmarks/loco_prior_features.py add
    ... benchmarks/loco_prior_features.py set proper,rare_top3,fp_event,plan
    ... benchmarks/loco_prior_features.py accounting   # the shipped prior under other token accountings
"""
import os, sys, re, time, pickle, warnings
import numpy as np
os.environ.setdefault("HF_HUB_OFFLINE", "1"); warnings.simplefilter("ignore", RuntimeWarning)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loco_value_model import locomo_setup, recall_weights
from rdmem.learn.train import training_rows, SALIENCE_COMPONENTS
from rdmem.scoring.value_features import PRIOR_FEATURES, message_body
from rdmem.scoring.logistic import LogisticModel
from rdmem.select import knapsack
from rdmem.units import encode_units
from rdmem.features import date_spans, _NUMBER, content_words, tokenize_words

PATH = os.environ.get("LOCOMO", "../shared/data/locomo/locomo_dev.json")
CP = os.path.join(os.environ.get("TMPDIR", "/tmp"), "loco_prior_features.pkl")
if os.path.exists(CP):
    convs, rows, costs, weights, texts, qrec = pickle.load(open(CP, "rb"))
else:
    emb, tok, convs = locomo_setup(PATH)
    rows = [training_rows(c, tok, emb) for c in convs]
    costs, weights = recall_weights(convs, tok)
    texts = [[u.text for u in encode_units(c.messages, tok)] for c in convs]
    # per question evidence indices
    qrec = []
    for c, t in zip(convs, texts):
        ids = [m["id"] for m in c.messages]; pos = {i: k for k, i in enumerate(ids)}
        qrec.append([[pos[e] for e in p.evidence if e in pos] for p in c.probes if p.evidence])
    pickle.dump((convs, rows, costs, weights, texts, qrec), open(CP, "wb"))

try:
    from wordfreq import zipf_frequency
except ImportError:  # the rarity candidates read 0
    def zipf_frequency(word, lang):
        return 8.0
_CLOSE = re.compile(r"\b(?:bye|see you|see ya|take care|talk (?:to you )?(?:soon|later)|catch you later|gotta go|have a (?:good|great|nice)|good ?night|until next time|chat (?:soon|later))\b", re.I)
_YOU = re.compile(r"\b(?:you|your|you're|you've|yours|u)\b", re.I)
_PLAN = re.compile(r"\b(?:i'm going to|i am going to|i plan|i'm planning|we're planning|i will|i'll|we'll|we're going to|i'm thinking (?:of|about)|i want to|i hope to|next (?:week|month|year|summer))\b", re.I)
_PREF = re.compile(r"\b(?:i love|i like|i enjoy|i prefer|i hate|my favou?rite|i'm (?:really )?into|i'm a (?:big )?fan)\b", re.I)
_FPEV = re.compile(r"\b(?:i|we)\s+(?:just\s+|finally\s+|recently\s+|also\s+)?(?:\w+ed|went|got|took|made|ran|bought|began|won|met|saw|gave|did|had|found|left|read|wrote|built|came|started|joined|signed)\b", re.I)
_MY = re.compile(r"\bmy\s+(?:\w+\s+)?(?:sister|brother|mom|mother|dad|father|kids?|son|daughter|husband|wife|partner|friend|friends|family|dog|cat|pet|grandma|grandpa|parents|boss|team|job|house|car)\b", re.I)
_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")
_PHOTO = re.compile(r"\[shares? .*?\]")

def rarity(words):
    z = sorted(8.0 - zipf_frequency(w, "en") for w in words)
    return z

def extra(text, prev_text, ):
    body = message_body(text)
    words = tokenize_words(body); nw = max(len(words), 1)
    cw = [w for w in content_words(body) if w.isalpha()]
    r = rarity(cw)
    sents = [s for s in re.split(r"(?<=[.!?])\s+", body.strip()) if s]
    nq = sum(s.rstrip().endswith("?") for s in sents)
    props = [m.group(0) for m in _PROPER.finditer(_PHOTO.sub("", body)) if m.group(0).lower() not in ("i", "i'm")]
    return {
        "n_dates": np.log1p(sum(1 for _ in date_spans(body))),
        "n_numbers": np.log1p(len(_NUMBER.findall(body))),
        "proper": np.log1p(len(set(props))),
        "rare_max": r[-1] if r else 0.0,
        "rare_top3": np.mean(r[-3:]) if r else 0.0,
        "rare_n": float(sum(x > 4.5 for x in r)),
        "you": len(_YOU.findall(body)) / nw,
        "q_share": nq / max(len(sents), 1),
        "ends_q": float(body.rstrip().endswith("?")),
        "closing": float(bool(_CLOSE.search(body))),
        "plan": float(bool(_PLAN.search(body))),
        "pref": float(bool(_PREF.search(body))),
        "fp_event": float(len(_FPEV.findall(body))),
        "my_rel": float(bool(_MY.search(body))),
        "photo": float(bool(_PHOTO.search(body))),
        "prev_q": float(prev_text is not None and message_body(prev_text).rstrip().endswith("?")),
        "content_share": len(cw) / nw,
    }

# the small LM's surprisal of each turn given the 3 before it (benchmarks/loco_surprisal.py; zeros if not run)
SP = os.path.join(os.environ.get("TMPDIR", "/tmp"), "loco_surprisal.pkl")
SURP = pickle.load(open(SP, "rb")) if os.path.exists(SP) else None

EX = None
def extras(i):
    global EX
    t = texts[i]
    ds = [extra(t[k], t[k-1] if k else None) for k in range(len(t))]
    names = list(ds[0])
    x = np.array([[d[n] for n in names] for d in ds])
    # causal novelty: vs the history so far
    e = np.asarray(rows[i]["e"], dtype=np.float64); s = e @ e.T
    n = len(e); nov = np.ones(n); nov20 = np.ones(n)
    for k in range(1, n):
        nov[k] = 1 - s[k, :k].max(); nov20[k] = 1 - s[k, max(0, k-20):k].max()
    x = np.hstack([x, nov[:, None], nov20[:, None], SURP[i] if SURP else np.zeros((n, 3))])
    return names + ["novelty_past", "novelty_past20", "surp_mean", "surp_max", "surp_top5"], x

t0 = time.time()
EXN = None; EXX = []
for i in range(len(convs)):
    EXN, xx = extras(i); EXX.append(xx)
print(f"extras {time.time()-t0:.1f}s", file=sys.stderr)
BASE = list(PRIOR_FEATURES); SAL = BASE.index("salience")
ALLN = BASE + EXN
XALL = [np.hstack([rows[i]["xp"], EXX[i]]) for i in range(len(convs))]
E = [np.asarray(r["e"], dtype=np.float64) for r in rows]
Y = [r["yp"] for r in rows]

def fold(cols, tr, te, l2=1.0, k=SALIENCE_COMPONENTS):
    x = np.vstack([E[i] for i in tr]); mean = x.mean(0)
    basis = np.linalg.svd(x - mean, full_matrices=False)[2][:k].T
    keep = [j for j in cols if j != SAL]
    m = LogisticModel(tuple(ALLN[j] for j in keep) + tuple(f"pc{j}" for j in range(k)), l2=l2).fit(
        np.vstack([np.hstack([XALL[i][:, keep], (E[i] - mean) @ basis]) for i in tr]), np.concatenate([Y[i] for i in tr]))
    d = basis @ (m.weights_[len(keep):] / m.scale_[len(keep):])
    def xs(i):
        x = XALL[i].copy(); x[:, SAL] = (E[i].astype(np.float32) @ d.astype(np.float32)); return x[:, cols]
    pm = LogisticModel(tuple(ALLN[j] for j in cols), l2=l2).fit(np.vstack([xs(i) for i in tr]), np.concatenate([Y[i] for i in tr]))
    return pm.predict(xs(te)), pm

def evaluate(names, budgets=(1000, 2000, 4000)):
    cols = [ALLN.index(n) for n in names]
    per_q = {b: [] for b in budgets}; conv = {b: [] for b in budgets}
    for te in range(len(convs)):
        p, _ = fold(cols, [j for j in range(len(convs)) if j != te], te)
        for b in budgets:
            sel = np.zeros(len(p), bool); sel[knapsack(p, costs[te], b)] = True
            rq = [sel[ev].mean() if ev else 0.0 for ev in qrec[te]]
            per_q[b] += rq; conv[b].append(float(weights[te][sel].sum()))
    return {b: (np.mean(conv[b]), np.array(per_q[b])) for b in budgets}

rng = np.random.default_rng(0)
NQ = sum(len(q) for q in qrec); BS = rng.integers(0, NQ, size=(1000, NQ))
def ci(a): m = a[BS].mean(1); return np.percentile(m, [2.5, 97.5])

def show(label, res, base=None):
    parts = []
    for b, (cm, pq) in res.items():
        lo, hi = ci(pq); s = f"{cm:.3f} [{lo:.3f},{hi:.3f}]"
        if base is not None:
            dl, dh = ci(pq - base[b][1]); s += f" d{cm-base[b][0]:+.3f} [{dl:+.3f},{dh:+.3f}]"
        parts.append(s)
    print(f"{label:<28} " + " | ".join(parts), flush=True)

if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "add"
    base = evaluate(BASE); show("shipped", base)
    if mode == "only":  # the named candidates alone: python loco_prior_features.py only surp_mean,surp_max
        for n in sys.argv[2].split(","):
            show("+" + n, evaluate(BASE + [n]), base)
    elif mode == "add":
        for n in EXN:
            show("+" + n, evaluate(BASE + [n]), base)
        full = evaluate(BASE + EXN); show("+all", full, base)
    elif mode == "accounting":  # the shipped prior under other token accountings (what a target's figure means)
        from rdmem.tokens import get_tokenizer
        tok = get_tokenizer("cl100k_base")
        harness = costs
        for label, cost_of in (("text, no per-message overhead", tok.count),
                               ("body only (no '[date] Speaker:' label)", lambda t: tok.count(message_body(t))),
                               ("words of the body", lambda t: len(message_body(t).split()))):
            costs = [np.array([max(1, cost_of(t)) for t in ts]) for ts in texts]
            show(label, evaluate(BASE), base)
        costs = harness
    else:
        feats = sys.argv[2].split(",")
        full = BASE + feats
        res = evaluate(full); show("set", res, base)
        for n in full:
            show("-" + n, evaluate([f for f in full if f != n]), res)
