"""The OpenAI Agents SDK adapter, driven by the real SDK (``Runner``, ``ScriptedModel``, ``SQLiteSession``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool, handoff  # noqa: E402
from agents.memory import Session  # noqa: E402
from agents.run_config import CallModelData, ModelInputData  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from rdmem import MemoryManager  # noqa: E402
from rdmem.errors import InvalidInput, InvalidType, StoreError  # noqa: E402
from rdmem.integrations.openai_agents import ITEMS_KEY, RdmemSession, items_to_messages  # noqa: E402

from .._checks import history_problems  # noqa: E402
from ._scenario import BUDGET, DIRECTIVE, FOOD_QUESTION, check_seen, conversation, tokens  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
INSTRUCTIONS = "You are a travel assistant in Lisbon. Answer briefly; cite prices in EUR."
SECOND_QUESTION = "Tomorrow I want lunch near Baixa: which food should I avoid, and where can I eat?"


# -- the test's own conversions (not rdmem's) ------------------------------------------------------
def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or () if p.get("type") in ("input_text", "output_text"))


def to_chat(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat dicts for what a model was given (Responses input items): consecutive function calls are
    one assistant message; reasoning is not text the chat API is sent."""
    out: list[dict[str, Any]] = []
    for it in items:
        kind = it.get("type")
        if kind == "reasoning":
            continue
        if kind == "function_call":
            call = {"id": it["call_id"], "type": "function",
                    "function": {"name": it["name"], "arguments": it["arguments"]}}
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls"):
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": it["call_id"], "content": it["output"]})
        elif kind in (None, "message"):
            out.append({"role": it["role"], "content": _text(it["content"])})
        else:
            raise AssertionError(f"unexpected item in the scenario: {it}")
    return out


def to_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses input items for OpenAI chat dicts (the scenario's conversation)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            out.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
            continue
        if m.get("content"):
            out.append({"role": m["role"], "content": m["content"]})
        out += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                 "arguments": c["function"]["arguments"]} for c in m.get("tool_calls") or ()]
    return out


def flat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for m in messages for i in m[ITEMS_KEY]]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def window_session(name: str = "s", **kw: Any) -> RdmemSession:
    return RdmemSession(name, policy="window", budget=kw.pop("budget", 100_000), **kw)


# -- items <-> chat messages ------------------------------------------------------------------------
def _output_message(text: str, n: int) -> dict[str, Any]:
    return {"id": f"msg_{n}", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _reasoning(text: str, n: int) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{n}", "summary": [{"type": "summary_text", "text": text}]}


WORDS = st.text(alphabet="abcdefghij klmnop,.?!", min_size=1, max_size=30)


@st.composite
def turns(draw: Any) -> list[dict[str, Any]]:
    """Well-formed item sequences: messages of every role and shape, reasoning, turns of 1-3 tool calls
    (reasoning between calls too) answered by their outputs."""
    items: list[dict[str, Any]] = []
    for n in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["easy", "parts", "output", "calls", "reasoning"]))
        if kind == "easy":
            items.append({"role": draw(st.sampled_from(["user", "assistant", "system", "developer"])),
                          "content": draw(WORDS)})
        elif kind == "parts":
            items.append({"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": draw(WORDS)}]})
        elif kind == "output":
            items.append(_output_message(draw(WORDS), n))
        elif kind == "reasoning":
            items.append(_reasoning(draw(WORDS), n))
        else:
            ids = [f"call_{n}_{k}" for k in range(draw(st.integers(1, 3)))]
            for k, cid in enumerate(ids):
                if draw(st.booleans()):
                    items.append(_reasoning(draw(WORDS), n * 10 + k))
                items.append({"type": "function_call", "call_id": cid, "name": "lookup", "id": f"fc_{cid}",
                              "arguments": json.dumps({"q": draw(WORDS)})})
            items += [{"type": "function_call_output", "call_id": cid, "output": draw(WORDS)} for cid in ids]
    return items


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns())
def test_items_round_trip(items):
    before = json.loads(json.dumps(items))
    messages = items_to_messages(items)
    assert items == before, "the caller's items were changed"
    assert flat(messages) == items
    assert {m["role"] for m in messages} <= {"user", "assistant", "system", "developer", "tool"}
    # Tool calls and their outputs become a valid chat exchange (system messages aside, which the chat API
    # wants first: the generator puts them anywhere).
    chat = [{k: v for k, v in m.items() if k != ITEMS_KEY} for m in messages if m["role"] not in ("system", "developer")]
    assert history_problems(chat) == []

    async def through_session():
        session = window_session()
        await session.add_items(items)
        return await session.all_items(), await session.get_items(), await session.get_items(limit=3)

    stored, context, tail = run(through_session())
    assert stored == items
    # The context is a valid chat history: the same items, system and developer messages first.
    first = [m for m in messages if m["role"] in ("system", "developer")]
    assert context == flat(first + [m for m in messages if m not in first])
    assert tail == items[-3:]


