"""gap_knapsack: the exact optimum when every run of skipped items costs an elision marker."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rdmem.select.chain import gap_knapsack


def _cost_with_markers(mask: tuple[int, ...], costs: np.ndarray, gap: int, forced: np.ndarray) -> int:
    total, runs, in_run = 0, 0, False
    for i, keep in enumerate(mask):
        if forced[i] and not in_run:  # a span already gone before item i
            runs, in_run = runs + 1, True
        if keep:
            total += int(costs[i])
            in_run = False
        elif not in_run:
            runs, in_run = runs + 1, True
    return total + runs * gap


def _brute(values: np.ndarray, costs: np.ndarray, budget: int, gap: int, forced: np.ndarray) -> float:
    best = 0.0
    for mask in itertools.product((0, 1), repeat=len(values)):
        if any(mask) and _cost_with_markers(mask, costs, gap, forced) <= budget:
            best = max(best, float(sum(v for v, m in zip(values, mask, strict=True) if m)))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(60):
        n = int(rng.integers(1, 8))
        values = rng.random(n).round(3)
        costs = rng.integers(1, 10, n)
        budget, gap = int(rng.integers(0, 40)), int(rng.integers(0, 6))
        forced = rng.random(n) < 0.3
        chosen = gap_knapsack(values, costs, budget, gap, gap_before=forced)
        mask = tuple(int(i in set(chosen.tolist())) for i in range(n))
        if chosen.size:
            assert _cost_with_markers(mask, costs, gap, forced) <= budget
        assert values[chosen].sum() == pytest.approx(_brute(values, costs, budget, gap, forced))


def test_prefers_a_contiguous_run_when_markers_are_dear() -> None:
    values, costs = np.array([5.0, 1.0, 5.0]), np.array([10, 10, 10])
    assert gap_knapsack(values, costs, 30, 12).tolist() == [0, 1, 2]
    assert gap_knapsack(values, costs, 25, 3).tolist() == [0, 2]


def test_errors() -> None:
    with pytest.raises(ValueError, match="gap_cost must be an int >= 0 tokens, got -1"):
        gap_knapsack(np.ones(2), np.ones(2, dtype=int), 5, -1)
    with pytest.raises(ValueError, match=r"gap_before must have shape \(2,\)"):
        gap_knapsack(np.ones(2), np.ones(2, dtype=int), 5, 1, gap_before=np.zeros(3, dtype=bool))


def _brute_priced(values: np.ndarray, costs: np.ndarray, budget: int, gap: int, forced: np.ndarray,
                  gap_value: float) -> float:
    best = 0.0
    for mask in itertools.product((0, 1), repeat=len(values)):
        if any(mask) and _cost_with_markers(mask, costs, gap, forced) <= budget:
            runs = _cost_with_markers(mask, np.zeros_like(costs), 1, forced)
            best = max(best, float(sum(v for v, m in zip(values, mask, strict=True) if m)) - gap_value * runs)
    return best


@pytest.mark.parametrize("seed", range(4))
def test_gap_value_is_taken_off_each_marker(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for _ in range(60):
        n = int(rng.integers(1, 8))
        values = (rng.random(n) - 0.2).round(3)  # some not worth their tokens (a caller pricing them)
        costs = rng.integers(1, 10, n)
        budget, gap = int(rng.integers(0, 40)), int(rng.integers(0, 6))
        forced, gap_value = rng.random(n) < 0.3, round(float(rng.random()), 2)
        chosen = gap_knapsack(values, costs, budget, gap, gap_before=forced, gap_value=gap_value)
        mask = tuple(int(i in set(chosen.tolist())) for i in range(n))
        got = 0.0
        if chosen.size:
            got = values[chosen].sum() - gap_value * _cost_with_markers(mask, np.zeros_like(costs), 1, forced)
        assert got == pytest.approx(max(_brute_priced(values, costs, budget, gap, forced, gap_value), 0.0))


def test_a_dear_marker_keeps_a_run_together() -> None:
    values, costs = np.array([5.0, -0.5, 5.0]), np.array([10, 10, 10])  # the middle one is not worth its tokens
    assert gap_knapsack(values, costs, 30, 1).tolist() == [0, 2]
    assert gap_knapsack(values, costs, 30, 1, gap_value=1.0).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="gap_value must be a finite number >= 0, got -1"):
        gap_knapsack(values, costs, 30, 1, gap_value=-1)
