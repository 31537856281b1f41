"""The rd policy on small hand-made histories where the right answer is known."""

from __future__ import annotations

import dataclasses

import pytest

from rdmem import compact
from rdmem.policies import RDPolicy, get_policy
from rdmem.policies.rd import STREAM_ROOM_VALUE

pytestmark = pytest.mark.slow  # rd with the real MiniLM: its values depend on the model

CHAT = [
    "haha yes totally, that sounds great!",
    "Wow, nice! Thanks so much!",
    "lol okay okay",
    "Cool cool, sounds good to me!",
]


def _history(core: list[tuple[str, str, str]], filler: int = 12) -> list[dict]:
    msgs = []
    for i in range(filler):
        msgs.append({"id": f"f{i}", "role": "user" if i % 2 == 0 else "assistant", "content": CHAT[i % len(CHAT)]})
    for mid, role, text in core:
        msgs.append({"id": mid, "role": role, "content": text})
    return msgs


def test_qa_mode_keeps_facts_over_chit_chat() -> None:
    msgs = _history([("fact", "user", "My sister Ana moved to Lisbon in March 2021 and started a bakery there.")], 0)
    msgs = msgs + _history([], 12) + [{"id": "last", "role": "user", "content": "ok"}]
    result = compact(msgs, budget=60, policy="rd")
    assert "fact" in result.kept_ids
    assert "last" in result.kept_ids  # the message about to be answered is never dropped


def test_query_brings_the_relevant_message() -> None:
    core = [
        ("pet", "user", "Our dog Biscuit is a three-year-old beagle who loves the beach."),
        ("car", "assistant", "You said the car needs new brakes before the trip in June."),
        ("job", "user", "I started a new job as a nurse at the city hospital last week."),
    ]
    msgs = _history(core, 20)
    result = compact(msgs, budget=70, policy="rd", query="What breed is Biscuit the dog?")
    assert "pet" in result.kept_ids
    result = compact(msgs, budget=70, policy="rd", query="Where does the user work as a nurse?")
    assert "job" in result.kept_ids


def test_instructions_are_protected_but_advice_in_a_chat_transcript_is_not() -> None:
    """An instruction to the model is kept before anything else; the same words in a timestamped,
    speaker-labelled transcript line are people talking to each other, weighed by the value model only
    (protecting them crowded out the facts a question needs)."""
    def history(label: bool) -> list[dict]:
        def text(i: int, t: str) -> str:
            return f"[9:{10 + i:02d} am on 2 May, 2023] {('Jon', 'Gina')[i % 2]}: {t}" if label else t

        chat = [{"id": f"c{i}", "role": ("user", "assistant")[i % 2], "content": text(i + 1, CHAT[i % len(CHAT)])}
                for i in range(12)]
        rule = {"id": "rule", "role": "user", "content": text(0, "Make sure you water the plants every morning.")}
        fact = {"id": "fact", "role": "user", "content": text(7, "My sister Ana moved to Lisbon in March 2021.")}
        return [chat[0], rule, *chat[1:6], fact, *chat[6:], {"id": "now", "role": "user", "content": text(20, "ok")}]

    question = "Where did Ana move to?"
    for policy in ("rd", "rd-task"):
        told = compact(history(label=False), budget=45, policy=policy, query=question)
        assert "rule" in told.kept_ids
        assert {d.id: d.reason for d in told.report}["rule"] == f"protected ({policy[3:] or 'qa'} mode)"
        quoted = compact(history(label=True), budget=90, policy=policy, query=question)
        assert {d.id: d.reason for d in quoted.report}["rule"] == ""
    quoted = compact(history(label=True), budget=90, policy="rd", query=question)
    assert {"fact", "now"} <= set(quoted.kept_ids) and "rule" not in quoted.kept_ids


def test_task_mode_protects_goal_plan_and_state() -> None:
    msgs = [
        {"id": "goal", "role": "user", "content": "Goal: migrate the billing service from MySQL to PostgreSQL."},
        {"id": "plan", "role": "assistant", "content": "Plan:\n1. Dump schema\n2. Convert types\n3. Copy data"},
    ]
    for i in range(10):
        msgs.append({"id": f"chat{i}", "role": "user", "content": f"Interesting, and what about the weather today {i}?"})
        msgs.append({"id": f"ans{i}", "role": "assistant", "content": "It is sunny and warm, a lovely day outside."})
    msgs += [
        {"id": "call", "role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "run_sql", "arguments": "{\"q\": \"select 1\"}"}}]},
        {"id": "state", "role": "tool", "tool_call_id": "c1", "content": "migration step 2 of 3 done"},
        {"id": "now", "role": "user", "content": "continue"},
    ]
    result = compact(msgs, budget=110, policy="rd-task")
    for mid in ("goal", "plan", "call", "state", "now"):
        assert mid in result.kept_ids, result.explain()
    reasons = {d.id: d.reason for d in result.report}
    assert reasons["goal"] == reasons["plan"] == "protected (task mode)"


