"""Exact 0/1 knapsack on a sequence where every run of skipped items costs a marker."""

from __future__ import annotations

import numpy as np

from ._validate import check_arrays

__all__ = ["gap_knapsack", "marker_aware", "group_totals"]


def gap_knapsack(
    values: np.ndarray,
    costs: np.ndarray,
    budget: int,
    gap_cost: int,
    *,
    gap_before: np.ndarray | None = None,
    gap_value: float = 0.0,
) -> np.ndarray:
    """Indices (ascending) maximising total value when each maximal run of skipped items costs ``gap_cost``.

    Items are in chronological order. Leaving items out is not free once the
    context shows where they were: every run of left-out items becomes one
    elision marker of ``gap_cost`` tokens. ``gap_before[i]`` marks items
    preceded by a span that is already gone (it costs a marker unless the run
    continues). Dynamic programming over (position, capacity, previous item
    kept or not), one numpy pass per item: O(n·B) like :func:`knapsack`.
    ``gap_value`` is value lost per marker besides its tokens (a caller that
    prices tokens, see :class:`rdmem.policies.RDPolicy`'s ``room_value``).

    When nothing is kept no marker is rendered, so the empty answer is always
    feasible.

    >>> v = np.array([5.0, 1.0, 5.0]); c = np.array([10, 10, 10])
    >>> gap_knapsack(v, c, 30, 12).tolist()   # skipping the middle item would need a 12-token marker
    [0, 1, 2]
    >>> gap_knapsack(v, c, 25, 3).tolist()    # a cheap marker: skip it
    [0, 2]
    """
    v, c = check_arrays(values, costs, budget)
    if isinstance(gap_cost, bool) or not isinstance(gap_cost, (int, np.integer)) or gap_cost < 0:
        raise ValueError(f"gap_cost must be an int >= 0 tokens, got {gap_cost!r}")
    if not np.isfinite(gap_value) or gap_value < 0:
        raise ValueError(f"gap_value must be a finite number >= 0, got {gap_value!r}")
    n = len(v)
    if n == 0 or budget == 0:
        return np.zeros(0, dtype=np.int64)
    forced = np.zeros(n, dtype=bool) if gap_before is None else np.asarray(gap_before, dtype=bool)
    if forced.shape != (n,):
        raise ValueError(f"gap_before must have shape ({n},), got {forced.shape}")
    B = int(budget)
    g = int(gap_cost)
    gv = float(gap_value)
    neg = -np.inf
    # dp_in[t] / dp_out[t]: best value using exactly t tokens, the last item kept / skipped
    # (a skipped item's run has paid its marker). Before the first item the state is "in",
    # so a leading run of skipped items costs a marker like any other.
    # Each row lives at the end of a buffer padded with -inf on the left, so "the row shifted
    # right by k tokens" is a view, not a new array; rows alternate between two buffers each.
    pad = min(B + 1, int(c.max()) + g + 1)
    bufs = np.full((4, pad + B + 1), neg)
    bufs[0, pad] = 0.0  # dp_in, before the first item
    cur_in, cur_out, nxt_in, nxt_out = bufs[0], bufs[1], bufs[2], bufs[3]
    never = np.full(B + 1, neg)

    def shifted(buf: np.ndarray, k: int) -> np.ndarray:
        return buf[pad - k : pad - k + B + 1] if k < pad else never

    keep_from_in = np.zeros((n, B + 1), dtype=bool)
    skip_from_in = np.zeros((n, B + 1), dtype=bool)
    for i in range(n):
        ci = int(c[i])
        gi = g if forced[i] else 0  # a span already gone before i is a run of its own unless one is open
        a, b = shifted(cur_in, ci + gi), shifted(cur_out, ci)
        if gv and forced[i]:
            a = a - gv
        np.greater_equal(a, b, out=keep_from_in[i])
        row = nxt_in[pad:]
        np.maximum(a, b, out=row)
        row += v[i]
        a, b = shifted(cur_in, g), cur_out[pad:]
        if gv:
            a = a - gv
        np.greater(a, b, out=skip_from_in[i])
        np.maximum(a, b, out=nxt_out[pad:])
        cur_in, nxt_in, cur_out, nxt_out = nxt_in, cur_in, nxt_out, cur_out
    dp_in, dp_out = cur_in[pad:], cur_out[pad:]
    best_in, best_out = float(dp_in.max()), float(dp_out.max())
    if max(best_in, best_out) <= 1e-12:
        return np.zeros(0, dtype=np.int64)
    state_in = best_in >= best_out
    t = int(np.argmax(dp_in if state_in else dp_out))
    chosen = []
    for i in range(n - 1, -1, -1):
        if state_in:
            chosen.append(i)
            prev_in = bool(keep_from_in[i, t])
            t -= int(c[i]) + (g if (prev_in and forced[i]) else 0)
        else:
            prev_in = bool(skip_from_in[i, t])
            t -= g if prev_in else 0
        state_in = prev_in
    return np.array(sorted(chosen), dtype=np.int64)