def test_several_calls_in_one_turn_are_one_assistant_message():
    items = [{"role": "user", "content": "Weather and sunset in Lisbon?"}, _reasoning("two lookups", 0),
             {"type": "function_call", "call_id": "a", "name": "weather", "arguments": "{}"},
             {"type": "function_call", "call_id": "b", "name": "sunset", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "a", "output": "22 C"},
             {"type": "function_call_output", "call_id": "b", "output": [{"type": "input_text", "text": "20:41"}]},
             _output_message("Mild, sunset 20:41.", 1)]
    messages = items_to_messages(items)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["a", "b"]
    assert messages[1][ITEMS_KEY] == items[1:4]  # the reasoning travels with the calls
    assert messages[3]["content"] == "20:41"
    assert messages[4]["content"] == "Mild, sunset 20:41."
    assert flat(messages) == items


def test_pydantic_items_and_bad_input():
    item = function_call("lookup", {"q": "tram"}, call_id="c1")
    (msg,) = items_to_messages([item])
    assert msg[ITEMS_KEY] == [{"id": "c1", "call_id": "c1", "type": "function_call", "name": "lookup",
                               "arguments": '{"q":"tram"}'}]
    with pytest.raises(TypeError, match="items must be a list of Agents SDK items, got str"):
        items_to_messages("hello")
    with pytest.raises(TypeError, match="items must be dicts or pydantic models"):
        items_to_messages([42])


def test_constructor_errors():
    with pytest.raises(ValueError, match="session_id '': a session name is 1 to 256 characters, got 0"):
        RdmemSession("")
    with pytest.raises(ValueError, match="session_id .*: a session name may not be only whitespace"):
        RdmemSession("   ")
    mem = MemoryManager(budget=100, policy="window", session="a")
    with pytest.raises(ValueError, match="manager is of session 'a', not session_id='b'"):
        RdmemSession("b", manager=mem)
    with pytest.raises(TypeError, match="a manager or its settings"):
        RdmemSession("a", manager=mem, budget=50)
    session = RdmemSession("a", manager=mem)
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    # one session object per session: a changed session_id went on reading and writing the first (a user's)
    with pytest.raises(ValueError, match="an RdmemSession is the session 'a' for good: make one per session"):
        session.session_id = "b"
    assert session.session_id == "a"
    assert session.budget == 100 and session.session_settings.limit is None


# -- the Session protocol, against the SDK's own SQLiteSession ---------------------------------------
SCRIPT: list[tuple] = [
    ("get", None), ("pop",), ("get", 2),
    ("add", [{"role": "user", "content": "Hi, two nights in Lisbon?"}]),
    ("add", [_output_message("Sure: which dates?", 1)]),
    ("add", [{"role": "user", "content": "Weather and sunset?"}, _reasoning("two tools", 2),
             {"type": "function_call", "call_id": "a", "name": "weather", "arguments": "{}"},
             {"type": "function_call", "call_id": "b", "name": "sunset", "arguments": "{}"}]),
    ("add", [{"type": "function_call_output", "call_id": "a", "output": "22 C"},
             {"type": "function_call_output", "call_id": "b", "output": "20:41"}]),
    ("add", [_output_message("Mild; sunset 20:41.", 3)]),
    ("get", None), ("get", 1), ("get", 3), ("get", 0), ("get", -1), ("get", 100),
    ("pop",), ("get", None), ("pop",), ("get", 2), ("pop",), ("pop",), ("get", 4), ("pop",), ("get", None),
    ("add", [{"role": "user", "content": "Remember that I'm allergic to peanuts."}]), ("get", 3),
    ("clear",), ("get", None), ("get", 5), ("pop",),
    ("add", [{"role": "user", "content": "Again."}]), ("get", None),
]


async def _apply(session: Any, op: tuple) -> Any:
    if op[0] == "add":
        return await session.add_items(json.loads(json.dumps(op[1])))
    if op[0] == "get":
        return await session.get_items() if op[1] is None else await session.get_items(limit=op[1])
    if op[0] == "pop":
        return await session.pop_item()
    return await session.clear_session()


def test_session_protocol_matches_sqlite_session(tmp_path):
    async def both():
        ours, theirs = RdmemSession("p", store=f"sqlite:///{tmp_path / 'p.db'}", policy="window", budget=10_000), \
            SQLiteSession("p")
        for op in SCRIPT:
            mine, sdk = await _apply(ours, op), await _apply(theirs, op)
            assert mine == sdk, f"{op}: {mine} != {sdk}"
        assert await ours.all_items() == await theirs.get_items() == [{"role": "user", "content": "Again."}]

    run(both())


OPS = st.one_of(
    st.tuples(st.just("add"), turns().filter(bool)),
    st.tuples(st.just("get"), st.integers(-1, 12)),
    st.tuples(st.just("pop")),
    st.tuples(st.just("clear")),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, max_size=10))
