"""Exact 0/1 knapsack on integer token costs, vectorised over the capacity axis."""

from __future__ import annotations

import numpy as np

from ._validate import check_arrays

__all__ = ["knapsack"]


def knapsack(values: np.ndarray, costs: np.ndarray, budget: int) -> np.ndarray:
    """Indices (ascending) of the subset with the largest total value whose cost fits ``budget``.

    Dynamic programming over capacities (tokens), one numpy pass per item:
    O(n·B) work but ~n Python steps instead of n·B, and each pass only covers
    the capacities that can still matter (see below). Before it, the items whose
    place in every optimum is proven by LP bounds are fixed (see
    :func:`_fixed_by_bounds`), so the table holds only the undecided ones. Items
    with value <= 0 are never taken; ties prefer the subset without the later
    item, so results are deterministic.

    >>> knapsack(np.array([6.0, 10.0, 12.0]), np.array([1, 2, 3]), 5).tolist()
    [1, 2]
    """
    values, costs = check_arrays(values, costs, budget)
    free = np.flatnonzero((costs == 0) & (values > 0))
    cand = np.flatnonzero((values > 0) & (costs > 0) & (costs <= budget))
    # A tiny per-item penalty makes a tie prefer not taking the item, robustly under float rounding
    # (a value too small to outweigh it is worth nothing).
    v = values[cand] - 1e-12 * np.maximum(1.0, np.abs(values[cand]))
    cand, v = cand[v > 0], v[v > 0]
    if cand.size == 0:
        return free.astype(np.int64)
    c = costs[cand]
    # Dividing all costs by their gcd shrinks the table without changing the optimum.
    g = max(int(np.gcd.reduce(c)), 1)
    w = c // g
    cap = budget // g
    taken, core = np.zeros(len(v), dtype=bool), np.ones(len(v), dtype=bool)
    if int(w.sum()) > cap:
        taken, out = _fixed_by_bounds(v, w, cap)
        core = ~(taken | out)
    rest = _dp(v[core], w[core], cap - int(w[taken].sum()))
    return np.sort(np.concatenate([cand[taken], cand[core][rest], free])).astype(np.int64)


def _fixed_by_bounds(v: np.ndarray, w: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Items every optimum takes, and items no optimum takes (masks), by Dantzig's LP bound.

    A feasible greedy answer (by value per token, skipping what does not fit)
    is a lower bound on the optimum. For each item, the LP relaxation with the
    item's choice flipped from the LP's own bounds every answer that makes that
    choice; if that bound is below the greedy one (by a margin far above float
    rounding), every optimum makes the other choice, so the item is fixed. The
    LP item split by the budget (the break item), copies of one item and
    anything within the margin stay undecided, for the exact table.
    """
    n = len(v)
    order = np.argsort(-(v / w), kind="stable")
    ws, vs = w[order].astype(np.float64), v[order]
    density = vs / ws
    W = np.concatenate(([0.0], np.cumsum(ws)))
    V = np.concatenate(([0.0], np.cumsum(vs)))

    def lp(capacity: np.ndarray) -> np.ndarray:
        """The LP relaxation's value over every item at each capacity (0 <= capacity)."""
        k = np.searchsorted(W, capacity, side="right") - 1  # items wholly taken
        part = np.where(k < n, (capacity - W[k]) * density[np.minimum(k, n - 1)], 0.0)
        return V[k] + part

    brk = int(np.searchsorted(W, cap, side="right") - 1)  # the break item's place in ``order``
    room, lower = float(cap), 0.0
    for i in range(n):  # the greedy answer: by density, skipping what does not fit
        if ws[i] <= room:
            room -= ws[i]
            lower += vs[i]
    margin = 1e-9 * max(1.0, abs(lower), float(np.abs(vs).sum()))
    pos = np.arange(n)
    bound = np.full(n, np.inf)
    inside = pos < brk  # wholly in the LP answer: bound every answer without the item
    bound[inside] = lp(cap + ws[inside]) - vs[inside]
    outside = pos > brk  # not in the LP answer: bound every answer with it
    bound[outside] = vs[outside] + lp(cap - ws[outside])
    sure = bound < lower - margin
    # Copies of one item (same value, same cost) are left to the table, which breaks their tie as it always
    # has (the earlier copy first); an LP bound can split a pair across the break item.
    by_pair = np.lexsort((ws, vs))
    pv, pw = vs[by_pair], ws[by_pair]
    twin = (pv[1:] == pv[:-1]) & (pw[1:] == pw[:-1])
    copies = np.zeros(n, dtype=bool)
    copies[by_pair[1:][twin]] = True
    copies[by_pair[:-1][twin]] = True
    sure &= ~copies
    taken, out = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    taken[order[inside & sure]] = True
    out[order[outside & sure]] = True
    return taken, out


def _dp(v: np.ndarray, w: np.ndarray, budget: int) -> np.ndarray:
    """Positions (ascending) of the best subset of items worth ``v`` (all > 0) costing ``w`` (all >= 1)
    within ``budget``: the dynamic programme over capacities."""
    if len(v) == 0 or budget <= 0:
        return np.zeros(0, dtype=np.int64)
    total = int(w.sum())
    cap = min(budget, total)
    # Plain Python numbers in the loop: numpy scalars cost more per step than the slices below.
    weights, prefix, gains = w.tolist(), np.cumsum(w).tolist(), v.tolist()  # prefix[k]: tokens of items 0..k
    dp = np.zeros(cap + 1, dtype=np.float64)
    cur = np.empty(cap + 1, dtype=np.float64)
    take = np.zeros((len(v), cap + 1), dtype=bool)
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
    for k in range(len(v) - 1, -1, -1):
        if r >= prefix[k]:  # every remaining item fits
            chosen.extend(range(k + 1))
            break
        if take[k, r]:
            chosen.append(k)
            r -= weights[k]
    return np.array(sorted(chosen), dtype=np.int64)
