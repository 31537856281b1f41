"""The compacting proxy, driven by the official openai client, in front of a fake upstream that records
everything it receives."""

from __future__ import annotations

import json
import logging
import time
from urllib.parse import quote

import httpx
import openai
import pytest

from rdmem.server import ServerSettings, create_app
from rdmem.store import MemoryStore

from .._checks import history_problems
from ..integrations._scenario import conversation
from .._fake_openai import Reply, chunks, completion

pytestmark = pytest.mark.slow  # starts servers

WINDOW, RESERVE = 2000, 200


def turns(n: int) -> list[dict]:
    """A long conversation: a system prompt, then the adapters' scenario (an early directive, then chatter
    with tool calls)."""
    return [{"role": "system", "content": "You are a travel assistant for Lisbon."}, *conversation(n)]


@pytest.fixture
def proxy(serve, fake_openai, minilm):
    # memory_timeout: the first request of a long history embeds it all on a shared CPU (the bound has its own tests)
    app = create_app(ServerSettings(upstream=fake_openai.url, context_window=WINDOW, reply_reserve=RESERVE,
                                    memory_timeout=60),
                     store=MemoryStore(), embedder=minilm)
    live = serve(app)
    return live, fake_openai


def client(live, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-upstream", max_retries=0, **kw)


def test_every_forwarded_request_fits_is_valid_and_keeps_the_directive(proxy, cl100k):
    live, upstream = proxy
    history = turns(300)
    oai = client(live)
    for question in ("Which tram goes to Belem?", "And the ferry?", "What can I eat tonight near Alfama?"):
        history.append({"role": "user", "content": question})
        upstream.text = f"Answer to: {question}"
        raw = oai.chat.completions.with_raw_response.create(model="fake-model", messages=history, max_tokens=RESERVE,
                                                            extra_headers={"X-Rdmem-Session": "trip"})
        reply = raw.parse()
        assert raw.headers["x-rdmem-session"] == "trip" and raw.headers["x-rdmem-compacted"] == "true"
        assert int(raw.headers["x-rdmem-tokens-before"]) > WINDOW >= int(raw.headers["x-rdmem-tokens-after"])
        sent = upstream.requests[-1]
        assert sent["auth"] == "Bearer sk-upstream"  # the client's own key reaches the model
        forwarded = sent["body"]["messages"]
        assert cl100k.messages_tokens(forwarded) <= WINDOW - RESERVE  # counted here, independently
        assert history_problems(forwarded) == []
        assert forwarded[0] == history[0]  # the system prompt first
        assert forwarded[-1] == history[-1]  # the question being asked
        assert any("allergic to peanuts" in (m.get("content") or "") for m in forwarded)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    # Each message was stored once, replies included, although the client sent its history three times (the
    # system prompt travels with every request and is not stored).
    mem = live.app.state.rdmem.pool.manager("default", "trip", budget=WINDOW - RESERVE)
    assert len(mem) == len(history) - 1
    assert [h["content"] for h in mem.history()][-2:] == [history[-2]["content"], history[-1]["content"]]


def test_a_request_that_fits_goes_through_unchanged(proxy):
    live, upstream = proxy
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi", "name": "ana"}]
    raw = client(live).chat.completions.with_raw_response.create(model="fake-model", messages=msgs, user="ana-1")
    assert raw.headers["x-rdmem-compacted"] == "false" and raw.headers["x-rdmem-session"] == "ana-1"
    assert upstream.requests[-1]["body"]["messages"] == msgs
    assert upstream.requests[-1]["body"]["user"] == "ana-1"


def test_streaming_is_relayed_chunk_by_chunk_and_the_reply_is_stored(proxy, cl100k):
    live, upstream = proxy
    history = turns(200) + [{"role": "user", "content": "Any peanut-free dessert nearby?"}]
    upstream.respond = lambda req: Reply(events=chunks("Try the pastel de nata at Belem.", pieces=6), event_delay=0.01)
    stream = client(live).chat.completions.create(model="fake-model", messages=history, stream=True,
                                                  max_tokens=RESERVE, extra_headers={"X-Rdmem-Session": "s2"})
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert len(pieces) == 6 and "".join(pieces) == "Try the pastel de nata at Belem."
    body = upstream.requests[-1]["body"]
    assert body["stream"] is True and cl100k.messages_tokens(body["messages"]) <= WINDOW - RESERVE
    mem = live.app.state.rdmem.pool.manager("default", "s2", budget=WINDOW - RESERVE)
    settled(lambda: mem.history()[-1]["role"] == "assistant")  # stored after the stream, off the relay
    assert mem.history()[-1] == {"id": mem.history()[-1]["id"], "role": "assistant",
                                 "content": "Try the pastel de nata at Belem."}


CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "fake-model"}


