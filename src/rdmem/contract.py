"""The contract between the engine and a policy: what a policy is given (:class:`Problem`), what it
answers (:class:`Plan`), and the :class:`Policy` protocol.

A policy only ever sees candidates it may send: pinned system messages are
set aside, tool calls and their results are grouped into *blocks* (kept or
dropped together), and ``budget`` is what pinned messages leave. The engine
(:func:`rdmem.compact`) does the rest: summaries, elision markers, the repair
to the exact budget, the guarantees every policy keeps, and the report.

A new policy is a small frozen dataclass with ``name``, ``description``,
``needs_embeddings`` and one method, ``plan``::

    >>> from dataclasses import dataclass
    >>> from rdmem import Plan, Problem, compact
    >>> @dataclass(frozen=True)
    ... class Newest:
    ...     name: str = "newest"
    ...     description: str = "the newest blocks that fit"
    ...     needs_embeddings: bool = False
    ...     def plan(self, problem: Problem) -> Plan:
    ...         # Leave room for one "[N messages omitted]" marker; newer blocks first.
    ...         costs, chosen, left = problem.block_costs(), [], problem.budget - problem.marker_tokens
    ...         for b in range(len(costs) - 1, -1, -1):
    ...             if costs[b] <= left:
    ...                 chosen.append(b)
    ...                 left -= costs[b]
    ...         return Plan(chosen=chosen, scores=np.arange(len(problem.units), dtype=float))
    >>> compact([{"role": "user", "content": f"note {i}"} for i in range(9)], budget=30, policy=Newest()).kept_ids
    ['m6', 'm7', 'm8']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, runtime_checkable

import numpy as np

from .scoring import LearnedValue, Scorer, ScoringContext
from .tokens import Tokenizer
from .units import MemoryUnit, Rung

__all__ = ["Problem", "Plan", "Valuation", "Policy", "Valued", "Composed", "LearnsOnline", "scores_of"]


@dataclass
class Problem:
    """What a policy plans over: candidate units, their blocks, and the tokens available.

    ``blocks`` are arrays of positions in ``units``, in order; ``budget`` is
    in tokens; ``marker_tokens`` is what one ``[N messages omitted]`` marker
    costs; ``ctx`` computes shared quantities (embeddings, IDF) on first use.
    """

    units: list[MemoryUnit]
    blocks: list[np.ndarray]
    budget: int
    ctx: ScoringContext
    tokenizer: Tokenizer
    marker_tokens: int
    #: Per block: whether a span that cannot come back (already archived, or not emittable)
    #: lies right before it, so an elision marker stands there whatever is chosen around it.
    gap_before: np.ndarray | None = None

    @cached_property
    def _single_units(self) -> np.ndarray | None:
        # Without tool calls every block is one unit, and per-block sums are plain lookups.
        if all(len(b) == 1 for b in self.blocks):
            return np.array([int(b[0]) for b in self.blocks], dtype=np.int64)
        return None

    @property
    def single_units(self) -> bool:
        """Is every block one unit (no tool calls among the candidates)?"""
        return self._single_units is not None

    @cached_property
    def block_of(self) -> np.ndarray:
        """The block of each unit (its index in ``blocks``), -1 for a unit in none; read-only."""
        out = np.full(len(self.units), -1, dtype=np.int64)
        if self._single_units is not None:
            out[self._single_units] = np.arange(len(self.blocks))
        else:
            for b, blk in enumerate(self.blocks):
                out[blk] = b
        out.flags.writeable = False
        return out

    @cached_property
    def _block_costs(self) -> np.ndarray:
        tokens = self.ctx.token_costs.astype(np.int64)
        if self._single_units is not None:
            return tokens[self._single_units]
        return np.array([int(tokens[b].sum()) for b in self.blocks], dtype=np.int64)

    def block_costs(self) -> np.ndarray:
        """Tokens of each block, verbatim (a new array: callers may change it)."""
        return self._block_costs.copy()

    def block_values(self, values: np.ndarray) -> np.ndarray:
        """Per-unit ``values`` summed per block."""
        if self._single_units is not None:
            return np.asarray(values, dtype=np.float64)[self._single_units]
        return np.array([float(values[b].sum()) for b in self.blocks], dtype=np.float64)


@dataclass
class Plan:
    """A policy's answer: chosen blocks, per-unit scores and contents, and what to summarize.

    ``chosen`` are block indices; ``scores`` one utility per unit (for the
    report and the engine's fill); ``contents`` replaces a unit's text
    (compressed rungs); ``summarize`` lists units the summary stands for, in
    at most ``summary_tokens``; ``fill`` lets the engine add what still fits;
    ``together`` lists groups of blocks kept or dropped together.
    """

    chosen: list[int]
    scores: np.ndarray
    breakdown: dict[str, np.ndarray] = field(default_factory=dict)
    contents: dict[int, str] = field(default_factory=dict)
    rungs: dict[int, Rung] = field(default_factory=dict)
    summarize: list[int] = field(default_factory=list)
    summary_tokens: int = 0
    fill: bool = False
    reasons: dict[int, str] = field(default_factory=dict)
    #: Groups of block indices kept or dropped together (a correction and what it corrects).
    together: list[list[int]] = field(default_factory=list)


@runtime_checkable
class Policy(Protocol):
    """Turns a :class:`Problem` into a :class:`Plan`; see the module's example.

    Optional: ``low_watermark``, the fraction of its budget a :class:`~rdmem.MemoryManager` trims the
    working set down to unless told (default 0.8; ``rd``: 0.98), and ``merged_low_watermark``, the same for a
    manager that sends no marker per omitted run (default: ``low_watermark``; ``rd``: 0.96).
    """

    # Read-only members: a frozen dataclass's fields qualify.
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def needs_embeddings(self) -> bool: ...

    def plan(self, problem: Problem) -> Plan: ...


@dataclass
class Valuation:
    """What a policy makes of a problem before it selects: each unit's value (protected units above all
    the rest), the breakdown for the report, reasons, and the groups of blocks that travel together
    (``None`` when no link joins two blocks)."""

    values: np.ndarray
    parts: dict[str, np.ndarray]
    protected: np.ndarray
    reasons: dict[int, str]
    merged: list[np.ndarray] | None


@runtime_checkable
class Valued(Policy, Protocol):
    """A policy that says what each unit is worth before it selects (:class:`Valuation`): a wrapper over it
    (``rd-ladder``) reads it, whatever the policy is (``rd``, a :class:`~rdmem.ScoredPolicy`, or a user's
    own)."""

    def valuation(self, problem: Problem) -> Valuation: ...


@runtime_checkable
class Composed(Protocol):
    """A policy built over another one, ``base``, that keeps messages whole.

    A :class:`~rdmem.MemoryManager` trims its working set (which holds whole
    messages) with ``base``; the composed policy decides how to send them
    when a context is built (``rd-ladder`` over ``rd``).
    """

    base: Policy


@runtime_checkable
class LearnsOnline(Protocol):
    """A policy whose learned value model online feedback can tilt (:class:`rdmem.learn.Feedback`)."""

    def value_model(self) -> LearnedValue | None: ...

    def with_value_model(self, value: LearnedValue) -> Policy: ...


def scores_of(scorer: Scorer, problem: Problem) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A scorer's utilities for the problem's units, and their breakdown by term (for the report)."""
    explain_fn = getattr(scorer, "explain", None)
    if explain_fn is not None:
        return explain_fn(problem.ctx)
    breakdown_fn = getattr(scorer, "breakdown", None)
    if breakdown_fn is not None:
        parts = breakdown_fn(problem.ctx)
        total = sum(parts.values(), np.zeros(len(problem.units)))
        return np.asarray(total, dtype=np.float64), parts
    s = np.asarray(scorer.score(problem.ctx), dtype=np.float64)
    return s, {"score": s}
