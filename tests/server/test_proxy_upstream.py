"""The proxy between real clients and an upstream that misbehaves as real ones do (the ninth review): one test
per defect, each failing on the proxy before it. The official openai client and httpx, against the app under
uvicorn and the scriptable fake upstream."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from rdmem.server import ServerSettings, create_app
from rdmem.store import MemoryStore

from .._fake_openai import Reply, chunks, completion
from .conftest import LiveServer
from .test_proxy_hostile import settled

pytestmark = pytest.mark.slow  # starts a server


@pytest.fixture(scope="module")
def proxy(_fake_openai_server, minilm):
    live = LiveServer(create_app(ServerSettings(upstream=_fake_openai_server.url, context_window=4000,
                                                reply_reserve=200, memory_timeout=60),
                                 store=MemoryStore(), embedder=minilm))
    yield live
    live.stop()


def client(live, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-upstream", max_retries=retries)


def stored(live, session: str) -> list[dict]:
    """The session's messages once its pending reply (if any) is stored: the pool's manager waits for it."""
    mem = live.app.state.rdmem.pool.manager("default", session, budget=100)
    settled(lambda: len(mem.history()) >= 1)
    return live.app.state.rdmem.pool.manager("default", session, budget=100).history()


def chunk(text: str, finish: str | None = None) -> str:
    return json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
                       "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


def test_a_cookie_the_upstream_sets_for_one_client_never_goes_with_anothers_request(proxy, fake_openai):
    """The proxy's httpx client kept a cookie jar: a gateway's login cookie set in alice's answer was sent with
    bob's request (bob got through as alice)."""
    fake_openai.respond = lambda req: Reply(body=completion("hi"), headers={"Set-Cookie": "gw_session=alice; Path=/"})
    alice = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-alice", max_retries=0)
    alice.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}], user="alice")
    fake_openai.respond = None
    bob = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-bob", max_retries=0)
    bob.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}], user="bob")
    with bob.chat.completions.with_streaming_response.create(model="fake-model", stream=True, user="bob",
                                                             messages=[{"role": "user", "content": "hi"}]) as r:
        r.read()
    bob.models.list()
    assert len(fake_openai.requests) == 4
    assert all("cookie" not in {k.lower() for k in req["headers"]} for req in fake_openai.requests)


