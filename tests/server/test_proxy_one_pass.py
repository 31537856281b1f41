"""One proxy request is one pass through memory: one read of the session, one write of what is new, the
context from the same view, the reply and the request's record in one more write, the working set trimmed
off the request path (to the request's budget, not the server's)."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from rdmem.server import ServerSettings, create_app
from rdmem.server._proxy_memory import _tokens_as_sent, prepare, readable_messages, store_reply, surely_fits
from rdmem.server.app import ServerState
from rdmem.server.metrics import Metrics
from rdmem.server.savings import session_savings
from rdmem.server.sessions import SessionPool
from rdmem.store import KeyStore, MemoryStore, open_store
from rdmem.tokens import get_tokenizer

from ..integrations._scenario import conversation
from .conftest import settle_embeddings

WINDOW, RESERVE = 900, 100


class CountingStore(MemoryStore):
    """Counts the store calls a request makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def _count(name):  # noqa: N805 - a decorator factory for the methods below
        def call(self, *args, **kwargs):
            self.calls.append(name)
            return getattr(MemoryStore, name)(self, *args, **kwargs)
        return call

    for _name in ("append", "set_tier", "delete", "update_state", "log_compaction", "load", "changes",
                  "version", "search"):
        locals()[_name] = _count(_name)
    del _name, _count


def _state(store, embedder) -> ServerState:
    """What the proxy's requests share, over ``store``, without a server (and without an embedding worker)."""
    settings = ServerSettings(upstream="http://127.0.0.1:9", context_window=WINDOW, reply_reserve=RESERVE)
    return ServerState(settings, store, SessionPool(store, settings, embedder), Metrics(), KeyStore(store))


def _history(n: int) -> list[dict]:
    return [{"role": "system", "content": "You are a travel assistant."}, *conversation(n)]


def test_a_request_that_surely_fits_by_its_size_fits_when_counted():
    import bisect
    import json

    from rdmem.tokens import get_tokenizer

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1, "b": [1, 2, {"c": ""}]}'}}
    bodies = [
        [{"role": "user", "content": ""}],
        [{"role": "user", "content": "0 1 2 3 4 5 6 7 8 9 ! ? ; : , . ~ ^ | % $ # @ ` \\ \" ' ( ) [ ] { }"}],
        [{"role": "user", "content": "東京 🙂 é ü ß \u2028 \t\n" * 20, "name": "ana"}],
        [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [call]},
         {"role": "tool", "tool_call_id": "c1", "content": "1"}],
        # an image counts by its size, not its URL's: 1,445 tokens for a remote one, 255 for a 1 x 1 PNG
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.io/a.png"}}]}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo"
                                                                          "AAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4"
                                                                          "nGP4DwABAQEAG7buVgAAAABJRU5ErkJggg=="}}]}],
    ]
    tok = get_tokenizer("cl100k_base")
    for messages in bodies:
        for compact in (True, False):
            raw = json.dumps({"model": "m", "messages": messages}, ensure_ascii=not compact,
                             separators=(",", ":") if compact else None).encode()
            parsed, skipped = readable_messages(messages)
            assert not skipped
            counted = tok.messages_tokens([m.chat for m in parsed])
            assert _tokens_as_sent(tok, messages) == counted  # counted before the parse: the same count
            # the least budget it is said to surely fit is never below what it counts
            top = 10 * len(raw) + 2000  # room for an image's tokens
            least = bisect.bisect_left(range(top), True, key=lambda b: surely_fits(raw, messages, b))
            assert 0 < counted <= least < top, (messages, counted, least)
    assert not surely_fits(b"{}", [], 0)  # no room: never "surely"
    # a body the count cannot read before it is parsed is counted after (the parse says what is wrong)
    assert _tokens_as_sent(tok, [{"role": "user", "content": 7}]) is None
    assert _tokens_as_sent(tok, ["hello"]) is None
    # Arguments sent as a JSON object are counted re-serialised, which can take more tokens than the body has
    # bytes: such a request is always counted.
    numbers = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"": [9e15] * 50}}}
    messages = [{"role": "assistant", "content": None, "tool_calls": [numbers]}]
    raw = json.dumps({"messages": messages}, separators=(",", ":")).replace("9000000000000000.0", "9e15").encode()
    parsed, _ = readable_messages(messages)
    assert tok.messages_tokens([m.chat for m in parsed]) > len(raw)
    assert not surely_fits(raw, messages, 10**9)


