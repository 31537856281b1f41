"""Multiple-choice knapsack over representation ladders, solved the way video coders do RD optimisation.

Every item (a memory unit) offers a small ladder of representations
("rungs": verbatim, compressed, summary, ...), each with a value (expected
utility kept) and a cost (tokens). "Absent" is always available with value 0
and cost 0. :func:`mckp` picks at most one rung per item so that the total
cost fits the budget and the total value is (nearly) maximal:

1. per item, the upper concave hull of its (cost, value) points, absent
   included: dominated rungs (costlier but not more valuable) and rungs under
   the chord of their neighbours are never chosen by the Lagrangian;
2. the hull segments of all items, sorted by slope (extra value per extra
   token) in decreasing order, are taken greedily. Sweeping the Lagrange
   multiplier λ from +∞ down is the same walk, and the prefix taken before the
   first segment that does not fit is the LP-relaxation optimum minus a
   fraction of that one "critical" segment;
3. the remaining segments are still taken where they fit (an item whose next
   segment does not fit is frozen, since the leftover only shrinks), then the
   leftover is filled with any upgrade (to any available rung, on the hull or
   not) that still fits, largest value gain first;
4. the same again with the critical item (owner of the first segment that
   did not fit) upgraded first; the better of the two is returned.

The result is never below ``max(LP optimum − value of the critical segment, LP optimum / 2)``
(the classic bound), which :func:`mckp_lp` reports; :func:`mckp_exact`
solves small instances exactly by dynamic programming, for tests.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["mckp", "mckp_exact", "mckp_lp", "LPRelaxation", "ladder_value", "ladder_cost"]

_EPS = 1e-12


class LPRelaxation(NamedTuple):
    """The LP relaxation of a ladder knapsack.

    ``value``: the LP optimum (an upper bound on any integer solution).
    ``critical_gain``: value of the one segment taken fractionally (0 when
    every segment fits); the greedy of :func:`mckp` is within this of ``value``.
    ``slope``: the optimal Lagrange multiplier λ, in value per token (0 when
    the budget is not binding).
    """

    value: float
    critical_gain: float
    slope: float


def _check_ladder(values: object, costs: object, budget: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate; return float values, int64 costs and the availability mask, all (n, r)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise TypeError(f"budget must be an int number of tokens, got {type(budget).__name__}")
    if budget < 0:
        raise ValueError(f"budget must be >= 0 tokens, got {budget}")
    v = np.asarray(values, dtype=np.float64)
    c = np.asarray(costs, dtype=np.float64)
    if v.ndim != 2 or v.shape != c.shape:
        raise ValueError(f"values and costs must be 2-D (items, rungs) of equal shape, got shapes {v.shape} and {c.shape}")
    if np.isinf(v).any():
        raise ValueError("values must be finite (NaN marks an unavailable rung)")
    finite_c = np.isfinite(c)
    if (finite_c & (np.mod(np.where(finite_c, c, 0.0), 1) != 0)).any():
        raise ValueError("costs must be whole numbers of tokens (a negative cost marks an unavailable rung)")
    avail = ~np.isnan(v) & finite_c & (c >= 0)
    return np.where(avail, v, 0.0), np.where(avail, c, 0).astype(np.int64), avail


def _hull_segments(v: np.ndarray, c: np.ndarray, avail: np.ndarray):
    """Start rung per item and the hull segments of all items, sorted by decreasing slope.

    Returns ``start`` (n,) rung index (-1 absent), ``start_value`` (n,) and, per
    segment in global order, ``item``, ``to`` (rung index), ``dc``, ``dv``, ``slope``.
    """
    n, r = v.shape
    p = r + 1
    # Point 0 is "absent" (0 tokens, value 0); point k + 1 is rung k.
    pv = np.concatenate([np.zeros((n, 1)), v], axis=1)
    pc = np.concatenate([np.zeros((n, 1), dtype=np.int64), c], axis=1)
    ok = np.concatenate([np.ones((n, 1), dtype=bool), avail], axis=1)
    # Per item, points by cost, then value (high first), then index; unavailable ones last.
    big = np.iinfo(np.int64).max
    idx = np.broadcast_to(np.arange(p), (n, p))
    os_ = np.lexsort((idx, -pv, np.where(ok, pc, big)), axis=-1)
    rows = np.arange(n)[:, None]
    cs, vs, oks = pc[rows, os_], pv[rows, os_], ok[rows, os_]
    # Undominated: worth strictly more than every cheaper-or-equal point before it.
    best_before = np.maximum.accumulate(np.where(oks, vs, -np.inf), axis=1)
    best_before = np.concatenate([np.full((n, 1), -np.inf), best_before[:, :-1]], axis=1)
    hs = oks & (vs > best_before)
    # Upper concave hull: drop points on or under the chord of their kept neighbours until none is left.
    pos = np.arange(p)[None, :]
    csf = cs.astype(np.float64)
    for _ in range(p):
        prev = np.maximum.accumulate(np.where(hs, pos, -1), axis=1)
        prev = np.concatenate([np.full((n, 1), -1), prev[:, :-1]], axis=1)
        nxt = np.minimum.accumulate(np.where(hs, pos, p)[:, ::-1], axis=1)[:, ::-1]
        nxt = np.concatenate([nxt[:, 1:], np.full((n, 1), p)], axis=1)
        inner = hs & (prev >= 0) & (nxt < p)
        pa, pb = np.minimum(np.maximum(prev, 0), p - 1), np.minimum(nxt, p - 1)
        ca, cb = csf[rows, pa], csf[rows, pb]
        va, vb = vs[rows, pa], vs[rows, pb]
        lhs = (vs - va) * (cb - ca)
        rhs = (vb - va) * (csf - ca)
        under = inner & (lhs <= rhs + _EPS * np.maximum(np.abs(lhs), np.abs(rhs)))
        if not under.any():
            break
        hs = hs & ~under
    first = np.argmax(hs, axis=1)  # every item has at least one vertex (the best cheapest point)
    start = os_[np.arange(n), first] - 1
    start_value = vs[np.arange(n), first]
    last = np.maximum.accumulate(np.where(hs, np.arange(p)[None, :], -1), axis=1)
    prev = np.concatenate([np.full((n, 1), -1), last[:, :-1]], axis=1)
    seg = hs & (prev >= 0)
    item, pos = np.nonzero(seg)
    pp = prev[item, pos]
    dc = (cs[item, pos] - cs[item, pp]).astype(np.int64)
    dv = vs[item, pos] - vs[item, pp]
    slope = dv / dc  # dc > 0: hull vertices have distinct costs
    rank = np.cumsum(seg, axis=1)[item, pos]
    # Decreasing slope; ties: later item first (recent memory), then the item's own segment order.
    g = np.lexsort((rank, -item, -slope))
    return start, start_value, item[g], os_[item, pos][g] - 1, dc[g], dv[g], slope[g]


def mckp(values: np.ndarray, costs: np.ndarray, budget: int) -> np.ndarray:
    """The rung chosen per item (-1: absent), maximising total value with total cost <= ``budget`` tokens.

    Parameters
    ----------
    values:
        ``(n, r)`` floats: the value of sending item ``i`` as rung ``k``
        (NaN: rung unavailable). Rungs worth <= 0 are never chosen.
    costs:
        ``(n, r)`` whole numbers of tokens (negative: rung unavailable).
    budget:
        Tokens available for all items together.

    Lagrangian / convex-hull greedy with a leftover fill (see the module
    docstring): O(n·r² + S log S) for S hull segments, a few ms for
    n = 1000, r = 3. With ``lp = mckp_lp(...)`` the value is at least
    ``max(lp.value - lp.critical_gain, lp.value / 2)`` and usually optimal. Deterministic: equal
    slopes favour the later item.

    >>> values = np.array([[10.0, 8.0, 3.0], [6.0, 5.0, 2.0]])
    >>> costs = np.array([[100, 40, 10], [60, 30, 10]])
    >>> mckp(values, costs, 70).tolist()     # both compressed: 13 > 10 + 2
    [1, 1]
    >>> mckp(values, costs, 200).tolist()    # everything verbatim
    [0, 0]
    >>> mckp(values, costs, 0).tolist()
    [-1, -1]
    """
    v, c, avail = _check_ladder(values, costs, budget)
    n, r = v.shape
    if n == 0 or r == 0:
        return np.full(n, -1, dtype=np.int64)
    avail &= c <= budget  # a rung that cannot fit alone only loosens the relaxation
    start, _, item, to, dc, _dv, _ = _hull_segments(v, c, avail)
    choice = _fill(v, c, avail, start, item, to, dc, int(budget))
    fits = np.cumsum(dc) <= budget
    if not fits.all():
        # The classic repair of the LP greedy: also try the critical item (whose segment is the first
        # that does not fit) at that segment's end first, then the rest; keep the better result.
        # max(LP - critical gain, critical gain) >= LP / 2.
        m = int(np.argmin(fits))
        own = item[:m] == item[m]
        g = np.concatenate([np.flatnonzero(own), [m], np.flatnonzero(~own), np.arange(m + 1, len(dc))])
        alt = _fill(v, c, avail, start, item[g], to[g], dc[g], int(budget))
        if ladder_value(v, alt) > ladder_value(v, choice) + _EPS:
            choice = alt
    return choice


def _fill(v, c, avail, start, item, to, dc, budget: int) -> np.ndarray:
    """Take segments in the given order while they fit, then fill the leftover with any upgrade."""
    n = len(start)
    choice = start.copy()
    left = budget
    # Phase 1: the prefix that fits, vectorised.
    fits = np.cumsum(dc) <= left
    m = int(np.argmin(fits)) if not fits.all() else len(dc)
    if m:
        left -= int(dc[:m].sum())
        # Segments of one item appear in order, so its last one taken names its rung.
        last_k = np.full(n, -1, dtype=np.int64)
        np.maximum.at(last_k, item[:m], np.arange(m))
        has = last_k >= 0
        choice[has] = to[last_k[has]]
    # Phase 2: later segments that still fit; an item whose next segment does not fit is frozen
    # (the leftover only shrinks, so it never will).
    frozen = [False] * n
    ch = choice.tolist()
    for i, k, d in zip(item[m:].tolist(), to[m:].tolist(), dc[m:].tolist()):
        if frozen[i]:
            continue
        if d <= left:
            ch[i] = k
            left -= d
        else:
            frozen[i] = True
    choice = np.array(ch, dtype=np.int64)
    # Phase 3: any upgrade (hull or not) that fits the leftover, largest gain first.
    rows = np.arange(n)
    while left > 0:
        cur_v = np.where(choice >= 0, v[rows, np.maximum(choice, 0)], 0.0)
        cur_c = np.where(choice >= 0, c[rows, np.maximum(choice, 0)], 0)
        gain = v - cur_v[:, None]
        extra = c - cur_c[:, None]
        ok = avail & (gain > _EPS) & (extra <= left)
        if not ok.any():
            break
        ii, kk = np.nonzero(ok)
        best = np.lexsort((kk, -ii, extra[ii, kk], -gain[ii, kk]))[0]
        i, k = int(ii[best]), int(kk[best])
        left -= int(extra[i, k])
        choice[i] = k
    return choice


def mckp_lp(values: np.ndarray, costs: np.ndarray, budget: int) -> LPRelaxation:
    """The LP relaxation of :func:`mckp`'s problem: optimum, critical segment gain and λ.

    Rungs that cost more than the whole budget are left out (they cannot be
    part of any solution), which tightens the bound.

    >>> lp = mckp_lp(np.array([[10.0], [9.0]]), np.array([[100], [60]]), 120)
    >>> round(lp.value, 6), lp.critical_gain, lp.slope   # item 1 whole, 60/100 of item 0
    (15.0, 10.0, 0.1)
    """
    v, c, avail = _check_ladder(values, costs, budget)
    if v.size == 0:
        return LPRelaxation(0.0, 0.0, 0.0)
    avail &= c <= budget
    start, start_value, item, to, dc, dv, slope = _hull_segments(v, c, avail)
    total = float(start_value.sum())
    cum = np.cumsum(dc)
    fits = cum <= budget
    if fits.all():
        return LPRelaxation(total + float(dv.sum()), 0.0, 0.0)
    m = int(np.argmin(fits))
    used = int(cum[m - 1]) if m else 0
    frac = (budget - used) / float(dc[m])
    return LPRelaxation(total + float(dv[:m].sum()) + frac * float(dv[m]), float(dv[m]), float(slope[m]))


def mckp_exact(values: np.ndarray, costs: np.ndarray, budget: int) -> np.ndarray:
    """The optimal rung per item (-1: absent) by dynamic programming over token capacities.

    O(n·r·B) time and O(n·B) memory for B = min(budget, Σ max cost): meant for
    small instances and for checking :func:`mckp`. Ties prefer absent, then
    the lower rung index.

    >>> mckp_exact(np.array([[10.0, 8.0, 3.0], [6.0, 5.0, 2.0]]), np.array([[100, 40, 10], [60, 30, 10]]), 70).tolist()
    [1, 1]
    """
    v, c, avail = _check_ladder(values, costs, budget)
    n, r = v.shape
    if n == 0 or r == 0:
        return np.full(n, -1, dtype=np.int64)
    usable = avail & (v > 0) & (c <= budget)
    cap = int(min(budget, np.where(usable, c, 0).max(axis=1).sum()))
    dp = np.zeros(cap + 1)
    take = np.full((n, cap + 1), -1, dtype=np.int16 if r < 32000 else np.int64)
    for i in range(n):
        new = dp.copy()
        for k in range(r):
            if not usable[i, k]:
                continue
            w = int(c[i, k])
            cand = dp[: cap + 1 - w] + v[i, k]
            better = cand > new[w:] + _EPS * max(1.0, abs(float(v[i, k])))
            new[w:] = np.where(better, cand, new[w:])
            take[i, w:][better] = k
        dp = new
    choice = np.full(n, -1, dtype=np.int64)
    rem = cap
    for i in range(n - 1, -1, -1):
        k = int(take[i, rem])
        if k >= 0:
            choice[i] = k
            rem -= int(c[i, k])
    return choice


def ladder_value(values: np.ndarray, choice: np.ndarray) -> float:
    """Total value of a choice (rung per item, -1 absent).

    >>> ladder_value(np.array([[3.0, 1.0], [2.0, 1.0]]), np.array([0, -1]))
    3.0
    """
    v = np.asarray(values, dtype=np.float64)
    ch = np.asarray(choice, dtype=np.int64)
    sel = ch >= 0
    return float(v[np.flatnonzero(sel), ch[sel]].sum())


def ladder_cost(costs: np.ndarray, choice: np.ndarray) -> int:
    """Total tokens of a choice (rung per item, -1 absent).

    >>> ladder_cost(np.array([[30, 10], [20, 5]]), np.array([0, 1]))
    35
    """
    c = np.asarray(costs)
    ch = np.asarray(choice, dtype=np.int64)
    sel = ch >= 0
    return int(c[np.flatnonzero(sel), ch[sel]].sum())
