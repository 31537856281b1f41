"""The proxy under hostile clients and faults (issue 24): one test per defect, each failing on the proxy before
it. The official openai client and httpx, against the in-process app under uvicorn and a scriptable upstream."""

from __future__ import annotations

import json
import logging
import sqlite3
import time

import httpx
import openai
import pytest

from rdmem.errors import StoreError
from rdmem.server import ServerSettings, create_app
from rdmem.store import ApiKey, KeyStore, MemoryStore

from .._checks import history_problems
from .._fake_openai import Reply, chunks, completion
from ..integrations._scenario import conversation
from .conftest import LiveServer

pytestmark = pytest.mark.slow  # starts servers

WINDOW, RESERVE = 2000, 200
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


class FlakyStore(MemoryStore):
    """A store that can go down: every key lookup then fails as a lost database does."""

    down = False

    def _key_tenant(self, digest: str) -> str | None:
        if self.down:
            raise StoreError("the connection is closed")
        return super()._key_tenant(digest)

    def _keys(self) -> list[ApiKey]:
        if self.down:
            raise StoreError("the connection is closed")
        return super()._keys()


@pytest.fixture(scope="module")
def open_proxy(_fake_openai_server, minilm):
    """A server without keys (one per module)."""
    live = LiveServer(create_app(ServerSettings(upstream=_fake_openai_server.url, context_window=WINDOW,
                                                reply_reserve=RESERVE, memory_timeout=60),
                                 store=MemoryStore(), embedder=minilm))
    yield live
    live.stop()


@pytest.fixture(scope="module")
def keyed_proxy(_fake_openai_server, minilm):
    """A server with a key, over a store that a test may take down: ``(live, store, secret)``."""
    store = FlakyStore()
    _, secret = KeyStore(store).create_key("acme")
    live = LiveServer(create_app(ServerSettings(upstream=_fake_openai_server.url, context_window=WINDOW,
                                                reply_reserve=RESERVE), store=store, embedder=minilm))
    yield live, store, secret
    store.down = False
    live.stop()


