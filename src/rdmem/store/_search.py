"""Ranking helpers shared by the stores: the query words to rank, reciprocal-rank fusion, top k."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..features import content_words

__all__ = ["rank_fusion", "query_terms", "rarest_terms", "top_k"]


def rank_fusion(rankings: Sequence[Sequence[int]], *, k: int = 60) -> list[tuple[int, float]]:
    """Reciprocal-rank fusion: ``sum 1 / (k + rank)`` over rankings, best first (ties by index)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for r, i in enumerate(ranking):
            fused[int(i)] = fused.get(int(i), 0.0) + 1.0 / (k + r + 1)
    return sorted(fused.items(), key=lambda x: (-x[1], x[0]))


def query_terms(query: str, *, limit: int = 32) -> list[str]:
    """The distinct content words of a query, in order (at most ``limit``), for full-text engines."""
    return list(dict.fromkeys(content_words(query)))[:limit]


def rarest_terms(matches: dict[str, int], cap: int) -> tuple[list[str], int]:
    """The query words to rank, rarest first, while their matches add up to at most ``cap``.

    Like Lucene's common-terms query: the words left out are the commonest,
    which carry the least BM25 weight; the rarest word is always kept. Words
    with no match are dropped. Returns the words and their total matches.

    >>> rarest_terms({"paris": 3, "trip": 40, "the": 900, "zzz": 0}, 100)
    (['paris', 'trip'], 43)
    """
    kept: list[str] = []
    total = 0
    for w in sorted((w for w in matches if matches[w]), key=lambda w: (matches[w], w)):
        if kept and total + matches[w] > cap:
            break
        kept.append(w)
        total += matches[w]
    return kept, total


def top_k(scores: np.ndarray, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``k`` highest ``scores``, best first (equal scores among them: lower index first).

    ``allowed`` is a boolean mask; indices outside it are never returned.

    >>> top_k(np.array([0.1, 0.9, 0.5, 0.9]), 2).tolist()
    [1, 3]
    """
    scores = np.asarray(scores)
    n = len(scores)
    if allowed is not None:
        n = int(np.count_nonzero(allowed))
        if n < len(scores):
            scores = np.where(allowed, scores, -np.inf)
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    # The k largest without negating a copy of the scores: the last k of an ascending partition.
    part = np.argpartition(scores, len(scores) - k)[len(scores) - k :] if k < len(scores) else np.arange(len(scores))
    return part[np.lexsort((part, -scores[part]))]
