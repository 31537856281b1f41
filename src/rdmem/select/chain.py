"""Exact 0/1 knapsack on a sequence where every run of skipped items costs a marker."""

from __future__ import annotations

import numpy as np

from ._validate import check_arrays


def gap_knapsack(
    values: np.ndarray,
    costs: np.ndarray,
    budget: int,
    gap_cost: int,
    *,
    gap_before: np.ndarray | None = None,
) -> np.ndarray:
    """Indices (ascending) maximising total value when each maximal run of skipped items costs ``gap_cost``.

    Items are in chronological order. Leaving items out is not free once the
    context shows where they were: every run of left-out items becomes one
    elision marker of ``gap_cost`` tokens. ``gap_before[i]`` marks items
    preceded by a span that is already gone (it costs a marker unless the run
    continues). Dynamic programming over (position, capacity, previous item
    kept or not), one numpy pass per item: O(n·B) like :func:`knapsack`.

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
    n = len(v)
    if n == 0 or budget == 0:
        return np.zeros(0, dtype=np.int64)
    forced = np.zeros(n, dtype=bool) if gap_before is None else np.asarray(gap_before, dtype=bool)
    if forced.shape != (n,):
        raise ValueError(f"gap_before must have shape ({n},), got {forced.shape}")
    B = int(budget)
    g = int(gap_cost)
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
        np.greater_equal(a, b, out=keep_from_in[i])
        row = nxt_in[pad:]
        np.maximum(a, b, out=row)
        row += v[i]
        a, b = shifted(cur_in, g), cur_out[pad:]
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