@pytest.mark.parametrize("odd", [5, True, 1.5, "x", [5], [{"function": {"name": 5, "arguments": {1j}}}]])
def test_a_message_with_odd_tool_calls_is_skipped_and_the_rest_compacted(hashing_embedder, odd):
    """Counting a request before it is parsed met ``"tool_calls": 5`` with a TypeError: the whole turn failed
    open (not stored, not compacted). Such a message is skipped, as the parse always did."""
    state = _state(MemoryStore(), hashing_embedder)
    history = _history(60)
    history.insert(5, {"role": "user", "content": "odd", "tool_calls": odd})
    calls: list[str] = []
    done = prepare(state, "default", "odd", False, {"messages": history}, WINDOW - RESERVE,
                   go=lambda: calls.append("go"), fits=lambda sent: calls.append("fits"))
    assert done.compacted and done.skipped == 1 and done.after <= WINDOW - RESERVE and not calls
    assert len(state.pool.manager("default", "odd", budget=WINDOW - RESERVE)) == len(history) - 2  # no system


def test_a_compacting_request_reads_once_writes_once_and_the_reply_is_one_more_write(hashing_embedder):
    store = CountingStore()
    state = _state(store, hashing_embedder)
    history = _history(60)
    budget = WINDOW - RESERVE
    done = prepare(state, "default", "trip", False, {"messages": history}, budget)  # opens the session
    store_reply(state, "default", "trip", budget, done.saving, {"role": "assistant", "content": "Sure."})
    history += [{"role": "assistant", "content": "Sure."}, {"role": "user", "content": "And the tram to Belem?"}]
    mem = state.pool.manager("default", "trip", budget=budget)
    assert mem.stats()["working_tokens"] > budget  # not trimmed on the request's path...
    mem.maintain()  # ...but by the embedding worker once the vectors landed (here, by hand)
    assert 0 < mem.stats()["working_tokens"] <= budget

    store.calls.clear()
    done = prepare(state, "default", "trip", False, {"messages": history}, budget)
    assert done.compacted and done.after <= budget and done.messages[-1] == history[-1]
    # one version check, one append (the new question), one search of the archive for the query; no load of
    # the stored history to line the resend up, no trim of the working set, no separate log write
    assert sorted(store.calls) == ["append", "search", "version"]

    store.calls.clear()
    store_reply(state, "default", "trip", budget, done.saving, {"role": "assistant", "content": "Tram 15."})
    assert store.calls == ["append"]  # the reply and the request's record, in one transaction
    assert [s.compacted for s in session_savings(store, "default", "trip")] == [True, True]
    assert [h["content"] for h in mem.history()][-3:] == ["Sure.", "And the tram to Belem?", "Tram 15."]
    assert len(mem) == len(history)  # everything once (the system prompt is not stored), the last reply too


