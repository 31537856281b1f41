"""LangChain v1 ``create_agent`` with :class:`RdmemMiddleware` and LangGraph ``create_react_agent`` with
:func:`rdmem_pre_model_hook`, driven by LangChain's own fake chat model through the shared scenario.

What a model saw is converted to OpenAI chat dicts here, by :func:`as_chat` (not by rdmem, nor by
LangChain), and checked by ``_scenario.check_seen``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (AIMessage, BaseMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage,
                                     convert_to_messages, messages_from_dict)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent
from langgraph.warnings import LangGraphDeprecatedSinceV10
from pydantic import Field

from rdmem import MemoryManager
from rdmem.errors import InvalidInput
from rdmem.reconstruct import MARKER
from rdmem.tokens import content_text
from rdmem.integrations.langchain import (LC_KEY, RdmemContext, RdmemMiddleware, from_openai, rdmem_pre_model_hook,
                                          to_openai)

from .._checks import history_problems
from ._scenario import BUDGET, DIRECTIVE, FOOD_QUESTION, check_seen, conversation, tokens

REPO = Path(__file__).resolve().parents[2]
SYSTEM = "You are a travel assistant for Lisbon. Answer briefly."
ANSWER = "Try the grilled fish at Taberna da Rua; their kitchen uses no peanuts."


def _chain(*nodes: tuple[str, Any]) -> Any:
    """A LangGraph graph over MessagesState that runs ``nodes`` (name, node) one after another."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    graph = StateGraph(MessagesState)
    names = [START]
    for name, node in nodes:
        graph.add_node(name, node)
        graph.add_edge(names[-1], name)
        names.append(name)
    graph.add_edge(names[-1], END)
    return graph


# -- the test's own converter and fake model --------------------------------------------------------

