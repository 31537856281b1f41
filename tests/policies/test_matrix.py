"""The common matrix: every registered policy keeps the same invariants."""

from __future__ import annotations

import copy
import warnings

import pytest

import rdmem
from rdmem import compact
from rdmem.policies import LadderPolicy, get_policy

from .._checks import TRUNCATED, check_compaction, clean, history_problems

POLICY_NAMES = sorted(rdmem.POLICIES)
BUDGETS = [40, 90, 160, 300, 100_000]


def run(messages, budget, policy, embedder, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return compact(messages, budget=budget, policy=policy, embedder=embedder, **kw)


@pytest.fixture
def embedder(hashing_embedder):
    """A fast deterministic embedder: the matrix runs in the quick suite, needing no model (the real MiniLM
    has its own smoke test below)."""
    return hashing_embedder


def test_registry_is_not_empty():
    assert {"window", "summary_buffer", "importance", "seed", "rd"} <= set(POLICY_NAMES)


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("query", [None, "Which hotel did we pick and what about the peanut allergy?"])
def test_invariants(policy, budget, query, agent_history, embedder, cl100k):
    before = copy.deepcopy(agent_history)
    result = run(agent_history, budget, policy, embedder, query=query)
    assert agent_history == before, "compact() mutated its input"
    check_compaction(result, agent_history, budget, cl100k)
    assert result.policy == policy and result.budget == budget


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_everything_fits_means_everything_verbatim(policy, agent_history, embedder, cl100k):
    result = run(agent_history, 100_000, policy, embedder)
    assert result.messages == [clean(m) for m in agent_history]
    assert result.kept_ids == [m["id"] for m in agent_history]
    assert result.tokens == cl100k.messages_tokens(result.messages)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_deterministic(policy, agent_history, embedder):
    a = run(agent_history, 120, policy, embedder, query="weather in Lisbon")
    b = run(copy.deepcopy(agent_history), 120, policy, embedder, query="weather in Lisbon")
    assert a.to_dict() == b.to_dict()


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_empty_input(policy, embedder):
    result = run([], 100, policy, embedder)
    assert (result.messages, result.tokens, result.kept_ids, result.report) == ([], 0, [], [])


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_system_prompt_pinned_and_first(policy, agent_history, embedder, cl100k):
    system = clean(agent_history[0])
    budget = cl100k.message_tokens(system) + 30
    result = run(agent_history, budget, policy, embedder)
    assert result.messages[0] == system
    assert "sys" in result.kept_ids
    check_compaction(result, agent_history, budget, cl100k)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_system_message_in_the_middle_moves_first(policy, agent_history, embedder, cl100k):
    history = agent_history + [{"id": "sys2", "role": "system", "content": "The user prefers French."}]
    result = run(history, 120, policy, embedder)
    assert result.messages[:2] == [clean(history[0]), clean(history[-1])]
    assert {"sys", "sys2"} <= set(result.kept_ids)
    check_compaction(result, history, 120, cl100k)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_the_newest_user_message_is_cut_with_a_marker_when_it_alone_overflows(policy, embedder, cl100k):
    text = "Summarise: " + " ".join(f"word{i} about the harbour" for i in range(400))
    history = [{"id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant", "content": f"short turn {i}"}
               for i in range(10)] + [{"id": "big", "role": "user", "content": text}]
    budget = 200
    with pytest.warns(RuntimeWarning, match="the newest user message 'big' .* was cut to .* tokens, and older"):
        result = compact(history, budget=budget, policy=policy, embedder=embedder)
    check_compaction(result, history, budget, cl100k)
    assert result.messages[-1]["content"].startswith(text[:40]) and TRUNCATED in result.messages[-1]["content"]
    assert result.messages[0] == {"role": "user", "content": "[10 messages omitted]"}
    assert result.tokens > budget - 20  # the room is used, not left empty
    assert result.report[-1].decision == "truncated" and result.kept_ids == []
    assert any("newest user message 'big'" in w for w in result.warnings)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_single_oversized_message_is_cut_with_a_marker(policy, embedder, cl100k):
    text = " ".join(f"word{i} about the harbour" for i in range(400))
    history = [{"id": "big", "role": "assistant", "content": text}]
    budget = 60
    assert cl100k.messages_tokens(history) > budget
    result = run(history, budget, policy, embedder)
    check_compaction(result, history, budget, cl100k)
    assert len(result.messages) == 1
    content = result.messages[0]["content"]
    assert result.kept_ids == []
    if isinstance(get_policy(policy), LadderPolicy):
        # The representation ladder has shorter rungs than the whole message: its one-line gist.
        assert content.startswith(text[:20]) and content.endswith("…")
        assert result.report[0].decision == "compressed" and result.report[0].rung.value == "summary"
        return
    assert content.startswith(text[:20]) and TRUNCATED in content
    assert result.report[0].decision == "truncated"


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_budget_smaller_than_any_message(policy, embedder, cl100k):
    para = " ".join(["The committee discussed the quarterly budget for the new harbour bridge."] * 12)
    history = [
        {"id": "s", "role": "system", "content": "You are terse. " + para},
        {"id": "u1", "role": "user", "content": "First: " + para},
        {"id": "a1", "role": "assistant", "content": "Reply: " + para},
        {"id": "u2", "role": "user", "content": "Second: " + para},
    ]
    smallest = min(cl100k.message_tokens(clean(m)) for m in history)
    for budget in (1, 5, 25, 60, smallest - 1):
        result = run(history, budget, policy, embedder)
        check_compaction(result, history, budget, cl100k)
        if budget >= 60:
            # Something is sent, and whatever was cut says so.
            assert result.messages
            assert any(TRUNCATED in m["content"] for m in result.messages)
        if not result.messages:
            assert result.warnings, "everything was dropped without a warning"


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_oversized_tool_group_never_half_sent(policy, embedder, cl100k):
    big = "row " * 500
    history = [
        {"id": "u", "role": "user", "content": "Fetch the table."},
        {"id": "a", "role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": "{\"table\": \"sales\"}"}}]},
        {"id": "t", "role": "tool", "tool_call_id": "c1", "content": big},
        {"id": "a2", "role": "assistant", "content": "Here it is."},
    ]
    for budget in (30, 80, 200):
        result = run(history, budget, policy, embedder)
        check_compaction(result, history, budget, cl100k)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_orphan_tool_messages_never_emitted(policy, embedder, cl100k):
    history = [
        {"id": "t0", "role": "tool", "tool_call_id": "gone", "content": "result of a call that left earlier"},
        {"id": "u", "role": "user", "content": "And now?"},
        {"id": "a", "role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"id": "t1", "role": "tool", "tool_call_id": "c1", "content": "one"},
        {"id": "b", "role": "assistant", "content": "the second result is missing"},
    ]
    result = run(history, 10_000, policy, embedder)
    check_compaction(result, history, 10_000, cl100k)
    assert set(result.kept_ids) == {"u", "b"}
    reasons = {d.id: d.reason for d in result.report}
    assert reasons["t0"] == "tool result without its call"
    assert reasons["a"] == reasons["t1"] == "tool call without all of its results"


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_markers_off(policy, agent_history, embedder, cl100k):
    result = run(agent_history, 120, policy, embedder, markers=False)
    assert not history_problems(result.messages)
    assert not any("omitted]" in (m.get("content") or "") for m in result.messages)
    assert result.tokens <= 120


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_content_parts_and_names(policy, embedder, cl100k):
    history = [
        {"id": "1", "role": "user", "name": "ana", "content": [{"type": "text", "text": "Book the 9:15 train."}]},
        {"id": "2", "role": "assistant", "content": "Booked the 9:15 to Porto."},
        {"id": "3", "role": "user", "name": "ben", "content": [{"type": "text", "text": "And a table for 4 at 8pm."}]},
    ]
    result = run(history, 10_000, policy, embedder)
    check_compaction(result, history, 10_000, cl100k)
    assert result.kept_ids == ["1", "2", "3"]


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_invariants_with_the_real_model(policy, agent_history, minilm, cl100k):
    """The same invariants with the real MiniLM, at a tight budget and with a query."""
    result = run(agent_history, 120, policy, minilm, query="Which hotel did we pick and what about the peanut allergy?")
    check_compaction(result, agent_history, 120, cl100k)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_the_turn_in_progress_travels_with_the_newest_user_message(policy, embedder, cl100k):
    """An agent in the middle of a turn (the question, then its tool calls and their results) is about to read
    the last results: whatever the policy prefers, the model sees the question and the calls made since."""
    history = [{"id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant",
                "content": f"Earlier turn {i}: a long digression about harbours, ferries and timetables, again."}
               for i in range(30)]
    history += [
        {"id": "q", "role": "user", "content": "Book the cheapest ferry to Naxos."},
        {"id": "c1", "role": "assistant", "content": None, "tool_calls": [
            {"id": "k1", "type": "function", "function": {"name": "ferries", "arguments": "{\"to\": \"Naxos\"}"}}]},
        {"id": "r1", "role": "tool", "tool_call_id": "k1", "content": "Blue Star 08:00 39 EUR; SeaJets 10:30 79 EUR"},
        {"id": "c2", "role": "assistant", "content": None, "tool_calls": [
            {"id": "k2", "type": "function", "function": {"name": "book", "arguments": "{\"ferry\": \"Blue Star\"}"}}]},
        {"id": "r2", "role": "tool", "tool_call_id": "k2", "content": "Booked: Blue Star 08:00, ref NX42"},
    ]
    # A query about the digression: a policy left to itself prefers the older turns.
    result = run(history, 160, policy, embedder, query="harbours and timetables")
    check_compaction(result, history, 160, cl100k)
    assert {"q", "c1", "r1", "c2", "r2"} <= set(result.kept_ids), result.kept_ids
    # Room for only part of the turn: the newest calls and results first.
    tight = run(history, 90, policy, embedder, query="harbours and timetables")
    check_compaction(tight, history, 90, cl100k)
    assert {"q", "c2", "r2"} <= set(tight.kept_ids), tight.kept_ids
    # Where each output message comes from: an input id, or None for a marker or the summary.
    assert len(result.sources) == len(result.messages)
    for msg, src in zip(result.messages, result.sources):
        if src in result.kept_ids:
            assert msg == clean(next(m for m in history if m["id"] == src))
        elif src is None:
            assert msg["role"] in ("user", "system")


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_a_tool_result_too_large_for_the_budget_is_cut_not_dropped(policy, embedder, cl100k):
    """An agent that fetched a long page reads a cut of it (with the truncation note), in at most half of the
    budget, instead of a marker that makes it call the tool again; older turns keep the rest."""
    page = " ".join(f"Paragraph {i}: the harbour of Naxos has ferries, cafes and a castle." for i in range(300))
    history = [{"id": f"t{i}", "role": "user", "content": f"Earlier {i}: remember the ferry leaves at {i}:15."}
               for i in range(20)]
    history += [
        {"id": "q", "role": "user", "content": "Summarise the page about Naxos."},
        {"id": "c", "role": "assistant", "content": None, "tool_calls": [
            {"id": "f1", "type": "function", "function": {"name": "fetch", "arguments": "{\"url\": \"naxos\"}"}}]},
        {"id": "page", "role": "tool", "tool_call_id": "f1", "content": page},
    ]
    budget = 2000
    with pytest.warns(RuntimeWarning, match="the tool message 'page' of the turn in progress .* was cut to"):
        result = compact(history, budget=budget, policy=policy, embedder=embedder)
    check_compaction(result, history, budget, cl100k)
    sent = result.messages[-1]
    assert sent["role"] == "tool" and sent["content"].startswith(page[:60]) and TRUNCATED in sent["content"]
    assert cl100k.message_tokens(sent) <= budget // 2
    assert result.report[-1].decision == "truncated" and {"q", "c"} <= set(result.kept_ids)
    assert any((m.get("content") or "").startswith("Earlier") for m in result.messages), "older turns left out"
