"""``rdmem.testing``: the shipped contracts pass on rdmem's own parts, and fail, saying why, on broken ones."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

from rdmem.contract import Plan, Problem
from rdmem.scoring import Recency, ScoringContext
from rdmem.store import MemoryStore
from rdmem.testing import POLICY_CHECKS, check_policy, check_scorer, check_store


def test_rdmems_own_parts_pass():
    check_store(MemoryStore)
    check_policy("window")
    check_scorer(Recency())


class OldHookStore(MemoryStore):
    """A store written to the ``_sessions(self)`` hook of before ``sessions(prefix)``: it lists every session."""

    def _sessions(self):
        return super()._sessions()


class PrefixHookStore(MemoryStore):
    """A store whose hook takes the prefix with no default (as ARCHITECTURE.md names it: ``_sessions(prefix)``)."""

    def _sessions(self, prefix):
        return super()._sessions(prefix)


@pytest.mark.parametrize("store", [OldHookStore, PrefixHookStore])
def test_a_store_whose_sessions_hook_takes_no_prefix_or_needs_one_passes(store):
    """``sessions(prefix)`` called the hook with the prefix: one written as ``_sessions(self)`` raised TypeError (a
    500 for every tenant's listing; the base filters what it lists now), and one written as ``_sessions(self,
    prefix)`` raised it when ``sessions()`` was called without one."""
    check_store(store)


class ForgetfulStore(MemoryStore):
    """Drops the fields the chat API does not know (the metadata users store with their messages)."""

    def append(self, session, units):
        for u in units:
            u.message = {k: v for k, v in u.message.items() if k in ("role", "content", "tool_calls", "tool_call_id",
                                                                     "name")}
        return super().append(session, units)


class TierBlindStore(MemoryStore):
    """Searches every tier whatever it is asked."""

    def _search(self, session, query, qvec, k, tier):
        return super()._search(session, query, qvec, k, None)


@pytest.mark.parametrize(("store", "check", "why"), [
    (ForgetfulStore, "check_roundtrip_keeps_everything", "messages loaded"),
    (TierBlindStore, "check_search_respects_tier_and_k", "search of the archive tier"),
])
def test_a_broken_store_fails_naming_the_check(store, check, why):
    with pytest.raises(AssertionError, match=f"the store fails {check}: {why}"):
        check_store(store)


_CALLS = itertools.count()


@dataclass(frozen=True)
class Dice:
    """Keeps every other block, starting from a different one on each call: not the same on the same input
    (a random pick would agree with itself by chance on a short history)."""

    name: str = "dice"
    description: str = "alternating"
    needs_embeddings: bool = False

    def plan(self, problem: Problem) -> Plan:
        start = next(_CALLS) % 2
        chosen = list(range(start, len(problem.blocks), 2))
        return Plan(chosen=chosen, scores=np.zeros(len(problem.units)))


def test_a_nondeterministic_policy_fails():
    deterministic = [c for c in POLICY_CHECKS if c.__name__ == "check_deterministic"]
    with pytest.raises(AssertionError, match="policy 'dice' fails check_deterministic: two runs on the same input"):
        check_policy(Dice(), checks=deterministic)


@dataclass(frozen=True)
class Shouting:
    needs_embeddings: bool = False

    def score(self, ctx: ScoringContext) -> np.ndarray:
        return np.full(len(ctx), np.inf)


@dataclass(frozen=True)
class Peeking:
    """Uses the query's vector but says it needs no embeddings (a policy would not give it a model)."""

    needs_embeddings: bool = False

    def score(self, ctx: ScoringContext) -> np.ndarray:
        q = ctx.query_embedding
        return np.zeros(len(ctx)) if q is None else ctx.embeddings @ q


@dataclass(frozen=True)
class OneNumber:
    needs_embeddings: bool = False

    def score(self, ctx: ScoringContext) -> np.ndarray:
        return np.zeros(1)


@pytest.mark.parametrize(("scorer", "check", "why"), [
    (Shouting(), "check_one_finite_utility_per_unit", "score\\(\\) returned non-finite values"),
    (Peeking(), "check_no_embeddings_unless_declared", "embedded texts although its needs_embeddings is False"),
    (OneNumber(), "check_one_finite_utility_per_unit", "the shape of score\\(\\)"),
])
def test_a_broken_scorer_fails_naming_the_check(scorer, check, why):
    with pytest.raises(AssertionError, match=f"scorer {type(scorer).__name__} fails {check}: .*{why}"):
        check_scorer(scorer)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="factory must be a callable that returns a Store, got MemoryStore"):
        check_store(MemoryStore())
    with pytest.raises(TypeError, match="policy must be a registered name or a Policy .*, got int"):
        check_policy(3)
    with pytest.raises(TypeError, match="scorer must have a score\\(ctx\\) method, got str"):
        check_scorer("recency")