def as_chat(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """OpenAI chat dicts for LangChain messages, written here from the chat API's rules."""
    roles = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": roles[m.type], "content": m.content}
        if m.name:
            msg["name"] = m.name
        if isinstance(m, AIMessage) and m.tool_calls:
            msg["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["name"], "arguments": json.dumps(c["args"], ensure_ascii=False)}} for c in m.tool_calls]
            msg["content"] = m.content or None
        if isinstance(m, ToolMessage):
            msg["tool_call_id"] = m.tool_call_id
        out.append(msg)
    return out


class RecordingModel(GenericFakeChatModel):
    """LangChain's scripted fake, with tools (it ignores them) and a record of every list it was sent."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> RecordingModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


@tool
def lookup(q: str) -> str:
    """Opening hours and prices of a place in Lisbon."""
    return f"{q}: open 12-23, mains about 15 EUR."


def tool_then_answer() -> RecordingModel:
    return RecordingModel(messages=iter([
        AIMessage("", tool_calls=[{"id": "call_food", "name": "lookup", "args": {"q": "restaurants in Alfama"}}]),
        AIMessage(ANSWER)]))


def scenario() -> list[BaseMessage]:
    return convert_to_messages(conversation()) + [HumanMessage(FOOD_QUESTION)]


def check_run(model: RecordingModel, given: list[BaseMessage], final: list[BaseMessage]) -> None:
    """Both model calls fit, with the system prompt, are valid and hold the directive; the state is whole."""
    assert tokens(as_chat(given)) > 3 * BUDGET  # the scenario does need compaction
    assert len(model.seen) == 2
    for seen in model.seen:
        assert isinstance(seen[0], SystemMessage) and seen[0].content == SYSTEM
        check_seen(as_chat(seen), BUDGET, food=True)
    assert model.seen[0][-1].content == FOOD_QUESTION
    assert [m.type for m in model.seen[1][-2:]] == ["ai", "tool"]  # the turn in progress, paired
    assert len(final) == len(given) + 3
    assert as_chat(final[:len(given)]) == as_chat(given)
    assert final[-2].content == "restaurants in Alfama: open 12-23, mains about 15 EUR." and final[-1].content == ANSWER


# -- (a) conversion -----------------------------------------------------------------------------------
def strip(chats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != LC_KEY} for m in chats]


_text = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")), min_size=1, max_size=30)
_args = st.dictionaries(st.sampled_from(["q", "city", "n"]), st.one_of(_text, st.integers(-99, 99)), max_size=2)


@st.composite
def lc_conversations(draw: st.DrawFn) -> list[BaseMessage]:
    """Turns of: a human message, zero to two steps of tool calls (each answered), an AI answer."""
    out: list[BaseMessage] = []
    calls = 0
    for turn in range(draw(st.integers(1, 6))):
        out.append(HumanMessage(draw(_text), id=f"h{turn}"))
        for _ in range(draw(st.integers(0, 2))):
            batch = [{"id": f"call_{calls + j}", "name": draw(st.sampled_from(["lookup", "weather"])),
                      "args": draw(_args)} for j in range(draw(st.integers(1, 3)))]
            calls += len(batch)
            out.append(AIMessage(draw(st.sampled_from(["", "Let me check."])), tool_calls=batch, id=f"c{calls}"))
            out += [ToolMessage(draw(_text), tool_call_id=c["id"], name=c["name"], id=f"t{c['id']}") for c in batch]
        out.append(AIMessage(draw(_text), id=f"a{turn}"))
    return out


@settings(max_examples=60, deadline=None)
@given(lc_conversations())
def test_conversion_round_trip_keeps_tool_calls_paired(messages):
    chats = to_openai(messages)
    assert strip(chats) == as_chat(messages)  # the adapter's chat form is the chat API's
    assert history_problems(strip(chats)) == []
    assert from_openai(chats) == messages  # with the stored message: back as it was given
    back = from_openai(strip(chats))  # from the chat fields alone: the same calls, the same pairs
    assert as_chat(back) == strip(chats)
    assert [type(m) for m in back] == [type(m) for m in messages]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lc_conversations(), _text, st.integers(0, 3), st.integers(40, 400))
def test_every_call_of_a_turn_is_fitted_valid_and_verbatim_ones_are_the_agents_own(before, question, steps, budget):
    """As an agent calls it: once with the new question, then after each round of tool results."""
    context, turn = RdmemContext(budget, policy="window", session="default"), [HumanMessage(question, id="q")]
    for step in range(steps + 1):
        if step:
            call = {"id": f"q{step}", "name": "lookup", "args": {"step": step}}
            turn += [AIMessage("", tool_calls=[call], id=f"qa{step}"),
                     ToolMessage(f"result {step}", tool_call_id=f"q{step}", id=f"qt{step}")]
        messages = before + turn
        fitted = context.fit(messages)
        assert tokens(as_chat(fitted)) <= budget
        assert history_problems(as_chat(fitted)) == []
        by_id = {m.id: m for m in messages}  # every message an agent holds has an id, as in a graph's state
        assert [m for m in fitted if m.id in by_id] == [by_id[m.id] for m in fitted if m.id in by_id]
        assert all(m.id in by_id or MARKER.match(m.content) or "truncated" in m.content for m in fitted)
        assert turn[0] in fitted or any("truncated" in m.content for m in fitted)  # the question being answered
    assert len(context.manager("default")) == len(messages)  # each message stored once


def test_odd_messages_convert_and_are_stored_whole():
    odd = [HumanMessage([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:,x"}}]),
           AIMessage("sure", response_metadata={"created": object()}),
           AIMessage([{"type": "text", "text": "calling"}], tool_calls=[{"id": "t1", "name": "f", "args": {"a": 1}}]),
           ToolMessage("done", tool_call_id="t1")]
    chats = to_openai(odd)
    assert [m["role"] for m in chats] == ["user", "assistant", "assistant", "tool"]
    assert chats[2]["content"] == "calling" and chats[2]["tool_calls"][0]["id"] == "t1"
    json.dumps(chats)  # provider metadata that is not JSON is stored as text
    mem = MemoryManager(budget=1000, policy="window")
    mem.extend(chats)
    assert [messages_from_dict([h[LC_KEY]])[0].content for h in mem.history()] == [m.content for m in odd]


def test_bad_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="budget must be > 0 tokens, got 0"):
        RdmemMiddleware(budget=0)
    with pytest.raises(ValueError, match="unknown policy 'nope'; choose one of"):
        RdmemMiddleware(budget=100, policy="nope")
    with pytest.raises(ValueError, match="session '': a session name is 1 to 256 characters, got 0"):
        rdmem_pre_model_hook(100, session="")
    with pytest.raises(ValueError, match="session 'a.*b': a session name may not hold control characters"):
        RdmemMiddleware(budget=100, session="a\nb")
    with pytest.raises(TypeError, match="system_prompt must be a string, a SystemMessage or None, got int"):
        rdmem_pre_model_hook(100, system_prompt=3)
    with pytest.raises(TypeError, match=r"messages\[0\] must be a LangChain message, got dict"):
        to_openai([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="the system prompt alone is .* tokens, budget=20 leaves"):
        RdmemContext(20, policy="window").fit([HumanMessage("hi")], SystemMessage("word " * 40))


# -- (b) create_agent + middleware, (d) async ------------------------------------------------------------
def test_create_agent_every_model_call_fits_and_the_state_stays_whole(tmp_path, minilm):
    model, given = tool_then_answer(), scenario()
    middleware = RdmemMiddleware(budget=BUDGET, store=f"sqlite:///{tmp_path}/m.db", embedder=minilm)
    agent = create_agent(model, tools=[lookup], system_prompt=SYSTEM, middleware=[middleware])
    final = agent.invoke({"messages": given}, {"configurable": {"thread_id": "trip"}})["messages"]
    check_run(model, given, final)
    stored = MemoryManager(budget=BUDGET, policy="window", store=f"sqlite:///{tmp_path}/m.db", session="trip")
    assert [h["content"] for h in stored.history()] == [m["content"] for m in as_chat(final)]  # the reply too


def test_ainvoke_goes_through_awrap_model_call(tmp_path, hashing_embedder):
    calls = []

    class Spy(RdmemMiddleware):
        def wrap_model_call(self, request, handler):
            calls.append("sync")
            return super().wrap_model_call(request, handler)

        async def awrap_model_call(self, request, handler):
            calls.append("async")
            return await super().awrap_model_call(request, handler)

    model, given = tool_then_answer(), scenario()
    spy = Spy(budget=BUDGET, store=f"sqlite:///{tmp_path}/m.db", embedder=hashing_embedder)
    agent = create_agent(model, tools=[lookup], system_prompt=SYSTEM, middleware=[spy])
    final = asyncio.run(agent.ainvoke({"messages": given}, {"configurable": {"thread_id": "trip"}}))["messages"]
    assert calls == ["async", "async"]
    check_run(model, given, final)
    assert len(spy.rdmem.manager("trip")) == len(final)  # the run's thread, seen from a worker thread
    assert len(spy.rdmem.manager("default")) == 0


def test_a_run_without_a_thread_has_no_memory(tmp_path, hashing_embedder):
    """No checkpointer, no thread_id (a stateless agent serving many users): each run is fitted on its own
    messages; nothing of one run reaches another, nothing is stored (it was all one session, "default")."""
    model = RecordingModel(messages=iter(["ok", "ok"]))
    middleware = RdmemMiddleware(budget=BUDGET, store=f"sqlite:///{tmp_path}/m.db", embedder=hashing_embedder)
    agent = create_agent(model, tools=[lookup], system_prompt=SYSTEM, middleware=[middleware])
    agent.invoke({"messages": [HumanMessage("alice here: my card PIN is 4711")]})
    agent.invoke({"messages": [HumanMessage("bob here: what is the weather?")]})
    assert [m.content for m in model.seen[1]] == [SYSTEM, "bob here: what is the weather?"]
    assert middleware.rdmem.manager("default").store.sessions() == []
    hook = rdmem_pre_model_hook(BUDGET, embedder=hashing_embedder)
    assert [m.content for m in hook({"messages": [HumanMessage("carol")]})["llm_input_messages"]] == ["carol"]
    assert hook.post_model_hook({"messages": [HumanMessage("carol"), AIMessage("hi")]}) == {}
    assert hook.rdmem.manager("default").store.sessions() == []


def test_one_thread_mirrored_at_once_stores_each_message_once(tmp_path, hashing_embedder):
    """Calls of one thread at once (threads of one middleware, and a second one on the same store, as another
    process): each message stored once. Unseen-then-extend stored all 20 twice in 4 trials of 10."""
    store = f"sqlite:///{tmp_path}/m.db"
    contexts = [RdmemContext(BUDGET, session="s", store=store, embedder=hashing_embedder) for _ in range(2)]
    messages = [HumanMessage(f"message {i}") for i in range(20)]
    for _ in range(5):
        contexts[0].manager("s").clear()
        barrier = threading.Barrier(4)

        def mirror(context: RdmemContext) -> None:
            barrier.wait(timeout=30)
            context.remember(messages)

        threads = [threading.Thread(target=mirror, args=(contexts[i % 2],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert [m["content"] for m in contexts[1].manager("s").history()] == [m.content for m in messages]


def test_threads_are_sessions_and_a_resent_state_is_stored_once():
    model = RecordingModel(messages=iter(["one", "two", "three"]))
    middleware = RdmemMiddleware(budget=BUDGET, policy="window")
    agent = create_agent(model, tools=[lookup], middleware=[middleware], checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("hello from a")]}, {"configurable": {"thread_id": "a"}})
    agent.invoke({"messages": [HumanMessage("hello from b")]}, {"configurable": {"thread_id": "b"}})
    final = agent.invoke({"messages": [HumanMessage("again from a")]}, {"configurable": {"thread_id": "a"}})
    assert [m["content"] for m in middleware.rdmem.manager("a").history()] == \
        ["hello from a", "one", "again from a", "three"] == [m.content for m in final["messages"]]
    assert [m["content"] for m in middleware.rdmem.manager("b").history()] == ["hello from b", "two"]
    assert [m.content for m in model.seen[2]] == ["hello from a", "one", "again from a"]


# -- (c) LangGraph create_react_agent + pre_model_hook -------------------------------------------------
@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
def test_create_react_agent_pre_model_hook_fits_every_call(tmp_path, minilm, call):
    model, given = tool_then_answer(), scenario()
    hook = rdmem_pre_model_hook(BUDGET, system_prompt=SYSTEM, store=f"sqlite:///{tmp_path}/m.db", embedder=minilm)
    with warnings.catch_warnings():  # deprecated by LangGraph 1.0 for langchain's create_agent, still working
        warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
        agent = create_react_agent(model, [lookup], pre_model_hook=hook, post_model_hook=hook.post_model_hook)
    run = agent.invoke if call == "invoke" else lambda *a: asyncio.run(agent.ainvoke(*a))
    final = run({"messages": given}, {"configurable": {"thread_id": "trip"}})["messages"]
    check_run(model, given, final)
    assert len(hook.rdmem.manager("trip")) == len(final)  # the reply is stored by the post-model hook


# -- (e) a new process continues the thread -----------------------------------------------------------
SECOND_RUN = """
import json, sys
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, messages_to_dict
from rdmem.integrations.langchain import RdmemMiddleware

seen = []
class Model(GenericFakeChatModel):
    def bind_tools(self, tools, **kwargs):
        return self
    def _generate(self, messages, *args, **kwargs):
        seen.append(messages_to_dict(messages))
        return super()._generate(messages, *args, **kwargs)

store, budget, system, question = sys.argv[1:5]
agent = create_agent(Model(messages=iter([AIMessage("Pastel de nata from Manteigaria is peanut-free.")])),
                     system_prompt=system, middleware=[RdmemMiddleware(budget=int(budget), store=store)])
state = agent.invoke({"messages": [HumanMessage(question)]}, {"configurable": {"thread_id": "trip"}})
print(json.dumps({"seen": seen, "state": messages_to_dict(state["messages"])}))
"""


@pytest.mark.slow  # the new process loads the default embedding model
def test_a_new_process_continues_the_thread_from_the_sqlite_file(tmp_path, minilm):
    store = f"sqlite:///{tmp_path}/m.db"
    first, given = tool_then_answer(), scenario()
    agent = create_agent(first, tools=[lookup], system_prompt=SYSTEM,
                         middleware=[RdmemMiddleware(budget=BUDGET, store=store, embedder=minilm)])
    agent.invoke({"messages": given}, {"configurable": {"thread_id": "trip"}})

    question = "And for dessert tonight, is there a pastry I can eat safely?"
    script = tmp_path / "second.py"
    script.write_text(SECOND_RUN)
    done = subprocess.run([sys.executable, str(script), store, str(BUDGET), SYSTEM, question], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    state = messages_from_dict(out["state"])
    assert [m.content for m in state] == [question, "Pastel de nata from Manteigaria is peanut-free."]
    (seen,) = [messages_from_dict(s) for s in out["seen"]]
    check_seen(as_chat(seen), BUDGET, food=True)
    assert seen[-1].content == question
    assert ANSWER in [m.content for m in seen]  # the first process's last reply: the thread goes on
    assert any(m.content == DIRECTIVE for m in seen)
    stored = MemoryManager(budget=BUDGET, policy="window", store=store, session="trip")
    assert len(stored) == len(given) + 3 + 2


# -- (f) the examples ---------------------------------------------------------------------------------
@pytest.mark.slow  # they load the default embedding model
@pytest.mark.parametrize("name", ["langchain_middleware.py", "langgraph_pre_model_hook.py"])
def test_example_runs(name):
    done = subprocess.run([sys.executable, str(REPO / "examples" / name)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=REPO)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    calls = [line for line in lines if line.startswith("model call:")]
    assert len(calls) == 2 and all(line.endswith("peanut directive seen: True") for line in calls)
    assert all(int(line.split()[2]) < 40 for line in calls)  # of 122 messages and more
    assert lines[-1] == "state: 125 messages; answer: Sunny, 24 C: sardines, no peanuts."
    assert "Warning" not in done.stderr


def _supervisor_with_a_sub_agent(store: str, embedder: Any, **sub_settings: Any) -> tuple[Any, RecordingModel, RecordingModel]:
    """LangChain's "sub-agents as tools": the supervisor's tool invokes another agent, both with the middleware
    on one store; LangGraph hands the sub-agent the supervisor's config, thread_id included."""
    researcher = RecordingModel(messages=iter(["researcher: done"]))
    sub = create_agent(researcher, tools=[], system_prompt="You research one topic.",
                       middleware=[RdmemMiddleware(budget=BUDGET, store=store, embedder=embedder, **sub_settings)])

    @tool
    def research(topic: str) -> str:
        """Research a topic with the research sub-agent."""
        return sub.invoke({"messages": [HumanMessage(f"Research: {topic}")]})["messages"][-1].content

    supervisor = RecordingModel(messages=iter([
        AIMessage("", tool_calls=[{"id": "c1", "name": "research", "args": {"topic": "peanut-free restaurants"}}]),
        "supervisor: done"]))
    agent = create_agent(supervisor, tools=[research], system_prompt=SYSTEM, checkpointer=InMemorySaver(),
                         middleware=[RdmemMiddleware(budget=BUDGET, store=store, embedder=embedder)])
    return agent, supervisor, researcher


def test_a_sub_agent_run_from_a_tool_neither_sees_nor_joins_its_caller_s_session(tmp_path, hashing_embedder):
    """The sub-agent saw the supervisor's private message and stored its own messages in the supervisor's
    session, where the supervisor's next call found them (and its own tool call summarised away)."""
    store = f"sqlite:///{tmp_path}/m.db"
    agent, supervisor, researcher = _supervisor_with_a_sub_agent(store, hashing_embedder)
    with pytest.warns(RuntimeWarning, match="an agent run by another agent's tool gets no memory"):
        agent.invoke({"messages": [HumanMessage("My private note: I am allergic to peanuts. Find me a place.")]},
                     {"configurable": {"thread_id": "alice"}})
    assert [m.content for m in researcher.seen[0]] == ["You research one topic.", "Research: peanut-free restaurants"]
    last = supervisor.seen[-1]
    assert history_problems(as_chat(last[1:])) == [] and isinstance(last[-1], ToolMessage)
    stored = MemoryManager(budget=BUDGET, policy="window", store=store, session="alice").history()
    assert [m["content"] for m in stored] == \
        ["My private note: I am allergic to peanuts. Find me a place.", None, "researcher: done", "supervisor: done"]


@pytest.mark.parametrize("how", ["no checkpointer", "state cleared"])
def test_a_new_message_equal_to_an_older_one_is_stored_and_given_to_the_model(tmp_path, how):
    """The agent's state holds only the new message (rdmem's store is the thread's memory; or the app cleared the
    state with RemoveMessage): a "yes" equal to an earlier "yes" was taken for it (the client going back to that
    turn), neither stored nor sent; the model answered the previous question again."""
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    store = f"sqlite:///{tmp_path}/m.db"
    model = RecordingModel(messages=iter(["Shall I book the 8pm table?", "Booked for 8pm.", "Which day?",
                                          "Booked for Friday too."]))
    saver = InMemorySaver() if how == "state cleared" else None
    agent = create_agent(model, tools=[], checkpointer=saver,
                         middleware=[RdmemMiddleware(budget=2000, policy="window", store=store)])
    config = {"configurable": {"thread_id": "alice"}}
    for text in ["Book dinner", "yes", "And another one", "yes"]:
        if saver is not None and text == "And another one":
            agent.update_state(config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]})
        agent.invoke({"messages": [HumanMessage(text)]}, config)
    assert [m.content for m in model.seen[-1]][-2:] == ["Which day?", "yes"]
    stored = MemoryManager(budget=2000, policy="window", store=store, session="alice").history()
    assert [m["content"] for m in stored] == ["Book dinner", "Shall I book the 8pm table?", "yes", "Booked for 8pm.",
                                              "And another one", "Which day?", "yes", "Booked for Friday too."]