@pytest.mark.slow  # starts servers (and PostgreSQL)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_working_set_is_trimmed_after_the_reply_to_the_requests_budget(backend, serve, fake_openai,
                                                                          hashing_embedder, tmp_path, request):
    import uuid

    url = f"sqlite:///{tmp_path / 'p.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    # the server's --budget (4,000) is larger than the whole history: only the request's budget trims it
    # memory_timeout: under a loaded suite PostgreSQL's first compaction took over the 1 s default (the
    # request then went on uncompacted, by design); the bound has its own tests
    app = create_app(ServerSettings(store=url, upstream=fake_openai.url, context_window=WINDOW,
                                    reply_reserve=RESERVE, budget=4000, memory_timeout=30), embedder=hashing_embedder)
    live = serve(app)
    oai = openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-x", max_retries=0)
    session = f"trim-{uuid.uuid4().hex[:8]}"
    history = _history(40)
    for n in range(3):
        history.append({"role": "user", "content": f"Question {n}: which tram goes to Belem?"})
        fake_openai.text = f"Answer {n}."
        raw = oai.chat.completions.with_raw_response.create(model="m", messages=history, max_tokens=RESERVE,
                                                            extra_headers={"X-Rdmem-Session": session})
        assert raw.headers["x-rdmem-compacted"] == "true"
        history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    settle_embeddings(live.app)
    mem = live.app.state.rdmem.pool.manager("default", session, budget=WINDOW - RESERVE)
    stats = mem.stats()
    assert stats["units"] == len(history) - 1  # each message once, the replies too
    assert 0 < stats["working_tokens"] <= WINDOW - RESERVE < stats["tokens"]
    assert len(session_savings(live.app.state.rdmem.store, "default", session)) == 3


@pytest.mark.slow  # starts a server
def test_a_request_that_fits_reaches_the_model_while_memory_stores_it(serve, fake_openai, hashing_embedder,
                                                                      monkeypatch):
    import time

    from rdmem.server import _proxy_memory

    from .._fake_openai import Reply, completion

    events: list[tuple[str, float]] = []
    turn = _proxy_memory.take_turn

    def slow_turn(*args, **kwargs):  # a store slower than the model
        time.sleep(0.4)
        out = turn(*args, **kwargs)
        events.append(("stored", time.monotonic()))
        return out

    def answer(req):
        events.append(("model", time.monotonic()))
        return Reply(body=completion("Fine."))

    monkeypatch.setattr(_proxy_memory, "take_turn", slow_turn)
    fake_openai.respond = answer
    app = create_app(ServerSettings(upstream=fake_openai.url, context_window=WINDOW, reply_reserve=RESERVE,
                                    memory_timeout=30), store=MemoryStore(), embedder=hashing_embedder)
    live = serve(app)
    oai = openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-x", max_retries=0)
    short = [{"role": "user", "content": "Hello there."}]
    raw = oai.chat.completions.with_raw_response.create(model="m", messages=short, user="fits")
    answered = time.monotonic()
    assert raw.headers["x-rdmem-compacted"] == "false" and raw.headers["x-rdmem-tokens-before"]  # counted
    mem = app.state.rdmem.pool.manager("default", "fits", budget=WINDOW - RESERVE)  # waits for the reply's store
    assert [h["content"] for h in mem.history()] == ["Hello there.", "Fine."]  # stored, the reply after
    assert [e for e, _ in events] == ["model", "stored"]  # the model did not wait for the store...
    assert answered < dict(events)["stored"]  # ...nor did the answer

    events.clear()  # a request that must be compacted waits for memory: what the model gets depends on it
    raw = oai.chat.completions.with_raw_response.create(model="m", messages=_history(80), user="long")
    assert raw.headers["x-rdmem-compacted"] == "true" and [e for e, _ in events] == ["stored", "model"]