def test_session_operations_like_sqlite_session(ops):
    """Any sequence of writes, tail reads and pops: the same answers, the same items, as ``SQLiteSession``."""
    async def both():
        ours, theirs = window_session("q"), SQLiteSession("q")
        for op in ops:
            assert await _apply(ours, op) == await _apply(theirs, op), op
        assert await ours.all_items() == await theirs.get_items()

    run(both())


def test_session_settings_limit_reads_the_tail():
    async def go():
        session = window_session(session_settings={"limit": 2})
        await session.add_items([{"role": "user", "content": str(i)} for i in range(5)])
        return await session.get_items(), await session.get_items(limit=4)

    short, longer = run(go())
    assert [i["content"] for i in short] == ["3", "4"]
    assert [i["content"] for i in longer] == ["1", "2", "3", "4"]


def test_get_items_fits_the_budget():
    async def go():
        session = window_session(budget=120)
        await session.add_items([{"role": "user", "content": f"Message number {i} about the tram."} for i in range(40)])
        return await session.get_items(), await session.all_items()

    context, stored = run(go())
    assert len(stored) == 40
    assert tokens(to_chat(context)) <= 120
    assert context[0]["content"].endswith("messages omitted]")  # rdmem's marker, as an input message
    assert context[-1] == stored[-1]


def test_get_items_stays_a_valid_history_after_a_pop():
    """A pop can leave a tool call without its output: the tail is returned as stored (as SQLiteSession
    does), the context without the unanswered call."""
    async def go():
        session = window_session()
        await session.add_items([{"role": "user", "content": "Weather?"},
                                 {"type": "function_call", "call_id": "a", "name": "weather", "arguments": "{}"},
                                 {"type": "function_call_output", "call_id": "a", "output": "22 C"},
                                 {"role": "user", "content": "And tomorrow?"}])
        await session.pop_item()
        popped = await session.pop_item()
        return popped, await session.get_items(limit=5), await session.get_items()

    popped, tail, context = run(go())
    assert popped["type"] == "function_call_output"
    assert [i.get("type") for i in tail] == [None, "function_call"]
    assert history_problems(to_chat(context)) == []
    assert context[0] == {"role": "user", "content": "Weather?"}
    assert all(i.get("type") != "function_call" for i in context)


def _two_step_model(answer: str) -> ScriptedModel:
    return ScriptedModel([[function_call("find_restaurants", {"area": "Alfama"}, call_id="call_1")],
                          [assistant_message(answer)]])


def test_streamed_run_stores_each_item_once():
    async def go():
        session = window_session(budget=300)
        await session.add_items([{"role": "user", "content": f"Note {i} about the ferry."} for i in range(30)])
        model = _two_step_model("Tasca do Chico.")
        agent = Agent(name="guide", instructions=INSTRUCTIONS, model=model, tools=[find_restaurants])
        result = Runner.run_streamed(agent, "Where to eat?", session=session, run_config=_run_config(session))
        async for _ in result.stream_events():
            pass
        return model.calls, await session.all_items()

    calls, stored = run(go())
    assert len(calls) == 2 and all(call.streamed for call in calls)
    for call in calls:
        check_seen(to_chat(call.input), 300 - tokens([{"role": "system", "content": INSTRUCTIONS}]), food=False)
    assert len(stored) == 30 + 4


def test_filter_without_the_session_stores_what_it_has_not_seen():
    """A run that keeps its own history (``result.to_input_list()``) with only the filter: each item is
    stored once, the resent history recognised."""
    async def go():
        session = window_session(budget=300)
        agent = Agent(name="guide", instructions=INSTRUCTIONS, model=_two_step_model("Tasca do Chico."),
                      tools=[find_restaurants])
        first = await Runner.run(agent, "Where to eat?", run_config=_run_config(session))
        agent.model = ScriptedModel([[assistant_message("At eight.")]])
        history = first.to_input_list() + [{"role": "user", "content": "When does it open?"}]
        await Runner.run(agent, history, run_config=_run_config(session))
        return await session.all_items()

    stored = run(go())
    assert [_text(i["content"]) if "content" in i else i["type"] for i in stored] == \
        ["Where to eat?", "function_call", "function_call_output", "Tasca do Chico.", "When does it open?"]


def test_concurrent_writers_lose_nothing(tmp_path):
    """Two coroutines (and a second session object on the same file) adding at once: every item is there,
    each batch whole and in order."""
    db = f"sqlite:///{tmp_path / 'c.db'}"

    async def go():
        one, other = window_session("c", store=db), window_session("c", store=db)

        async def writer(session: RdmemSession, who: str) -> None:
            for i in range(12):
                await session.add_items([{"role": "user", "content": f"{who} {i} question"},
                                         _output_message(f"{who} {i} answer", i)])

        await asyncio.gather(writer(one, "a"), writer(one, "b"), writer(other, "c"))
        return await one.all_items()

    items = run(go())
    texts = [_text(i["content"]) for i in items]
    assert sorted(texts) == sorted(f"{w} {i} {k}" for w in "abc" for i in range(12) for k in ("question", "answer"))
    for n in range(0, len(texts), 2):  # each add_items stays one contiguous batch
        assert texts[n].endswith("question") and texts[n + 1] == texts[n].replace("question", "answer")
    for w in "abc":  # and one writer's batches keep their order
        mine = [t for t in texts if t.startswith(w)]
        assert mine == [f"{w} {i} {k}" for i in range(12) for k in ("question", "answer")]


