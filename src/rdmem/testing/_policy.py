"""The invariants every policy keeps, whatever it prefers: one check per function.

Each check takes a policy (a registered name or a policy object) and an
embedder, runs :func:`rdmem.compact` on histories made for the case, and
checks the output from the outside (:func:`check_compaction`: the budget
re-counted with a fresh cl100k tokenizer, a valid chat history, tool calls
with their results, every elision marked).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

from .._api import compact
from ..contract import Policy
from ..embed import Embedder
from ..result import Compaction
from ..tokens import Tokenizer, get_tokenizer
from ._assert import equal, expect, warns
from ._history import TRUNCATED, agent_history, check_compaction, clean, history_problems

__all__ = ["POLICY_CHECKS", "PolicyCheck"]

PolicyCheck = Callable[["str | Policy", Embedder], None]

BUDGETS = (40, 90, 160, 300, 100_000)
QUERY = "Which hotel did we pick and what about the peanut allergy?"


def _tokenizer() -> Tokenizer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # offline, cl100k's one-line fallback notice
        return get_tokenizer("cl100k_base")


def _run(messages: list[dict[str, Any]], budget: int, policy: str | Policy, embedder: Embedder,
         **kw: Any) -> Compaction:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return compact(messages, budget=budget, policy=policy, embedder=embedder, **kw)


def _name(policy: str | Policy) -> str:
    return policy if isinstance(policy, str) else policy.name


def check_invariants(policy: str | Policy, embedder: Embedder) -> None:
    """At every budget, with and without a query: fits, valid, input untouched, every decision reported."""
    tok = _tokenizer()
    for budget in BUDGETS:
        for query in (None, QUERY):
            history = agent_history()
            before = copy.deepcopy(history)
            result = _run(history, budget, policy, embedder, query=query)
            equal(history, before, f"the input after compact(budget={budget}, query={query!r})")
            check_compaction(result, history, budget, tok)
            equal((result.policy, result.budget), (_name(policy), budget), "the result's policy and budget")


def check_everything_fits_means_everything_verbatim(policy: str | Policy, embedder: Embedder) -> None:
    history = agent_history()
    result = _run(history, 100_000, policy, embedder)
    equal(result.messages, [clean(m) for m in history], "the output when everything fits")
    equal(result.kept_ids, [m["id"] for m in history], "kept_ids when everything fits")
    equal(result.tokens, _tokenizer().messages_tokens(result.messages), "tokens when everything fits")


def check_deterministic(policy: str | Policy, embedder: Embedder) -> None:
    a = _run(agent_history(), 120, policy, embedder, query="weather in Lisbon")
    b = _run(agent_history(), 120, policy, embedder, query="weather in Lisbon")
    expect(a.to_dict() == b.to_dict(), f"two runs on the same input differ: kept {a.kept_ids} then {b.kept_ids}")


def check_empty_input(policy: str | Policy, embedder: Embedder) -> None:
    result = _run([], 100, policy, embedder)
    equal((result.messages, result.tokens, result.kept_ids, result.report), ([], 0, [], []), "the result of []")


def check_system_prompt_pinned_and_first(policy: str | Policy, embedder: Embedder) -> None:
    tok = _tokenizer()
    history = agent_history()
    system = clean(history[0])
    budget = tok.message_tokens(system) + 30
    result = _run(history, budget, policy, embedder)
    equal(result.messages[:1], [system], "the first message sent")
    expect("sys" in result.kept_ids, f"the system prompt is not kept: {result.kept_ids}")
    check_compaction(result, history, budget, tok)


def check_system_message_in_the_middle_moves_first(policy: str | Policy, embedder: Embedder) -> None:
    history = agent_history() + [{"id": "sys2", "role": "system", "content": "The user prefers French."}]
    result = _run(history, 120, policy, embedder)
    equal(result.messages[:2], [clean(history[0]), clean(history[-1])], "the first two messages sent")
    expect({"sys", "sys2"} <= set(result.kept_ids), f"a system message is not kept: {result.kept_ids}")
    check_compaction(result, history, 120, _tokenizer())


def check_the_newest_user_message_is_cut_when_it_alone_overflows(policy: str | Policy, embedder: Embedder) -> None:
    tok = _tokenizer()
    text = "Summarise: " + " ".join(f"word{i} about the harbour" for i in range(400))
    history: list[dict[str, Any]] = [{"id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant", "content": f"short turn {i}"}
               for i in range(10)] + [{"id": "big", "role": "user", "content": text}]
    budget = 200
    with warns(RuntimeWarning, "the newest user message 'big' .* was cut to .* tokens, and older",
               "compact() of a newest user message larger than the budget"):
        result = compact(history, budget=budget, policy=policy, embedder=embedder)
    check_compaction(result, history, budget, tok)
    last = result.messages[-1]["content"] if result.messages else ""
    expect(last.startswith(text[:40]) and TRUNCATED in last, "the newest user message is not sent, cut, last")
    equal(result.messages[0], {"role": "user", "content": "[10 messages omitted]"}, "the first message sent")
    expect(result.tokens > budget - 20, f"{result.tokens} tokens of {budget}: the room is left empty")
    equal((result.report[-1].decision, result.kept_ids), ("truncated", []), "the newest message's decision, kept_ids")
    expect(any("newest user message 'big'" in w for w in result.warnings), f"no warning says so: {result.warnings}")


def check_single_oversized_message_is_cut_with_a_marker(policy: str | Policy, embedder: Embedder) -> None:
    tok = _tokenizer()
    text = " ".join(f"word{i} about the harbour" for i in range(400))
    history: list[dict[str, Any]] = [{"id": "big", "role": "assistant", "content": text}]
    budget = 60
    result = _run(history, budget, policy, embedder)
    check_compaction(result, history, budget, tok)
    equal((len(result.messages), result.kept_ids), (1, []), "messages sent and kept_ids")
    content = result.messages[0]["content"]
    expect(content.startswith(text[:20]), f"what is sent does not start as the message: {content[:60]!r}")
    decision = result.report[0].decision
    # Cut with the note, or a shorter rung of its own (a policy with a representation ladder sends its gist).
    expect((decision == "truncated" and TRUNCATED in content) or decision == "compressed",
           f"the message is {decision} ({content[-60:]!r}), neither truncated with the note nor compressed")


def check_budget_smaller_than_any_message(policy: str | Policy, embedder: Embedder) -> None:
    tok = _tokenizer()
    para = " ".join(["The committee discussed the quarterly budget for the new harbour bridge."] * 12)
    history: list[dict[str, Any]] = [
        {"id": "s", "role": "system", "content": "You are terse. " + para},
        {"id": "u1", "role": "user", "content": "First: " + para},
        {"id": "a1", "role": "assistant", "content": "Reply: " + para},
        {"id": "u2", "role": "user", "content": "Second: " + para},
    ]
    smallest = min(tok.message_tokens(clean(m)) for m in history)
    for budget in (1, 5, 25, 60, smallest - 1):
        result = _run(history, budget, policy, embedder)
        check_compaction(result, history, budget, tok)
        if budget >= 60:  # something is sent, and whatever was cut says so
            expect(result.messages and any(TRUNCATED in m["content"] for m in result.messages),
                   f"budget {budget}: nothing cut and sent with the note")
        if not result.messages:
            expect(result.warnings, f"budget {budget}: everything was dropped without a warning")


def check_oversized_tool_group_never_half_sent(policy: str | Policy, embedder: Embedder) -> None:
    history: list[dict[str, Any]] = [
        {"id": "u", "role": "user", "content": "Fetch the table."},
        {"id": "a", "role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": "{\"table\": \"sales\"}"}}]},
        {"id": "t", "role": "tool", "tool_call_id": "c1", "content": "row " * 500},
        {"id": "a2", "role": "assistant", "content": "Here it is."},
    ]
    for budget in (30, 80, 200):
        check_compaction(_run(history, budget, policy, embedder), history, budget, _tokenizer())


def check_orphan_tool_messages_never_emitted(policy: str | Policy, embedder: Embedder) -> None:
    history: list[dict[str, Any]] = [
        {"id": "t0", "role": "tool", "tool_call_id": "gone", "content": "result of a call that left earlier"},
        {"id": "u", "role": "user", "content": "And now?"},
        {"id": "a", "role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"id": "t1", "role": "tool", "tool_call_id": "c1", "content": "one"},
        {"id": "b", "role": "assistant", "content": "the second result is missing"},
    ]
    result = _run(history, 10_000, policy, embedder)
    check_compaction(result, history, 10_000, _tokenizer())
    equal(set(result.kept_ids), {"u", "b"}, "kept_ids of a history with orphan tool messages")
    reasons = {d.id: d.reason for d in result.report}
    equal(reasons["t0"], "tool result without its call", "the reason for a result without its call")
    equal((reasons["a"], reasons["t1"]), ("tool call without all of its results",) * 2,
          "the reasons for a call without all of its results")


def check_markers_off(policy: str | Policy, embedder: Embedder) -> None:
    result = _run(agent_history(), 120, policy, embedder, markers=False)
    expect(not history_problems(result.messages), f"not a valid history: {history_problems(result.messages)}")
    expect(not any("omitted]" in (m.get("content") or "") for m in result.messages), "a marker with markers=False")
    expect(result.tokens <= 120, f"{result.tokens} tokens for a budget of 120")


def check_content_parts_and_names(policy: str | Policy, embedder: Embedder) -> None:
    history: list[dict[str, Any]] = [
        {"id": "1", "role": "user", "name": "ana", "content": [{"type": "text", "text": "Book the 9:15 train."}]},
        {"id": "2", "role": "assistant", "content": "Booked the 9:15 to Porto."},
        {"id": "3", "role": "user", "name": "ben", "content": [{"type": "text", "text": "And a table for 4 at 8pm."}]},
    ]
    result = _run(history, 10_000, policy, embedder)
    check_compaction(result, history, 10_000, _tokenizer())
    equal(result.kept_ids, ["1", "2", "3"], "kept_ids of messages with content parts and names")


def check_the_turn_in_progress_travels_with_the_newest_user_message(policy: str | Policy, embedder: Embedder) -> None:
    """An agent between its tool calls and its answer sees the question and the calls made since."""
    tok = _tokenizer()
    history: list[dict[str, Any]] = [{"id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant",
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
    result = _run(history, 160, policy, embedder, query="harbours and timetables")
    check_compaction(result, history, 160, tok)
    expect({"q", "c1", "r1", "c2", "r2"} <= set(result.kept_ids), f"the turn in progress is not kept whole: "
           f"{result.kept_ids}")
    # Room for only part of the turn: the newest calls and results first.
    tight = _run(history, 90, policy, embedder, query="harbours and timetables")
    check_compaction(tight, history, 90, tok)
    expect({"q", "c2", "r2"} <= set(tight.kept_ids), f"the question and the newest call are not kept: "
           f"{tight.kept_ids}")
    # Where each output message comes from: an input id, or None for a marker or the summary.
    equal(len(result.sources), len(result.messages), "sources per message")
    for msg, src in zip(result.messages, result.sources, strict=True):
        if src in result.kept_ids:
            equal(msg, clean(next(m for m in history if m["id"] == src)), f"the message sent for {src!r}")
        elif src is None:
            expect(msg["role"] in ("user", "system"), f"a marker or summary as a {msg['role']} message")


def check_a_tool_result_too_large_for_the_budget_is_cut_not_dropped(policy: str | Policy, embedder: Embedder) -> None:
    """An agent that fetched a long page reads a cut of it, in at most half of the budget."""
    tok = _tokenizer()
    page = " ".join(f"Paragraph {i}: the harbour of Naxos has ferries, cafes and a castle." for i in range(300))
    history: list[dict[str, Any]] = [{"id": f"t{i}", "role": "user", "content": f"Earlier {i}: remember the ferry leaves at {i}:15."}
               for i in range(20)]
    history += [
        {"id": "q", "role": "user", "content": "Summarise the page about Naxos."},
        {"id": "c", "role": "assistant", "content": None, "tool_calls": [
            {"id": "f1", "type": "function", "function": {"name": "fetch", "arguments": "{\"url\": \"naxos\"}"}}]},
        {"id": "page", "role": "tool", "tool_call_id": "f1", "content": page},
    ]
    budget = 2000
    with warns(RuntimeWarning, "the tool message 'page' of the turn in progress .* was cut to",
               "compact() of a turn whose tool result is larger than the budget"):
        result = compact(history, budget=budget, policy=policy, embedder=embedder)
    check_compaction(result, history, budget, tok)
    sent = result.messages[-1]
    expect(sent["role"] == "tool" and sent["content"].startswith(page[:60]) and TRUNCATED in sent["content"],
           "the tool result is not sent last, cut, with the note")
    expect(tok.message_tokens(sent) <= budget // 2, f"the cut result takes {tok.message_tokens(sent)} of {budget}")
    expect(result.report[-1].decision == "truncated" and {"q", "c"} <= set(result.kept_ids),
           f"the result is {result.report[-1].decision}, kept {result.kept_ids}")
    expect(any((m.get("content") or "").startswith("Earlier") for m in result.messages), "older turns left out")


#: Every policy check, in the order they run.
POLICY_CHECKS: tuple[PolicyCheck, ...] = (
    check_invariants, check_everything_fits_means_everything_verbatim, check_deterministic, check_empty_input,
    check_system_prompt_pinned_and_first, check_system_message_in_the_middle_moves_first,
    check_the_newest_user_message_is_cut_when_it_alone_overflows, check_single_oversized_message_is_cut_with_a_marker,
    check_budget_smaller_than_any_message, check_oversized_tool_group_never_half_sent,
    check_orphan_tool_messages_never_emitted, check_markers_off, check_content_parts_and_names,
    check_the_turn_in_progress_travels_with_the_newest_user_message,
    check_a_tool_result_too_large_for_the_budget_is_cut_not_dropped,
)
