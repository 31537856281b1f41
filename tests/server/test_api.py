"""The memory API and the mem0 subset over HTTP (httpx against a live server on 127.0.0.1)."""

from __future__ import annotations

import json

import httpx
import pytest

from rdmem.errors import InvalidInput, MissingDependency
from rdmem.reconstruct import MARKER
from rdmem.server import ServerSettings, create_app

from .._checks import history_problems

pytestmark = pytest.mark.slow  # starts a server

PEANUTS = {"role": "user", "content": "Remember that I'm allergic to peanuts."}


@pytest.fixture
def api(serve, tmp_path, hashing_embedder):
    settings = ServerSettings(store=f"sqlite:///{tmp_path / 'served.db'}", budget=300, max_messages=50,
                              max_message_chars=5000, max_body_bytes=200_000, max_budget=20_000)
    live = serve(create_app(settings, embedder=hashing_embedder))
    with httpx.Client(base_url=live.url, timeout=30) as client:
        yield client


def chat(n: int, start: int = 0) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} about the harbour and boats " * 3}
            for i in range(start, start + n)]


def test_add_then_context_then_search(api):
    r = api.post("/v1/sessions/trip/messages", json={"messages": [PEANUTS] + chat(40)})
    assert r.status_code == 201 and r.json() == {"session": "trip", "ids": [f"m{i}" for i in range(41)]}
    one = api.post("/v1/sessions/trip/messages", json={"messages": {"role": "user", "content": "One more."}})
    assert one.json()["ids"] == ["m41"]
    ctx = api.post("/v1/sessions/trip/context", json={"budget": 250, "query": "Which food must I avoid?"}).json()
    assert ctx["tokens"] <= 250 and history_problems(ctx["messages"]) == [] and ctx["policy"] == "rd"
    assert any("peanuts" in m["content"] for m in ctx["messages"]) and ctx["messages"][-1]["content"] == "One more."
    assert {"id", "decision", "tokens", "score"} <= set(ctx["report"][0]) and "breakdown" not in ctx["report"][0]
    full = api.post("/v1/sessions/trip/context", json={"budget": 250, "query": "Which food must I avoid?",
                                                       "breakdown": True}).json()
    assert full["messages"] == ctx["messages"] and "query.bm25" in full["report"][0]["breakdown"]
    hits = api.post("/v1/sessions/trip/search", json={"query": "allergic peanuts", "k": 3}).json()["results"]
    assert hits[0]["id"] == "m0" and hits[0]["message"]["content"] == PEANUTS["content"]
    assert hits[0]["tier"] in ("working", "archive")
    modes = api.post("/v1/sessions/trip/context", json={"budget": 200, "mode": "task"}).json()
    assert modes["policy"] == "rd-task" and modes["tokens"] <= 200
    window = api.post("/v1/sessions/trip/context", json={"budget": 200, "policy": "window"}).json()
    assert window["policy"] == "window"


def test_an_add_retried_with_its_ids_is_stored_once(api):
    """A client whose add timed out cannot know whether it was stored; with ids of its own, its retry was a 409
    that said only "already has a message with id". It is answered 200 with the ids and ``already_stored``;
    an id stored with other content, or a batch of which only some are stored, is still a 409."""
    batch = [{"role": "user", "content": "Pay invoice 42", "id": "inv-42"},
             {"role": "assistant", "content": "Paid.", "id": "inv-42-done", "lang": "en"}]
    first = api.post("/v1/sessions/pay/messages", json={"messages": batch})
    again = api.post("/v1/sessions/pay/messages", json={"messages": batch})
    assert first.status_code == 201 and first.json() == {"session": "pay", "ids": ["inv-42", "inv-42-done"]}
    assert again.status_code == 200 and again.json() == {"session": "pay", "ids": ["inv-42", "inv-42-done"],
                                                         "already_stored": True}
    other = api.post("/v1/sessions/pay/messages", json={"messages": [{**batch[0], "content": "Pay invoice 43"}]})
    partly = api.post("/v1/sessions/pay/messages", json={"messages": [batch[0], {"role": "user", "content": "new",
                                                                                  "id": "n1"}]})
    assert other.status_code == 409 == partly.status_code
    stored = api.get("/v1/sessions/pay/messages").json()
    assert [m["content"] for m in stored["messages"]] == ["Pay invoice 42", "Paid."]
    # values compare as JSON does: true is not 1 (Python's == said it was: "already stored" for other content)
    flagged = {"role": "user", "content": "flag", "id": "f1", "meta": {"ok": True, "n": [False]}}
    assert api.post("/v1/sessions/pay/messages", json={"messages": [flagged]}).status_code == 201
    assert api.post("/v1/sessions/pay/messages", json={"messages": [{**flagged, "meta": {"ok": 1, "n": [False]}}]}
                    ).status_code == 409
    assert api.post("/v1/sessions/pay/messages", json={"messages": [{**flagged, "meta": {"ok": True, "n": [0]}}]}
                    ).status_code == 409
    assert api.post("/v1/sessions/pay/messages", json={"messages": [flagged]}).json()["already_stored"] is True


