"""RdmemMemory inside the real LlamaIndex FunctionAgent, driven by LlamaIndex's own mock LLM, which
records every list of messages the agent sends it; each is converted here (not with rdmem's code) and
checked independently."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock  # noqa: E402
from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall  # noqa: E402
from llama_index.core.memory import BaseMemory  # noqa: E402
from llama_index.core.tools import FunctionTool, ToolSelection  # noqa: E402

from rdmem import MemoryManager  # noqa: E402
from rdmem.integrations.llamaindex import LI_KEY, RdmemMemory, from_openai, to_openai  # noqa: E402
from rdmem.errors import InvalidInput  # noqa: E402
from rdmem.reconstruct import MARKER  # noqa: E402

from .._checks import history_problems  # noqa: E402
from ._scenario import BUDGET, DIRECTIVE, FOOD_QUESTION, check_seen, conversation, tokens  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SYSTEM = "You are a travel assistant for Lisbon. Answer briefly; never suggest food the user cannot eat."


# -- the test's own converters (a LlamaIndex app's view, written without rdmem) ------------------------------
def oai(m: ChatMessage) -> dict[str, Any]:
    """The OpenAI chat dict the model would be sent for ``m``."""
    text = "\n".join(b.text for b in m.blocks if isinstance(b, TextBlock))
    out: dict[str, Any] = {"role": m.role.value, "content": text}
    calls = [{"id": b.tool_call_id, "type": "function",
              "function": {"name": b.tool_name, "arguments": b.tool_kwargs if isinstance(b.tool_kwargs, str)
                           else json.dumps(b.tool_kwargs)}} for b in m.blocks if isinstance(b, ToolCallBlock)]
    if calls:
        out.update(tool_calls=calls, content=text or None)
    if m.role == MessageRole.TOOL:
        out["tool_call_id"] = m.additional_kwargs["tool_call_id"]
    return out


def li(d: dict[str, Any]) -> ChatMessage:
    """A ChatMessage for an OpenAI dict, as LlamaIndex's own LLMs build them (calls as ToolCallBlocks)."""
    if d.get("tool_calls"):
        return ChatMessage(role="assistant", blocks=[
            ToolCallBlock(tool_call_id=c["id"], tool_name=c["function"]["name"],
                          tool_kwargs=json.loads(c["function"]["arguments"])) for c in d["tool_calls"]])
    if d["role"] == "tool":
        return ChatMessage(role="tool", content=d["content"], additional_kwargs={"tool_call_id": d["tool_call_id"]})
    return ChatMessage(role=d["role"], content=d["content"])


def restaurants(area: str) -> str:
    """Restaurants open tonight in an area of Lisbon, with what they serve."""
    return "\n".join(f"{area} #{i}: Tasca {i}, grilled fish, sardines, fado at nine; booking advised; mains 14-22 EUR."
                     for i in range(8))


