"""Named policies: a scorer, a selector and a way to reconstruct.

A policy is a small frozen dataclass with one method, :meth:`plan`, that
turns a :class:`~rdmem.compaction.Problem` into a :class:`~rdmem.compaction.Plan`.
The engine (:func:`rdmem.compaction.compact_units`) does the rest: summaries,
markers, repair to the exact budget, the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from .compaction import Plan, Problem
from .scoring import Information, Lexical, Metadata, Recency, Relevance, Scorer, Weighted, seed_scorer
from .select import get_selector

__all__ = ["Policy", "ScoredPolicy", "SummaryBuffer", "POLICIES", "get_policy", "register_policy"]


@runtime_checkable
class Policy(Protocol):
    name: str
    description: str

    @property
    def needs_embeddings(self) -> bool: ...

    def plan(self, problem: Problem) -> Plan: ...


def _scores(scorer: Scorer, problem: Problem) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    breakdown_fn = getattr(scorer, "breakdown", None)
    if breakdown_fn is not None:
        parts = breakdown_fn(problem.ctx)
        total = sum(parts.values(), np.zeros(len(problem.units)))
        return np.asarray(total, dtype=np.float64), parts
    s = np.asarray(scorer.score(problem.ctx), dtype=np.float64)
    return s, {"score": s}


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

    def plan(self, problem: Problem) -> Plan:
        scores, parts = _scores(self.scorer, problem)
        select = get_selector(self.selector)
        budget = max(problem.budget - problem.marker_tokens, 0)
        chosen = select(problem.block_values(scores), problem.block_costs(), budget)
        return Plan(chosen=[int(b) for b in chosen], scores=scores, breakdown=parts, fill=self.fill)


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
            raise ValueError(f"summary_fraction must be in (0, 1), got {self.summary_fraction!r}")

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


def _rd_scorer() -> Weighted:
    return Weighted(
        terms=(
            ("information", 1.0, Information()),
            ("metadata", 0.5, Metadata(directive=3.0, entity=1.0, factual=1.0)),
            ("recency", 0.3, Recency(decay=0.02)),
            ("relevance", 2.0, Relevance()),
            ("lexical", 1.5, Lexical()),
        ),
        normalize="max",
    )


def _builtin() -> dict[str, Callable[[], Policy]]:
    return {
        "window": lambda: ScoredPolicy(
            "window",
            "the most recent messages that fit, like LangChain trim_messages(strategy='last')",
            Recency(decay=0.0),
            selector="suffix",
        ),
        "summary_buffer": SummaryBuffer,
        "importance": lambda: ScoredPolicy(
            "importance",
            "highest utility first (recency, information, bonuses, query relevance) until the budget is full",
            Weighted(
                terms=(
                    ("recency", 1.0, Recency(decay=0.05)),
                    ("information", 1.0, Information()),
                    ("metadata", 0.5, Metadata()),
                    ("relevance", 1.5, Relevance()),
                ),
                normalize="minmax",
            ),
            selector="by_value",
        ),
        "seed": lambda: ScoredPolicy(
            "seed",
            "the seed design's scorer (recency, relevance, uniqueness, bonuses) with an exact knapsack",
            seed_scorer(),
            selector="knapsack",
        ),
        "rd": lambda: ScoredPolicy(
            "rd",
            "rate-distortion: information, bonuses and query relevance per token, exact knapsack (default)",
            _rd_scorer(),
            selector="knapsack",
            fill=True,
        ),
    }


POLICIES: dict[str, Callable[[], Policy]] = _builtin()


def register_policy(name: str, factory: Callable[[], Policy]) -> None:
    """Add a policy under ``name`` (the CLI, the service and the evaluation harness find it there)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"policy name must be a non-empty string, got {name!r}")
    POLICIES[name] = factory


_INSTANCES: dict[str, Policy] = {}


def get_policy(policy: str | Policy) -> Policy:
    """A policy by name (or the object itself); unknown names list the valid ones."""
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(sorted(POLICIES))}")
        if policy not in _INSTANCES:
            _INSTANCES[policy] = POLICIES[policy]()
        return _INSTANCES[policy]
    if isinstance(policy, Policy):
        return policy
    raise TypeError(f"policy must be a name or a policy object, got {type(policy).__name__}")
