"""Budgeted submodular coverage: duplicates do not both take budget; the (1 - 1/e)/2 guarantee holds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rdmem.select.coverage import coverage, coverage_objective, prepare_similarity

BOUND = (1 - 1 / math.e) / 2


def _dup_matrix():
    # Items 0 and 1 are copies; item 2 is unrelated.
    return np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])


def test_two_copies_never_both_taken():
    values, costs = np.array([5.0, 5.0, 1.0]), np.array([10, 10, 10])
    for budget in (20, 30, 1000):  # even when everything fits, the second copy adds nothing
        chosen = coverage(values, costs, budget, _dup_matrix()).tolist()
        assert chosen == [1, 2]
    assert coverage(values, costs, 10, _dup_matrix()).tolist() == [1]


def test_the_cheaper_copy_is_the_one_kept():
    values, costs = np.array([5.0, 5.0, 1.0]), np.array([10, 4, 10])
    assert coverage(values, costs, 14, _dup_matrix()).tolist() == [1, 2]


def test_redundancy_zero_is_the_plain_sum():
    values, costs = np.array([5.0, 5.0, 1.0]), np.array([10, 10, 10])
    assert coverage(values, costs, 20, _dup_matrix(), redundancy=0.0).tolist() == [0, 1]
    assert coverage_objective(values, _dup_matrix(), np.array([0, 1]), redundancy=0.0) == 10.0
    # Halfway: the second copy adds half its value (7.5 -> 10).
    assert coverage_objective(values, _dup_matrix(), np.array([0]), redundancy=0.5) == 7.5
    assert coverage_objective(values, _dup_matrix(), np.array([0, 1]), redundancy=0.5) == 10.0


def test_partial_similarity_gives_partial_credit():
    sim = np.array([[1.0, 0.6], [0.6, 1.0]])
    values = np.array([10.0, 10.0])
    assert coverage_objective(values, sim, np.array([0])) == pytest.approx(16.0)
    # Below the threshold similarity counts as nothing.
    assert coverage_objective(values, sim, np.array([0]), threshold=0.6) == pytest.approx(10.0)


def test_best_single_item_rule():
    # Gain per token prefers the small item; then the big one no longer fits. The big one alone is better.
    values, costs = np.array([2.0, 10.0]), np.array([1, 10])
    assert coverage(values, costs, 10, np.eye(2)).tolist() == [1]


def test_free_items_first_and_zero_gain_items_skipped():
    values, costs = np.array([1.0, 0.0, 3.0]), np.array([0, 0, 5])
    assert coverage(values, costs, 5, np.eye(3)).tolist() == [0, 2]


def test_brute_force_ratio_at_least_the_guarantee():
    rng = np.random.default_rng(3)
    ratios = []
    for _ in range(120):
        n = int(rng.integers(1, 8))
        x = rng.normal(size=(n, 4))
        if n > 2:
            x[1] = x[0] + 0.05 * rng.normal(size=4)  # a near-duplicate
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        sim = x @ x.T
        values, costs = rng.random(n), rng.integers(0, 30, n)
        budget, rho = int(rng.integers(0, 60)), float(rng.choice([0.0, 0.5, 1.0]))
        got = coverage(values, costs, budget, sim, redundancy=rho)
        assert costs[got].sum() <= budget
        assert np.all(np.diff(got) > 0)
        best = max(
            coverage_objective(values, sim, np.array(sub, dtype=np.int64), redundancy=rho)
            for k in range(n + 1)
            for sub in itertools.combinations(range(n), k)
            if costs[list(sub)].sum() <= budget
        )
        if best > 0:
            ratios.append(coverage_objective(values, sim, got, redundancy=rho) / best)
    assert min(ratios) >= BOUND
    assert np.mean(np.isclose(ratios, 1.0)) >= 0.8  # usually optimal on small instances


def test_deterministic_and_inputs_untouched():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 8))
    sim = x @ x.T
    values, costs = rng.random(30), rng.integers(1, 20, 30)
    s0 = sim.copy()
    first = coverage(values, costs, 60, sim, threshold=0.2)
    assert np.array_equal(first, coverage(values, costs, 60, sim, threshold=0.2))
    assert np.array_equal(sim, s0)


def test_prepare_similarity_clips_and_sets_the_diagonal():
    s = prepare_similarity(np.array([[0.3, -0.5], [1.7, 0.2]]), 2)
    assert s.tolist() == [[1.0, 0.0], [1.0, 1.0]]


def test_empty():
    assert coverage(np.zeros(0), np.zeros(0, dtype=int), 10, np.zeros((0, 0))).tolist() == []


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"values": np.array([-1.0, 1.0])}, ValueError, "values must be >= 0"),
        ({"similarity": np.eye(3)}, ValueError, r"similarity must be an \(n, n\) matrix for n = 2"),
        ({"similarity": np.array([[1.0, np.nan], [0.0, 1.0]])}, ValueError, "similarity must be finite"),
        ({"redundancy": 1.5}, ValueError, r"redundancy must be in \[0, 1\], got 1.5"),
        ({"redundancy": "high"}, TypeError, "redundancy must be a number"),
        ({"threshold": 1.0}, ValueError, r"threshold must be in \[0, 1\), got 1.0"),
        ({"budget": -3}, ValueError, "budget must be >= 0 tokens"),
    ],
)
def test_invalid_input(kwargs, error, match):
    args = {"values": np.array([1.0, 1.0]), "costs": np.array([1, 1]), "budget": 2, "similarity": np.eye(2)}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        coverage(args.pop("values"), args.pop("costs"), args.pop("budget"), args.pop("similarity"), **args)