def make_agent() -> tuple[FunctionAgent, list[list[ChatMessage]]]:
    """A FunctionAgent with one real tool and LlamaIndex's mock LLM, scripted to call the tool once and then
    answer; ``calls`` gets a copy of every message list the model is given."""
    calls: list[list[ChatMessage]] = []

    def respond(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        calls.append([m.model_copy(deep=True) for m in messages])
        if messages[-1].role == MessageRole.USER:
            call = ToolCallBlock(tool_call_id=f"run-{len(calls)}", tool_name="restaurants",
                                 tool_kwargs={"area": "Alfama"})
            return ChatMessage(role="assistant", blocks=[call])
        asked = next(m.content for m in reversed(messages) if m.role == MessageRole.USER)
        return ChatMessage(role="assistant", content=f"Tasca 0 is safe for you. (You asked: {asked})")

    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall(response_generator=respond)
    return FunctionAgent(tools=[FunctionTool.from_defaults(restaurants)], llm=llm, system_prompt=SYSTEM), calls


def run(agent: FunctionAgent, question: str, memory: BaseMemory) -> str:
    async def go() -> Any:  # the workflow starts on the running loop
        return await agent.run(user_msg=question, memory=memory)

    return str(asyncio.run(go()))


def run_checks(calls: list[list[ChatMessage]], question: str, limit: int, *, food: bool) -> list[list[dict]]:
    """Every model call of one run (call the tool, then answer): fits, valid, the question last asked."""
    assert len(calls) == 2
    seen = [[oai(m) for m in call] for call in calls]
    for s in seen:
        check_seen(s, limit, food=food)
        assert s[0] == {"role": "system", "content": SYSTEM}
    first, second = seen
    assert first[-1] == {"role": "user", "content": question}
    # The second call: the question, the run's own call and its result (from the agent's scratchpad).
    assert second[-3] == first[-1] and second[-2]["tool_calls"][0]["function"]["name"] == "restaurants"
    assert second[-1]["tool_call_id"] == second[-2]["tool_calls"][0]["id"] and "Tasca 7" in second[-1]["content"]
    return seen


# -- (a) conversion ---------------------------------------------------------------------------------------------
def test_openai_round_trip_keeps_every_tool_call_with_its_result():
    chats = conversation(60)
    assert sum(bool(d.get("tool_calls")) for d in chats) == 3
    for d in chats:
        assert {k: v for k, v in to_openai(from_openai(d)).items() if k != LI_KEY} == d
        m = li(d)
        out = to_openai(m)
        assert {k: v for k, v in out.items() if k != LI_KEY} == d  # calls, their ids, tool_call_id
        assert ChatMessage.model_validate(out[LI_KEY]) == m  # the ChatMessage itself, whole
    converted = [{k: v for k, v in to_openai(li(d)).items() if k != LI_KEY} for d in chats]
    assert history_problems(converted) == []


def test_calls_given_the_older_way_are_read_once_and_stay_paired():
    legacy = ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [
        ToolSelection(tool_id="t1", tool_name="lookup", tool_kwargs={"q": "tram"}),
        {"id": "t2", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'}}]})
    both = ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_call_id="t3", tool_name="lookup", tool_kwargs={})],
                       additional_kwargs={"tool_calls": [{"id": "t3", "type": "function",
                                                          "function": {"name": "lookup", "arguments": "{}"}}]})
    msgs = [ChatMessage(role="user", content="Tram and weather?"), legacy,
            ChatMessage(role="tool", content="Tram 15E.", additional_kwargs={"tool_call_id": "t1"}),
            ChatMessage(role="tool", content="Sunny.", additional_kwargs={"tool_call_id": "t2"}), both,
            ChatMessage(role="tool", content="Found.", additional_kwargs={"tool_call_id": "t3"})]
    chats = [{k: v for k, v in to_openai(m).items() if k != LI_KEY} for m in msgs]
    assert chats[1]["content"] is None and [c["id"] for c in chats[1]["tool_calls"]] == ["t1", "t2"]
    assert json.loads(chats[1]["tool_calls"][0]["function"]["arguments"]) == {"q": "tram"}
    assert [c["id"] for c in chats[4]["tool_calls"]] == ["t3"]  # not twice
    assert history_problems(chats) == []
    with pytest.raises(ValueError, match=r"a tool message needs additional_kwargs\['tool_call_id'\]"):
        to_openai(ChatMessage(role="tool", content="orphan"))


def test_get_gives_back_the_stored_messages_and_valid_ones_for_the_rest():
    chats = conversation(120)
    originals = [li(d) for d in chats] + [ChatMessage(role="user", content="Which ferry goes to Cacilhas?")]
    memory = RdmemMemory.from_defaults(session_id="conv", token_limit=600, policy="window")
    memory.put_messages(originals)
    got = memory.get()
    seen = [oai(m) for m in got]
    assert tokens(seen) <= 600 and history_problems(seen) == []
    assert got[-1] == originals[-1]
    verbatim = [m for m in got if m in originals]  # the stored ChatMessages themselves
    markers = [m for m in got if m not in originals]
    assert markers and all(MARKER.fullmatch(m.content) for m in markers)
    assert any(isinstance(b, ToolCallBlock) for m in verbatim for b in m.blocks)


# -- (b) the BaseMemory contract ----------------------------------------------------------------------------------
def test_base_memory_contract(tmp_path):
    memory = RdmemMemory.from_defaults(session_id="c", token_limit=500, policy="window",
                                       store=f"sqlite:///{tmp_path}/c.db")
    assert isinstance(memory, BaseMemory) and memory.class_name() == "RdmemMemory"
    assert memory.get() == [] and memory.get_all() == []
    first = [li(d) for d in conversation(10)]
    memory.put(first[0])
    memory.put_messages(first[1:])
    assert memory.get_all() == first
    asyncio.run(memory.aput(ChatMessage(role="user", content="And the ferry?")))
    asyncio.run(memory.aput_messages([ChatMessage(role="assistant", content="Every 20 minutes.")]))
    assert [m.content for m in asyncio.run(memory.aget_all())[-2:]] == ["And the ferry?", "Every 20 minutes."]
    assert asyncio.run(memory.aget()) == memory.get() == memory.get_all()  # it all fits
    replaced = [ChatMessage(role="user", content="Start over: Porto.")]
    memory.set(replaced)
    assert memory.get_all() == replaced
    asyncio.run(memory.aset(first[:2]))
    assert memory.get_all() == first[:2]
    memory.reset()
    assert memory.get_all() == []
    memory.put(ChatMessage(role="user", content="hi"))
    asyncio.run(memory.areset())
    assert memory.get_all() == [] and len(memory.manager) == 0


