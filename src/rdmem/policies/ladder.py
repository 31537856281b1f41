"""rd-ladder: rd's values, with each message sent verbatim, compressed, as a one-line gist, or not at all."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from ..compress import compress, one_line
from ..contract import LearnsOnline, Plan, Problem, Valued
from ..errors import InvalidInput, InvalidType
from ..features import content_words
from ..history import split_prefix
from ..scoring import LearnedValue
from ..select import group_totals, mckp
from ..tokens import Tokenizer
from ..units import Rung
from .rd import RDPolicy

__all__ = ["LadderPolicy"]


@dataclass(frozen=True)
class LadderPolicy:
    """The representation ladder over rd: one rung per message, chosen by a multiple-choice knapsack.

    Each prose message gets three rungs, verbatim, compressed (small talk
    removed, the most informative sentences kept, names, numbers and dates
    untouched) and a one-line gist, worth its value under ``base`` (any
    policy with a valuation, :class:`~rdmem.contract.Valued`; by default an
    :class:`RDPolicy`: its mode, value model and links) times the share of its
    information the rung keeps; the knapsack runs on their convex hulls, as
    video coders do. Groups of several messages (a tool call with its
    results, a correction with what it corrects) and messages without prose
    go verbatim or not at all. Elision markers are priced by running the
    knapsack again on a budget less the markers its answer needs, until it
    fits. rd's near-duplicate rule and its marker-aware programme are not
    part of it (each rung is one item of the knapsack instead).

    A :class:`~rdmem.MemoryManager` trims its working set with ``base`` (the
    working set holds whole messages); the rungs are chosen when a context is
    built.
    """

    name: str = "rd-ladder"
    description: str = "rd with the representation ladder: each message verbatim, compressed, one line or absent"
    base: Valued = field(default_factory=RDPolicy)

    def __post_init__(self) -> None:
        if not isinstance(self.base, Valued):  # composition: any policy that exposes its valuation
            raise InvalidType(f"base must be a policy with a valuation(problem) (rd, a ScoredPolicy, ...), "
                              f"got {type(self.base).__name__}")

    @property
    def needs_embeddings(self) -> bool:
        return self.base.needs_embeddings

    def value_model(self) -> LearnedValue | None:
        return self.base.value_model() if isinstance(self.base, LearnsOnline) else None

    def with_value_model(self, value: LearnedValue) -> LadderPolicy:
        base = self.base.with_value_model(value) if isinstance(self.base, LearnsOnline) else None
        if not isinstance(base, Valued):
            raise InvalidInput(f"the base policy {self.base.name!r} has no value model to replace")
        return replace(self, base=base)

    def plan(self, problem: Problem) -> Plan:
        v = self.base.valuation(problem)
        groups = v.merged if v.merged is not None else [np.array([b]) for b in range(len(problem.blocks))]
        return _ladder_plan(problem, groups, v.values, v.parts, v.reasons)


def _ladder_plan(
    problem: Problem, groups: list[np.ndarray], values: np.ndarray, parts: dict[str, np.ndarray],
    reasons: dict[int, str],
) -> Plan:
    """One rung per item (``groups`` of blocks that travel together) by a multiple-choice knapsack."""
    ctx, tok = problem.ctx, problem.tokenizer
    n = len(groups)
    v = np.full((n, 3), np.nan)
    c = np.full((n, 3), -1, dtype=np.int64)
    v[:, 0], c[:, 0] = group_totals(groups, problem.block_values(values), problem.block_costs())
    texts: dict[tuple[int, int], str] = {}
    info = ctx.information
    for b, group in enumerate(groups):
        if len(group) != 1 or len(problem.blocks[int(group[0])]) != 1:
            continue
        i = int(problem.blocks[int(group[0])][0])
        u = problem.units[i]
        if not u.text or u.message.get("tool_calls") or u.role not in ("user", "assistant") or info[i] <= 0:
            continue
        for k, text in ((1, _compressed(u.text, tok)), (2, _gist(u.text, tok))):
            if text == u.text:
                continue
            cost = tok.message_tokens({**u.message, "content": text})
            if cost >= c[b, 0] or (k == 2 and c[b, 1] >= 0 and cost >= c[b, 1]):
                continue
            kept = math.fsum(max(ctx.idf_of(w), 0.0) for w in set(content_words(text)))
            v[b, k], c[b, k] = values[i] * min(kept / info[i], 1.0), cost
            texts[(b, k)] = text
    choice = _fit_markers(v, c, problem)
    contents: dict[int, str] = {}
    rungs: dict[int, Rung] = {}
    for b in map(int, np.flatnonzero(choice > 0)):
        i = int(problem.blocks[int(groups[b][0])][0])
        contents[i] = texts[(int(b), int(choice[b]))]
        rungs[i] = Rung.COMPRESSED if choice[b] == 1 else Rung.SUMMARY
        reasons.setdefault(i, "compressed to fit" if choice[b] == 1 else "one line to fit")
    chosen = sorted(int(x) for b in np.flatnonzero(choice >= 0) for x in groups[b])
    together = [[int(x) for x in g] for g in groups if len(g) > 1]
    return Plan(
        chosen=chosen, scores=values, breakdown=parts, contents=contents, rungs=rungs, fill=True,
        reasons=reasons, together=together,
    )


def _fit_markers(v: np.ndarray, c: np.ndarray, problem: Problem) -> np.ndarray:
    """:func:`mckp` run again on a budget reduced by the markers its answer needs, until it fits them."""
    budget = problem.budget
    for _ in range(4):
        choice = mckp(v, c, budget)
        sent = choice >= 0
        runs = int(np.count_nonzero(sent[1:] & ~sent[:-1])) + int(bool(sent.any() and not sent[0]))
        runs += int(bool(sent.any() and not sent[-1]))
        need = int(c[np.flatnonzero(sent), choice[sent]].sum()) + runs * problem.marker_tokens
        if need <= problem.budget or budget == 0:
            break
        budget = max(budget - (need - problem.budget), 0)
    return choice


@lru_cache(maxsize=65_536)
def _compressed(text: str, tok: Tokenizer) -> str:
    return compress(text, tokenizer=tok)


@lru_cache(maxsize=65_536)
def _gist(text: str, tok: Tokenizer) -> str:
    return one_line(text, tokenizer=tok, max_tokens=max(20, tok.count(split_prefix(text)[0]) + 12))