def client(live, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-upstream", max_retries=0, **kw)


def personal(who: str, n: int = 60) -> list[dict]:
    """An over-window conversation that opens with "hello" and carries ``who``'s personal data."""
    chat = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hi! How can I help?"}]
    for i in range(n):
        chat += [{"role": "user", "content": f"{who}'s note {i}: my bank PIN is {who}-{i:04d}, remember it."},
                 {"role": "assistant", "content": f"Noted, {who}."}]
    return [SYSTEM, *chat, {"role": "user", "content": "What is my PIN?"}]


def settled(check, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not stored in time"
        time.sleep(0.02)


# Item 2: no shared memory without an explicit identity.

def test_without_an_identity_two_users_who_say_hello_share_nothing(open_proxy, fake_openai):
    oai = client(open_proxy)
    for who, other in (("ana", "bob"), ("bob", "ana")):
        raw = oai.chat.completions.with_raw_response.create(model="fake-model", messages=personal(who),
                                                            max_tokens=RESERVE)
        assert "x-rdmem-session" not in raw.headers and raw.headers["x-rdmem-memory"] == "none"
        assert raw.headers["x-rdmem-compacted"] == "true"  # compacted on its own
        sent = fake_openai.requests[-1]["body"]["messages"]
        assert history_problems(sent) == [] and sent[-1]["content"] == "What is my PIN?"
        assert not any(other in (m.get("content") or "") for m in sent)
    assert open_proxy.app.state.rdmem.store.sessions() == []  # nothing read or stored


def test_derived_sessions_are_per_tenant_and_never_delete_another_clients_messages(serve, fake_openai, minilm):
    store = MemoryStore()
    live = serve(create_app(ServerSettings(upstream=fake_openai.url, context_window=WINDOW, reply_reserve=RESERVE,
                                           derive_sessions=True, memory_timeout=60), store=store, embedder=minilm))
    oai = client(live)
    ana = [SYSTEM, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hi!"},
           {"role": "user", "content": "My PIN is 4321."}]
    fake_openai.text = "Noted."
    a = oai.chat.completions.with_raw_response.create(model="fake-model", messages=ana)
    session = a.headers["x-rdmem-session"]
    mem = live.app.state.rdmem.pool.manager("default", session, budget=100)
    before = [h["content"] for h in mem.history()]
    assert before == ["hello", "Hi!", "My PIN is 4321.", "Noted."]
    # Bob opens alike, then diverges: the replace-the-last-turn rule would have deleted Ana's last messages.
    bob = [SYSTEM, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hi!"},
           {"role": "user", "content": "Book me a table."}]
    b = oai.chat.completions.with_raw_response.create(model="fake-model", messages=bob)
    assert b.headers["x-rdmem-session"] == session  # the documented risk of --derive-sessions
    assert [h["content"] for h in mem.history()][:4] == before  # nothing of Ana's deleted


# Item 5: the stream relay is fail-open.

@pytest.mark.parametrize("bad", [
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "x", "function": {"name": "f"}}]}}]},
    {"choices": [{"index": 0, "delta": ["not", "a", "dict"]}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "f(1)"}]}}]},
])
def test_a_chunk_the_collector_cannot_read_is_relayed_as_sent_and_nothing_is_stored(open_proxy, fake_openai, caplog,
                                                                                    bad):
    events = [*chunks("Hello there.", pieces=2)[:1], json.dumps(bad), *chunks("Hello there.", pieces=2)[1:]]
    fake_openai.respond = lambda req: Reply(events=events)
    body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}], "user": "relay"}
    with caplog.at_level(logging.WARNING, logger="rdmem.server"):
        got = httpx.post(f"{open_proxy.url}/v1/chat/completions", json=body, timeout=30)
    assert got.status_code == 200
    assert got.content == b"".join(f"data: {e}\n\n".encode() for e in events)  # every byte, as sent
    lines = [r.getMessage() for r in caplog.records if "cannot read the streamed reply" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    time.sleep(0.2)
    stored = open_proxy.app.state.rdmem.pool.manager("default", "relay", budget=100).history()
    assert all(m["role"] != "assistant" for m in stored)


def test_a_streamed_reply_of_several_choices_stores_the_one_the_client_goes_on_with(open_proxy, fake_openai):
    """With ``n=2`` each event carries one choice by its index: both were appended into one stored reply that
    the model never gave ("A0 B0 A1 B1"); then the first choice was stored, though the client may go on with
    the other. Now no choice is stored with its request: the client's next request carries the one it chose."""
    def event(i: int, text: str) -> str:
        return json.dumps({"id": "c", "object": "chat.completion.chunk", "choices": [
            {"index": i, "delta": {"content": text}, "finish_reason": None}]})
    events = [event(0, "Paris "), event(1, "Lyon "), event(0, "is it."), event(1, "maybe."), "[DONE]"]
    fake_openai.respond = lambda req: Reply(events=events)
    body = {"model": "fake-model", "stream": True, "n": 2, "messages": [{"role": "user", "content": "capital?"}],
            "user": "two-choices"}
    assert httpx.post(f"{open_proxy.url}/v1/chat/completions", json=body, timeout=30).status_code == 200
    fake_openai.respond = None
    fake_openai.text = "It is."
    body = {**body, "stream": False, "n": 1, "messages": [*body["messages"], {"role": "assistant", "content":
            "Lyon maybe."}, {"role": "user", "content": "Sure?"}]}
    assert httpx.post(f"{open_proxy.url}/v1/chat/completions", json=body, timeout=30).status_code == 200
    mem = open_proxy.app.state.rdmem.pool.manager("default", "two-choices", budget=100)
    settled(lambda: mem.history()[-1]["content"] == "It is.")
    assert [m["content"] for m in mem.history()] == ["capital?", "Lyon maybe.", "Sure?", "It is."]


def test_a_compressed_stream_is_relayed_decoded_and_its_reply_stored(open_proxy, fake_openai):
    """The proxy's client accepts gzip: an upstream that compressed its events had them relayed compressed,
    without a Content-Encoding (the openai client failed: UnicodeDecodeError) and the reply was not stored."""
    import gzip

    events = gzip.compress(b"".join(f"data: {e}\n\n".encode() for e in chunks("Hello there.", pieces=2)))
    fake_openai.respond = lambda req: Reply(body=events, content_type="text/event-stream",
                                            headers={"Content-Encoding": "gzip"})
    got = client(open_proxy).chat.completions.create(model="fake-model", stream=True, user="gzipped",
                                                     messages=[{"role": "user", "content": "hi"}])
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == "Hello there."
    mem = open_proxy.app.state.rdmem.pool.manager("default", "gzipped", budget=100)
    settled(lambda: any(m["role"] == "assistant" for m in mem.history()))
    assert [m["content"] for m in mem.history()] == ["hi", "Hello there."]


def test_a_stream_the_model_breaks_off_ends_with_an_error_the_client_reads(open_proxy, fake_openai, caplog):
    """An upstream that closed mid-stream made the relay raise: the client saw a cut connection and the server
    logged a traceback ("ASGI callable returned without completing response"). Now the stream ends with an
    error event, which the openai client raises as an error naming the break (only whole events are relayed,
    so it never lands inside half of one); one log line, no partial reply."""
    half = chunks("Half of an answer", pieces=3)[2][:40].encode()  # the break comes in the middle of an event
    fake_openai.respond = lambda req: Reply(events=chunks("Half of an answer", pieces=3)[:2], cut=b"data: " + half)
    got = client(open_proxy).chat.completions.create(model="fake-model", stream=True, user="broken",
                                                     messages=[{"role": "user", "content": "hi"}])
    with caplog.at_level("WARNING"), pytest.raises(openai.APIError, match="stream broke off"):
        for _ in got:
            pass
    assert "the model's stream broke off" in caplog.text and "Traceback" not in caplog.text
    mem = open_proxy.app.state.rdmem.pool.manager("default", "broken", budget=100)
    settled(lambda: len(mem.history()) >= 1)
    assert [m["content"] for m in mem.history()] == ["hi"]  # the request, never the partial reply


# Item 6: one message never poisons a session.

@pytest.mark.parametrize(("bad", "skipped"), [
    ({"role": "function", "name": "lookup", "content": "42"}, "1"),
    ({"role": "tool", "content": "42"}, "1"),
    ({"role": "user", "content": "an int id", "id": 7}, None),
    ({"role": "user", "content": "a NUL \x00 here"}, None),
])
def test_one_message_rdmem_cannot_keep_is_skipped_and_the_session_goes_on(open_proxy, fake_openai, bad, skipped):
    session = f"poison-{bad['role']}-{len(bad)}-{'id' in bad}"
    oai = client(open_proxy)
    history = [SYSTEM, *conversation(150)[:-1], bad]
    for question in ("First question?", "Second question?"):
        history.append({"role": "user", "content": question})
        fake_openai.text = f"Answer to {question}"
        raw = oai.chat.completions.with_raw_response.create(model="fake-model", messages=history, max_tokens=RESERVE,
                                                            extra_headers={"X-Rdmem-Session": session})
        assert raw.headers.get("x-rdmem-skipped") == skipped
        if skipped and question == "First question?":
            # of the latest exchange: a compacted request would leave it out (the seventh review: a legacy
            # function result the model was about to read vanished), so the request goes as sent, and says why
            assert raw.headers["x-rdmem-compacted"] == "false"
            assert raw.headers["x-rdmem-warning"].startswith(f"not compacted: message {len(history) - 2} of the latest")
            assert fake_openai.requests[-1]["body"]["messages"] == history
        else:  # older now (or nothing skipped): compacted, and left out as an archived message is
            assert raw.headers["x-rdmem-compacted"] == "true"
        history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    contents = [h["content"] for h in open_proxy.app.state.rdmem.pool.manager("default", session, budget=100).history()]
    assert contents[-4:] == ["First question?", "Answer to First question?", "Second question?",
                             "Answer to Second question?"]  # user turns stored after the bad message too


# Item 8: model access never waits on memory.

def test_a_keyed_server_whose_store_is_down_forwards_unchanged_without_memory(keyed_proxy, fake_openai):
    live, store, secret = keyed_proxy
    msgs = [{"role": "user", "content": "hi"}]
    store.down = True
    try:
        raw = client(live).chat.completions.with_raw_response.create(
            model="fake-model", messages=msgs, extra_headers={"X-Rdmem-Key": secret, "X-Rdmem-Session": "s"})
    finally:
        store.down = False
    assert raw.status_code == 200 and raw.headers["x-rdmem-compacted"] == "failed"
    assert raw.headers["x-rdmem-memory"] == "none" and "x-rdmem-session" not in raw.headers
    assert fake_openai.requests[-1]["body"]["messages"] == msgs
    assert fake_openai.requests[-1]["auth"] == "Bearer sk-upstream"  # the upstream still checks the client
    assert store.sessions() == []  # no memory read or written without a valid key


def test_the_proxys_401_names_its_key_header(keyed_proxy):
    live, _, _ = keyed_proxy
    with pytest.raises(openai.AuthenticationError) as info:
        client(live).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
    assert "X-Rdmem-Key" in str(info.value) and "Bearer" not in info.value.body["message"]


def test_an_invalid_key_is_refused_while_memory_is_busy(serve, fake_openai, hashing_embedder):
    """The key's lookup waited in the threads memory's work filled (long histories stored and compacted, here
    behind a slow query embedding) past ``memory_timeout``, and a request with an invalid key was forwarded to
    the model as if the store could not say whose key it was."""
    import threading

    class Slow:
        dim = hashing_embedder.dim

        def embed(self, texts):
            time.sleep(1.5)
            return hashing_embedder.embed(texts)

    store = MemoryStore()
    _, secret = KeyStore(store).create_key("acme")
    live = serve(create_app(ServerSettings(upstream=fake_openai.url, context_window=WINDOW, reply_reserve=RESERVE,
                                           memory_timeout=0.5), store=store, embedder=Slow()))
    busy = [threading.Thread(target=client(live).chat.completions.create, kwargs=dict(
        model="fake-model", messages=personal(f"user{i}"), max_tokens=RESERVE,
        extra_headers={"X-Rdmem-Key": secret, "X-Rdmem-Session": f"s{i}"})) for i in range(12)]
    for t in busy:
        t.start()
    time.sleep(0.3)
    try:
        with pytest.raises(openai.AuthenticationError, match="invalid or revoked API key"):
            client(live).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "INTRUDER"}],
                                                 extra_headers={"X-Rdmem-Key": "rdmem_not_a_valid_key"})
    finally:
        for t in busy:
            t.join(60)
    assert not any("INTRUDER" in json.dumps(r["body"]) for r in fake_openai.requests)