def test_two_model_calls_of_one_session_at_once_store_a_new_question_once(tmp_path, hashing_embedder):
    """The filter found the input's new items, then wrote them, in two steps: two model calls of one session with
    one input at once (a double submit) stored the new question twice, 10 times in 10."""
    from agents.run_config import CallModelData, ModelInputData

    session = RdmemSession("t", store=f"sqlite:///{tmp_path / 'a.db'}", policy="rd", budget=2000,
                           embedder=hashing_embedder)
    history = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]
    question = {"role": "user", "content": "What about Lisbon?"}

    async def both() -> list[str]:
        await session.add_items(history)
        data = [CallModelData(model_data=ModelInputData(input=[*history, question], instructions=None),
                              agent=Agent(name="a"), context=None) for _ in range(2)]
        await asyncio.gather(*(session.call_model_input_filter(d) for d in data))
        return [m["content"] for m in await session.memory.history()]

    assert asyncio.run(both()) == ["hello", "hi there", "What about Lisbon?"]


# -- the shared scenario ----------------------------------------------------------------------------
@function_tool
def find_restaurants(area: str) -> str:
    """Restaurants open tonight in an area of Lisbon."""
    return f"Open tonight in {area}: Tasca do Chico (grilled fish), Thai Garden (satay with peanut sauce)."


def _instructions_budget() -> int:
    return BUDGET - tokens([{"role": "system", "content": INSTRUCTIONS}])


def _run_config(session: RdmemSession) -> RunConfig:
    return RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True)


SECOND_RUN = textwrap.dedent("""
    import asyncio, json, sys
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message
    from rdmem.integrations.openai_agents import RdmemSession

    async def main(db, budget, question, instructions):
        session = RdmemSession("trip", store="sqlite:///" + db, policy="rd", budget=budget)
        before = len(await session.all_items())
        model = ScriptedModel([[assistant_message("Avoid satay; Pastelaria Baixa is peanut-free.")]])
        agent = Agent(name="guide", instructions=instructions, model=model)
        config = RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True)
        result = await Runner.run(agent, question, session=session, run_config=config)
        print(json.dumps({"before": before, "calls": [c.input for c in model.calls], "answer": result.final_output}))

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]))
""")


def test_scenario_every_model_call_fits_and_a_new_process_continues(tmp_path, minilm):
    db = tmp_path / "trip.db"
    history = to_items(conversation())
    assert tokens(conversation()) > 3 * BUDGET  # compaction is needed, or the test proves nothing

    async def first_run():
        session = RdmemSession("trip", store=f"sqlite:///{db}", policy="rd", budget=BUDGET, embedder=minilm)
        await session.add_items(history)
        model = ScriptedModel([[function_call("find_restaurants", {"area": "Alfama"}, call_id="call_food")],
                               [assistant_message("Tasca do Chico: grilled fish, no peanuts. Skip Thai Garden.")]])
        agent = Agent(name="guide", instructions=INSTRUCTIONS, model=model, tools=[find_restaurants])
        result = await Runner.run(agent, FOOD_QUESTION, session=session, run_config=_run_config(session))
        return model.calls, result.final_output, await session.all_items()

    calls, answer, stored = run(first_run())
    assert answer.startswith("Tasca do Chico")
    assert len(calls) == 2  # the tool call, then the answer: the filter ran before each
    for call in calls:
        assert call.system_instructions == INSTRUCTIONS
        check_seen(to_chat(call.input), _instructions_budget(), food=True)
        assert len(call.input) < len(history) / 2
    assert to_chat(calls[0].input)[-1] == {"role": "user", "content": FOOD_QUESTION}
    last = to_chat(calls[1].input)
    assert last[-2]["tool_calls"][0]["id"] == "call_food" and "Thai Garden" in last[-1]["content"]
    # The runner stored the run's items once each (the filter wrote none twice).
    assert stored[:len(history)] == history
    assert [i.get("type", "message") for i in stored[len(history):]] == \
        ["message", "function_call", "function_call_output", "message"]

    # A new process continues the conversation from the same SQLite file.
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", SECOND_RUN, str(db), str(BUDGET), SECOND_QUESTION, INSTRUCTIONS],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"] == len(stored)
    (seen,) = [to_chat(c) for c in out["calls"]]
    check_seen(seen, _instructions_budget(), food=True)
    assert seen[-1] == {"role": "user", "content": SECOND_QUESTION}

    async def after():
        return await RdmemSession("trip", store=f"sqlite:///{db}", policy="window", budget=BUDGET).all_items()

    final = run(after())
    assert final[:len(stored)] == stored and final[0]["content"] == DIRECTIVE
    assert [_text(i["content"]) for i in final[len(stored):]] == [SECOND_QUESTION, out["answer"]]


