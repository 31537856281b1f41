"""Selectors: exact knapsack against brute force, greedy's 1/2 bound, top-K, suffix, validation."""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdmem.select import SELECTORS, by_value, get_selector, greedy, knapsack, suffix, topk


def brute_force(values, costs, budget):
    best = 0.0
    for r in range(len(values) + 1):
        for subset in itertools.combinations(range(len(values)), r):
            if sum(costs[i] for i in subset) <= budget:
                best = max(best, sum(values[i] for i in subset))
    return best


instances = st.integers(0, 10).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(-2.0, 50.0, allow_nan=False, allow_infinity=False), min_size=n, max_size=n),
        st.lists(st.integers(0, 40), min_size=n, max_size=n),
        st.integers(0, 120),
    )
)


def value_of(values, chosen):
    return float(sum(values[i] for i in chosen))


@settings(max_examples=300, deadline=None)
@given(instances)
def test_knapsack_matches_brute_force(instance):
    values, costs, budget = instance
    chosen = knapsack(np.array(values), np.array(costs), budget)
    assert chosen.tolist() == sorted(set(chosen.tolist()))
    assert sum(costs[i] for i in chosen) <= budget
    assert value_of(values, chosen) == pytest.approx(brute_force(values, costs, budget), abs=1e-6)