def test_a_locked_sqlite_store_does_not_delay_the_stream(serve, fake_openai, minilm, tmp_path):
    from rdmem.store.sqlite import SQLiteStore

    path = tmp_path / "locked.db"
    store = SQLiteStore(path)  # its busy timeout: 30 s
    live = serve(create_app(ServerSettings(upstream=fake_openai.url, memory_timeout=1.0), store=store,
                            embedder=minilm))
    fake_openai.respond = lambda req: Reply(events=chunks("Fine.", pieces=2))
    body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}], "user": "busy"}
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process's writer holds the database
    try:
        start = time.monotonic()
        with httpx.stream("POST", f"{live.url}/v1/chat/completions", json=body, timeout=60) as resp:
            headers_at = time.monotonic() - start
            text = resp.read().decode()
        done_at = time.monotonic() - start
    finally:
        other.execute("ROLLBACK")
        other.close()
    # It fits as sent: counted, forwarded and answered while its store waits for the lock.
    assert resp.headers["x-rdmem-compacted"] == "false" and "[DONE]" in text
    # Within the memory bound, not the store's busy timeout (30 s; headers came at 30.6 s, [DONE] at 61.9 s).
    assert headers_at < store.timeout / 5 and done_at < store.timeout / 5
    # Once the lock is gone the request's message and its reply are stored, in order.
    mem = live.app.state.rdmem.pool.manager("default", "busy", budget=8192 - 1024)
    settled(lambda: [h["content"] for h in mem.history()] == ["hi", "Fine."])