@pytest.mark.slow  # starts a server
def test_a_request_that_fits_when_counted_reaches_the_model_before_its_messages_are_parsed(
        serve, fake_openai, hashing_embedder, monkeypatch):
    from rdmem.server import _proxy_memory

    from .._fake_openai import Reply, completion

    events: list[str] = []
    parse = _proxy_memory.readable_messages

    def slow_parse(messages):  # a parse slower than the model
        time.sleep(0.4)
        events.append("parsed")
        return parse(messages)

    def answer(req):
        events.append("model")
        return Reply(body=completion("Fine."))

    monkeypatch.setattr(_proxy_memory, "readable_messages", slow_parse)
    fake_openai.respond = answer
    app = create_app(ServerSettings(upstream=fake_openai.url, context_window=WINDOW, reply_reserve=RESERVE,
                                    memory_timeout=30), store=MemoryStore(), embedder=hashing_embedder)
    oai = openai.OpenAI(base_url=f"{serve(app).url}/v1", api_key="sk-x", max_retries=0)
    messages = [{"role": "user", "content": "a fact to keep " * 60}, {"role": "user", "content": "Go on."}]
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    budget = WINDOW - RESERVE
    assert not surely_fits(raw, messages, budget)  # known to fit only once counted
    tok = get_tokenizer("cl100k_base")
    resp = oai.chat.completions.with_raw_response.create(model="m", messages=messages, user="counted")
    assert events == ["model", "parsed"]  # the model did not wait for the parse
    assert resp.headers["x-rdmem-tokens-before"] == str(tok.messages_tokens(messages))  # counted exactly
    # a message rdmem cannot keep is still said (the answer waits for the parse, not the model for it)
    events.clear()
    bad = [*messages, {"role": "function", "name": "f", "content": "legacy"}]
    resp = oai.chat.completions.with_raw_response.create(model="m", messages=bad, user="counted")
    assert events == ["model", "parsed"] and resp.headers["x-rdmem-skipped"] == "1"
    assert resp.headers["x-rdmem-tokens-before"] == str(tok.messages_tokens(bad[:-1]))


class OpeningStore(MemoryStore):
    """Counts the reads of a whole session (what opening a view of it costs)."""

    def __init__(self) -> None:
        super().__init__()
        self.whole_reads = 0

    def changes(self, session, since=0, *, rows=None):
        out = super().changes(session, since, rows=rows)
        self.whole_reads += out.full and bool(out.units)
        return out


def test_the_managers_of_one_session_read_it_once_whatever_the_requests_budgets(hashing_embedder):
    store = OpeningStore()
    state = _state(store, hashing_embedder)
    history = _history(60)
    prepare(state, "default", "trip", False, {"messages": history}, WINDOW - RESERVE)  # stores it
    state.pool._managers.clear()  # a new process: nothing pooled yet
    budgets = (WINDOW - RESERVE, 500, 300)  # requests with other max_tokens, then the REST API (server budget)
    for budget in budgets:
        done = prepare(state, "default", "trip", False, {"messages": history}, budget)
        assert done.compacted and done.after <= budget
    rest = state.pool.manager("default", "trip")
    assert rest.stats()["units"] == len(history) - 1
    assert store.whole_reads == 1  # one read of the stored session, not one per budget
    managers = [state.pool.manager("default", "trip", budget=b) for b in budgets] + [rest]
    assert len({id(m._session()) for m in managers}) == 1
    # each still compacts to its own budget
    assert [m.context("tram").tokens <= m.budget for m in managers] == [True] * 4
    # a write through one is seen by the others at once
    managers[1].add(role="user", content="One more thing: the castle.")
    assert {len(m) for m in managers} == {len(history)}


def _hold_reply_stores(monkeypatch) -> tuple:
    """``(storing, release)``: the proxy's reply stores wait for ``release``; ``storing`` is set when one does."""
    import threading

    from rdmem.server import _proxy_memory

    storing, release = threading.Event(), threading.Event()
    store = _proxy_memory.store_following

    def held(*args, **kwargs):  # the reply's write, held until the test lets it go
        storing.set()
        release.wait(60)
        return store(*args, **kwargs)

    monkeypatch.setattr(_proxy_memory, "store_following", held)
    return storing, release


