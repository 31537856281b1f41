"""Multiple-choice knapsack over representation ladders: hull, Lagrangian greedy, exact DP."""

from __future__ import annotations


import numpy as np
import pytest

from rdmem.select.mckp import ladder_cost, ladder_value, mckp, mckp_exact, mckp_lp


def _random_instance(rng: np.random.Generator):
    n, r = int(rng.integers(1, 9)), int(rng.integers(1, 4))
    costs = rng.integers(0, 40, (n, r))
    values = rng.random((n, r)) * costs / 10 + rng.random((n, r))
    values[rng.random((n, r)) < 0.15] = np.nan  # some rungs unavailable
    return values, costs, int(rng.integers(0, 120))


@pytest.fixture(scope="module")
def random_instances():
    rng = np.random.default_rng(7)
    return [_random_instance(rng) for _ in range(250)]


def test_ladder_where_the_answer_is_known():
    # Verbatim 100 tokens / value 10, compressed 40 / 8, summary 10 / 3 (and a second unit).
    values = np.array([[10.0, 8.0, 3.0], [6.0, 5.0, 2.0]])
    costs = np.array([[100, 40, 10], [60, 30, 10]])
    assert mckp(values, costs, 70).tolist() == [1, 1]  # 8 + 5 = 13 beats 6 + 3 = 9 (verbatim 100 does not fit)
    assert mckp(values, costs, 20).tolist() == [2, 2]
    assert mckp(values, costs, 50).tolist() == [1, 2]  # 8 + 2 = 10 beats 3 + 5 = 8
    assert mckp(values, costs, 160).tolist() == [0, 0]
    assert mckp(values, costs, 0).tolist() == [-1, -1]
    for budget in (0, 20, 50, 70, 100, 130, 160):
        assert ladder_value(values, mckp(values, costs, budget)) == ladder_value(values, mckp_exact(values, costs, budget))


def test_dominated_and_unavailable_rungs_are_never_chosen():
    # Rung 1 costs more than rung 0 for less value; rung 2 is unavailable twice over.
    values = np.array([[5.0, 4.0, np.nan], [5.0, 4.0, 9.0]])
    costs = np.array([[10, 20, 1], [10, 20, -1]])
    for budget in range(0, 60, 3):
        choice = mckp(values, costs, budget)
        assert 1 not in choice.tolist() and 2 not in choice.tolist()
        assert ladder_cost(costs, choice) <= budget


def test_rungs_worth_nothing_stay_absent():
    values = np.array([[0.0, -1.0], [2.0, 0.0]])
    costs = np.array([[1, 1], [1, 0]])
    assert mckp(values, costs, 10).tolist() == [-1, 0]
    assert mckp_exact(values, costs, 10).tolist() == [-1, 0]


def test_a_free_rung_is_always_taken():
    values = np.array([[4.0, 1.0]])
    costs = np.array([[30, 0]])
    assert mckp(values, costs, 0).tolist() == [1]
    assert mckp(values, costs, 30).tolist() == [0]


def test_leftover_fill_reaches_a_rung_under_the_hull():
    # (6 tokens, 5) lies under the chord from absent to (10 tokens, 10): the Lagrangian skips it,
    # but with 6 tokens it is the best that fits.
    values = np.array([[10.0, 5.0]])
    costs = np.array([[10, 6]])
    assert mckp(values, costs, 6).tolist() == [1]
    assert mckp(values, costs, 9).tolist() == [1]
    assert mckp(values, costs, 10).tolist() == [0]


def test_critical_item_repair_beats_the_plain_lp_prefix():
    # The dense small item comes first in slope order; the big one does not fit after it.
    values = np.array([[2.0], [10.0]])
    costs = np.array([[1], [10]])
    assert mckp(values, costs, 10).tolist() == [-1, 0]


def test_equal_slopes_favour_the_later_item():
    values = np.array([[3.0], [3.0], [3.0]])
    costs = np.array([[10], [10], [10]])
    assert mckp(values, costs, 20).tolist() == [-1, 0, 0]