# Item 9: the smaller ones.

def test_deeply_nested_json_is_a_400(open_proxy):
    raw = b'{"messages": [], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    got = httpx.post(f"{open_proxy.url}/v1/chat/completions", content=raw,
                     headers={"content-type": "application/json"}, timeout=30)
    assert got.status_code == 400 and "nested too deeply" in got.json()["error"]["message"]


@pytest.mark.parametrize(("field", "said"), [(b'"temperature": NaN', "NaN"), (b'"top_p": 1e400', "1e400"),
                                             (b'"logit_bias": {"50256": -Infinity}', "-Infinity")])
@pytest.mark.parametrize("stream", [False, True])
def test_a_number_json_does_not_have_is_a_400_naming_it(open_proxy, field, said, stream):
    """Found by the seventh review: Python's parser read NaN, Infinity and 1e400; a request that had to be
    compacted was then sent on re-serialised, which failed: a 500 with a traceback (streamed), or a 502 that
    blamed the model (which was never called)."""
    long = ", ".join('{"role": "user", "content": "%s"}' % ("word " * 400) for _ in range(6)).encode()
    raw = b'{"model": "m", "stream": %s, %s, "messages": [%s]}' % (b"true" if stream else b"false", field, long)
    got = httpx.post(f"{open_proxy.url}/v1/chat/completions", content=raw,
                     headers={"content-type": "application/json"}, timeout=30)
    assert got.status_code == 400, got.text
    assert said in got.json()["error"]["message"]
    rest = httpx.post(f"{open_proxy.url}/v1/sessions/nan/messages", content=b'{"role": "user", "content": "x", '
                      + field + b"}", headers={"content-type": "application/json"}, timeout=30)
    assert rest.status_code == 400 and said in rest.json()["error"]["message"]