def test_set_with_a_message_rdmem_refuses_changes_nothing(tmp_path):
    """set() cleared the session, then found the new list's bad message: the session was left empty
    (FunctionAgent.run(chat_history=...) calls aset)."""
    memory = RdmemMemory.from_defaults(session_id="c", token_limit=500, policy="window",
                                       store=f"sqlite:///{tmp_path}/c.db")
    before = [ChatMessage(role="user", content="my passport number is X123"), ChatMessage(role="assistant", content="noted")]
    memory.put_messages(before)
    with pytest.raises(InvalidInput, match="tool_call_id"):
        memory.set([ChatMessage(role="user", content="hello"), ChatMessage(role="tool", content="result")])
    assert memory.get_all() == before
    memory.set(before[:1])
    assert memory.get_all() == before[:1]
    # a value pydantic cannot make JSON was its raw PydanticSerializationError, from deep inside
    with pytest.raises(InvalidInput, match="a user message holds a value rdmem cannot store as JSON"):
        memory.put(ChatMessage(role="user", content="x", additional_kwargs={"obj": object()}))
    assert memory.get_all() == before[:1]


def test_memories_made_without_a_session_id_never_share_one(tmp_path, hashing_embedder):
    """A session_id left out was "default": two users' memories over one persistent store shared it (each saw the
    other's messages, and one's reset() wiped the other's). A new session each, as LlamaIndex's Memory does."""
    store = f"sqlite:///{tmp_path}/shared.db"
    alice = RdmemMemory.from_defaults(store=store, embedder=hashing_embedder)
    bob = RdmemMemory(store=store, embedder=hashing_embedder)
    alice.put(ChatMessage(role="user", content="my card PIN is 4711"))
    assert alice.session_id != bob.session_id and bob.get_all() == []
    bob.reset()
    assert [m.content for m in alice.get_all()] == ["my card PIN is 4711"]


def test_get_stays_within_the_limit_and_brings_back_what_the_query_needs(hashing_embedder):
    memory = RdmemMemory.from_defaults(session_id="q", token_limit=BUDGET, embedder=hashing_embedder)
    memory.put_messages([li(d) for d in conversation()])
    got = [oai(m) for m in memory.get(input=FOOD_QUESTION)]
    check_seen(got, BUDGET, food=True)
    memory.put(ChatMessage(role="user", content=FOOD_QUESTION))
    assert oai(memory.get()[-1]) == {"role": "user", "content": FOOD_QUESTION}  # no input: the newest question


def test_settings_are_checked():
    with pytest.raises(ValueError, match="token_limit must be > 0 tokens, got 0"):
        RdmemMemory.from_defaults(token_limit=0)
    with pytest.raises(ValueError, match=r"reserve must be an int >= 0 and below token_limit \(100\), got 100"):
        RdmemMemory.from_defaults(token_limit=100, reserve=100)
    with pytest.raises(ValueError, match="session_id 'a.*b': a session name may not hold control characters"):
        RdmemMemory.from_defaults(session_id="a\x1bb")
    with pytest.raises(TypeError, match="embeder"):
        RdmemMemory.from_defaults(embeder=None)  # a misspelt setting is not ignored
    agent, _ = make_agent()
    with pytest.raises(ValueError, match="the agent's system prompt and state take 2. tokens"):
        RdmemMemory.from_defaults(token_limit=20, agent=agent, policy="window")


def test_the_agent_s_system_prompt_and_state_are_reserved():
    agent, _ = make_agent()
    memory = RdmemMemory.from_defaults(token_limit=BUDGET, reserve=10, agent=agent, policy="window")
    assert memory.reserve == 10 + tokens([{"role": "system", "content": SYSTEM}])
    stateful = FunctionAgent(tools=[restaurants], llm=agent.llm, system_prompt=SYSTEM,
                             initial_state={"city": "Lisbon", "diet": "no peanuts"})
    assert RdmemMemory.from_defaults(token_limit=BUDGET, agent=stateful, policy="window").reserve > memory.reserve


