"""rd-ladder composes over any policy that exposes a valuation, not over rd alone."""

from __future__ import annotations

import numpy as np
import pytest

from rdmem import compact
from rdmem.compaction import unit_values
from rdmem.contract import Valued
from rdmem.errors import InvalidInput
from rdmem.policies import LadderPolicy, RDPolicy, get_policy
from rdmem.scoring import LearnedValue
from rdmem.testing import check_policy
from rdmem.units import encode_units


def test_every_scoring_policy_exposes_its_valuation():
    assert all(isinstance(get_policy(n), Valued) for n in ("rd", "rd-task", "window", "importance", "seed"))
    assert not isinstance(get_policy("summary_buffer"), Valued)  # it values nothing: recency and a summary


def test_the_ladder_over_window_keeps_every_invariant_and_has_no_value_model_to_tune():
    ladder = LadderPolicy(name="window-ladder", description="window's values on the ladder", base=get_policy("window"))
    check_policy(ladder)
    assert ladder.value_model() is None and not ladder.needs_embeddings
    with pytest.raises(InvalidInput, match="the base policy 'window' has no value model to replace"):
        ladder.with_value_model(LearnedValue())
    assert isinstance(LadderPolicy().with_value_model(LearnedValue()).base, RDPolicy)  # rd's is replaced


def test_unit_values_are_the_report_scores_when_everything_fits(cl100k, hashing_embedder, agent_history):
    """The values the KV press leans on, without rendering anything: the plan's scores with room for every
    message (rd's near-duplicate rule included), 0 for the pinned system message."""
    msgs = agent_history + [dict(agent_history[-1], id="again")]  # a copy: rd values one of the two at 0
    units = encode_units(msgs, cl100k)
    for name in ("rd", "window", "rd-ladder", "summary_buffer"):
        pol = get_policy(name)
        emb = hashing_embedder if pol.needs_embeddings else None
        report = compact(msgs, budget=10**9, policy=pol, tokenizer=cl100k, embedder=emb).report
        values = unit_values(units, policy=pol, tokenizer=cl100k, embedder=emb)
        assert values.tolist() == [d.score for d in report], name
        assert values[[u.pinned for u in units]].tolist() == [0.0] * sum(u.pinned for u in units)