# -- the example ------------------------------------------------------------------------------------
@pytest.mark.slow  # the example's rd policy loads MiniLM in its own process
def test_example_runs():
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "openai_agents_session.py")],
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    calls = [line for line in lines if line.startswith("model call")]
    assert len(calls) == 2 and all("peanut directive: yes" in line for line in calls), proc.stdout
    assert any("Tasca do Chico" in line for line in lines), proc.stdout


def test_a_cut_newest_message_stores_only_what_is_new(minilm):
    """The session's newest message is too large and is given to the runner cut: the filter finds where the
    new messages begin after what the session rendered (sessions.first_unseen), and stores only them."""
    history = [{"role": "user" if i % 2 == 0 else "assistant",
                "content": f"Remember that my locker code is 4{i:02d}." if i % 4 == 0 else
                f"Chatting about the weather and the harbour boats, nothing much at all, turn {i}. " * 2}
               for i in range(24)]
    history.append({"role": "user", "content": "Here is my whole travel diary: " + "we walked and ate. " * 400})

    async def go():
        session = RdmemSession("cut", policy="importance", budget=300, embedder=minilm)
        await session.add_items(history)
        before, given = await session.all_items(), await session.get_items()
        model = ScriptedModel([[assistant_message("Noted.")]])
        agent = Agent(name="guide", model=model)
        await Runner.run(agent, "What is my locker code?", session=session,
                         run_config=RunConfig(call_model_input_filter=session.call_model_input_filter,
                                              tracing_disabled=True))
        return before, model.calls[0].input, given, await session.all_items()

    before, seen, given, after = run(go())
    # What the runner was given (the session's context) held the diary cut; the model was then sent the
    # context of the new question.
    assert any("[rdmem: truncated," in (m["content"] or "") for m in to_chat(given))
    assert to_chat(seen)[-1] == {"role": "user", "content": "What is my locker code?"}
    assert after[:len(before)] == before
    assert [i.get("content") if isinstance(i.get("content"), str) else i["content"][0]["text"]
            for i in after[len(before):]] == ["What is my locker code?", "Noted."]