@pytest.mark.slow  # starts a server
def test_the_answer_does_not_wait_for_its_reply_to_be_stored_but_the_sessions_readers_do(serve, fake_openai,
                                                                                        hashing_embedder, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as Late

    import httpx

    storing, release = _hold_reply_stores(monkeypatch)
    fake_openai.text = "Fine."
    app = create_app(ServerSettings(upstream=fake_openai.url, memory_timeout=60), store=MemoryStore(),
                     embedder=hashing_embedder)
    live = serve(app)
    oai = openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-x", max_retries=0)
    answer = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello there."}],
                                         user="later")
    assert answer.choices[0].message.content == "Fine."  # the client has its answer...
    assert storing.wait(30) and not release.is_set()  # ...while the reply's write is still held back
    with httpx.Client(base_url=live.url, timeout=60) as http, ThreadPoolExecutor(1) as pool:
        page = pool.submit(http.get, "/v1/sessions/later/messages")
        with pytest.raises(Late):  # the session's reader waits for the reply...
            page.result(timeout=0.5)
        release.set()
        messages = page.result(timeout=60).json()["messages"]
    assert [m["content"] for m in messages] == ["Hello there.", "Fine."]  # ...and finds it


@pytest.mark.slow  # starts a server
def test_a_request_answered_before_its_store_failed_says_so_in_one_log_line(serve, fake_openai, hashing_embedder,
                                                                           monkeypatch, caplog):
    import logging

    from rdmem.errors import StoreError
    from rdmem.server import _proxy_memory

    def broken(*args, **kwargs):
        raise StoreError("the disk is full")

    monkeypatch.setattr(_proxy_memory, "take_turn", broken)
    fake_openai.text = "Fine."
    live = serve(create_app(ServerSettings(upstream=fake_openai.url, memory_timeout=30), store=MemoryStore(),
                            embedder=hashing_embedder))
    oai = openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-x", max_retries=0)
    with caplog.at_level(logging.WARNING, logger="rdmem.server"):
        raw = oai.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "Hi."}],
                                                            user="full")
        assert raw.parse().choices[0].message.content == "Fine." and raw.headers["x-rdmem-compacted"] == "false"
        mem = live.app.state.rdmem.pool.manager("default", "full")  # waits for the reply's store to end
        # Nor is the reply stored (it would come before its question): both come again with the next request.
        assert mem.history() == []
    lines = [r.getMessage() for r in caplog.records if "could not store the request" in r.getMessage()]
    assert len(lines) == 1 and "the disk is full" in lines[0] and "\n" not in lines[0]


@pytest.mark.slow  # starts a server
def test_a_late_memory_still_stores_the_request_before_its_reply_and_the_next_request_after_both(
        serve, fake_openai, hashing_embedder, monkeypatch):
    import time

    from rdmem.server import _proxy_memory

    read = _proxy_memory.readable_messages
    slow = [1.0]

    def late(messages):  # the first request's memory is late: it fails open, and goes on in its thread
        if slow:
            time.sleep(slow.pop())
        return read(messages)

    monkeypatch.setattr(_proxy_memory, "readable_messages", late)
    live = serve(create_app(ServerSettings(upstream=fake_openai.url, memory_timeout=0.3), store=MemoryStore(),
                            embedder=hashing_embedder))
    oai = openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-x", max_retries=0)
    history = []
    for n in (1, 2):  # the second waits for the first's reply, itself after the late request: late too
        history.append({"role": "user", "content": f"Question {n}?"})
        fake_openai.text = f"Answer {n}."
        raw = oai.chat.completions.with_raw_response.create(model="m", messages=history, user="late")
        assert raw.headers["x-rdmem-compacted"] == "failed"  # forwarded unchanged, memory's work going on
        history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    mem = live.app.state.rdmem.pool.manager("default", "late")

    def stored() -> list[str]:
        return [h["content"] for h in mem.history()]

    deadline = time.monotonic() + 30
    while len(stored()) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    # each message once, in order: the first reply after its late request, the second request after that reply
    assert stored() == ["Question 1?", "Answer 1.", "Question 2?", "Answer 2."]