# -- (c) the shared scenario, (d) a second process ----------------------------------------------------------------
def test_the_run_s_tool_calls_are_counted_on_every_call(hashing_embedder):
    """The tool's long result sits in the agent's scratchpad, not in memory: memory must leave it room."""
    for key, fits in (("scratchpad", True), ("not-the-agent-s-key", False)):
        agent, calls = make_agent()
        memory = RdmemMemory.from_defaults(session_id=key, token_limit=BUDGET, embedder=hashing_embedder,
                                           agent=agent, scratchpad_key=key)
        memory.put_messages([li(d) for d in conversation()])
        run(agent, FOOD_QUESTION, memory)
        assert (tokens([oai(m) for m in calls[1]]) <= BUDGET) is fits
    agent, calls = make_agent()  # a result larger than the whole limit: said, not hidden
    memory = RdmemMemory.from_defaults(session_id="tiny", token_limit=200, policy="window", agent=agent)
    with pytest.warns(RuntimeWarning, match=r"the agent's run in progress and reserve take \d+ tokens of token_limit=200"):
        run(agent, FOOD_QUESTION, memory)
    assert oai(calls[1][1]) == {"role": "user", "content": FOOD_QUESTION}  # the question alone, then the run


def test_an_agent_workflow_is_measured_as_its_agents(hashing_embedder):
    agent, calls = make_agent()
    flow = AgentWorkflow(agents=[agent], root_agent=agent.name)
    memory = RdmemMemory.from_defaults(token_limit=BUDGET, embedder=hashing_embedder, agent=flow)
    assert memory.reserve == tokens([{"role": "system", "content": SYSTEM}])
    memory.put_messages([li(d) for d in conversation()])
    run(flow, FOOD_QUESTION, memory)
    run_checks(calls, FOOD_QUESTION, BUDGET, food=True)


def test_every_model_call_fits_and_a_new_process_continues(tmp_path, minilm):
    db = tmp_path / "m.db"
    agent, calls = make_agent()
    memory = RdmemMemory.from_defaults(session_id="trip", token_limit=BUDGET, store=f"sqlite:///{db}",
                                       embedder=minilm, agent=agent)
    memory.put_messages([li(d) for d in conversation()])
    answer = run(agent, FOOD_QUESTION, memory)
    assert answer == f"Tasca 0 is safe for you. (You asked: {FOOD_QUESTION})"
    run_checks(calls, FOOD_QUESTION, BUDGET, food=True)
    assert agent.llm.last_chat_messages == calls[-1]  # the mock's own record agrees
    stored = memory.get_all()
    assert len(stored) == len(conversation()) + 4 and [m.role.value for m in stored[-4:]] == ["user", "assistant", "tool", "assistant"]

    question = "And for dessert tonight, what is safe for me to eat near Alfama?"
    script = ("import json, sys; from tests.integrations.test_llamaindex import *\n"
              "agent, calls = make_agent()\n"
              f"memory = RdmemMemory.from_defaults(session_id='trip', token_limit={BUDGET}, "
              f"store='sqlite:///{db}', agent=agent)\n"
              f"answer = run(agent, {question!r}, memory)\n"
              "print(json.dumps({'answer': answer, 'calls': [[oai(m) for m in c] for c in calls]}))\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'src'}"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["answer"] == f"Tasca 0 is safe for you. (You asked: {question})"
    second = run_checks([[li(d) for d in c] for c in out["calls"]], question, BUDGET, food=True)
    # The new process saw the first run: its question and its answer.
    assert any(m == {"role": "user", "content": FOOD_QUESTION} for m in second[0])
    assert any(m.get("content") == answer for m in second[0])
    again = RdmemMemory.from_defaults(session_id="trip", token_limit=BUDGET, store=f"sqlite:///{db}",
                                      embedder=minilm).get_all()
    assert len(again) == len(conversation()) + 8 and again[-1].content == out["answer"] and again[:-4] == stored
    assert again[0].content == DIRECTIVE


# -- (e) the example ------------------------------------------------------------------------------------------------
@pytest.mark.slow  # the example loads MiniLM in its own process
def test_the_example_runs():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "llamaindex_memory.py")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "Open tonight in Alfama: Tasca do Chico (grilled fish), Pateo 13 (sardines). No peanuts, as you asked."
    assert lines[1].startswith("85 messages stored; the model saw ") and lines[1].endswith("among them: True")