# -- the adversarial review of the adapters (2026-12-06) --------------------------------------------------------
def _local_tool_turn(i: int) -> list[dict[str, Any]]:
    """A turn with a shell call and an apply_patch call, each answered by its output (the runner runs both locally)."""
    return [{"role": "user", "content": f"step {i}: list the files in /srv/app{i} and tell me which is largest"},
            {"type": "shell_call", "call_id": f"sh{i}", "status": "completed",
             "action": {"commands": [f"ls -la /srv/app{i} " + "--sort=size " * 40]}},
            {"type": "shell_call_output", "call_id": f"sh{i}",
             "output": [{"stdout": f"big{i}.bin", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
            {"type": "apply_patch_call", "call_id": f"ap{i}", "status": "completed",
             "operation": {"type": "update_file", "path": f"app{i}.py", "diff": "+x = 1\n" * 60}},
            {"type": "apply_patch_call_output", "call_id": f"ap{i}", "status": "completed", "output": "ok"},
            _output_message(f"big{i}.bin is largest", i)]


@pytest.mark.parametrize("policy", ["window", "rd"])
def test_a_local_tool_s_output_is_never_given_without_its_call(policy, hashing_embedder):
    """The Responses API refuses an output whose call is not in the input: shell, apply_patch, computer and
    local-shell calls are grouped with their outputs as function calls are (they were separate messages, and a
    budget of 300 kept an output alone)."""
    async def go(budget: int) -> list[dict[str, Any]]:
        session = RdmemSession("x", budget=budget, policy=policy, embedder=hashing_embedder)
        for i in range(6):
            await session.add_items(_local_tool_turn(i))
        assert await session.all_items() == [it for i in range(6) for it in _local_tool_turn(i)]  # stored whole
        return await session.get_items()

    given = 0
    for budget in range(300, 1300, 100):
        items = run(go(budget))
        calls = {it["call_id"]: it["type"] for it in items if str(it.get("type")).endswith("_call")}
        outputs = [(it["call_id"], it["type"]) for it in items if str(it.get("type")).endswith("_call_output")]
        assert all(calls.get(cid) + "_output" == kind for cid, kind in outputs), (budget, outputs, calls)
        given += len(outputs)
    assert given  # some budgets hold whole tool turns
    shell = items_to_messages(_local_tool_turn(0))[2]
    assert shell["role"] == "tool" and shell["content"] == "big0.bin"  # a shell's stdout is counted and ranked


def test_a_cut_local_tool_output_keeps_its_type():
    """A shell output too long for the budget is cut: it came back as a function_call_output answering a
    shell_call, a pair the Responses API does not take."""
    async def go() -> list[dict[str, Any]]:
        session = window_session("cut", budget=800)
        big = "\n".join(f"f{k}.bin {k}" for k in range(800))
        await session.add_items([{"role": "user", "content": "now list /srv/big"},
                                 {"type": "shell_call", "call_id": "big", "status": "completed",
                                  "action": {"commands": ["ls /srv/big"]}},
                                 {"type": "shell_call_output", "call_id": "big", "output": [
                                     {"stdout": big, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}])
        return await session.get_items()

    output = run(go())[-1]
    assert output["type"] == "shell_call_output" and output["call_id"] == "big"
    (record,) = output["output"]
    assert record["stdout"].startswith("f0.bin 0\nf1.bin 1") and "[rdmem: truncated" in record["stdout"]
    assert record["outcome"] == {"type": "exit", "exit_code": 0}


def test_an_agent_run_as_a_tool_neither_sees_nor_joins_the_session():
    """The SDK runs an agent made a tool with its caller's RunConfig, filter included: the filter gave the
    sub-agent the user's whole history and stored the sub-agent's input in the user's session."""
    async def go():
        session = window_session("alice")
        await session.add_items([{"role": "user", "content": "My private note: my PIN is 4711."},
                                 {"role": "assistant", "content": "Noted."}])
        translator_model = ScriptedModel([[assistant_message("Bonjour")]])
        translator = Agent(name="translator", instructions="Translate to French.", model=translator_model)
        boss_model = ScriptedModel([[function_call("translate", {"input": "Hello"}, call_id="c1")],
                                    [assistant_message("In French: Bonjour")]])
        boss = Agent(name="boss", instructions="Use tools.", model=boss_model,
                     tools=[translator.as_tool(tool_name="translate", tool_description="Translate to French")])
        config = RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True)
        with pytest.warns(RuntimeWarning, match="agent 'translator' is not one of this session's agents"):
            await Runner.run(boss, "Say hello in French", session=session, run_config=config)
        return translator_model.calls[0].input, boss_model.calls[1].input, await session.all_items()

    sub_input, boss_input, stored = run(go())
    assert [_text(i.get("content")) for i in sub_input] == ["Hello"]
    assert "4711" in json.dumps(boss_input)  # the session's own agent still has its memory
    assert [_text(i.get("content")) for i in stored if i.get("role")] == \
        ["My private note: my PIN is 4711.", "Noted.", "Say hello in French", "In French: Bonjour"]


def test_a_run_beginning_while_another_runs_an_agent_as_a_tool_does_not_give_it_the_session():
    """Each read of the session's items (a run beginning) made the next agent the filter met the session's:
    a sub-agent of run A (an agent made a tool) reaching the filter just after run B began was given alice's
    history and its input stored in her session, and B's own agent was passed through unfitted. The SDK's
    steps in that order: A begins, A's agent calls the model, B begins, A's sub-agent calls the model, then
    B's agent."""
    async def go():
        session = window_session("alice", budget=300)
        await session.add_items([{"role": "user", "content": "My private note: my PIN is 4711."},
                                 {"role": "assistant", "content": "Noted."},
                                 *({"role": "user", "content": f"Note {i} about the ferry."} for i in range(40))])
        boss, translator = Agent(name="boss"), Agent(name="translator")

        async def call(agent, input_items):
            data = CallModelData(model_data=ModelInputData(input=input_items, instructions=None), agent=agent,
                                 context=None)
            return (await session.call_model_input_filter(data)).input

        a_items = await session.get_items()
        await call(boss, [*a_items, {"role": "user", "content": "Say hello in French"}])
        b_items = await session.get_items()
        with pytest.warns(RuntimeWarning, match="agent 'translator' is not one of this session's agents"):
            sub = await call(translator, [{"role": "user", "content": "Hello"}])
        b_input = await call(boss, [*b_items, {"role": "user", "content": "word " * 400}])
        return sub, b_input, await session.all_items()

    sub, b_input, stored = run(go())
    assert sub == [{"role": "user", "content": "Hello"}]  # passed through: neither fitted nor stored
    assert "Hello" not in [i.get("content") for i in stored]
    assert tokens(to_chat(b_input)) <= 300  # B's own agent is fitted


def test_a_cancelled_streamed_run_leaves_the_next_run_s_question_stored_once():
    """A streamed run cancelled between the filter (which stores its question) and the runner's add left the
    filter's entry waiting first in line; the next run's question, added by its runner, did not match it and
    was stored twice."""
    from agents import RunHooks

    class SlowStart(RunHooks):  # anything that awaits between the model-input filter and the input's save
        async def on_llm_start(self, context, agent, system_prompt, input_items):
            await asyncio.sleep(0.5)

    async def go():
        session = window_session("cancelled", budget=2000)
        config = RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True)
        agent = Agent(name="guide", model=ScriptedModel([[assistant_message("Answer 1")]]))
        result = Runner.run_streamed(agent, "Question 1", session=session, run_config=config, hooks=SlowStart())

        async def consume():
            async for _ in result.stream_events():
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.2)
        result.cancel()
        await task
        agent.model = ScriptedModel([[assistant_message("Answer 2")]])
        result = Runner.run_streamed(agent, "Question 2", session=session, run_config=config)
        async for _ in result.stream_events():
            pass
        return [_text(i.get("content")) for i in await session.all_items()]

    assert run(go()) == ["Question 1", "Question 2", "Answer 2"]


def test_an_agent_handed_off_to_shares_the_session():
    async def go():
        session = window_session("bob")
        await session.add_items([{"role": "user", "content": "I am allergic to peanuts."}])
        chef_model = ScriptedModel([[assistant_message("No peanuts, then.")]])
        chef = Agent(name="chef", instructions="Cook.", model=chef_model)
        triage = Agent(name="triage", instructions="Route.", handoffs=[chef],
                       model=ScriptedModel([[function_call("transfer_to_chef", {}, call_id="h1")]]))
        config = RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True)
        await Runner.run(triage, "What can I eat?", session=session, run_config=config)
        return chef_model.calls[0].input

    assert "peanuts" in json.dumps(run(go()))


def test_agents_names_the_session_s_agents():
    with pytest.raises(InvalidType, match="agents must be a list"):
        RdmemSession("s", agents="boss")
    chef = Agent(name="chef")
    session = RdmemSession("s", policy="window", agents=["boss", Agent(name="helper"), handoff(chef)])
    assert session._agents == {"boss", "helper", "chef"}


def test_each_run_s_first_agent_is_the_session_s():
    """The agent was learned once per session object: a second run with another agent (not a handoff target)
    was passed through unfitted, with a warning."""
    async def go():
        session = window_session("two-agents", budget=300)
        config = RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True)
        for name in ("general", "billing"):
            model = ScriptedModel([[assistant_message(f"{name}: ok")]])
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                await Runner.run(Agent(name=name, model=model), "word " * 200, session=session, run_config=config)
        return model.calls[0].input, session.budget

    billing_input, budget = run(go())
    assert tokens(to_chat(billing_input)) <= budget  # fitted: two 200-word questions are over the budget


