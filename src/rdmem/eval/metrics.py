"""Distortion metrics: pure functions over ids, texts and arrays.

Evidence recall and the all-evidence rate need labelled evidence (message ids);
answer-token recall needs a gold answer; information and embedding coverage
need nothing but the history. :func:`oracle_ids` is the exact knapsack that
knows every question, the bound no query-agnostic policy can beat.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidInput, MissingDependency
from ..features import content_words
from ..reconstruct import marker_count
from ..select import knapsack
from ..tokens import content_text

__all__ = [
    "evidence_recall",
    "all_evidence",
    "answer_token_recall",
    "context_words",
    "context_text",
    "bootstrap_ci",
    "mean_ci",
    "gain_kept_ci",
    "information_coverage",
    "embedding_coverage",
    "oracle_values",
    "oracle_ids",
    "normalize_answer",
    "token_f1",
    "locomo_f1",
]

_RDMEM_NOTE = re.compile(r"\[rdmem: [^\]\n]*\]")


def evidence_recall(evidence: Collection[str], present: Collection[str]) -> float:
    """Share of ``evidence`` ids found in ``present``; NaN when there is no evidence.

    >>> evidence_recall(["D1:1", "D1:2"], {"D1:2", "D1:7"})
    0.5
    """
    ev = list(dict.fromkeys(evidence))
    if not ev:
        return math.nan
    have = present if isinstance(present, (set, frozenset)) else set(present)
    return sum(e in have for e in ev) / len(ev)


def all_evidence(evidence: Collection[str], present: Collection[str]) -> float:
    """1.0 if every evidence id is present, else 0.0; NaN when there is no evidence.

    >>> all_evidence(["a", "b"], ["a", "b", "c"]), all_evidence(["a", "b"], ["a"])
    (1.0, 0.0)
    """
    r = evidence_recall(evidence, present)
    return r if math.isnan(r) else float(r == 1.0)


def context_text(messages: Iterable[Mapping[str, Any]]) -> str:
    """The text a model reads in ``messages``, without rdmem's own markers and summary headers."""
    return "\n".join(
        "" if marker_count(m) is not None else _RDMEM_NOTE.sub(" ", content_text(m.get("content"))) for m in messages
    )