def test_close_to_exact_and_within_the_classic_bound(random_instances):
    equal = 0
    for values, costs, budget in random_instances:
        got, best = mckp(values, costs, budget), mckp_exact(values, costs, budget)
        v = np.nan_to_num(values)
        assert ladder_cost(costs, got) <= budget and ladder_cost(costs, best) <= budget
        for choice in (got, best):  # only available rungs
            sel = choice >= 0
            assert not np.isnan(values[np.flatnonzero(sel), choice[sel]]).any()
        lp = mckp_lp(values, costs, budget)
        gv, ev = ladder_value(v, got), ladder_value(v, best)
        assert gv <= ev + 1e-9 <= lp.value + 2e-9
        assert gv >= max(lp.value - lp.critical_gain, lp.value / 2) - 1e-9
        equal += abs(gv - ev) <= 1e-9
    # Usually optimal: 92% of these small, tight instances with this seed.
    assert equal >= 0.8 * len(random_instances)


def test_lp_relaxation_on_a_known_case():
    lp = mckp_lp(np.array([[10.0], [9.0]]), np.array([[100], [60]]), 120)
    assert lp.value == pytest.approx(15.0) and lp.critical_gain == 10.0 and lp.slope == pytest.approx(0.1)
    lp = mckp_lp(np.array([[10.0], [9.0]]), np.array([[100], [60]]), 1000)
    assert lp == (19.0, 0.0, 0.0)


def test_large_instance_respects_the_budget_and_tracks_the_lp():
    rng = np.random.default_rng(0)
    n = 1000
    costs = np.sort(rng.integers(5, 200, (n, 3)), axis=1)[:, ::-1]
    values = np.sort(rng.random((n, 3)), axis=1)[:, ::-1]
    for budget in (2_000, 20_000):
        choice = mckp(values, costs, budget)
        assert choice.shape == (n,) and choice.dtype == np.int64
        assert ladder_cost(costs, choice) <= budget
        lp = mckp_lp(values, costs, budget)
        assert ladder_value(values, choice) >= lp.value - lp.critical_gain
        assert np.array_equal(choice, mckp(values, costs, budget))  # deterministic


def test_inputs_are_not_modified():
    values = np.array([[1.0, np.nan], [2.0, 1.0]])
    costs = np.array([[3, 1], [4, -1]])
    v0, c0 = values.copy(), costs.copy()
    mckp(values, costs, 5)
    mckp_exact(values, costs, 5)
    mckp_lp(values, costs, 5)
    assert np.array_equal(values, v0, equal_nan=True) and np.array_equal(costs, c0)


def test_empty_shapes():
    assert mckp(np.zeros((0, 3)), np.zeros((0, 3), dtype=int), 10).shape == (0,)
    assert mckp(np.zeros((2, 0)), np.zeros((2, 0), dtype=int), 10).tolist() == [-1, -1]
    assert mckp_exact(np.zeros((0, 3)), np.zeros((0, 3), dtype=int), 10).shape == (0,)


@pytest.mark.parametrize(
    ("values", "costs", "budget", "error", "match"),
    [
        (np.ones((2, 2)), np.ones((2, 3), dtype=int), 5, ValueError, "values and costs must be 2-D"),
        (np.ones(2), np.ones(2, dtype=int), 5, ValueError, "values and costs must be 2-D"),
        (np.ones((1, 1)), np.array([[1.5]]), 5, ValueError, "whole numbers of tokens"),
        (np.array([[np.inf]]), np.ones((1, 1), dtype=int), 5, ValueError, "values must be finite"),
        (np.ones((1, 1)), np.ones((1, 1), dtype=int), -1, ValueError, "budget must be >= 0 tokens, got -1"),
        (np.ones((1, 1)), np.ones((1, 1), dtype=int), 2.5, TypeError, "budget must be an int number of tokens"),
        (np.ones((1, 1)), np.ones((1, 1), dtype=int), True, TypeError, "budget must be an int number of tokens"),
    ],
)
def test_invalid_input(values, costs, budget, error, match):
    for fn in (mckp, mckp_exact, mckp_lp):
        with pytest.raises(error, match=match):
            fn(values, costs, budget)
