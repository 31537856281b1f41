"""Ranking helpers shared by the stores: BM25 over texts and reciprocal-rank fusion."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from ..features import content_words


def lexical_rank(texts: Sequence[str], query: str, *, k1: float = 1.2, b: float = 0.75) -> list[int]:
    """Indices of ``texts`` with a positive BM25 score for ``query``, best first."""
    terms = set(content_words(query))
    if not terms:
        return []
    docs = [content_words(t) for t in texts]
    n = len(docs)
    avg = max(sum(len(d) for d in docs) / max(n, 1), 1.0)
    df = Counter(w for d in docs for w in set(d) if w in terms)
    scores = []
    for i, d in enumerate(docs):
        tf = Counter(w for w in d if w in terms)
        s = sum(
            math.log((n - df[t] + 0.5) / (df[t] + 0.5) + 1) * f * (k1 + 1) / (f + k1 * (1 - b + b * len(d) / avg))
            for t, f in tf.items()
        )
        if s > 0:
            scores.append((s, i))
    scores.sort(key=lambda x: (-x[0], x[1]))
    return [i for _, i in scores]


def rank_fusion(rankings: Sequence[Sequence[int]], *, k: int = 60) -> list[tuple[int, float]]:
    """Reciprocal-rank fusion: ``sum 1 / (k + rank)`` over rankings, best first (ties by index)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for r, i in enumerate(ranking):
            fused[int(i)] = fused.get(int(i), 0.0) + 1.0 / (k + r + 1)
    return sorted(fused.items(), key=lambda x: (-x[1], x[0]))
