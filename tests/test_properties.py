"""Property-based tests: random histories with tool calls, random budgets, every policy."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rdmem
from rdmem import compact
from rdmem.reconstruct import marker_count
from rdmem.tokens import get_tokenizer

from ._checks import HashingEmbedder, check_compaction

POLICY_NAMES = sorted(rdmem.POLICIES)
EMBEDDER = HashingEmbedder()
with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    TOKENIZER = get_tokenizer("cl100k_base")

WORDS = (
    "the plan hotel Lisbon flight 42 EUR May 2024-05-16 remember don't forget from now on always never "
    "记住 别忘了 以后都 Ana Ben meeting budget ok lol thanks why how ? ! . , tomorrow 9:15 peanuts "
    "allergy train Porto report deadline Q3 revenue grew 12% café naïve 東京 🚀"
).split()

text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=120).map(" ".join)


@st.composite
def histories(draw):
    messages = []
    n_calls = 0
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "tool_group", "system", "parts", "orphan"]))
        if kind in ("user", "assistant", "system"):
            messages.append({"role": kind, "content": draw(text)})
        elif kind == "parts":
            messages.append({"role": "user", "name": "ana",
                             "content": [{"type": "text", "text": draw(text)}, {"type": "text", "text": draw(text)}]})
        elif kind == "orphan" and draw(st.booleans()):
            messages.append({"role": "tool", "tool_call_id": "nobody", "content": draw(text)})
        else:
            k = draw(st.integers(1, 3))
            ids = [f"call_{n_calls + j}" for j in range(k)]
            n_calls += k
            calls = [{"id": cid, "type": "function",
                      "function": {"name": draw(st.sampled_from(["search", "weather", "db_query"])),
                                   "arguments": json.dumps({"q": draw(text)[:80]})}} for cid in ids]
            messages.append({"role": "assistant", "content": draw(st.sampled_from([None, "Let me check."])),
                             "tool_calls": calls})
            answered = ids if draw(st.integers(0, 9)) else ids[:-1]  # now and then a call lacks its result
            for cid in answered:
                messages.append({"role": "tool", "tool_call_id": cid, "content": draw(text)})
    if draw(st.booleans()):
        for i, m in enumerate(messages):
            m["id"] = f"D{i}"
    return messages


@pytest.mark.parametrize("policy", POLICY_NAMES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=histories(), budget=st.integers(1, 1500), query=st.one_of(st.none(), text))
def test_random_histories_keep_every_invariant(policy, messages, budget, query):
    before = copy.deepcopy(messages)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = compact(messages, budget=budget, policy=policy, query=query or None, embedder=EMBEDDER)
        again = compact(messages, budget=budget, policy=policy, query=query or None, embedder=EMBEDDER)
    assert messages == before
    check_compaction(result, messages, budget, TOKENIZER)
    assert result.to_dict() == again.to_dict()
    assert sum(marker_count(m) is not None for m in result.messages) <= 1  # one merged marker (the default)


@pytest.mark.parametrize("policy", ["rd", "window"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=histories(), budget=st.integers(1, 1500), query=st.one_of(st.none(), text))
def test_a_marker_per_omitted_run_keeps_every_invariant(policy, messages, budget, query):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = compact(messages, budget=budget, policy=policy, query=query or None, embedder=EMBEDDER, markers=True)
    check_compaction(result, messages, budget, TOKENIZER)


@pytest.mark.parametrize("policy", POLICY_NAMES)
@settings(max_examples=15, deadline=None)
@given(messages=histories())
def test_a_budget_that_holds_everything_sends_everything(policy, messages):
    """With room for the whole history (and a marker per left-out message), every emittable message is sent verbatim."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        whole = TOKENIZER.messages_tokens([{k: v for k, v in m.items() if k != "id"} for m in messages])
        budget = whole + 15 * sum(m["role"] == "tool" or "tool_calls" in m for m in messages) + 1
        result = compact(messages, budget=budget, policy=policy, embedder=EMBEDDER)
    check_compaction(result, messages, budget, TOKENIZER)
    not_sent = {d.id for d in result.report if d.decision != "kept"}
    # Only messages that can never be sent (orphan results, unanswered calls) are left out.
    assert all(d.reason for d in result.report if d.id in not_sent)


@pytest.mark.parametrize("policy", POLICY_NAMES)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=histories(), budget=st.integers(30, 600), query=st.one_of(st.none(), text))
def test_memory_manager_streams_keep_every_invariant(policy, messages, budget, query):
    from rdmem import MemoryManager

    from ._checks import history_problems

    mem = MemoryManager(budget=budget, policy=policy, embedder=EMBEDDER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ids = mem.extend(messages)
        ctx = mem.context(query=query or None)
    assert set(mem.working_ids()) | set(mem.archived_ids()) == set(ids)
    assert ctx.tokens == TOKENIZER.messages_tokens(ctx.messages) <= budget
    assert not history_problems(ctx.messages)
    assert set(ctx.kept_ids) <= set(ids)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("abcde"), max_size=12), st.lists(st.sampled_from("abcdef"), max_size=12),
       st.integers(0, 4))
def test_a_resend_lines_up_with_what_is_stored(stored, new, dropped):
    """A client resends (a window of) what is stored, less the last ``dropped``, then new messages: the
    alignment finds at least that run, ending ``dropped`` before the end when nothing shorter explains it."""
    from rdmem.history import resend_alignment

    kept = stored[: len(stored) - dropped] if dropped <= len(stored) else []
    m, d = resend_alignment(stored, kept + new)
    assert 0 <= m <= len(kept + new) and 0 <= d <= len(stored)
    assert (kept + new)[:m] == stored[len(stored) - d - m: len(stored) - d]  # what it says is stored, is
    if kept and dropped == 0:
        assert m >= len(kept)  # the usual resend: the whole of it is found
    if kept and not new and len(set(stored)) == len(stored):
        assert (m, d) == (len(kept), len(stored) - len(kept))  # a regenerate, on distinct messages