def test_a_streamed_tool_call_is_stored_whole(proxy):
    live, upstream = proxy
    events = [json.dumps({**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
                  {"index": 0, "id": "call_9", "type": "function", "function": {"name": "weather", "arguments": ""}}]}}]}),
              json.dumps({**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [
                  {"index": 0, "function": {"arguments": '{"city": '}}]}}]}),
              json.dumps({**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [
                  {"index": 0, "function": {"arguments": '"Lisbon"}'}}]}}]}),
              json.dumps({**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}), "[DONE]"]
    upstream.respond = lambda req: Reply(events=events)
    oai = client(live)
    history: list[dict] = [{"role": "user", "content": "Weather?"}]
    with oai.chat.completions.stream(model="fake-model", user="tools", messages=history) as stream:
        list(stream)
        call = stream.get_final_completion().choices[0].message.model_dump(exclude_none=True, exclude={"parsed"})
    mem = live.app.state.rdmem.pool.manager("default", "tools", budget=WINDOW - 1024)
    settled(lambda: mem.history()[-1]["role"] == "assistant")
    stored = mem.history()[-1]
    assert stored["tool_calls"] == [{"id": "call_9", "type": "function",
                                     "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'}}]
    # The SDK's accumulation of the stream adds each call's "index" (and a client may send "" for no content):
    # resent, it is the stored call, not a new message, in a session shared by a user's chats too.
    assert call["tool_calls"][0]["index"] == 0
    upstream.respond = None
    upstream.text = "Sunny."
    # LangChain's ChatOpenAI resends the arguments re-serialised ('{"city":"Lisbon"}'): the same call (it was
    # stored again, a call without its results, in every turn of a user's session: 48 messages for 40 sent)
    compact = {**call, "tool_calls": [{**call["tool_calls"][0], "function": {
        "name": "weather", "arguments": json.dumps(json.loads(call["tool_calls"][0]["function"]["arguments"]),
                                                   separators=(",", ":"))}}]}
    for content, sent in ((None, call), ("", call), (None, compact)):
        history = [{"role": "user", "content": "Weather?"}, {**sent, **({"content": content} if content == "" else {})},
                   {"role": "tool", "tool_call_id": "call_9", "content": "22 C"}]
        oai.chat.completions.create(model="fake-model", user="tools", messages=history)
        settled(lambda: mem.history()[-1]["content"] == "Sunny.")
        mem = live.app.state.rdmem.pool.manager("default", "tools", budget=WINDOW - 1024)  # the request's store done
        assert [(m["role"], m.get("content")) for m in mem.history()] == [
            ("user", "Weather?"), ("assistant", None), ("tool", "22 C"), ("assistant", "Sunny.")]


def test_when_compaction_fails_the_original_request_is_forwarded(proxy, caplog):
    live, upstream = proxy
    # A system prompt larger than the window: rdmem cannot compact it, the upstream may know better. Fail open.
    msgs = [{"role": "system", "content": "Lisbon. " * 1000}, {"role": "user", "content": "Lunch ideas?"}]
    with caplog.at_level(logging.WARNING, logger="rdmem.server"):
        raw = client(live).chat.completions.with_raw_response.create(model="fake-model", messages=msgs)
    assert raw.status_code == 200 and raw.headers["x-rdmem-compacted"] == "failed"
    assert upstream.requests[-1]["body"]["messages"] == msgs  # unchanged
    lines = [r.getMessage() for r in caplog.records if "compaction failed" in r.getMessage()]
    assert len(lines) == 1 and "forwarding the request unchanged" in lines[0] and "\n" not in lines[0]


@pytest.mark.parametrize(("status", "error"), [(400, openai.BadRequestError), (401, openai.AuthenticationError),
                                                (429, openai.RateLimitError), (500, openai.InternalServerError),
                                                (503, openai.InternalServerError)])
def test_upstream_errors_reach_the_client_as_the_upstream_sent_them(proxy, status, error):
    live, upstream = proxy
    body = {"error": {"message": f"upstream says {status}", "type": "invalid_request_error", "code": f"e{status}"}}
    upstream.respond = lambda req: Reply(status, body)
    for stream in (False, True):
        with pytest.raises(error) as info:
            out = client(live).chat.completions.create(model="fake-model", stream=stream,
                                                       messages=[{"role": "user", "content": "hi"}])
            list(out) if stream else None
        assert info.value.status_code == status and info.value.body == body["error"]


def test_a_slow_upstream_times_the_client_out_as_it_would_directly(proxy):
    live, upstream = proxy
    upstream.respond = lambda req: Reply(body=completion("late"), delay=2.0)
    with pytest.raises(openai.APITimeoutError):
        client(live, timeout=0.5).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])


