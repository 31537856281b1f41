"""Exact 0/1 knapsack on integer token costs, vectorised over the capacity axis."""

from __future__ import annotations

from math import gcd

import numpy as np

from ._validate import check_arrays


def knapsack(values: np.ndarray, costs: np.ndarray, budget: int) -> np.ndarray:
    """Indices (ascending) of the subset with the largest total value whose cost fits ``budget``.

    Dynamic programming over capacities, one numpy pass per item: O(n·B) work
    but ~n Python steps instead of n·B. Items with value <= 0 are never taken;
    ties prefer the subset without the later item, so results are deterministic.

    >>> knapsack(np.array([6.0, 10.0, 12.0]), np.array([1, 2, 3]), 5).tolist()
    [1, 2]
    """
    values, costs = check_arrays(values, costs, budget)
    n = len(values)
    free = [i for i in range(n) if costs[i] == 0 and values[i] > 0]
    cand = np.array([i for i in range(n) if values[i] > 0 and 0 < costs[i] <= budget], dtype=np.int64)
    if cand.size == 0:
        return np.array(sorted(free), dtype=np.int64)
    c = costs[cand]
    g = int(np.gcd.reduce(c))
    g = gcd(g, 1) if g < 1 else g
    # Dividing all costs by their gcd shrinks the table without changing the optimum.
    w = c // g
    cap = int(min(budget // g, int(w.sum())))
    v = values[cand]
    dp = np.zeros(cap + 1, dtype=np.float64)
    take = np.zeros((len(cand), cap + 1), dtype=bool)
    for k in range(len(cand)):
        wk = int(w[k])
        if wk > cap:
            continue
        with_k = dp[: cap + 1 - wk] + v[k]
        better = with_k > dp[wk:] + 1e-12 * max(1.0, abs(v[k]))
        take[k, wk:] = better
        dp[wk:] = np.where(better, with_k, dp[wk:])
    chosen = []
    r = cap
    for k in range(len(cand) - 1, -1, -1):
        if take[k, r]:
            chosen.append(int(cand[k]))
            r -= int(w[k])
    return np.array(sorted(chosen + free), dtype=np.int64)