def test_a_retry_is_answered_though_the_token_limit_is_spent(serve, tmp_path, hashing_embedder):
    """A retry stores nothing, so it costs nothing: it was charged first and refused 429 (Retry-After 38 s) once
    the add it repeats had spent the tenant's tokens, just when a client whose add timed out needs its answer."""
    live = serve(create_app(ServerSettings(store=f"sqlite:///{tmp_path / 'r.db'}", rate_tokens=300),
                            embedder=hashing_embedder))
    big = {"role": "user", "content": "the quarterly report, in full: " + "numbers and words " * 60, "id": "r1"}
    with httpx.Client(base_url=live.url, timeout=30) as client:
        assert client.post("/v1/sessions/s/messages", json={"messages": [big]}).status_code == 201
        other = client.post("/v1/sessions/s/messages", json={"messages": [{**big, "id": "r2"}]})
        assert other.status_code == 429  # the limit is spent: a new add waits
        again = [client.post("/v1/sessions/s/messages", json={"messages": [big]}) for _ in range(3)]
    assert [(r.status_code, r.json()["already_stored"]) for r in again] == [(200, True)] * 3


def test_sessions_are_listed_shown_paged_and_deleted(api):
    api.post("/v1/sessions/a/messages", json={"messages": chat(30)})
    api.post("/v1/sessions/b/messages", json={"messages": chat(3)})
    listed = api.get("/v1/sessions").json()
    assert [s["session"] for s in listed["sessions"]] == ["a", "b"] and listed["next_offset"] is None
    assert api.get("/v1/sessions", params={"limit": 1}).json()["next_offset"] == 1
    detail = api.get("/v1/sessions/a").json()
    assert detail["units"] == 30 and detail["working"] + detail["archived"] == 30 and detail["tokens"] > 300
    page = api.get("/v1/sessions/a/messages", params={"offset": 25, "limit": 3}).json()
    assert [m["id"] for m in page["messages"]] == ["m25", "m26", "m27"] and page["next_offset"] == 28
    assert api.delete("/v1/sessions/a/messages/m26").status_code == 204
    assert api.delete("/v1/sessions/a/messages/m26").status_code == 404
    assert [m["id"] for m in api.get("/v1/sessions/a/messages", params={"offset": 25}).json()["messages"]] == [
        "m25", "m27", "m28", "m29"]
    assert api.delete("/v1/sessions/b").status_code == 204
    assert api.get("/v1/sessions/b").status_code == 404
    assert [s["session"] for s in api.get("/v1/sessions").json()["sessions"]] == ["a"]


def test_feedback_and_explain(api):
    api.post("/v1/sessions/f/messages", json={"messages": [PEANUTS] + chat(20)})
    assert api.post("/v1/sessions/f/feedback", json={"ids": ["m0"], "reward": 1.0}).json() == {"ok": True}
    text = api.post("/v1/sessions/f/explain", json={"budget": 120}).json()
    assert text["text"].startswith("policy=rd budget=120") and len(text["report"]) >= 1
    bad = api.post("/v1/sessions/f/feedback", json={"ids": ["nope"], "reward": 1.0})
    assert bad.status_code == 404 and "unknown ids in feedback" in bad.json()["error"]["message"]


