"""Exact 0/1 knapsack on integer token costs, vectorised over the capacity axis."""

from __future__ import annotations

import numpy as np

from ._validate import check_arrays

__all__ = ["knapsack"]


def knapsack(values: np.ndarray, costs: np.ndarray, budget: int) -> np.ndarray:
    """Indices (ascending) of the subset with the largest total value whose cost fits ``budget``.

    Dynamic programming over capacities (tokens), one numpy pass per item:
    O(n·B) work but ~n Python steps instead of n·B, and each pass only covers
    the capacities that can still matter (see below). Items with value <= 0 are
    never taken; ties prefer the subset without the later item, so results are
    deterministic.

    >>> knapsack(np.array([6.0, 10.0, 12.0]), np.array([1, 2, 3]), 5).tolist()
    [1, 2]
    """
    values, costs = check_arrays(values, costs, budget)
    free = np.flatnonzero((costs == 0) & (values > 0))
    cand = np.flatnonzero((values > 0) & (costs > 0) & (costs <= budget))
    if cand.size == 0:
        return free.astype(np.int64)
    c = costs[cand]
    # Dividing all costs by their gcd shrinks the table without changing the optimum.
    g = max(int(np.gcd.reduce(c)), 1)
    w = c // g
    total = int(w.sum())
    cap = min(budget // g, total)
    # A tiny per-item penalty makes a tie prefer not taking the item, robustly under float rounding.
    v = values[cand] - 1e-12 * np.maximum(1.0, np.abs(values[cand]))
    # Plain Python numbers in the loop: numpy scalars cost more per step than the slices below.
    weights, prefix, gains = w.tolist(), np.cumsum(w).tolist(), v.tolist()  # prefix[k]: tokens of items 0..k
    dp = np.zeros(cap + 1, dtype=np.float64)
    cur = np.empty(cap + 1, dtype=np.float64)
    take = np.zeros((len(cand), cap + 1), dtype=bool)
    filled, everything = 0, 0.0  # dp[r] for r > filled is `everything`: all items so far fit
    for k, wk in enumerate(weights):
        # Capacities above prefix[k] hold every item so far (no work); capacities below
        # cap - (tokens of the items after k) are never reached when tracing back from cap.
        hi = min(cap, prefix[k])
        lo = max(wk, cap - (total - prefix[k]))
        if hi > filled:
            dp[filled + 1 : hi + 1] = everything
            filled = hi
        if lo <= hi:
            with_k = cur[: hi + 1 - lo]
            np.add(dp[lo - wk : hi + 1 - wk], gains[k], out=with_k)
            np.greater(with_k, dp[lo : hi + 1], out=take[k, lo : hi + 1])
            np.maximum(dp[lo : hi + 1], with_k, out=dp[lo : hi + 1])
        everything += gains[k]
    chosen: list[int] = []
    r = cap
    for k in range(len(cand) - 1, -1, -1):
        if r >= prefix[k]:  # every remaining item fits
            chosen.extend(cand[: k + 1].tolist())
            break
        if take[k, r]:
            chosen.append(int(cand[k]))
            r -= weights[k]
    return np.array(sorted(chosen + free.tolist()), dtype=np.int64)