@pytest.mark.parametrize("kind", ["limit", "callback", "cleared"])
def test_a_second_agent_is_the_session_s_with_a_read_limit_an_input_callback_or_after_a_clear(kind):
    """A second top-level agent on a long-lived session was passed through unfitted, with a warning, when the
    runner read the session with a limit, an input callback kept only the history's end, or the session had been
    cleared (review 21)."""
    from agents.memory import SessionSettings

    async def go():
        session = window_session(f"two-{kind}", budget=300)
        extra: dict[str, Any] = {}
        if kind == "limit":
            extra["session_settings"] = SessionSettings(limit=50)
        if kind == "callback":
            extra["session_input_callback"] = lambda history, new: history[-1:] + new
        config = RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True, **extra)
        for name in ("general", "billing"):
            if kind == "cleared" and name == "billing":
                await session.clear_session()
            model = ScriptedModel([[assistant_message(f"{name}: ok")]])
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                await Runner.run(Agent(name=name, model=model), "word " * 200, session=session, run_config=config)
        return model.calls[0].input

    assert tokens(to_chat(run(go()))) <= 300  # fitted


def test_reading_the_session_while_a_streamed_run_works_stores_its_question_once():
    """App code reading the session (get_items) twice while a streamed run was between the filter and the
    runner's add expired the run's entry: its question was stored twice (review 21)."""
    from agents import RunHooks

    async def go():
        session = window_session("ui-reads", budget=2000)
        config = RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True)
        agent = Agent(name="guide", model=ScriptedModel([[assistant_message("Answer 1")]]))
        await Runner.run(agent, "Question 1", session=session, run_config=config)

        class UiPoll(RunHooks):  # another task of the app reads the conversation while the model works
            async def on_llm_start(self, context, agent, system_prompt, input_items):
                for _ in range(2):
                    await session.get_items()

        agent.model = ScriptedModel([[assistant_message("Answer 2")]])
        result = Runner.run_streamed(agent, "Question 2", session=session, run_config=config, hooks=UiPoll())
        async for _ in result.stream_events():
            pass
        return [_text(i.get("content")) for i in await session.all_items()]

    assert run(go()) == ["Question 1", "Answer 1", "Question 2", "Answer 2"]