def test_an_agent_made_a_node_of_a_graph_keeps_its_thread_s_memory(tmp_path, hashing_embedder):
    """An agent that is a node of the user's own graph shares the graph's messages: it is the thread's
    conversation (a first fix for sub-agents gave every nested run no memory, this one too)."""

    store = f"sqlite:///{tmp_path}/m.db"
    inner = create_agent(RecordingModel(messages=iter(["hi"])), tools=[],
                         middleware=[RdmemMiddleware(budget=BUDGET, store=store, embedder=hashing_embedder)])
    graph = _chain(("agent", inner))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        graph.compile(checkpointer=InMemorySaver()).invoke({"messages": [HumanMessage("I am Carol")]},
                                                            {"configurable": {"thread_id": "carol"}})
    stored = MemoryManager(budget=BUDGET, policy="window", store=store, session="carol").history()
    assert [m["content"] for m in stored] == ["I am Carol", "hi"]


@pytest.mark.parametrize("checkpointer", [True, False])
def test_an_agent_a_node_invokes_with_its_own_input_is_warned_about_and_session_keeps_it_apart(tmp_path, checkpointer):
    """LangGraph's "invoke a graph from a node": a node of the user's graph asks a helper agent for a title, both
    agents with the middleware on one store. The helper is given alice's thread (her PIN) and its messages are
    stored there, silently until now: a warning says so, and ``session=`` keeps it apart. Its memory is not taken
    away (a first fix did, and so took the thread's memory from an agent made a node of a graph without a
    checkpointer, whose state also holds only the new message: the last test below)."""

    def run(helper_session):
        store = f"sqlite:///{tmp_path}/{helper_session is None}.db"
        chat_model = RecordingModel(messages=iter(["Noted, your PIN is safe.", "Here is a title."]))
        title_model = RecordingModel(messages=iter(["Title: PIN", "Title: again"]))
        chat = create_agent(chat_model, tools=[],
                            middleware=[RdmemMiddleware(budget=BUDGET, policy="window", store=store)])
        titler = create_agent(title_model, tools=[], middleware=[RdmemMiddleware(
            budget=BUDGET, policy="window", store=store, **({} if helper_session is None else {"session": helper_session}))])

        def make_title(state):
            titler.invoke({"messages": [HumanMessage("Write a 3-word title for: " + state["messages"][-1].content)]})
            return {}

        app = _chain(("chat", chat), ("make_title", make_title)).compile(checkpointer=InMemorySaver() if checkpointer else None)
        config = {"configurable": {"thread_id": "alice"}}
        for text in ("My card PIN is 4711, keep it private", "Give me a title"):
            app.invoke({"messages": [HumanMessage(text)]}, config)
        return store, chat_model, title_model

    with pytest.warns(RuntimeWarning, match="node 'make_title', with input of its own, is given the memory of thread "
                                            "'alice' \\(the conversation of the agent of node 'chat'\\)"):
        run(None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        store, chat_model, title_model = run(lambda config: config["configurable"]["thread_id"] + "/titles")
    assert [[m.content for m in seen] for seen in title_model.seen][0] == [
        "Write a 3-word title for: Noted, your PIN is safe."]
    assert [m.content for m in chat_model.seen[-1]] == [
        "My card PIN is 4711, keep it private", "Noted, your PIN is safe.", "Give me a title"]
    stored = MemoryManager(budget=BUDGET, policy="window", store=store, session="alice").history()
    assert [m["content"] for m in stored] == ["My card PIN is 4711, keep it private", "Noted, your PIN is safe.",
                                              "Give me a title", "Here is a title."]


@pytest.mark.parametrize("hook", [False, True])
def test_an_agent_made_a_node_of_a_graph_without_a_checkpointer_keeps_its_thread_s_memory(tmp_path, hook):
    """The graph built again for every request (a web server, a restarted process), no checkpointer: rdmem is the
    thread's memory. The node's state holds only the new message; its agent still gets the thread's."""

    store = f"sqlite:///{tmp_path}/m.db"
    replies = iter(["Noted, Carol.", "You are Carol."])
    for text in ("My name is Carol", "What is my name?"):
        model = RecordingModel(messages=replies)
        if hook:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
                fit = rdmem_pre_model_hook(budget=BUDGET, policy="window", store=store)
                agent = create_react_agent(model, tools=[], pre_model_hook=fit, post_model_hook=fit.post_model_hook)
        else:
            agent = create_agent(model, tools=[], middleware=[RdmemMiddleware(budget=BUDGET, policy="window",
                                                                              store=store)])
        graph = _chain(("chat", agent))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            graph.compile().invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": "carol"}})
    assert [m.content for m in model.seen[-1]][-3:] == ["My name is Carol", "Noted, Carol.", "What is my name?"]
    stored = MemoryManager(budget=BUDGET, policy="window", store=store, session="carol").history()
    assert [m["content"] for m in stored] == ["My name is Carol", "Noted, Carol.", "What is my name?", "You are Carol."]


def test_session_may_name_the_session_from_the_run_s_config(tmp_path, hashing_embedder):
    store = f"sqlite:///{tmp_path}/m.db"
    agent, _, researcher = _supervisor_with_a_sub_agent(
        store, hashing_embedder, session=lambda config: f"{config['configurable']['thread_id']}-research")
    agent.invoke({"messages": [HumanMessage("Find me a place.")]}, {"configurable": {"thread_id": "alice"}})
    stored = MemoryManager(budget=BUDGET, policy="window", store=store, session="alice-research").history()
    assert [m["content"] for m in stored] == ["Research: peanut-free restaurants", "researcher: done"]
    with pytest.raises(InvalidInput, match="session= callable"):
        RdmemContext(BUDGET, session=lambda config: "a\nb").current_session()


def test_a_content_block_langchain_cannot_convert_is_named_not_fatal(tmp_path, hashing_embedder):
    """A video block (Gemini takes them) made every model call of the thread fail inside the middleware with
    LangChain's ValueError, for good: the message stays in the state."""
    model = RecordingModel(messages=iter(["A1", "A2"]))
    agent = create_agent(model, tools=[], middleware=[RdmemMiddleware(budget=BUDGET, policy="window",
                                                                      store=f"sqlite:///{tmp_path}/m.db")],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    video = HumanMessage(content=[{"type": "text", "text": "what happens here?"},
                                  {"type": "video", "base64": "AAAAGGZ0eXBtcDQy", "mime_type": "video/mp4"}])
    agent.invoke({"messages": [video]}, config)
    agent.invoke({"messages": [HumanMessage("and now?")]}, config)
    assert model.seen[0][-1].content == video.content  # the model is given the message whole
    stored = to_openai([video])[0]
    assert "[video]" in content_text(stored["content"]) and stored[LC_KEY]["data"]["content"][1]["type"] == "video"


def test_a_tool_call_too_large_to_send_is_said(tmp_path):
    """A call whose arguments alone pass the budget cannot be cut: the model's next call did not see it, and
    nothing said why (the adapters dropped the context's warnings)."""
    @tool
    def write_file(text: str) -> str:
        """Write a file."""
        return "wrote it"

    model = RecordingModel(messages=iter([
        AIMessage("", tool_calls=[{"id": "c1", "name": "write_file", "args": {"text": "lorem ipsum " * 3000}}]),
        "done"]))
    agent = create_agent(model, tools=[write_file], checkpointer=InMemorySaver(),
                         middleware=[RdmemMiddleware(budget=2000, policy="window", store=f"sqlite:///{tmp_path}/m.db")])
    with pytest.warns(RuntimeWarning, match="of the turn in progress .* cannot fit beside the newest user message"):
        agent.invoke({"messages": [HumanMessage("write the report")]}, {"configurable": {"thread_id": "t"}})


def test_an_edited_state_is_stored_once_and_in_order(tmp_path):
    """LangGraph state edits: a RemoveMessage in the middle of the thread made the next resend look new from
    the removed message on, so every later message was stored again (twice per call: before and after the
    model); LangChain's SummarizationMiddleware, which puts a summary in place of the oldest messages, stored
    the kept ones again after the summary. The resend is now lined up by LangGraph's message ids."""
    store = f"sqlite:///{tmp_path}/m.db"
    model = RecordingModel(messages=iter([f"reply {i}" for i in range(20)]))
    middleware = RdmemMiddleware(budget=BUDGET, policy="window", store=store)
    agent = create_agent(model, tools=[], middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    for i in range(4):
        agent.invoke({"messages": [HumanMessage(f"question {i}")]}, config)
    state = agent.get_state(config).values["messages"]
    agent.update_state(config, {"messages": [RemoveMessage(id=state[2].id), RemoveMessage(id=state[5].id)]})
    agent.invoke({"messages": [HumanMessage("question 4")]}, config)
    history = [m["content"] for m in MemoryManager(budget=BUDGET, policy="window", store=store, session="t").history()]
    # removed from the state, kept in the session (nothing is deleted: README); nothing stored twice
    assert history == [f"{kind} {i}" for i in range(5) for kind in ("question", "reply")]
    # the oldest messages removed (the state trimmed from the front) goes on as before
    state = agent.get_state(config).values["messages"]
    agent.update_state(config, {"messages": [RemoveMessage(id=m.id) for m in state[:6]]})
    agent.invoke({"messages": [HumanMessage("question 5")]}, config)
    history = [m["content"] for m in MemoryManager(budget=BUDGET, policy="window", store=store, session="t").history()]
    assert history == [f"{kind} {i}" for i in range(6) for kind in ("question", "reply")]
    # the last question rewritten under its id (add_messages replaces it) and its reply removed: the edit is
    # stored (after what the session holds; it was taken for the question held under that id, and lost)
    state = agent.get_state(config).values["messages"]
    agent.update_state(config, {"messages": [RemoveMessage(id=state[-1].id),
                                             HumanMessage(id=state[-2].id, content="question 5, edited")]})
    agent.invoke({"messages": [HumanMessage("question 6")]}, config)
    history = [m["content"] for m in MemoryManager(budget=BUDGET, policy="window", store=store, session="t").history()]
    assert history[-5:] == ["question 5", "reply 5", "question 5, edited", "question 6", "reply 6"]

    summarizer = GenericFakeChatModel(messages=iter([f"SUMMARY {i}" for i in range(20)]))
    model = RecordingModel(messages=iter([f"reply {i}" for i in range(20)]))
    middleware = RdmemMiddleware(budget=BUDGET, policy="window", store=store)
    agent = create_agent(model, tools=[], checkpointer=InMemorySaver(), middleware=[
        SummarizationMiddleware(summarizer, trigger=("messages", 6), keep=("messages", 2)), middleware])
    config = {"configurable": {"thread_id": "s"}}
    with pytest.warns(RuntimeWarning, match="come before messages its session holds"):
        for i in range(6):
            agent.invoke({"messages": [HumanMessage(f"question {i}")]}, config)
    assert "summary" in agent.get_state(config).values["messages"][0].content  # LangChain did summarize
    history = [m["content"] for m in MemoryManager(budget=BUDGET, policy="window", store=store, session="s").history()]
    assert history == [f"{kind} {i}" for i in range(6) for kind in ("question", "reply")]
    assert [m.content for m in model.seen[-1]][-3:] == ["question 4", "reply 4", "question 5"]