def test_roleplay_and_creative_protect_their_units() -> None:
    persona = {"id": "persona", "role": "user", "content": "You are Captain Mira, a gruff pirate who hates parrots."}
    style = {"id": "style", "role": "user", "content": "Write in the style of a noir detective, present tense."}
    # A draft is the latest assistant message of at least 150 tokens.
    draft = {"id": "draft", "role": "assistant", "content": "The rain hits the window like a debt collector. " * 15}
    msgs = [persona, style, draft] + _history([], 16) + [{"id": "now", "role": "user", "content": "go on"}]
    rp = compact(msgs, budget=120, policy="rd-roleplay")
    assert "persona" in rp.kept_ids
    cr = compact(msgs, budget=260, policy="rd-creative")
    assert {"style", "draft"} <= set(cr.kept_ids)
    reasons = {d.id: d.reason for d in cr.report}
    assert reasons["style"] == reasons["draft"] == "protected (creative mode)"


def test_unknown_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown mode 'poetry'; choose one of qa, task, roleplay, creative"):
        RDPolicy(mode="poetry")


def test_report_breaks_utility_down_by_signal() -> None:
    result = compact(_history([("x", "user", "I adopted a cat named Tofu in 2022.")], 6), budget=40, policy="rd")
    decision = next(d for d in result.report if d.id == "x")
    assert "prior.date" in decision.breakdown and "value" in decision.breakdown
    assert get_policy("rd").needs_embeddings


def test_a_correction_travels_with_what_it_corrects() -> None:
    msgs = [
        {"id": "like", "role": "user", "content": "I like apples, please add them to the shopping list."},
        {"id": "ok", "role": "assistant", "content": "Added apples to the shopping list."},
        {"id": "fix", "role": "user", "content": "Actually, not green apples, only red ones."},
    ] + _history([], 14) + [{"id": "now", "role": "user", "content": "what is on the list?"}]
    for budget in (40, 60, 90, 140):
        kept = set(compact(msgs, budget=budget, policy="rd").kept_ids)
        assert ("fix" in kept) <= ("like" in kept), (budget, kept)
    result = compact(msgs, budget=140, policy="rd")
    reasons = {d.id: d.reason for d in result.report}
    assert reasons["fix"] == reasons["like"] == "travels with the message it corrects"


def test_together_names_link_kinds() -> None:
    with pytest.raises(ValueError, match=r"together must name link kinds from \('correction', 'answer'\), got \['nope'\]"):
        RDPolicy(together=("nope",))


def test_ladder_compresses_what_does_not_fit_verbatim() -> None:
    # Two facts wrapped in small talk (49 and 42 tokens; 27 each without it) and the latest message (5):
    # 70 tokens hold one fact verbatim (with a marker for the other), or both once the small talk goes.
    facts = [
        ("trip", "user", "Hey, good morning! Haha, you know, so anyway. We booked the ferry to Naxos for 14 August, "
                         "two adults and a car, cabin 212. Thanks so much, that sounds great!"),
        ("vet", "assistant", "Oh wow, nice! Cool cool. Biscuit's rabies booster is due on 3 September at the "
                             "Harbour Street clinic with Dr Mendes. Sounds good to me, haha!"),
    ]
    msgs = [{"id": mid, "role": role, "content": text} for mid, role, text in facts]
    msgs.append({"id": "last", "role": "user", "content": "ok"})
    verbatim = compact(msgs, budget=70, policy="rd")
    ladder = compact(msgs, budget=70, policy="rd-ladder")
    assert ladder.tokens <= 70
    assert len(verbatim.kept_ids) + len(verbatim.compressed_ids) == 2  # "last" and one fact
    assert set(ladder.compressed_ids) == {"trip", "vet"}  # both facts, shortened
    assert "last" in ladder.kept_ids
    sent = " ".join(m["content"] for m in ladder.messages)
    for needle in ("Naxos", "14 August", "cabin 212", "3 September", "Dr Mendes"):
        assert needle in sent
    assert "Haha" not in sent and "Cool cool" not in sent
    rungs = {d.id: d.rung.value for d in ladder.report}
    assert rungs["trip"] in ("compressed", "summary") and rungs["last"] == "verbatim"