@pytest.mark.parametrize("text", [b"a \\ud800 b", b"\\udc00", b"\\ud83d\\ude42\\ude42", b"\\uD83D \\uDE42",
                                  b"\\\\uD800\\uDC00"])  # the last: an escaped backslash, "uD800", a lone low half
def test_a_lone_surrogate_is_a_400_naming_the_field(open_proxy, text):
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "' + text + b'"}]}'
    got = httpx.post(f"{open_proxy.url}/v1/chat/completions", content=raw,
                     headers={"content-type": "application/json"}, timeout=30)
    assert got.status_code == 400
    assert got.json()["error"]["message"] == "messages[0].content is not valid Unicode (a lone surrogate)"


def test_an_escaped_emoji_is_not_a_lone_surrogate(open_proxy):
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "ok \\ud83d\\ude42 \\\\ud800"}]}'
    got = httpx.post(f"{open_proxy.url}/v1/chat/completions", content=raw,
                     headers={"content-type": "application/json"}, timeout=30)
    assert got.status_code == 200, got.text  # a pair, and an escaped backslash followed by "ud800" (text)


def test_a_small_body_nested_too_deeply_is_a_400(open_proxy):
    raw = b'{"messages": [], "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"  # under max_message_chars: parsed whole
    got = httpx.post(f"{open_proxy.url}/v1/chat/completions", content=raw,
                     headers={"content-type": "application/json"}, timeout=30)
    assert got.status_code == 400 and "nested too deeply" in got.json()["error"]["message"]