def test_mem0_subset(api):
    added = api.post("/memories", json={"messages": [{"role": "user", "content": "I play tennis on Sundays."},
                                                     {"role": "user", "content": "My cat is called Miso."}],
                                        "user_id": "alice", "agent_id": "coach", "metadata": {"src": "chat"}}).json()
    assert [r["event"] for r in added["results"]] == ["ADD", "ADD"]
    first = added["results"][0]
    assert first["memory"] == "I play tennis on Sundays." and first["user_id"] == "alice"
    api.post("/memories", json={"messages": [{"role": "user", "content": "Bob likes chess."}], "user_id": "bob"})
    mine = api.get("/memories", params={"user_id": "alice"}).json()["results"]  # alice's, every agent
    assert [m["memory"] for m in mine] == ["I play tennis on Sundays.", "My cat is called Miso."]
    assert mine[0]["metadata"] == {"src": "chat"} and mine[0]["agent_id"] == "coach"
    assert api.get(f"/memories/{first['id']}").json()["memory"] == "I play tennis on Sundays."
    found = api.post("/search", json={"query": "which sport does she play tennis", "filters": {"user_id": "alice"},
                                      "top_k": 1}).json()["results"]
    assert len(found) == 1 and found[0]["memory"] == "I play tennis on Sundays." and found[0]["score"] > 0
    assert api.post("/search", json={"query": "chess", "user_id": "alice"}).json()["results"][0]["user_id"] == "alice"
    other = api.post("/search", json={"query": "x", "filters": {"user_id": "alice", "category": "sport"}})
    assert other.status_code == 422 and other.json()["error"]["message"] == \
        "filters.category: Extra inputs are not permitted"
    assert api.delete(f"/memories/{first['id']}").json() == {"message": "Memory deleted successfully"}
    assert api.get(f"/memories/{first['id']}").status_code == 404
    assert api.delete("/memories", params={"user_id": "alice"}).json() == {"message": "All relevant memories deleted"}
    assert api.get("/memories", params={"user_id": "alice"}).json() == {"results": []}
    assert [m["memory"] for m in api.get("/memories", params={"user_id": "bob"}).json()["results"]] == [
        "Bob likes chess."]
    for call in (lambda: api.post("/memories", json={"messages": [{"role": "user", "content": "x"}]}),
                 lambda: api.get("/memories"), lambda: api.post("/search", json={"query": "x"}),
                 lambda: api.delete("/memories")):
        r = call()
        assert r.status_code == 400 and "At least one identifier" in r.json()["detail"]
    assert api.get("/memories/not-an-id").status_code == 404
    import base64  # an id that decodes to JSON nested deeper than Python's parser recurses: a 404 like any other
    deep = base64.urlsafe_b64encode(b"[" * 3000).decode().rstrip("=")
    for r in (api.get(f"/memories/{deep}"), api.delete(f"/memories/{deep}")):
        assert r.status_code == 404 and "not found" in r.json()["detail"]


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("post", "/v1/sessions/s/messages", {"messages": [{"role": "user", "content": "x"}] * 51}, 400,
         "messages: more than 50 messages in one request; the limit is 50 (max_messages)"),
        ("post", "/v1/sessions/s/messages", {"messages": [{"role": "user", "content": "x" * 5001}]}, 400,
         "messages[0].content: 5001 characters, over the limit of 5000 (max_message_chars)"),
        ("post", "/v1/sessions/s/messages", {"messages": [{"role": "robot", "content": "x"}]}, 422,
         "messages[0]: Input tag 'robot' found using 'role' does not match"),
        ("post", "/v1/sessions/s/messages",
         {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, 422,
         "messages[0].content[0].text: Input should be a valid string"),
        ("post", "/v1/sessions/s/messages", {"messages": [{"role": "tool", "content": "x"}]}, 422,
         "messages[0].tool_call_id: Field required"),
        ("post", "/v1/sessions/s/messages", {"nope": 1}, 422, "messages"),
        # Every string a message carries is valid Unicode, and every field nests at most 64 levels: a store
        # must keep it and every reader read it back (these were 500s, or stored and then unreadable).
        ("post", "/v1/sessions/s/messages",
         {"messages": [{"role": "user", "content": "x", "metadata": {"k": "\ud800"}}]}, 400,
         "message 0: field 'metadata'.k is not valid Unicode: a lone surrogate"),
        ("post", "/v1/sessions/s/messages", {"messages": [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c\udc001", "content": "ok"}]}, 400,
         "message 1: field 'tool_call_id' is not valid Unicode"),
        ("post", "/v1/sessions/s/messages", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://\ud800"}}]}]}, 400,
         "message 0: content[0].image_url.url is not valid Unicode"),
        # A mem0 id is a session's name: a lone surrogate in it was a 500 (the name could not be encoded).
        ("post", "/memories", {"user_id": "a\ud800", "messages": [{"role": "user", "content": "x"}]}, 400,
         "user_id 'a\\ud800': a session name must be valid Unicode (found a lone surrogate '\\ud800' at 1)"),
        ("post", "/v1/sessions/s/messages",
         {"messages": [{"role": "user", "content": "x", "metadata": _nested(100)}]}, 400,
         "message 0: field 'metadata' nests more than 64 levels deep"),
        # A query is valid Unicode too: a lone surrogate in it was a 500 on /context and /explain (the embedder's
        # cache key could not be encoded).
        ("post", "/v1/sessions/known/context", {"query": "where\ud800"}, 400,
         "query is not valid Unicode: a lone surrogate '\\ud800' at character 5"),
        ("post", "/v1/sessions/known/explain", {"query": "\udfff"}, 400, "query is not valid Unicode"),
        ("post", "/v1/sessions/known/context", {"budget": 0}, 422, "budget"),
        ("post", "/v1/sessions/known/feedback", {"ids": ["m0"] * 10_001, "reward": 1}, 422,
         "ids: List should have at most 10000 items"),
        ("post", "/v1/sessions/known/context", {"budget": 30000}, 400, "budget must be at most 20000 tokens"),
        ("post", "/v1/sessions/known/context", {"policy": "magic"}, 400, "unknown policy 'magic'; choose one of"),
        ("post", "/v1/sessions/known/context", {"policy": "rd", "mode": "task"}, 400, "a policy or a mode, not both"),
        ("post", "/v1/sessions/unknown/context", {}, 404, "no session 'unknown'"),
        ("post", "/v1/sessions/known/search", {"query": "x", "k": 5000}, 400, "k must be at most 1000"),
        ("get", "/v1/sessions?limit=5000", None, 422, "limit"),
        ("get", "/v1/sessions/unknown", None, 404, "no session 'unknown'"),
        ("delete", "/v1/sessions/unknown", None, 404, "no session 'unknown'"),
        ("get", "/v1/nothing-here", None, 404, "rdmem serves no GET /v1/nothing-here"),
    ],
)
def test_bad_requests_are_4xx_json_and_store_nothing(api, method, path, body, status, message):
    api.post("/v1/sessions/known/messages", json={"messages": chat(2)})
    # Sent as a client serialises it (ASCII escapes: httpx's json= cannot encode a lone surrogate).
    r = api.request(method.upper(), path, content=None if body is None else json.dumps(body),
                    headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()
    assert message in err["error"]["message"] and err["detail"] == err["error"]["message"] and err["error"]["code"]
    assert api.get("/v1/sessions/s").status_code == 404  # a rejected batch stores nothing


def test_bodies_over_the_limit_are_413_announced_or_streamed(api):
    big = b'{"messages": [{"role": "user", "content": "' + b"x" * 300_000 + b'"}]}'
    r = api.post("/v1/sessions/s/messages", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = api.post("/v1/sessions/s/messages", content=iter([big[:150_000], big[150_000:]]),
                 headers={"content-type": "application/json"})  # chunked: no Content-Length
    assert r.status_code == 413
    r = api.post("/v1/sessions/s/messages", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["message"] == "the body is not valid JSON"
    assert api.get("/v1/sessions/s").status_code == 404


def test_health_metrics_and_docs(api):
    assert api.get("/healthz").json()["status"] == "ok"
    api.post("/v1/sessions/m/messages", json={"messages": chat(40)})
    api.post("/v1/sessions/m/context", json={"budget": 100})
    text = api.get("/metrics").text
    assert 'rdmem_requests_total{method="POST",route="/v1/sessions/{session}/context",status="200"' in text
    assert "rdmem_request_seconds_bucket" in text and "rdmem_compactions_total" in text
    assert "rdmem_messages_stored_total" in text
    spec = api.get("/openapi.json").json()
    assert "/v1/sessions/{session}/context" in spec["paths"] and "/memories" in spec["paths"]
    assert api.get("/docs").status_code == 200


@pytest.mark.parametrize("name", ["org/alice", "a/messages/m0", "100%", "a%2Fb", "café/x", "%"])
def test_a_session_name_with_a_slash_or_a_percent_is_one_path_segment(api, name):
    """A name may hold "/" (the proxy's ``user``, MCP and mem0 ids make such sessions), sent as %2F: routing
    split it, so "org%2Falice" reached no route (404 for its own session), and deleting the session
    "a/messages/m0" deleted message m0 of session "a" (204). Now the segment is the name, every route."""
    from urllib.parse import quote

    api.post("/v1/sessions/a/messages", json={"messages": chat(2)}).raise_for_status()
    path = f"/v1/sessions/{quote(name, safe='')}"
    assert api.post(f"{path}/messages", json={"messages": chat(3)}).json() == {"session": name, "ids": ["m0", "m1", "m2"]}
    assert api.get(path).json()["session"] == name
    assert len(api.get(f"{path}/messages").json()["messages"]) == 3
    assert api.post(f"{path}/search", json={"query": "harbour"}).status_code == 200
    assert api.delete(f"{path}/messages/m0").status_code == 204
    assert api.delete(path).status_code == 204 and api.get(path).status_code == 404
    assert [m["id"] for m in api.get("/v1/sessions/a/messages").json()["messages"]] == ["m0", "m1"]  # untouched
    routes = api.get("/metrics").text
    assert 'route="/v1/sessions/{session}/messages/{message_id}",status="204"' in routes


def test_names_escaped_in_another_encoding_than_utf8_are_refused_not_merged(api):
    """"josé" and "josü" %-escaped as Latin-1 ("jos%E9", "jos%FC") both decoded to "jos\ufffd": one user's messages
    were read back under the other's name, through the REST paths and mem0's query ids alike."""
    r = api.post("/v1/sessions/jos%E9/messages", json={"messages": [{"role": "user", "content": "account 1234"}]})
    assert r.status_code == 400 and "found U+FFFD, the replacement character" in r.json()["error"]["message"]
    assert api.get("/v1/sessions/jos%FC/messages").status_code == 400
    api.post("/memories", json={"user_id": "jos\u00e9", "messages": [{"role": "user", "content": "PIN 4711"}]})
    r = api.get("/memories?user_id=%FC")
    assert r.status_code == 400 and "user_id" in r.json()["error"]["message"]
    assert [m["memory"] for m in api.get("/memories?user_id=jos%C3%A9").json()["results"]] == ["PIN 4711"]


def test_a_made_up_method_adds_no_metric_series(api):
    """Any client, with no key, could add a series per HTTP method it made up (1,000 requests with 4 kB
    methods grew /metrics from 19 kB to 74 MB); now they are all counted as one, ``OTHER``."""
    before = len(api.get("/metrics").text)
    for i in range(50):
        assert api.request(f"M{i}" + "A" * 1000, "/healthz").status_code == 405
    text = api.get("/metrics").text
    assert 'rdmem_requests_total{method="OTHER",route="/healthz",status="405"' in text and "AAAA" not in text
    assert len(text) < before + 5000


class _NoModel:
    """An embedder as a server without the embeddings extra has it: loading the model fails."""

    def embed(self, texts):
        raise MissingDependency("the default embedder needs sentence-transformers: pip install 'rdmem[embeddings]'")


def test_a_missing_embedding_model_is_a_json_error_that_says_what_to_install(serve, tmp_path):
    live = serve(create_app(ServerSettings(store=f"sqlite:///{tmp_path / 'm.db'}"), embedder=_NoModel()))
    # Storing does not wait for the model (messages are embedded off the request path): it works.
    r = httpx.post(f"{live.url}/v1/sessions/alice/messages", json={"messages": [PEANUTS]}, timeout=30)
    assert r.status_code == 201
    # A query must be embedded to be answered: that is where the missing model shows.
    r = httpx.post(f"{live.url}/v1/sessions/alice/search", json={"query": "peanuts"}, timeout=30)
    assert r.status_code == 501
    assert r.json()["error"] == {"code": "missing_dependency",
                                 "message": "the default embedder needs sentence-transformers: "
                                            "pip install 'rdmem[embeddings]'"}


def test_the_server_shows_left_out_messages_as_its_markers_setting_says(serve, tmp_path, hashing_embedder):
    history = [{"role": "user" if i % 2 == 0 else "assistant",
                "content": f"Remember that my locker code is 4{i:02d}." if i % 4 == 0 else
                f"Chatting about the weather and the harbour boats, nothing much at all, turn {i}. " * 2}
               for i in range(24)]

    def markers(**setting: str) -> list[str]:
        settings = ServerSettings(store=f"sqlite:///{tmp_path / f'{setting}.db'}", policy="importance", **setting)
        live = serve(create_app(settings, embedder=hashing_embedder))
        with httpx.Client(base_url=live.url, timeout=30) as client:
            client.post("/v1/sessions/s/messages", json={"messages": history}).raise_for_status()
            ctx = client.post("/v1/sessions/s/context", json={"budget": 160}).json()
        return [m["content"] for m in ctx["messages"] if MARKER.match(m["content"])]

    assert len(markers(markers="runs")) >= 2
    merged = markers()  # the default
    assert len(merged) == 1 and merged[0].endswith("omitted throughout]")
    assert markers(markers="none") == []
    with pytest.raises(InvalidInput, match="markers must be one of merged, runs, none, got 'all'"):
        ServerSettings(markers="all")


def test_a_window_above_the_largest_budget_is_refused_at_start_up():
    """Found by the seventh review: a 1,047,576-token window (GPT-4.1's) over the default max_budget started,
    and every proxy request then failed open in silence (X-Rdmem-Compacted: failed, nothing ever stored)."""
    with pytest.raises(InvalidInput, match=r"context_window \(1047576\) is above max_budget \(1000000\), the "
                                           r"largest budget memory takes: raise max_budget \(--max-budget\) to at least 1047576"):
        ServerSettings(context_window=1_047_576, upstream="http://127.0.0.1:9/v1")
    assert ServerSettings(context_window=1_047_576, max_budget=1_047_576, upstream="http://127.0.0.1:9/v1")
    assert ServerSettings(max_budget=5000).context_window == 8192  # no proxy: the window is not used


def test_a_mem0_add_retried_with_its_own_ids_is_answered_not_refused(api):
    """README: a write retried with ids of the client's own is answered ``already_stored`` (REST) and nothing is
    stored again. mem0's add answered 409 (the time it adds to each memory differs at each try)."""
    body = {"user_id": "ana", "messages": [{"role": "user", "content": "my PIN is 1234", "id": "k1"},
                                           {"role": "user", "content": "I like tea", "id": "k2"}]}
    first = api.post("/memories", json=body)
    assert first.status_code == 200 and [r["event"] for r in first.json()["results"]] == ["ADD", "ADD"]
    again = api.post("/memories", json=body)
    assert again.status_code == 200, again.text
    assert [(r["id"], r["event"]) for r in again.json()["results"]] == [(r["id"], "NONE") for r in first.json()["results"]]
    assert [m["memory"] for m in api.get("/memories", params={"user_id": "ana"}).json()["results"]] == \
        ["my PIN is 1234", "I like tea"]
    other = {**body, "messages": [{"role": "user", "content": "my PIN is 9999", "id": "k1"}]}
    assert api.post("/memories", json=other).status_code == 409  # an id stored with other content
