"""MemoryManager: watermarks, a stable prefix between compactions, query-time recall, errors."""

from __future__ import annotations

import asyncio
import json
import warnings

import pytest

import rdmem
from rdmem import MemoryManager

from ._checks import TRUNCATED, history_problems


def chat(n):
    topics = ["trains", "the museum", "dinner plans", "the weather", "a bookshop", "the tram"]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        yield {"id": f"t{i}", "role": role, "content": f"Turn {i} about {topics[i % 6]}. " + "More detail here. " * (i % 5)}


@pytest.mark.parametrize("policy", sorted(rdmem.POLICIES))
def test_watermarks_and_prefix_stability(policy, hashing_embedder, cl100k):
    budget, high, low = 300, 0.9, 0.6
    mem = MemoryManager(budget=budget, policy=policy, embedder=hashing_embedder, high=high, low=low)
    sent = {}
    prev: list[str] = []
    compactions = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for msg in chat(80):
            sent[msg["id"]] = {"role": msg["role"], "content": msg["content"]}
            assert mem.add(msg) == msg["id"]
            now = mem.working_ids()
            working_tokens = cl100k.messages_tokens([sent[i] for i in now])
            assert working_tokens <= high * budget
            if now != prev + [msg["id"]]:  # between compactions the working set only grows at its end
                compactions += 1
                assert working_tokens <= low * budget, "a compaction must go down to the low watermark"
                assert set(now) <= set(prev) | {msg["id"]}
            prev = now
    assert compactions >= 3
    assert len(mem) == 80
    assert set(mem.working_ids()) | set(mem.archived_ids()) == set(sent)
    ctx = mem.context()
    assert ctx.tokens == cl100k.messages_tokens(ctx.messages) <= budget
    assert not history_problems(ctx.messages)
    assert mem.messages() == ctx.messages


def test_prefix_is_byte_stable_between_compactions(cl100k):
    """What the model is sent grows by appending only, until the next compaction."""
    mem = MemoryManager(budget=400, policy="window")
    previous = None
    stable_steps = 0
    for msg in chat(40):
        mem.add(msg)
        rendered = json.dumps(mem.messages())
        if previous is not None and rendered.startswith(previous[:-1]):
            stable_steps += 1
        previous = rendered
    assert stable_steps >= 20


def test_default_watermarks():
    assert (MemoryManager(budget=100, policy="window").high, MemoryManager(budget=100, policy="window").low) == (1.0, 0.8)
    # rd compacts often and by little (rdmem.sessions.default_low); with a marker per omitted run, whose tokens
    # leave the working set's own under the mark, closer to the budget.
    assert MemoryManager(budget=100, policy="rd").low == 0.96
    assert MemoryManager(budget=100, policy="rd", markers=False).low == 0.96
    assert MemoryManager(budget=100, policy="rd", markers=True).low == 0.98
    assert MemoryManager(budget=100, policy="rd", low=0.5).low == 0.5
    assert MemoryManager(budget=100, policy="rd", high=0.9).low == 0.9  # never above the high watermark


def test_a_users_policy_sets_its_own_low_watermark():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Newest:
        name: str = "newest"
        description: str = "the window's choice, trimmed less"
        needs_embeddings: bool = False
        low_watermark: float = 0.9

        def plan(self, problem):
            return rdmem.get_policy("window").plan(problem)

    assert MemoryManager(budget=100, policy=Newest()).low == 0.9
    assert MemoryManager(budget=100, policy=Newest(), low=0.5).low == 0.5
    with pytest.raises(rdmem.InvalidInput, match="policy 'newest': low_watermark must be a fraction of the budget"):
        MemoryManager(budget=100, policy=Newest(low_watermark=1.5))


