"""Score every unit, add scores per block, select under the budget (window, importance, seed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..contract import Plan, Problem, Valuation, scores_of
from ..scoring import Scorer
from ..select import get_selector

__all__ = ["ScoredPolicy"]


@dataclass(frozen=True)
class ScoredPolicy:
    """Score every unit, add scores per block (a tool call and its results), select under the budget.

    ``selector`` is a name from :data:`rdmem.select.SELECTORS`. One elision
    marker is reserved up front; the engine repairs any overflow, and with
    ``fill`` adds what still fits afterwards.
    """

    name: str
    description: str
    scorer: Scorer
    selector: str = "knapsack"
    fill: bool = False

    def __post_init__(self) -> None:
        get_selector(self.selector)

    @property
    def needs_embeddings(self) -> bool:
        return bool(self.scorer.needs_embeddings)

    def valuation(self, problem: Problem) -> Valuation:
        """Each unit's score (none protected, no links between blocks)."""
        scores, parts = scores_of(self.scorer, problem)
        return Valuation(scores, parts, np.zeros(len(scores), dtype=bool), {}, None)

    def plan(self, problem: Problem) -> Plan:
        v = self.valuation(problem)
        scores, parts = v.values, v.parts
        select = get_selector(self.selector)
        budget = max(problem.budget - problem.marker_tokens, 0)
        chosen = select(problem.block_values(scores), problem.block_costs(), budget)
        return Plan(chosen=[int(b) for b in chosen], scores=scores, breakdown=parts, fill=self.fill)