@pytest.mark.slow  # starts a server
def test_a_shutdown_waits_for_a_reply_still_being_stored(serve, fake_openai, hashing_embedder, monkeypatch,
                                                         tmp_path):
    """The proxy stores a reply after answering: a server told to stop then (Ctrl-C) waits for that store,
    bounded, before it closes the store (the reply was dropped without a word)."""
    import threading

    storing, release = _hold_reply_stores(monkeypatch)
    fake_openai.text = "Fine."
    url = f"sqlite:///{tmp_path / 'm.db'}"  # the server's own store: it closes it when it stops
    live = serve(create_app(ServerSettings(upstream=fake_openai.url, memory_timeout=60, store=url),
                            embedder=hashing_embedder))
    oai = openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-x", max_retries=0)
    oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello there."}], user="bye")
    assert storing.wait(30)
    threading.Timer(0.5, release.set).start()  # the store answers while the server is stopping
    live.stop()
    with open_store(url) as kept:
        assert [u.message["content"] for u in kept.load("t/default/bye")] == ["Hello there.", "Fine."]


@pytest.mark.slow  # starts servers
def test_a_reply_another_server_stored_first_is_not_stored_again(serve, fake_openai, hashing_embedder, monkeypatch,
                                                                  tmp_path):
    """Two servers on one store (two processes, or ``--workers 2``) and a client alternating between them: A
    answers and stores its reply after; B gets the next request, which carries that reply, first and
    stores it as a resent message. A's late store must then store nothing (it stored the reply again, and
    the duplicate broke the next resend's alignment: a review saw whole histories stored twice)."""
    import threading

    from rdmem.server import routes_proxy

    from .._fake_openai import Reply, completion

    fake_openai.respond = lambda req: Reply(body=completion(f"reply to {len(req['body']['messages'])} messages"))
    release, first, done = threading.Event(), threading.Event(), threading.Event()
    original = routes_proxy.store_reply

    def late(*args, **kw):  # the first reply's store (server A's) waits until server B has stored the next request
        if first.is_set():
            return original(*args, **kw)
        first.set()
        release.wait(60)
        try:
            return original(*args, **kw)
        finally:
            done.set()

    monkeypatch.setattr(routes_proxy, "store_reply", late)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    a, b = (serve(create_app(ServerSettings(upstream=fake_openai.url, memory_timeout=60, store=url),
                             embedder=hashing_embedder)) for _ in range(2))
    oai = {s: openai.OpenAI(base_url=f"{s.url}/v1", api_key="sk-x", max_retries=0) for s in (a, b)}
    history = [{"role": "user", "content": "question one"}]

    def ask(server) -> None:
        answer = oai[server].chat.completions.create(model="m", messages=history, user="alt")
        history.append({"role": "assistant", "content": answer.choices[0].message.content})

    def stored(store) -> list[str]:
        deadline = time.monotonic() + 30
        while len(store.load("t/default/alt")) < len(history) and time.monotonic() < deadline:
            time.sleep(0.05)  # the last reply is stored after the answer
        return [u.message["content"] for u in store.load("t/default/alt")]

    ask(a)  # A's reply store is held
    assert first.wait(30)
    history.append({"role": "user", "content": "question two"})
    ask(b)  # B stores A's reply (resent), its question and, after answering, its own reply
    with open_store(url) as store:
        assert stored(store) == [m["content"] for m in history]
        release.set()
        assert done.wait(30)  # A's late store: nothing is left to store
        assert stored(store) == [m["content"] for m in history]
    history.append({"role": "user", "content": "question three"})
    ask(a)
    with open_store(url) as store:
        assert stored(store) == [m["content"] for m in history]