@pytest.mark.parametrize("policy", ["rd", "importance"])
def test_query_brings_back_archived_units(policy, cl100k, minilm):
    mem = MemoryManager(budget=160, policy=policy, embedder=minilm)
    mem.add(role="user", content="My locker code at the gym is 4411.", id="locker")
    for msg in chat(30):
        mem.add(msg)
    archived = "locker" in mem.archived_ids()
    if policy == "importance":
        assert archived and not any("4411" in (m["content"] or "") for m in mem.messages())
    recalled = mem.context(query="What is my gym locker code?")
    assert "locker" in recalled.kept_ids
    assert recalled.tokens == cl100k.messages_tokens(recalled.messages) <= 160
    assert not history_problems(recalled.messages)
    assert ("locker" in mem.archived_ids()) is archived  # a query does not move units between tiers


def test_a_strong_hit_brings_its_archived_neighbours_into_the_candidates(minilm):
    """The turns around a fact are candidates with it (``NEIGHBOUR_REACH`` either side of each of the
    ``NEIGHBOUR_HITS`` best hits), though a search for the query would not find them."""
    from rdmem._session import NEIGHBOUR_REACH

    # window: the working set is the newest messages, so the fact and its reply are archived
    mem = MemoryManager(budget=120, policy="window", embedder=minilm, archive_candidates=1)
    filler = [f"Small talk number {i}: the weather stayed grey and mild." for i in range(40)]
    mem.extend([{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(filler)])
    mem.add(role="user", content="We finally adopted a rescue greyhound called Biscuit!", id="fact")
    mem.add(role="assistant", content="Oh how lovely, congratulations!", id="after")
    mem.extend([{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(filler)])
    archived = mem.archived_ids()
    assert {"fact", "after"} <= set(archived)
    at = archived.index("fact")
    near = set(archived[max(0, at - NEIGHBOUR_REACH): at + NEIGHBOUR_REACH + 1])
    considered = {d.id for d in mem.context(query="What is the name of the greyhound they adopted?").report}
    assert near <= considered  # the hit and its archived neighbours, "after" among them
    assert len(considered & set(archived)) == len(near)  # and no other archived message (one search hit)


def test_tool_groups_stay_together(cl100k, hashing_embedder):
    mem = MemoryManager(budget=200, policy="rd", embedder=hashing_embedder)
    for i in range(25):
        mem.add(role="user", content=f"Check stock for item {i}, please.")
        mem.add(role="assistant", content=None, tool_calls=[
            {"id": f"c{i}", "type": "function", "function": {"name": "stock", "arguments": json.dumps({"item": i})}}])
        mem.add(role="tool", tool_call_id=f"c{i}", content=f"item {i}: {i * 3} in stock")
        mem.add(role="assistant", content=f"Item {i} has {i * 3} units.")
        # A call and its result enter and leave working memory together (once both have arrived).
        working = set(mem.working_ids())
        for j in range(i):
            call_id, result_id = f"m{4 * j + 1}", f"m{4 * j + 2}"
            assert (call_id in working) == (result_id in working)
        out = mem.messages(query=f"stock of item {i // 2}")
        assert not history_problems(out)
        assert cl100k.messages_tokens(out) <= 200


def test_an_oversized_message_is_cut_not_lost(cl100k, hashing_embedder):
    mem = MemoryManager(budget=100, policy="rd", embedder=hashing_embedder)
    mem.add(role="user", content="Please read this. " + "The report says revenue grew. " * 80, id="big")
    out = mem.messages()
    assert len(out) == 1 and TRUNCATED in out[0]["content"]
    assert cl100k.messages_tokens(out) <= 100
    mem.add(role="assistant", content="Done reading.", id="ok")
    assert mem.working_ids() == ["big", "ok"]  # the reply after it stays: the turn in progress


def test_the_newest_user_message_is_never_dropped_silently(hashing_embedder):
    """Ten short turns and a last question far larger than the budget: it is cut and sent, with a warning."""
    mem = MemoryManager(budget=2000, policy="rd", embedder=hashing_embedder)
    for i in range(10):
        mem.add(role="user" if i % 2 == 0 else "assistant", content=f"short turn {i}")
    mem.add(role="user", content="Summarise: " + "The quick brown fox jumps over the lazy dog. " * 360, id="q")
    with pytest.warns(RuntimeWarning, match="the newest user message 'q' \\(3609 tokens\\) does not fit"):
        ctx = mem.context()
    assert ctx.messages[-1]["content"].startswith("Summarise: The quick") and TRUNCATED in ctx.messages[-1]["content"]
    assert 1900 < ctx.tokens <= 2000
    assert "q" in mem.working_ids()
    assert ctx.warnings and "cut to" in ctx.warnings[0]


def test_add_forms_and_ids():
    mem = MemoryManager(budget=1000, policy="window")
    assert mem.add(role="user", content="a") == "m0"
    assert mem.add({"role": "assistant", "content": "b"}) == "m1"
    assert mem.add({"role": "user", "content": "c", "id": "x"}) == "x"
    assert mem.extend([{"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}]) == ["m2", "m3"]
    assert mem.working_ids() == ["m0", "m1", "x", "m2", "m3"]
    assert len(mem) == 5


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"budget": 0}, ValueError, "budget must be > 0 tokens, got 0"),
        ({"budget": 1.5}, TypeError, "budget must be an int number of tokens, got float"),
        ({"budget": 100, "low": 0.9, "high": 0.8}, ValueError,
         r"watermarks must satisfy 0 < low <= high, got low=0.9, high=0.8"),
        ({"budget": 100, "low": 0.0}, ValueError, "watermarks must satisfy 0 < low <= high"),
        ({"budget": 100, "session": ""}, ValueError, "session must be a non-empty string, got ''"),
        ({"budget": 100, "archive_candidates": -1}, ValueError, "archive_candidates must be an int >= 0, got -1"),
        ({"budget": 100, "policy": "nope"}, ValueError, "unknown policy 'nope'"),
        ({"budget": 100, "store": "redis://x"}, ValueError, "unknown store URL 'redis://x'"),
    ],
)
def test_bad_parameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        mem = MemoryManager(**kwargs)
        mem.working_ids()  # the store is opened lazily


def test_bad_calls():
    mem = MemoryManager(budget=100, policy="window")
    mem.add(role="user", content="hi", id="a")
    with pytest.raises(ValueError, match="session 'default' already has a message with id 'a'"):
        mem.add(role="user", content="again", id="a")
    with pytest.raises(TypeError, match="pass either a message dict or keyword fields, not both"):
        mem.add({"role": "user", "content": "x"}, id="b")
    with pytest.raises(ValueError, match="invalid role 'robot'"):
        mem.add(role="robot", content="x")
    with pytest.raises(ValueError, match=r"budget must be > 0 tokens, got 0"):
        mem.context(budget=0)
    with pytest.raises(TypeError, match="query must be a string or None, got int"):
        mem.context(query=5)  # type: ignore[arg-type]
    assert mem.working_ids() == ["a"]  # failed adds leave nothing behind


def test_explicit_and_automatic_ids_coexist():
    """An explicit id that an automatic one would have taken does not break the session (issue 15, item 3)."""
    mem = MemoryManager(budget=100, policy="window")
    assert mem.add(role="user", content="a") == "m0"
    assert mem.add(role="user", content="b", id="m2") == "m2"
    assert mem.add(role="user", content="c") == "m3"  # after every m<n> the session has had
    assert mem.add(role="user", content="d", id="m1") == "m1"
    with pytest.raises(ValueError, match="session 'default' already has a message with id 'm3'; nothing was written"):
        mem.add(role="user", content="again", id="m3")
    assert mem.add(role="user", content="e") == "m4"  # the session is still usable
    assert [h["content"] for h in mem.history()] == ["a", "b", "c", "d", "e"]
    assert [h["id"] for h in mem.history()] == ["m0", "m2", "m3", "m1", "m4"]


def test_fields_the_chat_api_does_not_know_are_stored_not_sent():
    mem = MemoryManager(budget=1000, policy="window")
    msg = {"role": "user", "content": "hi", "id": "u1", "metadata": {"source": "slack", "n": [1, 2]},
           "timestamp": "2026-12-01T10:00:00Z"}
    mem.add(msg)
    mem.extend([{"role": "assistant", "content": "hello", "thread": 7}])
    assert mem.history() == [msg, {"id": "m0", "role": "assistant", "content": "hello", "thread": 7}]
    assert mem.messages() == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with pytest.raises(ValueError, match="message 0: field 'when' cannot be stored: it is not JSON"):
        mem.add(role="user", content="x", when=object())
    with pytest.raises(ValueError, match="message 1: 'id' must be a non-empty string, got int 5"):
        mem.extend([{"role": "user", "content": "ok"}, {"role": "user", "content": "x", "id": 5}])
    assert len(mem) == 2  # a rejected batch stores nothing


def test_add_explains_what_it_takes():
    mem = MemoryManager(budget=100, policy="window")
    with pytest.raises(TypeError, match=r"got str; did you mean add\(role='user', content='hello'\)\?"):
        mem.add("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="add\\(\\) needs a message"):
        mem.add()
    with pytest.raises(TypeError, match="got one dict \\(wrap a single message in a list\\)"):
        mem.extend({"role": "user", "content": "x"})  # type: ignore[arg-type]


def test_positional_settings_still_work_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="pass them as keywords"):
        mem = MemoryManager(100, "window")
    assert (mem.budget, mem.policy.name) == (100, "window")
    with pytest.raises(TypeError, match="needs a budget in tokens"):
        MemoryManager(policy="window")


def test_two_managers_of_one_session_share_it(tmp_path):
    """Two managers on one store (as two processes would be) see each other's messages at once."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    a = MemoryManager(budget=300, policy="window", store=url, session="s")
    b = MemoryManager(budget=300, policy="window", store=url, session="s")
    for i in range(40):
        (a if i % 2 == 0 else b).add(role="user", content=f"message {i} " + "word " * 10)
        assert (a.working_ids(), a.archived_ids()) == (b.working_ids(), b.archived_ids())
    assert len(a) == len(b) == 40
    assert [h["id"] for h in a.history()] == [f"m{i}" for i in range(40)]
    assert "message 39 " + "word " * 10 in [m["content"] for m in a.messages()]
    working = a.working_ids()
    assert a.tokenizer.messages_tokens([{"role": "user", "content": h["content"]} for h in a.history()
                                        if h["id"] in set(working)]) <= 300  # one working set, not two
    counted = {h["id"]: a.tokenizer.message_tokens({"role": "user", "content": h["content"]}) for h in a.history()}
    assert a.stats()["tokens"] == b.stats()["tokens"] == sum(counted.values())  # kept as the view grows
    b.delete(["m0", "m1"])
    assert [h["id"] for h in a.history()][:2] == ["m2", "m3"] and len(a) == 38
    assert a.stats()["tokens"] == sum(counted.values()) - counted["m0"] - counted["m1"]


@pytest.mark.parametrize(("store", "kind", "message"), [
    ("bogus", rdmem.InvalidInput, "unknown store URL 'bogus'; use one of memory://, sqlite:///, postgresql://"),
    ("sqlite:///", rdmem.InvalidInput, "store URL 'sqlite:///' has no file path"),
    ("sqlite:///m.db?sync=full", rdmem.InvalidInput, "unknown option 'sync'; allowed: synchronous"),
    (5, rdmem.InvalidType, "store must be a URL string or a Store, got int"),
])
def test_a_store_of_the_wrong_form_fails_at_construction_not_at_the_first_add(tmp_path, monkeypatch, store, kind,
                                                                               message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(kind, match=message):
        MemoryManager(budget=100, policy="window", store=store)
    assert list(tmp_path.iterdir()) == []  # and nothing was opened to find out


def test_a_password_in_an_unknown_store_url_is_not_repeated():
    with pytest.raises(rdmem.InvalidInput) as info:
        MemoryManager(budget=100, store="mysql://bob:s3cr3t@db/x")
    assert "s3cr3t" not in str(info.value) and "mysql://bob:***@db/x" in str(info.value)


@pytest.mark.parametrize("enabled", [True, False])
def test_opening_a_session_leaves_the_garbage_collector_as_it_found_it(hashing_embedder, enabled):
    import gc

    from rdmem import _session
    from rdmem.store import MemoryStore

    store = MemoryStore()
    MemoryManager(budget=400, store=store, session="s", embedder=hashing_embedder).extend(
        [{"role": "user", "content": f"message {i}"} for i in range(50)])
    paused = []
    sync = _session.SessionView._apply_units

    def watched(view, changes):
        paused.append(gc.isenabled())
        return sync(view, changes)

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_session.SessionView, "_apply_units", watched)
            assert len(MemoryManager(budget=400, store=store, session="s", embedder=hashing_embedder)) == 50
            assert paused == [enabled]  # a small session: read as it comes (the collector as it was)
            mp.setattr(_session, "_BULK_READ", 50)  # as large as a session paused for
            assert len(MemoryManager(budget=400, store=store, session="s", embedder=hashing_embedder)) == 50
        assert paused == [enabled, False]  # the whole session was read with the collector paused...
        assert gc.isenabled() is enabled  # ...and left as it was
    finally:
        (gc.enable if was else gc.disable)()


def test_a_turn_in_progress_too_large_to_send_is_said_not_dropped_silently():
    """A tool call whose arguments alone pass the budget cannot be cut (arguments stay valid JSON): it and its
    result were left out with no warning, and an agent that did not see its call made it again and again."""
    mem = MemoryManager(budget=2000, policy="window")
    mem.extend([{"role": "user", "content": "write the report", "id": "q"},
                {"role": "assistant", "content": None, "id": "call", "tool_calls": [{"id": "c1", "type": "function",
                 "function": {"name": "write_file", "arguments": json.dumps({"text": "lorem ipsum " * 3000})}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "wrote it", "id": "result"}])
    ctx = mem.context("write the report", warn=False)
    assert ctx.kept_ids == ["q"]
    assert any("messages ['call', 'result'] of the turn in progress" in w and "left out" in w for w in ctx.warnings)


def test_close_leaves_a_store_given_as_an_object_to_its_giver(tmp_path):
    """A manager per request over the application's store (``with MemoryManager(store=app_store, ...)``) closed
    the store on leaving: the next request failed with "used after close()"."""
    from rdmem.store import open_store

    app_store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    for i in range(2):
        with MemoryManager(budget=1000, policy="window", store=app_store, session="s") as mem:
            mem.add(role="user", content=f"request {i}")
    assert len(app_store.load("s")) == 2
    app_store.close()
    with MemoryManager(budget=1000, policy="window", store=f"sqlite:///{tmp_path / 'm.db'}", session="s") as mem:
        assert len(mem) == 2
        opened = mem.store
    with pytest.raises(rdmem.StoreError, match="used after close"):
        opened.version("s")  # a store the manager opened from its URL is closed with it


@pytest.mark.parametrize("store", ["memory://", None, "sqlite"])
def test_a_closed_manager_says_so_instead_of_starting_over(tmp_path, store):
    """A manager used after close() opened its store again: over memory:// (the default) that was a new, empty
    store, so history() said [] and context() forgot everything, without a word."""
    spec = f"sqlite:///{tmp_path / 'm.db'}" if store == "sqlite" else store
    mem = MemoryManager(budget=1000, policy="window", store=spec)
    mem.add(role="user", content="my card PIN is 4711")
    mem.close()
    mem.close()  # twice: harmless
    for use in (mem.history, lambda: mem.add(role="user", content="more"), lambda: mem.context("PIN?"), mem.__len__):
        with pytest.raises(rdmem.StoreError, match="this MemoryManager was closed"):
            use()
    never_used = MemoryManager(budget=1000, policy="window", store=spec)
    never_used.close()
    with pytest.raises(rdmem.StoreError, match="was closed"):
        never_used.history()


def test_a_closed_async_manager_says_so_too():
    async def scenario() -> None:
        async with rdmem.AsyncMemoryManager(budget=1000, policy="window") as mem:
            await mem.add(role="user", content="hello")
        with pytest.raises(rdmem.StoreError, match="was closed"):
            await mem.history()

    asyncio.run(scenario())