def test_knapsack_bounds_change_no_answer(monkeypatch):
    """Fixing items by LP bounds gives the answer of the table alone (the same subset, not only its value),
    copies of one item included, on continuous values as policies produce them."""
    module = importlib.import_module("rdmem.select.knapsack")  # the module (the package exports the function)
    rng = np.random.default_rng(11)
    instances = []
    for trial in range(600):
        n = int(rng.integers(1, 150))
        values = rng.beta(0.5, 3, n) * rng.choice([1.0, 10.0, 1000.0]) - rng.choice([0.0, 0.05])
        costs = rng.integers(0, 90, n)
        if trial % 3 == 0:  # half of them copies of the other half
            values, costs = np.concatenate([values[: n // 2], values[: n - n // 2]]), np.concatenate([costs[: n // 2], costs[: n - n // 2]])
        instances.append((values, costs, int(rng.integers(0, int(costs.sum()) + 10))))
    with_bounds = [knapsack(*x).tolist() for x in instances]
    nothing = lambda v, w, cap: (np.zeros(len(v), dtype=bool), np.zeros(len(v), dtype=bool))  # noqa: E731
    monkeypatch.setattr(module, "_fixed_by_bounds", nothing)
    assert [knapsack(*x).tolist() for x in instances] == with_bounds


def test_knapsack_bounds_leave_a_small_table_on_a_compaction_sized_instance():
    """300 messages of 8-80 tokens, 4,000 of budget: the bounds decide most items (the table's size, and so
    the call's time, falls with them; BENCHMARKS "Knapsack speed")."""
    from rdmem.select.knapsack import _fixed_by_bounds

    rng = np.random.default_rng(3)
    values, costs = rng.beta(0.5, 3, 300), rng.integers(8, 80, 300)
    taken, out = _fixed_by_bounds(values - 1e-12, costs, 4000)
    assert not (taken & out).any()
    assert (taken | out).mean() > 0.8
    chosen = knapsack(values, costs, 4000)
    assert set(np.flatnonzero(taken)) <= set(chosen.tolist()) and not set(np.flatnonzero(out)) & set(chosen.tolist())


def test_knapsack_on_seeded_random_instances():
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(1, 13))
        values = rng.random(n) * 10
        costs = rng.integers(1, 60, n)
        budget = int(rng.integers(0, 200))
        chosen = knapsack(values, costs, budget)
        assert costs[chosen].sum() <= budget
        assert values[chosen].sum() == pytest.approx(brute_force(values, costs, budget))


def test_knapsack_gcd_scaling_and_free_items():
    # All costs multiples of 100: the table shrinks, the answer does not change.
    values, costs = np.array([3.0, 4.0, 5.0, 1.0]), np.array([300, 400, 500, 0])
    assert knapsack(values, costs, 800).tolist() == [0, 2, 3]
    assert knapsack(values, costs, 799).tolist() == [0, 1, 3]
    assert knapsack(values, costs, 0).tolist() == [3]


def test_knapsack_is_deterministic_on_ties():
    values, costs = np.ones(6), np.full(6, 10)
    first = knapsack(values, costs, 30).tolist()
    assert first == knapsack(values, costs, 30).tolist()
    assert len(first) == 3


def test_knapsack_never_takes_non_positive_values():
    assert knapsack(np.array([0.0, -1.0, 2.0]), np.array([1, 1, 1]), 10).tolist() == [2]


@settings(max_examples=300, deadline=None)
@given(instances)
def test_greedy_meets_half_the_optimum(instance):
    values, costs, budget = instance
    chosen = greedy(np.array(values), np.array(costs), budget)
    assert sum(costs[i] for i in chosen) <= budget
    assert value_of(values, chosen) >= 0.5 * brute_force(values, costs, budget) - 1e-9


def test_greedy_takes_the_best_single_item_when_it_beats_the_ratio_order():
    assert greedy(np.array([2.0, 10.0]), np.array([1, 10]), 10).tolist() == [1]


@settings(max_examples=100, deadline=None)
@given(instances)
def test_by_value_fits(instance):
    values, costs, budget = instance
    chosen = by_value(np.array(values), np.array(costs), budget)
    assert sum(costs[i] for i in chosen) <= budget
    assert chosen.tolist() == sorted(chosen.tolist())


def test_topk_is_chronological():
    values = np.array([0.1, 0.9, 0.5, 0.7, 0.9])
    assert topk(values, 2).tolist() == [1, 4]
    assert topk(values, 3).tolist() == [1, 3, 4]
    assert topk(values, 0).tolist() == []
    assert topk(values, 10).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="k must be an int >= 0, got -1"):
        topk(values, -1)


def test_suffix_is_the_longest_recent_run_that_fits():
    costs = np.array([5, 1, 1, 9, 2, 3])
    assert suffix(np.zeros(6), costs, 5).tolist() == [4, 5]
    assert suffix(np.zeros(6), costs, 14).tolist() == [3, 4, 5]
    # It stops at the first item that does not fit, even if older ones would.
    assert suffix(np.zeros(6), costs, 13).tolist() == [4, 5]
    assert suffix(np.zeros(6), costs, 1).tolist() == []
    assert suffix(np.zeros(6), costs, 100).tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("name", sorted(SELECTORS))
def test_every_selector_handles_empty_input_and_zero_budget(name):
    select = get_selector(name)
    assert select(np.zeros(0), np.zeros(0, dtype=int), 10).tolist() == []
    assert sum(np.array([3, 4])[select(np.array([1.0, 2.0]), np.array([3, 4]), 0)]) == 0


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        ((np.ones(2), np.ones(3, dtype=int), 5), ValueError, r"values and costs must be 1-D of equal length"),
        ((np.ones(2), np.array([1, -1]), 5), ValueError, r"costs must be >= 0 tokens, got -1"),
        ((np.ones(2), np.array([1.5, 2.0]), 5), ValueError, "costs must be whole numbers of tokens"),
        ((np.array([1.0, np.nan]), np.array([1, 1]), 5), ValueError, "values must be finite"),
        ((np.ones(2), np.array([1, 1]), -1), ValueError, r"budget must be >= 0 tokens, got -1"),
        ((np.ones(2), np.array([1, 1]), 2.5), TypeError, "budget must be an int number of tokens, got float"),
        ((np.ones(2), np.array([1, 1]), True), TypeError, "budget must be an int number of tokens, got bool"),
    ],
)
def test_selector_validation(args, exc, match):
    for select in (knapsack, greedy, by_value, suffix):
        with pytest.raises(exc, match=match):
            select(*args)


def test_unknown_selector():
    with pytest.raises(ValueError, match=r"unknown selector 'magic'; choose one of by_value, greedy, knapsack"):
        get_selector("magic")
