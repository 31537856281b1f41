"""A summary of the older part plus the most recent messages verbatim."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..contract import Plan, Problem
from ..errors import InvalidInput
from ..scoring import Recency
from ..select import get_selector

__all__ = ["SummaryBuffer"]


@dataclass(frozen=True)
class SummaryBuffer:
    """A summary of the older part plus the most recent messages verbatim.

    Like LangChain's ``ConversationSummaryBufferMemory``: the newest messages
    that fit ``1 - summary_fraction`` of the budget stay verbatim; everything
    older is summarized into at most ``summary_fraction`` of the budget.
    """

    name: str = "summary_buffer"
    description: str = "summary of the older part (extractive by default) + the most recent messages verbatim"
    summary_fraction: float = 0.3
    needs_embeddings: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.summary_fraction < 1.0:
            raise InvalidInput(f"summary_fraction must be in (0, 1), got {self.summary_fraction!r}")

    def plan(self, problem: Problem) -> Plan:
        recency = Recency(decay=0.0).score(problem.ctx)
        costs = problem.block_costs()
        verbatim_budget = int(problem.budget * (1 - self.summary_fraction))
        chosen = get_selector("suffix")(np.zeros(len(costs)), costs, verbatim_budget)
        summarize = sorted(int(i) for b in range(int(chosen[0]) if len(chosen) else len(costs)) for i in problem.blocks[b])
        if not summarize:
            chosen = get_selector("suffix")(np.zeros(len(costs)), costs, problem.budget)
        spare = problem.budget - int(costs[chosen].sum()) if len(chosen) else problem.budget
        return Plan(
            chosen=[int(b) for b in chosen],
            scores=recency,
            breakdown={"recency": recency},
            summarize=summarize,
            summary_tokens=max(spare - problem.marker_tokens, 0) if summarize else 0,
        )