def test_models_are_passed_through(proxy):
    live, upstream = proxy
    assert [m.id for m in client(live).models.list()] == ["fake-model"]
    assert upstream.requests[-1]["auth"] == "Bearer sk-upstream"
    assert client(live).models.retrieve("fake-model").id == "fake-model"  # it was a 404
    assert client(live).models.retrieve("org/fake-model").id == "org/fake-model"
    with pytest.raises(openai.NotFoundError):
        client(live).models.retrieve("other")  # the upstream's own 404
    # the path is the upstream's only under /models: "../admin" resolved against its URL reached /admin
    seen = len(upstream.requests)
    for path in ("%2E%2E/%2E%2E/admin/secret", "..%2F..%2Fadmin", "a//b", "%2E/x"):  # httpx would resolve "../"
        r = httpx.get(f"{live.url}/v1/models/{path}", headers={"Authorization": "Bearer sk-upstream"})
        assert r.status_code == 400 and "not a model id" in r.json()["error"]["message"], (path, r.text)
    assert len(upstream.requests) == seen


def test_an_openai_api_the_proxy_does_not_serve_is_a_404_that_says_what_it_serves(proxy):
    """The Responses API (the Agents SDK's default), embeddings and legacy completions got a bare "Not Found"."""
    live, upstream = proxy
    seen = len(upstream.requests)
    with pytest.raises(openai.NotFoundError) as refused:
        client(live).responses.create(model="fake-model", input="hi")
    assert "POST /v1/chat/completions and GET /v1/models" in str(refused.value)
    with pytest.raises(openai.NotFoundError, match="rdmem serves no POST /v1/embeddings"):
        client(live).embeddings.create(model="fake-model", input="hi")
    assert len(upstream.requests) == seen  # nothing forwarded, nothing stored


def test_with_derive_sessions_a_conversation_without_a_name_is_recognised(serve, fake_openai, minilm):
    live = serve(create_app(ServerSettings(upstream=fake_openai.url, context_window=WINDOW, reply_reserve=RESERVE,
                                           derive_sessions=True, memory_timeout=60), store=MemoryStore(), embedder=minilm))
    oai = client(live)
    first = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Plan a day in Sintra."}]
    a = oai.chat.completions.with_raw_response.create(model="fake-model", messages=first)
    later = first + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "And the evening?"}]
    b = oai.chat.completions.with_raw_response.create(model="fake-model", messages=later)
    assert a.headers["x-rdmem-session"] == b.headers["x-rdmem-session"].strip() != ""
    assert a.headers["x-rdmem-memory"] == "session"
    mem = live.app.state.rdmem.pool.manager("default", a.headers["x-rdmem-session"], budget=WINDOW - 1024)
    # Stored once each (the first reply came back in the second request), and the second reply; the system
    # prompt comes with every request and is not stored.
    assert [h["content"] for h in mem.history()] == [m["content"] for m in later[1:]] + ["ok"]
    # A system prompt that carries the date and time: one session still (each request was a new session,
    # storing the whole history again).
    names = set()
    for t, when in enumerate(("Sunday, December 6, 2026, 10:01", "Sunday, December 6, 2026, 10:02",
                              "Monday, December 7, 2026, 09:00")):
        chat = [{"role": "system", "content": f"Be brief. It is {when}."}, *later[1:], *(
            [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"Then {t}?"}])]
        names.add(oai.chat.completions.with_raw_response.create(model="fake-model", messages=chat)
                  .headers["x-rdmem-session"])
    assert len(names) == 1 and names != {a.headers["x-rdmem-session"]}  # another prompt is another session
    # Any other number still tells two prompts apart (an account's: two end users of one key who open alike)
    accounts = {oai.chat.completions.with_raw_response.create(model="fake-model", messages=[
        {"role": "system", "content": f"You help the holder of account {n}. It is 10:0{n % 10}."},
        {"role": "user", "content": "Hi"}]).headers["x-rdmem-session"] for n in (48213, 99120)}
    assert len(accounts) == 2

    def derived(messages, **kw) -> str | None:
        return oai.chat.completions.with_raw_response.create(model="fake-model", messages=messages, **kw) \
            .headers.get("x-rdmem-session")

    # Numbers shaped like a date or a time that no calendar or clock has were dropped as one: two account
    # holders whose prompts differ by "4411-22-33" / "9870-65-43" shared a session, and one's PIN reached the
    # other's request (a review, with the openai SDK); so did "Sun Li" / "Mon Li", a day's name alone.
    for a_, b_ in (("Account 4411-22-33", "Account 9870-65-43"), ("Ticket 12/34/567", "Ticket 12/35/567"),
                   ("Locker 99:98", "Locker 99:99"), ("Agent: Sun Li", "Agent: Mon Li")):
        assert derived([{"role": "system", "content": a_}, {"role": "user", "content": "Hi"}]) != \
            derived([{"role": "system", "content": b_}, {"role": "user", "content": "Hi"}]), (a_, b_)
    # One conversation stays one session: a prompt whose date and day change by the day, a greeting before the
    # first user message that says the time of day, a first message whose ``name`` the client drops on resend
    # (a review of a first fix that counted names and greetings, and took "Tue," before an ISO date for a name).
    for a_, b_ in ((("Today is Tue, 2024-06-04.",), ("Today is Wed, 2024-06-05.",)),
                   (("Day of week: Tue.",), ("Day of week: Wed.",)), (("Now: Tue 2024-06-04 09:15",), ("Now: Wed "
                                                                                                 "2024-06-05 10:00",))):
        assert derived([{"role": "system", "content": a_[0]}, {"role": "user", "content": "Hi"}]) == \
            derived([{"role": "system", "content": b_[0]}, {"role": "user", "content": "Hi"}]), (a_, b_)
    assert derived([{"role": "assistant", "content": "Good morning!"}, {"role": "user", "content": "Plan my day"}]) == \
        derived([{"role": "assistant", "content": "Good afternoon!"}, {"role": "user", "content": "Plan my day"},
                 {"role": "assistant", "content": "ok"}, {"role": "user", "content": "And then?"}])
    assert derived([{"role": "user", "content": "Plan my day", "name": "alice"}]) == \
        derived([{"role": "user", "content": "Plan my day"}, {"role": "assistant", "content": "ok"},
                 {"role": "user", "content": "And then?"}])
    # A user that is not a string (OpenAI refuses it; an upstream may not) is no name: no memory, and says so.
    raw = oai.chat.completions.with_raw_response.create(model="fake-model", messages=[{"role": "user", "content": "Hi"}],
                                                        extra_body={"user": 1})
    assert raw.headers["x-rdmem-memory"] == "none" and "'user' is not a session name" in raw.headers["x-rdmem-warning"]