class _TwoServers:
    """Two proxies on one SQLite file, the client's session ``user``; the store of the reply whose text is
    ``hold`` waits (:attr:`held` set) until :attr:`release` is set (:attr:`done` once stored)."""

    def __init__(self, serve, fake_openai, embedder, monkeypatch, path, user: str, hold: str) -> None:
        import threading

        from rdmem.server import routes_proxy

        self.release, self.held, self.done = threading.Event(), threading.Event(), threading.Event()
        original = routes_proxy.store_reply

        def late(*args, **kw):
            if not (args[5] and args[5].get("content") == hold):
                return original(*args, **kw)
            self.held.set()
            self.release.wait(60)
            try:
                return original(*args, **kw)
            finally:
                self.done.set()

        monkeypatch.setattr(routes_proxy, "store_reply", late)
        self.url, self.user = f"sqlite:///{path}", user
        self.a, self.b = (serve(create_app(ServerSettings(upstream=fake_openai.url, memory_timeout=60, store=self.url),
                                           embedder=embedder)) for _ in range(2))
        self._oai = {s: openai.OpenAI(base_url=f"{s.url}/v1", api_key="sk-x", max_retries=0) for s in (self.a, self.b)}

    def ask(self, server, history) -> list[dict]:
        answer = self._oai[server].chat.completions.create(model="m", messages=history,  # the edit rule's sessions
                                                            extra_headers={"X-Rdmem-Session": self.user})
        return [*history, {"role": "assistant", "content": answer.choices[0].message.content}]

    def stored(self, store, n) -> list[str]:
        deadline = time.monotonic() + 30
        while len(store.load(f"t/default/{self.user}")) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return [u.message["content"] for u in store.load(f"t/default/{self.user}")]


@pytest.mark.slow  # starts servers
def test_a_late_reply_to_a_question_the_client_edited_on_another_server_is_not_stored(
        serve, fake_openai, hashing_embedder, monkeypatch, tmp_path):
    """Server A answers q2 and stores its reply after; the client edits q2 and its request reaches server B
    first, which replaces q2 with the edit. A's late store must then store nothing: it stored the abandoned q2
    and its reply again after the edit (q1 a1 q2' q2 a2 a2')."""
    from .._fake_openai import Reply, completion

    fake_openai.respond = lambda req: Reply(body=completion("answer to " + req["body"]["messages"][-1]["content"]))
    two = _TwoServers(serve, fake_openai, hashing_embedder, monkeypatch, tmp_path / "shared.db", "edit", "answer to q2")
    history = two.ask(two.a, [{"role": "user", "content": "q1"}])
    with open_store(two.url) as store:
        assert two.stored(store, 2) == ["q1", "answer to q1"]
    two.ask(two.a, [*history, {"role": "user", "content": "q2"}])  # A's store of its reply is held
    assert two.held.wait(30)
    history = two.ask(two.b, [*history, {"role": "user", "content": "q2 edited"}])
    want = [m["content"] for m in history]
    with open_store(two.url) as store:
        assert two.stored(store, 4) == want
        two.release.set()
        assert two.done.wait(30)
        assert two.stored(store, 4) == want


@pytest.mark.slow  # starts servers
def test_a_late_reply_to_a_request_retried_on_another_server_is_not_stored_after_the_retrys(
        serve, fake_openai, hashing_embedder, monkeypatch, tmp_path):
    """Server A answers q2 and stores its reply after; the client retries the same request and it reaches
    server B first, which stores its own reply. A's late store must then store nothing: the question had two
    replies, the one the client dropped last (q1 a1 q2 a2' a2)."""
    import itertools

    from .._fake_openai import Reply, completion

    count = itertools.count(1)
    fake_openai.respond = lambda req: Reply(body=completion(f"answer {next(count)}"))
    two = _TwoServers(serve, fake_openai, hashing_embedder, monkeypatch, tmp_path / "shared.db", "retry", "answer 2")
    history = two.ask(two.a, [{"role": "user", "content": "q1"}])
    with open_store(two.url) as store:
        assert two.stored(store, 2) == ["q1", "answer 1"]
    request = [*history, {"role": "user", "content": "q2"}]
    two.ask(two.a, request)  # A's store of its reply is held
    assert two.held.wait(30)
    want = [m["content"] for m in two.ask(two.b, request)]  # the retry
    assert want[-1] == "answer 3"
    with open_store(two.url) as store:
        assert two.stored(store, 4) == want
        two.release.set()
        assert two.done.wait(30)
        assert two.stored(store, 4) == want


