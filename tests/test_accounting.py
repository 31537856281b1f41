"""The engine's fill step: incremental marker accounting equals a full recount of the render."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rdmem._accounting import fill as _fill, gap_sizes as _gap_sizes


def _marker(gap: int) -> int:
    # Marker sizes that grow with the number of digits, like the real "[N messages omitted]".
    return 0 if not gap else 8 + len(str(gap))


def _render_cost(chosen, costs, blocks, hidden, open_):
    kept = np.zeros(len(hidden), dtype=bool)
    for b in chosen:
        kept[blocks[b]] = True
    return sum(int(costs[b]) for b in chosen) + sum(map(_marker, _gap_sizes(kept, hidden, open_)))


def _reference_fill(chosen, values, costs, ratio, blocks, hidden, open_, avail):
    """The same greedy, recounting the whole render for every try."""
    chosen = set(chosen)
    for b in sorted(range(len(costs)), key=lambda b: (-ratio[b], -b)):
        if b in chosen or values[b] <= 0:
            continue
        if _render_cost(chosen | {b}, costs, blocks, hidden, open_) <= avail:
            chosen.add(b)
    return chosen


@st.composite
def problems(draw):
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=14))
    n = sum(sizes)
    blocks, start = [], 0
    for s in sizes:
        blocks.append(np.arange(start, start + s))
        start += s
    hidden = np.array(draw(st.lists(st.sampled_from([0, 0, 0, 1, 7, 120]), min_size=n, max_size=n)), dtype=np.int64)
    open_ = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    costs = np.array(draw(st.lists(st.integers(1, 40), min_size=len(blocks), max_size=len(blocks))), dtype=np.int64)
    values = np.array(draw(st.lists(st.floats(-0.2, 1.0), min_size=len(blocks), max_size=len(blocks))))
    chosen = set(draw(st.sets(st.integers(0, len(blocks) - 1), max_size=len(blocks))))
    slack = draw(st.integers(0, 150))
    return blocks, hidden, open_, costs, values, chosen, slack


@settings(max_examples=300, deadline=None)
@given(problems())
def test_fill_matches_a_full_recount(problem):
    blocks, hidden, open_, costs, values, chosen, slack = problem
    # Blocks are contiguous: open_ only matters for the units between chosen ones, as in the engine.
    avail = _render_cost(chosen, costs, blocks, hidden, open_) + slack
    ratio = values / np.maximum(costs, 1)
    expected = _reference_fill(chosen, values, costs, ratio, blocks, hidden, open_, avail)
    got = set(chosen)
    room = avail - _render_cost(got, costs, blocks, hidden, open_)
    _fill(got, values, costs, ratio, {}, blocks, hidden, open_, room, _marker)
    assert got == expected
    assert _render_cost(got, costs, blocks, hidden, open_) <= avail


def test_fill_removes_the_marker_a_block_closes():
    # Units 0 and 2 are sent, 1 is left out (a 9-token marker). Sending 1 costs 5 but removes that marker.
    blocks = [np.array([0]), np.array([1]), np.array([2])]
    hidden = np.zeros(3, dtype=np.int64)
    open_ = np.ones(3, dtype=bool)
    costs = np.array([10, 5, 10])
    chosen = {0, 2}
    room = 0  # the render of {0, 2} uses the whole budget, marker included
    _fill(chosen, np.ones(3), costs, 1 / costs, {}, blocks, hidden, open_, room, _marker)
    assert chosen == {0, 1, 2}