def settled(check, timeout: float = 30) -> None:
    """Wait until ``check()`` holds (a reply is stored after its stream ends, in the background)."""
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not stored in time"
        time.sleep(0.02)


def stored(live, session: str) -> list[str]:
    return [h["content"] for h in live.app.state.rdmem.pool.manager("default", session, budget=100).history()]


def test_a_system_prompt_that_changes_every_request_stores_nothing_twice(proxy, cl100k):
    """A client whose system prompt carries the time: each message is stored once, and a compacted request
    carries the current system prompt only."""
    live, upstream = proxy
    oai = client(live)
    chat = turns(150)[1:]  # the conversation, without a fixed system prompt
    for t in range(4):
        upstream.text = f"Reply {t}"
        msgs = [{"role": "system", "content": f"You are a travel assistant. It is now 10:0{t}."}, *chat,
                {"role": "user", "content": f"Question {t}: where can I eat tonight?"}]
        reply = oai.chat.completions.create(model="fake-model", messages=msgs, max_tokens=RESERVE,
                                            extra_headers={"X-Rdmem-Session": "clock"})
        sent = upstream.requests[-1]["body"]["messages"]
        assert [m["content"] for m in sent if m["role"] == "system"] == [msgs[0]["content"]]
        assert history_problems(sent) == [] and cl100k.messages_tokens(sent) <= WINDOW - RESERVE
        chat = msgs[1:] + [{"role": "assistant", "content": reply.choices[0].message.content}]
    assert stored(live, "clock") == [m["content"] for m in chat]


def test_a_regenerated_reply_replaces_the_one_the_client_dropped(proxy):
    """Regenerate (or retry after a lost answer): the client resends its history without the last reply; the
    session follows it, storing nothing twice."""
    live, upstream = proxy
    oai = client(live)
    sys_, q1, q2 = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Plan a day in Sintra."},
                    {"role": "user", "content": "And the evening?"})

    def ask(messages, answer):
        upstream.text = answer
        oai.chat.completions.create(model="fake-model", messages=messages, extra_headers={"X-Rdmem-Session": "regen"})
        return {"role": "assistant", "content": answer}

    a1 = ask([sys_, q1], "Pena Palace, then Regaleira.")
    ask([sys_, q1, a1, q2], "Dinner in Colares.")            # the reply the user will not keep
    a2 = ask([sys_, q1, a1, q2], "Sunset at Cabo da Roca.")  # regenerated
    q3 = {"role": "user", "content": "Thanks!"}
    ask([sys_, q1, a1, q2, a2, q3], "Enjoy.")
    assert stored(live, "regen") == [q1["content"], a1["content"], q2["content"], a2["content"], q3["content"],
                                     "Enjoy."]


def test_a_user_s_second_chat_deletes_nothing_the_first_stored(proxy):
    """``user`` names an end user, who may hold two chats at once: the second chat's "Hi" looked like an edit of
    the first's last turn and replaced it (the flight number the user gave in chat 1 was deleted)."""
    live, upstream = proxy
    oai = client(live)

    def ask(messages, answer):
        upstream.text = answer
        oai.chat.completions.create(model="fake-model", messages=messages, user="carol")
        return {"role": "assistant", "content": answer}

    hi = {"role": "user", "content": "Hi"}
    flight = {"role": "user", "content": "My flight is AF123 on Friday."}
    a1 = ask([hi], "Hello!")
    a2 = ask([hi, a1, flight], "Noted: AF123.")
    ask([hi], "Hello again!")  # chat 2: its "Hi" is chat 1's, whose reply the session holds already
    assert stored(live, "carol") == ["Hi", "Hello!", flight["content"], a2["content"]]