def test_the_ladder_is_a_policy_composed_over_rd() -> None:
    from rdmem.contract import Composed
    from rdmem.manager import MemoryManager
    from rdmem.sessions import default_low
    from rdmem.policies import LadderPolicy

    ladder = get_policy("rd-ladder")
    assert isinstance(ladder, LadderPolicy) and isinstance(ladder, Composed) and ladder.base == RDPolicy()
    task = LadderPolicy(base=RDPolicy(mode="task"))
    assert task.base.mode == "task" and task.needs_embeddings
    with pytest.raises(TypeError, match=r"base must be a policy with a valuation\(problem\) \(rd, a ScoredPolicy, ...\), got str"):
        LadderPolicy(base="rd")  # type: ignore[arg-type]
    # The watermarks are the manager's: rd and the ladder over it compact down to 0.96 (0.98 with a marker per
    # omitted run), the others 0.8.
    assert default_low(ladder) == default_low(get_policy("rd")) == 0.96
    assert default_low(ladder, True) == default_low(get_policy("rd"), True) == 0.98
    assert default_low(get_policy("window")) == 0.8
    mem = MemoryManager(budget=100, policy=ladder)
    assert mem.low == 0.96 and mem._working_policy == dataclasses.replace(ladder.base, room_value=STREAM_ROOM_VALUE)
    mem = MemoryManager(budget=100, policy=ladder, markers=True)
    assert mem.low == 0.98 and mem._working_policy is ladder.base


def _repeated_fact_history() -> list[dict]:
    fact = "My passport number is X1234567 and it expires on 3 May 2031."
    msgs = []
    for mid, text in (("a1", fact), ("c", "I think the museum was nice."), ("a2", fact),
                      ("b", "My sister Ana moved to Lisbon in March 2021 and opened a bakery.")):
        msgs.append({"id": mid, "role": "user", "content": text})
        msgs += [{"id": f"{mid}-f{i}", "role": "assistant" if i % 2 == 0 else "user", "content": CHAT[i]}
                 for i in range(4)]
    return msgs + [{"id": "last", "role": "user", "content": "ok"}]


def test_near_duplicates_do_not_both_take_budget() -> None:
    msgs = _repeated_fact_history()
    # Without the rule the knapsack spends the room on the fact's second copy (the newest messages not priced
    # for coherence here: they would take that room too) ...
    assert {"a1", "a2"} <= set(compact(msgs, budget=100, policy=RDPolicy(duplicates=None, coherence=0.0)).kept_ids)
    # ... with it, one copy stays and the room goes to a message that says something else.
    result = compact(msgs, budget=100, policy="rd")
    kept = set(result.kept_ids)
    assert len(kept & {"a1", "a2"}) == 1 and {"b", "c"} <= kept
    dropped = next(d for d in result.report if d.id in {"a1", "a2"} - kept)
    assert dropped.reason == f"near-duplicate of {(kept & {'a1', 'a2'}).pop()}"
    # Messages that merely share a topic are not duplicates.
    assert all(not d.reason.startswith("near-duplicate") for d in result.report if d.id in {"b", "c"})


def test_duplicates_threshold_is_checked() -> None:
    with pytest.raises(ValueError, match=r"duplicates must be a cosine similarity in \(0, 1\] or None, got 1.5"):
        RDPolicy(duplicates=1.5)


def test_an_uninformative_query_leaves_the_prior_in_charge() -> None:
    core = [
        ("pet", "user", "Our dog Biscuit is a three-year-old beagle who loves the beach."),
        ("car", "assistant", "You said the car needs new brakes before the trip in June."),
        ("job", "user", "I started a new job as a nurse at the city hospital last week."),
    ]
    msgs = _history(core, 20)
    alone = compact(msgs, budget=70, policy="rd")
    for small_talk in ("ok, thanks", "go on", "Cool cool, sounds good to me!"):
        weighed = compact(msgs, budget=70, policy="rd", query=small_talk)
        assert weighed.kept_ids == alone.kept_ids
        assert {d.breakdown["query_weight"] for d in weighed.report} == {0.0}  # the report says why
    # A pointed question decides alone, as relevance did before queries were weighed ...
    pointed = "What breed is Biscuit the dog?"
    weighed = compact(msgs, budget=70, policy="rd", query=pointed)
    assert weighed.kept_ids == compact(msgs, budget=70, policy=RDPolicy(query_weight=1.0), query=pointed).kept_ids
    assert "pet" in weighed.kept_ids
    assert all("query_weight" not in d.breakdown for d in weighed.report)  # weight 1: nothing blended
    # ... and a fixed weight of 0 ignores any query.
    assert compact(msgs, budget=70, policy=RDPolicy(query_weight=0.0), query=pointed).kept_ids == alone.kept_ids


def test_query_weight_is_checked() -> None:
    with pytest.raises(ValueError, match=r"query_weight must be an Informativeness or a number in \[0, 1\], got 1.5"):
        RDPolicy(query_weight=1.5)
