"""What every scorer must do (``score(ctx)``: one finite utility per unit), one check per function.

Each check takes a scorer and an embedder and builds its own
:class:`~rdmem.scoring.ScoringContext` over the test conversation (with and
without a query), so a scorer is checked as a policy will call it.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..embed import Embedder
from ..scoring import Scorer, ScoringContext
from ..tokens import get_tokenizer
from ..units import MemoryUnit, encode_units
from ._assert import equal, expect
from ._history import agent_history

__all__ = ["SCORER_CHECKS", "ScorerCheck"]

ScorerCheck = Callable[[Scorer, Embedder], None]

QUERIES = (None, "Which restaurants are safe for my peanut allergy?")


def _units(messages: Sequence[dict[str, Any]] | None = None) -> list[MemoryUnit]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        tok = get_tokenizer("cl100k_base")
    return encode_units(agent_history() if messages is None else messages, tok)


def _scores(scorer: Scorer, ctx: ScoringContext, what: str) -> np.ndarray:
    got = scorer.score(ctx)
    expect(isinstance(got, np.ndarray), f"{what}: score() returned {type(got).__name__}, not a numpy array")
    equal(got.shape, (len(ctx),), f"{what}: the shape of score() (one utility per unit)")
    expect(np.issubdtype(got.dtype, np.number) and not np.issubdtype(got.dtype, np.complexfloating),
           f"{what}: score() returned dtype {got.dtype}, not real numbers")
    expect(bool(np.all(np.isfinite(got))), f"{what}: score() returned non-finite values {got[~np.isfinite(got)]}")
    return got


class _Refuses:
    """An embedder that fails: a scorer that says it needs no embeddings must not call one."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise AssertionError("the scorer embedded texts although its needs_embeddings is False")


def check_declares_needs_embeddings(scorer: Scorer, embedder: Embedder) -> None:
    expect(isinstance(getattr(scorer, "needs_embeddings", None), bool),
           f"{type(scorer).__name__}.needs_embeddings must be a bool, got {getattr(scorer, 'needs_embeddings', None)!r}")


def check_one_finite_utility_per_unit(scorer: Scorer, embedder: Embedder) -> None:
    for query in QUERIES:
        _scores(scorer, ScoringContext(_units(), query=query, embedder=embedder), f"query={query!r}")


def check_no_embeddings_unless_declared(scorer: Scorer, embedder: Embedder) -> None:
    if scorer.needs_embeddings:
        return
    for query in QUERIES:
        _scores(scorer, ScoringContext(_units(), query=query, embedder=_Refuses()), f"query={query!r}, no embedder")


def check_deterministic(scorer: Scorer, embedder: Embedder) -> None:
    for query in QUERIES:
        ctx = ScoringContext(_units(), query=query, embedder=embedder)
        first = _scores(scorer, ctx, f"query={query!r}")
        again = _scores(scorer, ctx, f"query={query!r}, the same context again")
        fresh = _scores(scorer, ScoringContext(_units(), query=query, embedder=embedder),
                        f"query={query!r}, a fresh context")
        expect(np.array_equal(first, again) and np.array_equal(first, fresh),
               f"query={query!r}: scores differ between calls on the same units: {first} / {again} / {fresh}")


def check_units_untouched(scorer: Scorer, embedder: Embedder) -> None:
    units = _units()
    before = [(u.id, u.index, u.role, copy.deepcopy(u.message), u.text, u.tokens, u.group, u.links) for u in units]
    for query in QUERIES:
        scorer.score(ScoringContext(units, query=query, embedder=embedder))
    after = [(u.id, u.index, u.role, u.message, u.text, u.tokens, u.group, u.links) for u in units]
    expect(before == after, "score() changed the units it scored")


def check_empty_and_single(scorer: Scorer, embedder: Embedder) -> None:
    for query in QUERIES:
        _scores(scorer, ScoringContext([], query=query, embedder=embedder), f"no units, query={query!r}")
        one = _units([{"role": "user", "content": "Remember that I'm allergic to peanuts."}])
        _scores(scorer, ScoringContext(one, query=query, embedder=embedder), f"one unit, query={query!r}")


def check_edge_texts(scorer: Scorer, embedder: Embedder) -> None:
    """Empty content, a tool call without text, no words at all, a long message, another script."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "!!! ... ???"},
        {"role": "user", "content": "记住我对花生过敏"},
        {"role": "assistant", "content": "word " * 2000},
    ]
    for query in (*QUERIES, "!!!"):
        _scores(scorer, ScoringContext(_units(messages), query=query, embedder=embedder), f"edge texts, {query!r}")


def check_explain_agrees_with_score(scorer: Scorer, embedder: Embedder) -> None:
    """A scorer with ``explain(ctx)`` returns the same scores, and a breakdown with one value per unit."""
    explain = getattr(scorer, "explain", None)
    if explain is None:
        return
    for query in QUERIES:
        ctx = ScoringContext(_units(), query=query, embedder=embedder)
        scores, parts = explain(ctx)
        expect(np.allclose(np.asarray(scores), _scores(scorer, ctx, f"query={query!r}")),
               f"query={query!r}: explain()'s scores are not score()'s")
        expect(isinstance(parts, dict) and all(np.shape(v) == (len(ctx),) for v in parts.values()),
               f"query={query!r}: explain()'s breakdown is not a dict of one value per unit")


#: Every scorer check, in the order they run.
SCORER_CHECKS: tuple[ScorerCheck, ...] = (
    check_declares_needs_embeddings, check_one_finite_utility_per_unit, check_no_embeddings_unless_declared,
    check_deterministic, check_units_untouched, check_empty_and_single, check_edge_texts,
    check_explain_agrees_with_score,
)