@pytest.mark.parametrize("store", ["sqlite", None])
def test_a_memory_given_another_session_id_is_that_session_s(tmp_path, store):
    """``session_id`` is a pydantic field: assigned (one memory object reused per user) or changed in a
    ``model_copy(update=...)`` (a template copied per user), the memory went on with the session it was made
    for: bob's get() answered with alice's PIN, and dave's with carol's address. LlamaIndex's own Memory
    follows the new id."""
    spec = f"sqlite:///{tmp_path / 'm.db'}" if store == "sqlite" else None
    memory = RdmemMemory.from_defaults(session_id="alice", store=spec, policy="window")
    memory.put(ChatMessage(role="user", content="alice: my card PIN is 4321"))
    memory.session_id = "bob"
    memory.put(ChatMessage(role="user", content="bob: hello"))
    assert [m.content for m in memory.get()] == ["bob: hello"] and memory.manager.session == "bob"
    template = RdmemMemory.from_defaults(session_id="template", store=spec, policy="window")
    carol = template.model_copy(update={"session_id": "carol"})
    dave = template.model_copy(update={"session_id": "dave"})
    carol.put(ChatMessage(role="user", content="carol: my address is 1 Elm St"))
    assert dave.get() == [] and [m.content for m in carol.get_all()] == ["carol: my address is 1 Elm St"]
    assert [m.content for m in template.get_all()] == []
    # the same store: alice's session still holds alice's message only
    memory.session_id = "alice"
    assert [m.content for m in memory.get_all()] == ["alice: my card PIN is 4321"]
    memory.session_id = "bad\nname"
    with pytest.raises(InvalidInput, match="session_id"):
        memory.get()


def test_a_context_restored_from_its_dict_goes_on_in_the_same_store(tmp_path):
    """A workflow Context serialized (``ctx.to_dict``) and restored (``Context.from_dict``), LlamaIndex's way
    to resume in another process: the memory came back on a new in-memory store, so the next run's turn never
    reached the SQLite file. It comes back with its store's URL and settings; a store it cannot write (an
    object, a URL with a password) is said, when written and when restored."""
    from llama_index.core.workflow import Context, JsonSerializer

    from rdmem.store import MemoryStore

    db = f"sqlite:///{tmp_path / 'm.db'}"
    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall(max_tokens=5)
    agent = FunctionAgent(tools=[], llm=llm, system_prompt="Be brief.")
    memory = RdmemMemory.from_defaults(session_id="alice", store=db, policy="window")

    async def scenario() -> None:
        ctx = Context(agent)
        await agent.run(user_msg="first question", ctx=ctx, memory=memory)
        restored = Context.from_dict(agent, ctx.to_dict(serializer=JsonSerializer()), serializer=JsonSerializer())
        await agent.run(user_msg="second question", ctx=restored)
        again = await restored.store.get("memory")
        assert again.manager.policy.name == "window" and again.manager.session == "alice"

    asyncio.run(scenario())
    contents = [(m["role"], m["content"]) for m in MemoryManager(budget=1000, policy="window", store=db, session="alice").history()]
    assert contents == [("user", "first question"), ("assistant", "first question"),  # the mock LLM echoes
                        ("user", "second question"), ("assistant", "second question")]
    hidden = RdmemMemory.from_defaults(session_id="bob", store=MemoryStore(), policy="window")
    with pytest.warns(RuntimeWarning, match="its store \\(an object\\) is not written"):
        data = hidden.to_dict()
    with pytest.warns(RuntimeWarning, match="restored without its store"):
        RdmemMemory.from_dict(data)
    with pytest.warns(RuntimeWarning, match="postgresql://bob:\\*\\*\\*@db/x"):
        assert "secret" not in json.dumps(RdmemMemory(session_id="c", store="postgresql://bob:secret@db/x").to_dict())


def test_images_count_toward_the_token_limit(tmp_path, cl100k):
    """An image block was counted as its name, "[image]" (3 tokens): five photos (1,445 tokens each as the model
    counts an image of unknown size) were returned for a token_limit of 2,000."""
    from llama_index.core.base.llms.types import ImageBlock

    mem = RdmemMemory.from_defaults(session_id="alice", store=f"sqlite:///{tmp_path}/m.db", token_limit=2000,
                                    policy="window")
    for i in range(5):
        mem.put(ChatMessage(role="user", blocks=[TextBlock(text=f"What is in photo {i}?"),
                                                 ImageBlock(url=f"https://example.com/{i}.jpg")]))
        mem.put(ChatMessage(role="assistant", content=f"Photo {i} shows a tram."))
    out = mem.get()
    sent = [{"role": m.role.value, "content": [{"type": "text", "text": b.text} if isinstance(b, TextBlock) else
                                               {"type": "image_url", "image_url": {"url": str(b.url)}} for b in m.blocks]}
            for m in out]
    assert cl100k.messages_tokens(sent) <= 2000
    photos = [str(b.url) for m in out for b in m.blocks if isinstance(b, ImageBlock)]
    assert photos == ["https://example.com/4.jpg"]  # the newest photo, whole
