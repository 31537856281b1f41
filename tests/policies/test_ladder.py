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


def test_a_cut_in_the_turn_in_progress_is_counted_once_beside_the_ladders_shorter_forms(hashing_embedder):
    """Found by the property test (CI): the ladder chose a shorter form of a message of the turn in progress,
    the turn's cut then replaced it, and its block was charged for both: 66 tokens rendered for a budget of 63
    (the engine's internal error). The cut is made from the whole messages and counted as sent."""
    from rdmem import MemoryManager

    the = " ".join(["the"] * 17)
    history = [{"role": "system", "content": "the the the"}, {"role": "user", "content": ""},
               {"role": "user", "content": ""}, {"role": "user", "content": ""},
               {"role": "assistant", "content": f"{the} ? plan"}, {"role": "assistant", "content": ""},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_0", "type": "function", "function": {"name": "search", "arguments": '{"q": ""}'}}]},
               {"role": "tool", "tool_call_id": "call_0", "content": "the the the"}]
    mem = MemoryManager(budget=63, policy="rd-ladder", embedder=hashing_embedder)
    mem.extend(history)
    ctx = mem.context()
    assert ctx.tokens == mem.tokenizer.messages_tokens(ctx.messages) <= 63
    assert any(m.get("tool_calls") for m in ctx.messages) and ctx.messages[-1]["role"] == "tool"