def test_user_fields_name_sessions_exactly_and_a_bad_session_header_is_refused_before_the_model(proxy):
    """OpenAI's ``user`` is any string a client sends. A session name is taken exactly as sent: two end users
    whose ids differ by a no-break space never share a session (they did: the name was stripped). One that
    is not a session name gives the request no memory, and says so; the model is called once either way. A
    name beyond printable ASCII is percent-encoded in the response's header. ``X-Rdmem-Session`` is rdmem's
    own: a bad one is a 400, and the model is not called."""
    live, upstream = proxy
    oai = client(live)
    for user, session in (("alice", "alice"), ("alice\u00a0", "alice\u00a0"), ("ユーザー", "ユーザー"),
                          (" alice", " alice"), ("bob ", "bob "), ("50%", "50%"),  # a header cannot end in a space
                          ("u" * 300, None), ("tab\there", None)):
        before = len(upstream.requests)
        raw = oai.chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": f"I am {user!r}"}], user=user)
        assert raw.parse().choices[0].message.content and len(upstream.requests) == before + 1
        if session is None:
            assert raw.headers["x-rdmem-memory"] == "none" and "x-rdmem-session" not in raw.headers
            assert "'user' is not a session name" in raw.headers["x-rdmem-warning"]
            continue
        plain = session.isascii() and "%" not in session and session == session.strip()
        shown = session if plain else quote(session, safe="")  # (" alice" dropped the connection: h11 refused it)
        assert (raw.headers["x-rdmem-memory"], raw.headers["x-rdmem-session"]) == ("session", shown)
        mem = live.app.state.rdmem.pool.manager("default", session)
        deadline = time.monotonic() + 10
        while len(mem) < 2 and time.monotonic() < deadline:  # the reply is stored after the answer
            time.sleep(0.05)
        assert [h["content"] for h in mem.history()] == [f"I am {user!r}", "ok"]  # its own, no one else's
    before = len(upstream.requests)
    for bad, why in (("a\tb", "control characters"), ("s" * 257, "1 to 256 characters")):
        with pytest.raises(openai.BadRequestError, match=why):
            oai.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}],
                                        extra_headers={"X-Rdmem-Session": bad})
    assert len(upstream.requests) == before
    # X-Rdmem-Session's bytes are the name in UTF-8 (they were read as Latin-1: "café" stored as "cafÃ©")
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "in the café"}]}
    r = httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=30,
                   headers={"authorization": "Bearer sk-x", "X-Rdmem-Session": "café".encode()})
    assert r.status_code == 200 and r.headers["x-rdmem-session"] == quote("café", safe="")
    assert live.app.state.rdmem.pool.manager("default", "café").history()[0]["content"] == "in the café"
    r = httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=30,
                   headers={"authorization": "Bearer sk-x", "X-Rdmem-Session": b"caf\xe9"})  # Latin-1, not UTF-8
    assert r.status_code == 400 and "must be UTF-8" in r.text
    assert len(upstream.requests) == before + 1


def test_a_user_named_like_a_mem0_scope_does_not_reach_its_memories(proxy):
    """One key for mem0 (``user_id=<username>``) and the proxy (``user=<username>``): an end user who called
    themselves "mem0:user_id=bob" was given bob's memories (his PIN) and stored their turns among them."""
    live, upstream = proxy
    api = httpx.Client(base_url=live.url, timeout=30)
    api.post("/memories", json={"user_id": "bob", "messages": [{"role": "user", "content": "Bob's bank PIN is 9876"}]})
    history = [{"role": "user", "content": f"filler {i} " + "words " * 60} for i in range(40)]
    raw = client(live).chat.completions.with_raw_response.create(
        model="fake-model", messages=[*history, {"role": "user", "content": "What is the bank PIN?"}],
        max_tokens=RESERVE, user="mem0:user_id=bob")
    assert raw.headers["x-rdmem-memory"] == "none" and "mem0" in raw.headers["x-rdmem-warning"]
    assert "9876" not in json.dumps(upstream.requests[-1]["body"])
    assert [m["memory"] for m in api.get("/memories", params={"user_id": "bob"}).json()["results"]] == \
        ["Bob's bank PIN is 9876"]
    # named on purpose (the header: the application's own choice), the scope is a session like any other
    raw = client(live).chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": "What is my PIN?"}],
        extra_headers={"X-Rdmem-Session": "mem0:user_id=bob"})
    assert raw.headers["x-rdmem-memory"] == "session"