def test_upstream_failures_carry_the_rdmem_headers(serve, minilm):
    from .conftest import free_port

    live = serve(create_app(ServerSettings(upstream=f"http://127.0.0.1:{free_port()}/v1"), store=MemoryStore(),
                            embedder=minilm))
    for stream in (False, True):
        got = httpx.post(f"{live.url}/v1/chat/completions", timeout=30, json={
            "model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}], "user": "u"})
        assert got.status_code == 502 and got.headers["x-rdmem-session"] == "u"
        assert got.headers["x-rdmem-compacted"] == "false" and got.headers["x-rdmem-memory"] == "session"


def test_the_proxys_400_and_401_are_in_the_openapi_schema(open_proxy):
    doc = httpx.get(f"{open_proxy.url}/openapi.json", timeout=30).json()
    answers = doc["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert {"400", "401"} <= set(answers)
    assert answers["401"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorResponse"}


def test_only_allow_listed_client_headers_go_upstream(open_proxy, fake_openai):
    client(open_proxy, default_headers={"Cookie": "sid=secret", "X-Forwarded-For": "10.0.0.1",
                                        "OpenAI-Organization": "org-1", "X-Rdmem-Session": "h"}) \
        .chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
    sent = {k.lower(): v for k, v in fake_openai.requests[-1]["headers"].items()}
    assert sent["openai-organization"] == "org-1" and sent["authorization"] == "Bearer sk-upstream"
    assert "cookie" not in sent and "x-forwarded-for" not in sent and "x-rdmem-session" not in sent


def test_max_tokens_larger_than_the_window_is_said_not_silent(open_proxy, fake_openai, caplog):
    with caplog.at_level(logging.WARNING, logger="rdmem.server"):
        raw = client(open_proxy).chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=WINDOW + 1)
    assert "leaves no room" in raw.headers["x-rdmem-warning"]
    assert any("leaves no room" in r.getMessage() for r in caplog.records)


def test_a_streamed_reply_stored_off_the_relay_is_stored_once_when_the_next_request_comes_at_once(
        open_proxy, fake_openai, monkeypatch):
    from rdmem.server import routes_proxy

    slow = routes_proxy.store_reply

    def store_reply(*args, **kw):  # a store slower than the client's next request
        time.sleep(0.5)
        slow(*args, **kw)

    monkeypatch.setattr(routes_proxy, "store_reply", store_reply)
    oai = client(open_proxy)
    history = [{"role": "user", "content": "Tell me a story."}]
    for n in range(3):
        fake_openai.respond = lambda req, n=n: Reply(events=chunks(f"Story part {n}.", pieces=3))
        text = "".join(c.choices[0].delta.content or "" for c in oai.chat.completions.create(
            model="fake-model", messages=history, stream=True, user="once") if c.choices)
        history += [{"role": "assistant", "content": text}, {"role": "user", "content": f"And then {n}?"}]
    mem = open_proxy.app.state.rdmem.pool.manager("default", "once", budget=100)
    sent = history[:-1]  # the last question was never asked
    settled(lambda: len(mem.history()) >= len(sent))
    time.sleep(0.2)
    assert [h["content"] for h in mem.history()] == [m["content"] for m in sent]  # each once, in order


def test_rdmem_serve_takes_derive_sessions_and_memory_timeout(rdmem_serve, fake_openai):
    server = rdmem_serve("--upstream", fake_openai.url, "--derive-sessions", "--memory-timeout", "30",
                         "--policy", "window")
    got = httpx.post(f"{server.url}/v1/chat/completions", timeout=60,
                     json={"model": "m", "messages": [{"role": "user", "content": "hello"}]})
    assert got.status_code == 200 and got.headers["x-rdmem-memory"] == "session"
    assert got.headers["x-rdmem-session"].startswith("chat-") and got.headers["x-rdmem-compacted"] == "false"


def test_a_refusal_reply_is_stored_with_its_refusal_and_sent_with_it(open_proxy, fake_openai):
    """Found by the seventh review: the model's refusal (content null, 'refusal' its text) was stored as an empty
    reply, and a compacted history sent the model's refusals and audio replies as empty messages."""
    body = completion("")
    body["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    fake_openai.respond = lambda req: Reply(body=body)
    history = [SYSTEM, *conversation(150), {"role": "user", "content": "Tell me how to pick a lock."}]
    raw = client(open_proxy).chat.completions.with_raw_response.create(
        model="fake-model", messages=history, max_tokens=RESERVE, extra_headers={"X-Rdmem-Session": "refusals"})
    assert raw.headers["x-rdmem-compacted"] == "true" and raw.parse().choices[0].message.refusal
    fake_openai.respond = None
    stored = open_proxy.app.state.rdmem.pool.manager("default", "refusals", budget=100).history()[-1]
    assert {k: v for k, v in stored.items() if k != "id"} == {"role": "assistant", "content": None,
                                                              "refusal": "I can't help with that."}
    history += [{"role": "assistant", "content": None, "refusal": "I can't help with that."},
                {"role": "user", "content": "Fine. What did you just say?"}]
    client(open_proxy).chat.completions.create(model="fake-model", messages=history, max_tokens=RESERVE,
                                               extra_headers={"X-Rdmem-Session": "refusals"})
    sent = fake_openai.requests[-1]["body"]["messages"]
    assert sent[-2] == {"role": "assistant", "content": None, "refusal": "I can't help with that."}