def test_an_agent_run_as_a_tool_with_its_own_tool_loop_is_not_the_session_s():
    """A sub-agent (``Agent.as_tool``) whose input is a message the session holds ("Hello") and whose second call
    goes on with its own tool call was taken for a run's first call: given alice's whole history, its tool call
    stored in her session (review 23)."""
    @function_tool
    def dictionary(word: str) -> str:
        """Look a word up."""
        return f"{word}: bonjour"

    async def go():
        session = window_session("alice-tools", budget=100_000)
        await session.add_items([{"role": "user", "content": "My private note: my PIN is 4711."},
                                 {"role": "assistant", "content": "Noted."}, {"role": "user", "content": "Hello"},
                                 {"role": "assistant", "content": "Hi! How can I help?"}])
        translator_model = ScriptedModel([[function_call("dictionary", {"word": "Hello"}, call_id="d1")],
                                          [assistant_message("Bonjour")]])
        translator = Agent(name="translator", model=translator_model, tools=[dictionary])
        boss = Agent(name="boss", model=ScriptedModel([[function_call("translate", {"input": "Hello"}, call_id="c1")],
                                                       [assistant_message("In French: Bonjour")]]),
                     tools=[translator.as_tool(tool_name="translate", tool_description="Translate to French")])
        config = RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True)
        with pytest.warns(RuntimeWarning, match="agent 'translator' is not one of this session's agents"):
            await Runner.run(boss, "Say hello in French", session=session, run_config=config)
        return translator_model.calls, await session.all_items()

    calls, stored = run(go())
    assert all("4711" not in json.dumps(c.input) for c in calls)
    assert "dictionary" not in json.dumps(stored)


def test_a_streamed_run_of_a_long_input_stores_each_item_once():
    """A streamed run whose input is 70 new items (an imported conversation): the filter's stored messages were
    kept for the runner's add up to 64, so 6 were stored twice (review 23)."""
    async def go():
        session = window_session("imported", budget=100_000)
        agent = Agent(name="a", model=ScriptedModel([[assistant_message("Done.")]]))
        config = RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True,
                           session_input_callback=lambda history, new: history + new)
        items = [{"role": "user" if k % 2 == 0 else "assistant", "content": f"line {k}"} for k in range(70)]
        result = Runner.run_streamed(agent, items, session=session, run_config=config)
        async for _ in result.stream_events():
            pass
        return [_text(i.get("content")) for i in await session.all_items()]

    assert run(go()) == [f"line {k}" for k in range(70)] + ["Done."]


def test_instructions_over_the_budget_are_refused_not_sent_without_input():
    async def go():
        session = window_session("b", budget=1000)
        await session.add_items([{"role": "user", "content": "Which restaurant is safe for me tonight?"}])
        data = CallModelData(model_data=ModelInputData(input=await session.get_items(),
                                                       instructions="Be careful. " * 800),
                             agent=Agent(name="a"), context=None)
        await session.call_model_input_filter(data)

    with pytest.raises(InvalidInput, match="instructions alone are 2405 tokens, budget=1000"):
        run(go())


def test_a_pop_that_fails_half_way_loses_no_item(monkeypatch):
    """pop_item deleted the message, then stored the items it keeps: a store failing between the two writes lost
    them (the SDK pops when it rewinds a retried turn). The kept items are written first now."""
    async def go():
        session = window_session("p")
        await session.add_items([{"role": "user", "content": "question"},
                                 {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                                 {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"}])
        mem, writes = session.memory.sync, []

        def first_write_only(real: Any) -> Any:  # the database goes away after the pop's first write
            def write(arg: Any) -> Any:
                writes.append(real.__name__)
                if len(writes) > 1:
                    raise StoreError("the database went away")
                return real(arg)
            return write
        monkeypatch.setattr(mem, "delete", first_write_only(mem.delete))
        monkeypatch.setattr(mem, "extend", first_write_only(mem.extend))
        with pytest.raises(StoreError):
            await session.pop_item()
        monkeypatch.undo()
        return await session.all_items()

    kept = [i.get("call_id") for i in run(go())]
    assert "c1" in kept and "c2" in kept


def test_an_input_image_counts_as_an_image(cl100k):
    """An input image was counted as its name, "[input_image]" (4 tokens): a session of photos overflowed the
    budget by 1,441 tokens each as the model counts an image of unknown size."""
    photo = {"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                         {"type": "input_image", "image_url": "https://example.com/a.jpg"}]}
    (message,) = items_to_messages([photo])
    chat = {k: v for k, v in message.items() if k != ITEMS_KEY}
    assert cl100k.message_tokens(chat) >= 1445 + cl100k.count("What is this?")
    low = {**photo, "content": [photo["content"][0], {**photo["content"][1], "detail": "low"}]}
    (message,) = items_to_messages([low])
    assert cl100k.message_tokens({k: v for k, v in message.items() if k != ITEMS_KEY}) < 120

    async def fitted():
        session = window_session(budget=3500)
        await session.add_items([photo, {"role": "assistant", "content": "A tram."}] * 4)
        return await session.get_items()

    items = run(fitted())
    assert sum(isinstance(i.get("content"), list) and len(i["content"]) == 2 for i in items) <= 2

