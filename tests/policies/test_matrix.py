"""The common matrix: every registered policy keeps the invariants of ``rdmem.testing.POLICY_CHECKS``."""

from __future__ import annotations

import warnings

import pytest

import rdmem
from rdmem import compact
from rdmem.testing import POLICY_CHECKS

from .._checks import check_compaction

POLICY_NAMES = sorted(rdmem.POLICIES)


@pytest.fixture
def embedder(hashing_embedder):
    """A fast deterministic embedder: the matrix runs in the quick suite, needing no model (the real MiniLM
    has its own smoke test below)."""
    return hashing_embedder


def test_registry_is_not_empty():
    assert {"window", "summary_buffer", "importance", "seed", "rd"} <= set(POLICY_NAMES)


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("check", POLICY_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_matrix(check, policy, embedder):
    check(policy, embedder)


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_invariants_with_the_real_model(policy, agent_history, minilm, cl100k):
    """The same invariants with the real MiniLM, at a tight budget and with a query."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = compact(agent_history, budget=120, policy=policy, embedder=minilm,
                         query="Which hotel did we pick and what about the peanut allergy?")
    check_compaction(result, agent_history, 120, cl100k)