@pytest.mark.slow  # starts servers
@pytest.mark.parametrize("named", ["header", "user"])
def test_a_session_deleted_through_another_server_while_a_request_waits_stays_deleted(
        serve, fake_openai, hashing_embedder, tmp_path, named):
    """Two servers on one store (``--workers 2``): the delete went to B while A's request waited for the model;
    A's reply, lined up against the emptied session, stored the whole history again (a PIN came back)."""
    import threading

    from .._fake_openai import Reply, completion

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    a, b = (serve(create_app(ServerSettings(upstream=fake_openai.url, memory_timeout=60, store=url),
                             embedder=hashing_embedder)) for _ in range(2))
    how = {"extra_headers": {"X-Rdmem-Session": "pin"}} if named == "header" else {"user": "pin"}
    oai = openai.OpenAI(base_url=f"{a.url}/v1", api_key="sk-x", max_retries=0)
    history = [{"role": "user", "content": "My card PIN is 4321."}]
    fake_openai.text = "Noted."
    oai.chat.completions.create(model="m", messages=history, **how)
    history += [{"role": "assistant", "content": "Noted."}, {"role": "user", "content": "What is my PIN?"}]
    fake_openai.respond = lambda req: Reply(body=completion("4321."), delay=1.5)
    asking = threading.Thread(target=lambda: oai.chat.completions.create(model="m", messages=history, **how))
    asking.start()
    rest = httpx.Client(base_url=b.url, timeout=30)
    deadline = time.monotonic() + 30
    while (r := rest.get("/v1/sessions/pin/messages")).status_code != 200 or \
            r.json()["messages"][-1]["content"] != "What is my PIN?":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert rest.delete("/v1/sessions/pin").status_code == 204
    if named == "user":  # a new chat of the session through B, before A's reply is stored: the session is back
        fake_openai.respond = None
        fake_openai.text = "Hello again."
        openai.OpenAI(base_url=f"{b.url}/v1", api_key="sk-x", max_retries=0).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi, a new chat."}], **how)
    asking.join(30)
    time.sleep(0.5)  # A stores its reply after the answer
    a.app.state.rdmem.pool.manager("default", "pin", budget=100)  # waits for A's store of the session
    b.app.state.rdmem.pool.manager("default", "pin", budget=100)
    after = rest.get("/v1/sessions/pin/messages")
    assert after.status_code == 404 if named == "header" else \
        [m["content"] for m in after.json()["messages"]] == ["Hi, a new chat.", "Hello again."]


def test_a_session_deleted_while_its_request_is_stored_is_not_brought_back(hashing_embedder):
    """A delete that landed while a long request was being lined up and written (its write, made for the
    version read before the delete, conflicted and was lined up again against the emptied session) stored the
    whole history again: the PIN the user had just deleted came back (review 21)."""
    import threading

    from rdmem.errors import StoreError

    entered, release = threading.Event(), threading.Event()

    class HeldStore(MemoryStore):
        def append(self, session, units, **kw):
            if len(units) > 10 and not entered.is_set():  # the long request's write waits for the delete
                entered.set()
                release.wait(30)
            return super().append(session, units, **kw)

    store = HeldStore()
    state = _state(store, hashing_embedder)
    first = [{"role": "user", "content": "My bank PIN is 4711."}]
    prepare(state, "default", "pin", False, {"messages": first}, WINDOW - RESERVE)
    history = [*first, {"role": "assistant", "content": "Noted."}, *conversation(60)]
    mark, failed = state.pool.deletes, []

    def request() -> None:
        try:
            prepare(state, "default", "pin", False, {"messages": history}, 10**6, mark)
        except StoreError as exc:
            failed.append(str(exc))

    t = threading.Thread(target=request)
    t.start()
    assert entered.wait(30)
    state.pool.delete_session("default", "pin")
    release.set()
    t.join(30)
    assert failed and "was deleted meanwhile" in failed[0]
    assert store.version("t/default/pin") == 0  # still deleted