def test_a_number_too_long_to_read_is_a_400_naming_it(proxy):
    live, upstream = proxy
    before = len(upstream.requests)
    body = '{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "temperature": ' + "9" * 5000 + "}"
    r = httpx.post(f"{live.url}/v1/chat/completions", content=body, timeout=30,
                   headers={"content-type": "application/json", "authorization": "Bearer sk-x"})
    assert r.status_code == 400 and "a number that cannot be read" in r.json()["error"]["message"]
    assert len(upstream.requests) == before


def test_a_user_s_two_chats_at_once_store_each_message_once(proxy):
    """Two chats of one end user (``user``) interleave in one session: each resend of chat A was the session's
    messages with chat B's between them, which did not line up, so A's earlier turns were stored again on
    every request (and a reply that followed them was taken for a superseded one and not stored)."""
    live, upstream = proxy
    oai = client(live)
    chats: dict[str, list[dict]] = {"A": [], "B": []}
    for turn in range(3):
        for chat in ("A", "B"):
            chats[chat].append({"role": "user", "content": f"chat {chat}, question {turn}"})
            upstream.text = f"chat {chat}, answer {turn}"
            reply = oai.chat.completions.create(model="fake-model", messages=chats[chat], user="dana")
            chats[chat].append({"role": "assistant", "content": reply.choices[0].message.content})
    assert stored(live, "dana") == [f"chat {chat}, {kind} {turn}" for turn in range(3) for chat in ("A", "B")
                                    for kind in ("question", "answer")]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("named", ["header", "user"])
def test_a_session_deleted_while_its_request_is_answered_stays_deleted(proxy, stream, named):
    """The reply of a request in flight when its session was deleted was stored after the delete, lined up
    against the emptied session: the whole history (a PIN included) came back without the client sending
    anything more."""
    import threading

    live, upstream = proxy
    oai = client(live)
    how = {"extra_headers": {"X-Rdmem-Session": "pin"}} if named == "header" else {"user": "pin"}
    history = [{"role": "user", "content": "My card PIN is 4321."}]
    upstream.text = "Noted."
    oai.chat.completions.create(model="fake-model", messages=history, **how)
    history += [{"role": "assistant", "content": "Noted."}, {"role": "user", "content": "What is my PIN?"}]
    assert stored(live, "pin") == ["My card PIN is 4321.", "Noted."]
    upstream.respond = lambda req: Reply(body=completion("4321."), delay=1.5) if not stream else \
        Reply(events=chunks("4321."), delay=1.5)
    answered: list[object] = []

    def ask() -> None:
        out = oai.chat.completions.create(model="fake-model", messages=history, stream=stream, **how)
        answered.append(list(out) if stream else out)

    asking = threading.Thread(target=ask)
    asking.start()
    rest = httpx.Client(base_url=live.url, timeout=30)
    settled(lambda: rest.get("/v1/sessions/pin/messages").json().get("messages", [{}])[-1].get("content")
            == "What is my PIN?")  # the question is stored; the model is still answering
    assert rest.delete("/v1/sessions/pin").status_code == 204
    asking.join(30)
    assert answered  # the client got its answer
    time.sleep(0.5)  # the reply's store, after the answer
    live.app.state.rdmem.pool.manager("default", "pin", budget=100)  # waits for any store of this session
    assert rest.get("/v1/sessions/pin/messages").status_code == 404
    assert rest.get("/v1/sessions/pin").status_code == 404