#: Capacity cells of the marker-aware DP (costs are counted in quanta of budget // this).
GAP_DP_WIDTH = 1000
#: Items the marker-aware DP considers, by value (the rest are left out of it).
GAP_DP_MAX_ITEMS = 160


def marker_aware(
    values: np.ndarray,
    costs: np.ndarray,
    budget: int,
    marker_tokens: int,
    *,
    forced: np.ndarray,
    always: np.ndarray,
    max_items: int = GAP_DP_MAX_ITEMS,
    width: int = GAP_DP_WIDTH,
    gap_value: float = 0.0,
) -> np.ndarray:
    """:func:`gap_knapsack` over the ``max_items`` most valuable items, costs in quanta of tokens.

    Items are in order; ``forced`` flags those with a span that cannot come
    back right before them, ``always`` those never left out of the programme.
    Items far down the value order are almost never worth their tokens;
    leaving them out keeps the programme fast on large candidate sets (a
    caller's fill still offers them what is left). Costs are rounded up to a
    quantum of ``budget // width`` tokens, so any choice feasible in quanta
    is feasible in tokens. ``gap_value``: see :func:`gap_knapsack`. Returns
    ascending indices into ``values``.

    >>> marker_aware(np.array([5.0, 1.0, 5.0]), np.array([10, 10, 10]), 25, 2,
    ...              forced=np.zeros(3, bool), always=np.zeros(3, bool)).tolist()
    [0, 2]
    """
    n = len(values)
    if n > max_items:
        order = np.lexsort((-np.arange(n), -values))
        keep = np.zeros(n, dtype=bool)
        keep[order[:max_items]] = True
        keep |= always
    else:
        keep = np.ones(n, dtype=bool)
    idx = np.flatnonzero(keep)
    # A kept item has a forced gap before it when a left-out item lies between it and the previous
    # kept one, or when any item in between (itself included) had one.
    prev = np.concatenate([[-1], idx[:-1]])
    seen = np.concatenate([[0], np.cumsum(forced)])
    sub_forced = (idx > prev + 1) | (seen[idx + 1] > seen[prev + 1])
    q = max(1, budget // width)
    chosen = gap_knapsack(values[idx], -(-costs[idx] // q), budget // q, -(-marker_tokens // q), gap_before=sub_forced,
                          gap_value=gap_value)
    return idx[chosen]


def group_totals(groups: list[np.ndarray], values: np.ndarray, costs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Value and cost of each group of items (the groups partition the items).

    >>> group_totals([np.array([0, 2]), np.array([1])], np.array([1.0, 2.0, 3.0]), np.array([4, 5, 6]))
    (array([4., 2.]), array([10,  5]))
    """
    group_of = np.empty(len(values), dtype=np.int64)
    for k, g in enumerate(groups):
        group_of[g] = k
    return (
        np.bincount(group_of, weights=values, minlength=len(groups)),
        np.bincount(group_of, weights=costs, minlength=len(groups)).astype(np.int64),
    )
