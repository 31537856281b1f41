"""Selection algorithms: pure functions ``(values, costs, budget) -> indices``.

Each returns the ascending indices of the chosen items; total cost never
exceeds the budget. ``SELECTORS`` maps names to them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import InvalidInput
from .chain import gap_knapsack, group_totals, marker_aware
from .coverage import coverage, coverage_objective
from .duplicates import near_duplicate_groups
from .greedy import by_value, greedy, suffix, topk
from .knapsack import knapsack
from .mckp import mckp, mckp_exact, mckp_lp

__all__ = [
    "SELECTORS", "get_selector", "knapsack", "greedy", "by_value", "topk", "suffix",
    "mckp", "mckp_exact", "mckp_lp", "coverage", "coverage_objective", "gap_knapsack", "marker_aware",
    "group_totals", "near_duplicate_groups",
]

Selector = Callable[[np.ndarray, np.ndarray, int], np.ndarray]

SELECTORS: dict[str, Selector] = {
    "knapsack": knapsack,
    "greedy": greedy,
    "by_value": by_value,
    "suffix": suffix,
}


def get_selector(name: str) -> Selector:
    try:
        return SELECTORS[name]
    except KeyError:
        raise InvalidInput(f"unknown selector {name!r}; choose one of {', '.join(sorted(SELECTORS))}") from None