def context_words(messages: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The distinct content words of rendered messages (see :func:`rdmem.features.content_words`)."""
    return frozenset(content_words(context_text(messages)))


def answer_token_recall(answer: str | None, words: Collection[str]) -> float:
    """Share of the gold answer's distinct content words present in ``words``; NaN without any.

    ``words`` is typically :func:`context_words` of the rendered context, so a
    fact that survives only inside a summary still counts.

    >>> answer_token_recall("Psychology, counseling certification", {"psychology", "certification", "job"})
    0.6666666666666666
    >>> answer_token_recall("yes", {"yes"})
    nan
    """
    if answer is None:
        return math.nan
    gold = set(content_words(str(answer)))
    if not gold:
        return math.nan
    return sum(w in words for w in gold) / len(gold)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    seed: int = 0,
    n_resamples: int = 1000,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean (NaNs ignored).

    Resamples questions with replacement, ``n_resamples`` times, with a
    generator seeded by ``seed`` (no global state). A single value gives a
    zero-width interval; no values give ``(nan, nan)``.

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    """
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise InvalidInput(f"n_resamples must be an int >= 1, got {n_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise InvalidInput(f"confidence must be in (0, 1), got {confidence!r}")
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    # Sample counts per item (multinomial) instead of index arrays: same distribution, O(n) memory.
    counts = rng.multinomial(v.size, np.full(v.size, 1.0 / v.size), size=n_resamples)
    means = counts @ v / v.size
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def mean_ci(
    values: Sequence[float] | np.ndarray, *, seed: int = 0, n_resamples: int = 1000
) -> tuple[float, float, float]:
    """``(mean, low, high)`` with a 95% bootstrap interval; NaNs ignored, all NaN for no values."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (math.nan, math.nan, math.nan)
    lo, hi = bootstrap_ci(v, seed=seed, n_resamples=n_resamples)
    return (float(v.mean()), lo, hi)


def gain_kept_ci(
    none: Sequence[float] | np.ndarray, policy: Sequence[float] | np.ndarray, full: Sequence[float] | np.ndarray,
    *, seed: int = 0, n_resamples: int = 1000,
) -> tuple[float, float, float]:
    """The share of the full context's gain a policy keeps, ``Σ(none − policy) / Σ(none − full)`` over
    questions (losses such as NLL: lower is better), with a paired 95% bootstrap interval (questions
    resampled together). NaN when the full context gains nothing on average.

    >>> gain_kept_ci([3.0, 3.0], [2.0, 2.0], [1.0, 1.0])
    (0.5, 0.5, 0.5)
    """
    n, p, f = (np.asarray(x, dtype=np.float64) for x in (none, policy, full))
    ok = ~(np.isnan(n) | np.isnan(p) | np.isnan(f))
    num, den = (n - p)[ok], (n - f)[ok]
    if num.size == 0 or den.sum() <= 0:
        return (math.nan, math.nan, math.nan)
    counts = np.random.default_rng(seed).multinomial(num.size, np.full(num.size, 1.0 / num.size), size=n_resamples)
    dens = counts @ den
    ratios = np.where(dens > 0, (counts @ num) / np.where(dens > 0, dens, 1.0), np.nan)
    ratios = ratios[~np.isnan(ratios)]
    lo, hi = np.quantile(ratios, [0.025, 0.975]) if ratios.size else (math.nan, math.nan)
    return (float(num.sum() / den.sum()), float(lo), float(hi))


def _idf(docs: Sequence[Collection[str]]) -> dict[str, float]:
    df: Counter[str] = Counter()
    for d in docs:
        df.update(set(d))
    n = len(docs)
    # The same smoothed IDF the scorers use (rdmem.scoring.ScoringContext.idf_of), clipped at 0.
    return {w: max(math.log((n + 1) / (c + 0.5)), 0.0) for w, c in df.items()}


def information_coverage(history: Sequence[str], context: Iterable[str]) -> float:
    """IDF-weighted share of the history's distinct content words present in the context.

    Each message of ``history`` is one document for the IDF, so a word said
    once weighs more than one said everywhere. 1.0 means every word of the
    history survives somewhere in the context (verbatim or in a summary).

    >>> round(information_coverage(["alpha beta", "alpha gamma"], ["alpha beta"]), 3)
    0.558
    """
    docs = [content_words(t) for t in history]
    idf = _idf(docs)
    total = math.fsum(idf.values())
    if total <= 0:
        return math.nan
    have = set(content_words("\n".join(context)))
    return math.fsum(w for word, w in idf.items() if word in have) / total


def embedding_coverage(history: np.ndarray, context: np.ndarray) -> float:
    """Mean over history units of the best cosine similarity to any context unit.

    Both arrays hold unit vectors, one per row. An empty context covers
    nothing (0.0); an empty history gives NaN.

    >>> h = np.array([[1.0, 0.0], [0.0, 1.0]]); c = np.array([[1.0, 0.0]])
    >>> embedding_coverage(h, c)
    0.5
    """
    h = np.asarray(history, dtype=np.float64)
    if h.ndim != 2 or h.shape[0] == 0:
        return math.nan
    c = np.asarray(context, dtype=np.float64)
    if c.size == 0:
        return 0.0
    if c.ndim != 2 or c.shape[1] != h.shape[1]:
        raise ValueError(f"context embeddings must have shape (n, {h.shape[1]}), got {c.shape}")
    return float(np.clip(h @ c.T, -1.0, 1.0).max(axis=1).mean())


def oracle_values(ids: Sequence[str], evidence: Iterable[Collection[str]]) -> np.ndarray:
    """Each unit's value to an oracle that knows every question.

    Mean evidence recall over questions is linear in the kept set: a unit is
    worth ``sum over questions q citing it of 1 / |evidence(q)|``. Questions
    without evidence add nothing.

    >>> oracle_values(["a", "b", "c"], [["a"], ["a", "b"]]).tolist()
    [1.5, 0.5, 0.0]
    """
    pos = {u: i for i, u in enumerate(ids)}
    v = np.zeros(len(ids), dtype=np.float64)
    for ev in evidence:
        ev = [e for e in dict.fromkeys(ev) if e in pos]
        for e in ev:
            v[pos[e]] += 1.0 / len(ev)
    return v


def oracle_ids(ids: Sequence[str], costs: Sequence[int], evidence: Iterable[Collection[str]], budget: int) -> list[str]:
    """Ids of the set that maximises mean evidence recall within ``budget`` tokens (exact knapsack).

    ``costs`` are the units' tokens as sent (per-message overhead included).

    >>> oracle_ids(["a", "b", "c"], [10, 10, 10], [["a"], ["b", "c"]], 20)
    ['a', 'b']
    """
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 0:
        raise InvalidInput(f"budget must be an int >= 0 tokens, got {budget!r}")
    values = oracle_values(ids, evidence)
    chosen = knapsack(values, np.asarray(costs, dtype=np.int64), int(budget))
    return [ids[int(i)] for i in chosen]


# -- LoCoMo's QA F1, as its official evaluation code computes it -------------


def normalize_answer(text: str) -> str:
    """LoCoMo's normalisation: drop commas, lower-case, strip punctuation, drop a/an/the/and.

    >>> normalize_answer("The Cat, and a Dog!")
    'cat dog'
    """
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the|and)\b", " ", text)
    return " ".join(text.split())


def _stemmer() -> Any:
    try:
        from nltk.stem import PorterStemmer
    except ImportError as exc:  # pragma: no cover - the eval extra installs it
        raise MissingDependency("LoCoMo's F1 stems words with NLTK's Porter stemmer: pip install 'rdmem[eval]'") from exc
    return PorterStemmer()


_STEM: Any = None


def _stem_tokens(text: str) -> list[str]:
    global _STEM
    if _STEM is None:
        _STEM = _stemmer()
    return [_STEM.stem(w) for w in normalize_answer(text).split()]


def token_f1(prediction: str, gold: str) -> float:
    """Token F1 of two answers after :func:`normalize_answer` and Porter stemming (LoCoMo's ``f1_score``).

    >>> token_f1("painted a sunrise", "a sunrise")
    0.6666666666666666
    """
    pred, ref = _stem_tokens(prediction), _stem_tokens(gold)
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def locomo_f1(prediction: str, gold: str, category: int | None) -> float:
    """The QA score LoCoMo's official code gives one answer, by question category.

    Category 1 (multi-hop): prediction and gold are split on commas and each
    gold part takes its best F1 against any predicted part; the mean over gold
    parts is the score. Category 3: only the gold answer's part before the
    first ``;`` counts. Categories 2 and 4 (and unknown): plain token F1.
    Category 5 (adversarial): 1 if the prediction says "no information
    available" or "not mentioned", else 0.

    >>> locomo_f1("psychology, counseling", "Psychology, counseling certification", 1)
    0.8333333333333333
    """
    prediction, gold = str(prediction), str(gold)
    if category == 5:
        low = prediction.lower()
        return float("no information available" in low or "not mentioned" in low)
    if category == 1:
        preds = [p.strip() for p in prediction.split(",")]
        golds = [g.strip() for g in gold.split(",")]
        return float(np.mean([max(token_f1(p, g) for p in preds) for g in golds]))
    if category == 3:
        gold = gold.split(";")[0].strip()
    return token_f1(prediction, gold)