def test_with_n_choices_the_one_the_client_goes_on_with_is_stored(proxy):
    """With ``n=2`` the proxy stored the first choice, and the client's next request, going on with the second,
    added it after: two replies to one question, one the client never chose."""
    live, upstream = proxy
    body = completion("Whiskers")
    body["choices"].append({"index": 1, "message": {"role": "assistant", "content": "Mittens"}, "finish_reason": "stop"})
    upstream.respond = lambda req: Reply(body=body)
    oai = client(live)
    history = [{"role": "user", "content": "A name for my cat?"}]
    for how in ({"user": "cats"}, {"extra_headers": {"X-Rdmem-Session": "cats-x"}}):
        answer = oai.chat.completions.create(model="fake-model", messages=history, n=2, **how)
        chosen = answer.choices[1].message.content
        upstream.respond = None
        upstream.text = "It suits a calm cat."
        oai.chat.completions.create(model="fake-model", **how, messages=[
            *history, {"role": "assistant", "content": chosen}, {"role": "user", "content": "Why that one?"}])
        name = how.get("user") or "cats-x"
        settled(lambda: stored(live, name)[-1] == "It suits a calm cat.")
        assert stored(live, name) == ["A name for my cat?", "Mittens", "Why that one?", "It suits a calm cat."]
        upstream.respond = lambda req: Reply(body=body)


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_the_client_gave_up_on_is_not_stored(proxy, stream):
    """A client that timed out before the first byte retries: the reply it never saw was stored (and in a session
    a user's chats share, the retry's reply after it: two replies to one question)."""
    live, upstream = proxy
    upstream.respond = lambda req: Reply(body=completion("ANSWER 1"), delay=1.5) if not stream else \
        Reply(events=chunks("ANSWER 1"), delay=1.5)
    question = [{"role": "user", "content": "Is 91 prime?"}]
    with pytest.raises(openai.APITimeoutError):
        out = client(live, timeout=0.5).chat.completions.create(model="fake-model", messages=question,
                                                                 stream=stream, user="gave-up")
        list(out) if stream else None
    time.sleep(1.5)  # the model answers the proxy after the client left
    upstream.respond = None
    upstream.text = "ANSWER 2"
    answer = client(live).chat.completions.create(model="fake-model", messages=question, user="gave-up")
    assert answer.choices[0].message.content == "ANSWER 2"
    settled(lambda: stored(live, "gave-up")[-1] == "ANSWER 2")
    assert stored(live, "gave-up") == ["Is 91 prime?", "ANSWER 2"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_message_the_model_refused_is_not_kept_to_be_refused_again(proxy, stream):
    """The model refused a request (a 400: a bad image); the client dropped that message and went on, as chat
    apps do. In a session a user's chats share the message stayed stored, and every compacted request that
    brought it back into the context was refused too."""
    live, upstream = proxy
    oai = client(live)
    bad = {"role": "user", "content": [{"type": "text", "text": "Look at this."},
                                       {"type": "image_url", "image_url": {"url": "https://example.invalid/x.png"}}]}
    history = [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi."}]
    upstream.text = "Hi."
    oai.chat.completions.create(model="fake-model", messages=history[:1], user="poison")
    error = {"error": {"message": "Invalid image URL.", "type": "invalid_request_error", "code": "invalid_image_url"}}
    upstream.respond = lambda req: Reply(status=400, body=error)
    with pytest.raises(openai.BadRequestError):
        out = oai.chat.completions.create(model="fake-model", messages=[*history, bad], user="poison", stream=stream)
        list(out) if stream else None
    upstream.respond = None
    upstream.text = "Sure."
    oai.chat.completions.create(model="fake-model", messages=[*history, {"role": "user", "content": "Go on."}],
                                user="poison")
    settled(lambda: stored(live, "poison")[-1] == "Sure.")
    assert stored(live, "poison") == ["Hello.", "Hi.", "Go on.", "Sure."]


def test_an_agent_loop_of_custom_tool_calls_is_stored_and_compacted(proxy, cl100k):
    """OpenAI's custom tools (``type: "custom"``, free-form input): every call was skipped as invalid, so
    nothing but their results was stored and the loop was never compacted (a skipped message of the latest
    exchange keeps a request as sent), over the window at every step."""
    live, upstream = proxy
    history: list[dict] = [{"role": "user", "content": "Tidy the logs, step by step."}]
    for i in range(60):
        history += [{"role": "assistant", "content": None, "tool_calls": [
                        {"id": f"call_{i}", "type": "custom", "custom": {"name": "shell", "input": f"gzip /var/log/app.{i}"}}]},
                    {"role": "tool", "tool_call_id": f"call_{i}", "content": f"compressed app.{i}: " + "ok " * 20}]
    events = [json.dumps({**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
                  {"index": 0, "id": "call_x", "type": "custom", "custom": {"name": "shell", "input": ""}}]}}]}),
              json.dumps({**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [
                  {"index": 0, "custom": {"input": "ls /var/"}}]}}]}),
              json.dumps({**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [
                  {"index": 0, "custom": {"input": "log"}}]}}]}),
              json.dumps({**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}), "[DONE]"]
    upstream.respond = lambda req: Reply(events=events)
    raw = client(live).chat.completions.with_raw_response.create(
        model="fake-model", messages=history, stream=True, extra_headers={"X-Rdmem-Session": "custom"})
    list(raw.parse())
    assert raw.headers["x-rdmem-compacted"] == "true" and "x-rdmem-skipped" not in raw.headers
    sent = upstream.requests[-1]["body"]["messages"]
    assert cl100k.messages_tokens(sent) <= WINDOW - RESERVE and not history_problems(sent)
    mem = live.app.state.rdmem.pool.manager("default", "custom", budget=WINDOW - RESERVE)
    settled(lambda: len(mem.history()) == len(history) + 1)
    assert [m.get("tool_calls") for m in mem.history()[:-1]] == [m.get("tool_calls") for m in history]
    assert mem.history()[-1]["tool_calls"] == [{"id": "call_x", "type": "custom",
                                                "custom": {"name": "shell", "input": "ls /var/log"}}]