@settings(max_examples=150, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12), st.integers(0, 3))
def test_one_user_s_chats_interleaved_in_one_session_line_up(order, new):
    """Two chats of one end user stored turn by turn in one session (the proxy's ``user`` sessions): chat A's
    resend is its own turns, with chat B's between them in the store. Its stored turns are found, its new
    messages are new, and only B's can be said to be dropped (the plain alignment stored A's turns again)."""
    turns = {"A": 0, "B": 0}
    stored: list[dict] = []
    for is_a in order:
        chat = "A" if is_a else "B"
        stored += [{"role": "user", "content": f"{chat} q{turns[chat]}"},
                   {"role": "assistant", "content": f"{chat} a{turns[chat]}"}]
        turns[chat] += 1
    resend = [m for m in stored if m["content"].startswith("A")] + [
        {"role": "user", "content": f"A new {i}"} for i in range(new)]
    mem = rdmem.MemoryManager(budget=10_000, policy="window")
    ids = mem.extend(stored)
    fresh, dropped = mem.resent(resend)
    assert fresh == list(range(2 * turns["A"], len(resend)))
    assert all(stored[ids.index(i)]["content"].startswith("B") for i in dropped)  # A's own are never dropped


def test_a_reply_is_stored_when_other_chats_wrote_while_it_was_made():
    """A shared session (one end user's chats): chat A resumes after chat B's five turns, and chat C does a turn
    while A's reply is being made. The reply's question, stored by its own request, now lies between C's
    messages: the reply was taken for one that another process had superseded, and not stored."""
    from rdmem._turn import store_following, take_turn
    from rdmem.messages import parse_messages

    mem = rdmem.MemoryManager(budget=10_000, policy="window")

    def turn(history: list[dict], question: str, answer: str | None) -> list:
        history.append({"role": "user", "content": question})
        parsed = parse_messages(history)
        take_turn(mem, parsed)  # a shared session: replace=0, so gaps
        if answer is not None:
            store_following(mem, parsed, parse_messages([{"role": "assistant", "content": answer}]))
            history.append({"role": "assistant", "content": answer})
        return parsed

    a: list[dict] = []
    b: list[dict] = []
    turn(a, "a1", "A1")
    for i in range(5):
        turn(b, f"b{i}", f"B{i}")
    asked = turn(a, "a2", None)  # A's reply is being made...
    turn([], "c1", "C1")  # ...while chat C does a turn
    assert store_following(mem, asked, parse_messages([{"role": "assistant", "content": "A2"}]))
    assert [m["content"] for m in mem.history()] == ["a1", "A1", *[f"{x}{i}" for i in range(5) for x in "bB"],
                                                     "a2", "c1", "C1", "A2"]


def test_a_new_chat_opening_as_an_older_one_did_is_stored():
    """In a shared session, a new chat's first message equal to one stored 20 messages back ("Hi") was taken for
    it by the wider search (it looks back 4n + 64 messages): the new chat's opening, and then its reply, were
    not stored. One message alone is not enough to say a resend is stored; within the newest n + 8 the plain
    alignment still decides, as before."""
    from rdmem._turn import store_following, take_turn
    from rdmem.messages import parse_messages

    mem = rdmem.MemoryManager(budget=10_000, policy="window")
    mem.extend([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}] +
               [{"role": "user" if i % 2 == 0 else "assistant", "content": f"trip detail {i}"} for i in range(20)])
    asked = parse_messages([{"role": "user", "content": "Hi"}])
    assert take_turn(mem, asked).new == [0]
    assert store_following(mem, asked, parse_messages([{"role": "assistant", "content": "Hello again!"}]))
    assert [m["content"] for m in mem.history()][-2:] == ["Hi", "Hello again!"]


@pytest.mark.parametrize("shared", [False, True])
def test_the_reply_to_a_question_edited_further_back_is_stored(shared):
    """A client edits its second question of four and goes on from there: the edit is stored after the newest
    turn (further back than the replace-the-last-turn rule reaches), and its reply, whose history no longer lined
    up, was taken for a superseded one and lost. A reply to the session's newest message is stored after it."""
    from rdmem._turn import store_following, take_turn
    from rdmem.messages import parse_messages

    mem = rdmem.MemoryManager(budget=10_000, policy="window")
    history: list[dict] = []
    for i in range(1, 5):
        history.append({"role": "user", "content": f"q{i}"})
        asked = parse_messages(history)
        take_turn(mem, asked, replace=0 if shared else 4)
        store_following(mem, asked, parse_messages([{"role": "assistant", "content": f"a{i}"}]), gaps=shared)
        history.append({"role": "assistant", "content": f"a{i}"})
    edited = parse_messages([*history[:2], {"role": "user", "content": "q2, edited"}])
    assert take_turn(mem, edited, replace=0 if shared else 4).new == [2]
    assert store_following(mem, edited, parse_messages([{"role": "assistant", "content": "a2, edited"}]), gaps=shared)
    assert [m["content"] for m in mem.history()][-3:] == ["a4", "q2, edited", "a2, edited"]
    # a late reply to the question before the edit is still not stored: it answers a history the client left
    assert not store_following(mem, parse_messages(history[:3]), parse_messages([{"role": "assistant", "content":
                                                                                 "a2, late"}]), gaps=shared)