@pytest.mark.parametrize("events", [
    pytest.param([f"data: {chunk('The answer is')}\n\n", 'data: {"error": {"message": "CUDA out of memory"}}\n\n',
                  "data: [DONE]\n\n"], id="error-object-then-done"),
    pytest.param([f"data: {chunk('The answer is')}\n\n",
                  'event: error\ndata: {"error": {"message": "overloaded"}}\n\n', "data: [DONE]\n\n"],
                 id="error-event"),
    pytest.param([f"data: {chunk('A')}\n\n", "data: {not json\n\n", f"data: {chunk('B', 'stop')}\n\n",
                  "data: [DONE]\n\n"], id="not-json"),
    pytest.param([f"data: {chunk('Hello')}\n\n", 'data: {"error": {"message": "provider down"}, "choices": '
                  '[{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}\n\n'],
                 id="openrouter-error-with-choices"),
    pytest.param([f"data: {chunk('Hello')}\n\n", 'data: {"error": {"message": "provider down"}, "choices": '
                  '[{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}\n\n', "data: [DONE]\n\n"],
                 id="openrouter-error-with-choices-then-done"),
])
def test_a_stream_that_carried_an_error_is_not_stored_as_a_reply(proxy, fake_openai, events):
    """vLLM and SGLang end a stream that failed midway with an error event and then [DONE]: the client raised
    the error, and memory stored the half reply ("The answer is") as the assistant's answer."""
    fake_openai.respond = lambda req: Reply(events=events, raw=True)
    user = f"failed-{len(events)}-{events[1][:12]}"
    got = client(proxy).chat.completions.create(model="fake-model", stream=True, user=user,
                                                messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(Exception):  # the client sees its stream fail (APIError, or the JSON decoder's error)
        for _ in got:
            pass
    assert [m["content"] for m in stored(proxy, user)] == ["hi"]


def test_an_error_field_that_is_null_is_no_error(proxy, fake_openai):
    """The openai client fails on a truthy ``error`` only: a chunk saying ``"error": null`` is read as any other."""
    fake_openai.respond = lambda req: Reply(events=[chunk("Hello", None), '{"error": null}', chunk(" world", "stop"),
                                                    "[DONE]"])
    got = client(proxy).chat.completions.create(model="fake-model", stream=True, user="null-error",
                                                messages=[{"role": "user", "content": "hi"}])
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == "Hello world"
    settled(lambda: len(stored(proxy, "null-error")) == 2)
    assert [m["content"] for m in stored(proxy, "null-error")] == ["hi", "Hello world"]


def test_an_event_whose_data_spans_two_lines_is_stored_as_the_client_reads_it(proxy, fake_openai):
    """SSE joins an event's data lines with a newline (as the openai client does): the collector parsed each
    line alone, so a pretty-printed event was lost from the stored reply (" red pill" for "Take the red pill")."""
    first = chunk("Take the").replace('"choices": ', '"choices":\ndata: ')
    fake_openai.respond = lambda req: Reply(events=[f"data: {first}\n\n", f"data: {chunk(' red pill', 'stop')}\n\n",
                                                    "data: [DONE]\n\n"], raw=True)
    got = client(proxy).chat.completions.create(model="fake-model", stream=True, user="multiline",
                                                messages=[{"role": "user", "content": "hi"}])
    said = "".join(c.choices[0].delta.content or "" for c in got if c.choices)
    assert said == "Take the red pill"
    settled(lambda: len(stored(proxy, "multiline")) == 2)
    assert [m["content"] for m in stored(proxy, "multiline")] == ["hi", said]


def test_a_stream_that_ends_after_its_finish_reason_without_done_is_stored(proxy, fake_openai):
    """Only [DONE] counted as complete: a stream that ended after its finish_reason without one (the client read
    all of it) stored no reply. One cut off before its finish_reason is still not stored."""
    fake_openai.respond = lambda req: Reply(events=chunks("Hello world", pieces=2)[:-1])
    oai = client(proxy)
    got = oai.chat.completions.create(model="fake-model", stream=True, user="no-done",
                                      messages=[{"role": "user", "content": "hi"}])
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == "Hello world"
    settled(lambda: len(stored(proxy, "no-done")) == 2)
    assert [m["content"] for m in stored(proxy, "no-done")] == ["hi", "Hello world"]
    fake_openai.respond = lambda req: Reply(events=chunks("Hello world", pieces=2)[:-2])  # no finish_reason
    got = oai.chat.completions.create(model="fake-model", stream=True, user="cut",
                                      messages=[{"role": "user", "content": "hi"}])
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == "Hello world"
    assert [m["content"] for m in stored(proxy, "cut")] == ["hi"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_upstreams_retry_headers_reach_the_client(proxy, fake_openai, stream):
    """Only Content-Type (and two ids when not streamed) came back: the openai client retried a 429 the upstream
    said not to retry (x-should-retry: false) and ignored its Retry-After."""
    limits = {"Retry-After": "3", "retry-after-ms": "3000", "x-should-retry": "false",
              "x-ratelimit-remaining-requests": "0", "x-request-id": "req-429"}
    fake_openai.respond = lambda req: Reply(429, {"error": {"message": "slow down", "type": "rate_limit"}},
                                            headers=limits)
    with pytest.raises(openai.RateLimitError) as err:
        client(proxy, retries=2).chat.completions.create(model="fake-model", stream=stream, user="limited",
                                                         messages=[{"role": "user", "content": "hi"}])
    assert len(fake_openai.requests) == 1  # not retried, as the upstream said
    got = {k.lower(): v for k, v in err.value.response.headers.items()}
    assert {k.lower(): v for k, v in limits.items()}.items() <= got.items()


def test_a_streamed_answer_carries_the_upstreams_request_id_and_a_redirect_its_location(proxy, fake_openai):
    fake_openai.respond = lambda req: Reply(events=chunks("ok"), headers={"x-request-id": "req-stream-1"})
    got = client(proxy).chat.completions.with_raw_response.create(model="fake-model", stream=True, user="ids",
                                                                  messages=[{"role": "user", "content": "hi"}])
    assert got.headers["x-request-id"] == "req-stream-1"
    fake_openai.respond = lambda req: Reply(307, {}, headers={"Location": "https://elsewhere.example/v1"})
    moved = httpx.post(f"{proxy.url}/v1/chat/completions", timeout=30,
                       json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
    assert moved.status_code == 307 and moved.headers["location"] == "https://elsewhere.example/v1"
    assert len(fake_openai.requests) == 2  # not followed


@pytest.mark.parametrize("stream", [False, True])
def test_a_header_with_utf8_in_it_goes_upstream_as_the_client_sent_it(proxy, fake_openai, stream):
    """httpx encodes a header given as text as ASCII: a client's 'User-Agent: Café-bot/1.0' was a 502 blaming
    the model (a 500 with a traceback when streamed), after its message was stored."""
    got = httpx.post(f"{proxy.url}/v1/chat/completions", timeout=30,
                     headers={"User-Agent": "Café-bot/1.0".encode()},
                     json={"model": "fake-model", "stream": stream, "user": f"cafe-{stream}",
                           "messages": [{"role": "user", "content": "hi"}]})
    assert got.status_code == 200, got.text
    sent = {k.lower(): v for k, v in fake_openai.requests[-1]["headers"].items()}
    assert sent["user-agent"] == "Café-bot/1.0".encode().decode("latin-1")  # http.server reads headers as Latin-1