def test_a_refused_request_s_messages_stay_once_another_request_went_on_from_them(proxy):
    """Two chats of one user open alike; the model refuses the first slowly (a 400 after a while) and answers the
    second, which lined up with the first's stored question. Deleting the refused request's messages then took
    the question from under the second chat's answer (stored alone, then twice)."""
    import threading

    live, upstream = proxy
    error = {"error": {"message": "Timeout while downloading image", "type": "invalid_request_error"}}
    upstream.respond = lambda req: Reply(status=400, body=error, delay=1.5) if req["body"]["model"] == "x" else \
        Reply(body=completion("Day 1: Belem."))
    oai = client(live)
    opener = [{"role": "user", "content": "Plan a 3-day trip to Lisbon."}]
    refused: list[int] = []

    def chat_x() -> None:
        try:
            oai.chat.completions.create(model="x", messages=opener, user="ana")
        except openai.BadRequestError as exc:
            refused.append(exc.status_code)

    x = threading.Thread(target=chat_x)
    x.start()
    settled(lambda: stored(live, "ana") == ["Plan a 3-day trip to Lisbon."])
    oai.chat.completions.create(model="y", messages=opener, user="ana")
    x.join(30)
    assert refused == [400]
    time.sleep(0.5)  # the refused request's messages, looked at after its answer
    live.app.state.rdmem.pool.manager("default", "ana", budget=100)  # its store done
    assert stored(live, "ana") == ["Plan a 3-day trip to Lisbon.", "Day 1: Belem."]


def test_a_new_session_deleted_or_read_right_after_its_first_answer(serve, fake_openai, hashing_embedder):
    """The proxy answers once it has counted a request, while it stores its messages: a DELETE or a read right
    after the first answer of a new session found no session (404), and the session appeared after."""
    class SlowStore(MemoryStore):  # a store that takes its time to write (a busy database)
        def append(self, session, units, **kw):
            time.sleep(0.5)
            return super().append(session, units, **kw)

    live = serve(create_app(ServerSettings(upstream=fake_openai.url, context_window=WINDOW, memory_timeout=30),
                            store=SlowStore(), embedder=hashing_embedder))
    oai = client(live)
    rest = httpx.Client(base_url=live.url, timeout=30)
    fake_openai.text = "Noted."
    for i in range(2):
        oai.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "My PIN is 4711."}],
                                    extra_headers={"X-Rdmem-Session": f"new-{i}"})
        if i:
            assert rest.get(f"/v1/sessions/new-{i}").json()["units"] >= 1  # the session's detail waits too
            assert [m["content"] for m in rest.get(f"/v1/sessions/new-{i}/messages").json()["messages"]][:1] == [
                "My PIN is 4711."]
        else:
            assert rest.delete(f"/v1/sessions/new-{i}").status_code == 204
            time.sleep(1.5)  # the reply's store, after the answer
            assert rest.get(f"/v1/sessions/new-{i}").status_code == 404


@pytest.mark.parametrize("named", ["header", "user"])
def test_a_slow_reply_is_stored_after_many_messages_stored_since_its_question(proxy, named):
    """Requests of one session at once (an app fanning questions out): a slow reply with ten or more messages
    stored after its question was taken for one whose question had been deleted, and lost (review 23)."""
    import threading

    live, upstream = proxy
    upstream.respond = lambda req: Reply(body=completion(f"answer to {req['body']['messages'][-1]['content']}"),
                                         delay=2.0 if req["body"]["messages"][-1]["content"] == "slow" else 0)
    how = {"extra_headers": {"X-Rdmem-Session": "fan"}} if named == "header" else {"user": "fan"}
    oai = client(live)
    slow = threading.Thread(target=lambda: oai.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "slow"}], **how))
    slow.start()
    settled(lambda: "slow" in stored(live, "fan"))
    for i in range(8):  # sixteen messages stored after the slow question
        oai.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": f"q{i}"}], **how)
    slow.join(30)
    settled(lambda: "answer to slow" in stored(live, "fan"))


def test_images_count_toward_the_budget_of_what_is_forwarded(proxy, cl100k):
    """A chat about photos (remote URLs: a few bytes each, 1,445 tokens each as the model counts them) is
    compacted to fit the window as the model counts it, not sent whole because its text is short."""
    live, upstream = proxy
    photo = {"type": "image_url", "image_url": {"url": "https://example.com/photo.jpg"}}
    history = [{"role": "user", "content": [{"type": "text", "text": f"What is in photo {i}?"}, photo]}
               if i % 2 == 0 else {"role": "assistant", "content": f"Photo {i - 1} shows a tram."} for i in range(9)]
    raw = client(live).chat.completions.with_raw_response.create(model="fake-model", messages=history,
                                                                 max_tokens=RESERVE)
    forwarded = upstream.requests[-1]["body"]["messages"]
    assert raw.headers["x-rdmem-compacted"] == "true"
    assert cl100k.messages_tokens(history) > WINDOW and cl100k.messages_tokens(forwarded) <= WINDOW - RESERVE
    assert forwarded[-1] == history[-1]  # the photo being asked about
