"""Greedy selectors: by value per token (with the classic bound), by value, top-K, most recent."""

from __future__ import annotations

import numpy as np

from ._validate import check_arrays

__all__ = ["greedy", "by_value", "topk", "suffix"]


def greedy(values: np.ndarray, costs: np.ndarray, budget: int) -> np.ndarray:
    """Greedy by value per token, then the better of that and the best single item.

    The max(greedy, best single item) rule guarantees at least half the
    optimal value of the 0/1 knapsack.

    >>> greedy(np.array([1.0, 1.0, 10.0]), np.array([1, 1, 10]), 10).tolist()
    [2]
    """
    v, c = check_arrays(values, costs, budget)
    ratio = np.where(c > 0, v / np.maximum(c, 1), np.inf)
    order = np.lexsort((np.arange(len(v)), -ratio))
    chosen, used, total = [], 0, 0.0
    for i in order:
        if v[i] <= 0:
            continue
        if used + c[i] <= budget:
            chosen.append(int(i))
            used += int(c[i])
            total += float(v[i])
    fits = np.flatnonzero((c <= budget) & (v > 0))
    if fits.size:
        best = int(fits[np.argmax(v[fits])])
        if v[best] > total:
            return np.array([best], dtype=np.int64)
    return np.array(sorted(chosen), dtype=np.int64)


def by_value(values: np.ndarray, costs: np.ndarray, budget: int) -> np.ndarray:
    """Highest value first, skipping what does not fit (ties: later index first)."""
    v, c = check_arrays(values, costs, budget)
    order = np.lexsort((-np.arange(len(v)), -v))
    chosen, used = [], 0
    for i in order:
        if used + c[i] <= budget:
            chosen.append(int(i))
            used += int(c[i])
    return np.array(sorted(chosen), dtype=np.int64)


def topk(values: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` highest values, returned in chronological (index) order; ties keep the later item.

    >>> topk(np.array([0.1, 0.9, 0.5, 0.7]), 2).tolist()
    [1, 3]
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")
    v = np.asarray(values, dtype=np.float64)
    order = np.lexsort((-np.arange(len(v)), -v))
    return np.sort(order[:k]).astype(np.int64)


def suffix(values: np.ndarray, costs: np.ndarray, budget: int) -> np.ndarray:
    """The longest run of most recent items that fits (values ignored), like ``trim_messages(strategy="last")``."""
    _, c = check_arrays(values, costs, budget)
    used, start = 0, len(c)
    for i in range(len(c) - 1, -1, -1):
        if used + c[i] > budget:
            break
        used += int(c[i])
        start = i
    return np.arange(start, len(c), dtype=np.int64)
