"""The service on PostgreSQL gives the answers it gives on SQLite: a NUL is text, not an outage."""

from __future__ import annotations

import uuid

import httpx
import pytest

from rdmem.server import ServerSettings, create_app

pytestmark = pytest.mark.slow  # PostgreSQL and a server


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, serve, tmp_path, hashing_embedder):
    url = f"sqlite:///{tmp_path / 'm.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    live = serve(create_app(ServerSettings(store=url, budget=300), embedder=hashing_embedder))
    with httpx.Client(base_url=live.url, timeout=30) as client:
        yield client


def test_a_nul_in_what_a_message_says_is_stored_and_given_back_exactly(api):
    session = "nul-" + uuid.uuid4().hex[:8]
    messages = [{"role": "user", "content": "before\x00after, about the kayak", "metadata": {"k": "v\x00"}},
                {"role": "assistant", "content": [{"type": "text", "text": "\x00"}]}]
    r = api.post(f"/v1/sessions/{session}/messages", json={"messages": messages})
    assert r.status_code == 201, r.text
    page = api.get(f"/v1/sessions/{session}/messages").json()["messages"]
    assert [{k: v for k, v in m.items() if k != "id"} for m in page] == messages
    ctx = api.post(f"/v1/sessions/{session}/context", json={"query": "kayak"}).json()
    assert ctx["messages"][0]["content"] == "before\x00after, about the kayak"
    hits = api.post(f"/v1/sessions/{session}/search", json={"query": "kayak", "k": 2}).json()["results"]
    assert hits[0]["message"]["content"] == messages[0]["content"]
    mem0 = api.post("/memories", json={"messages": [{"role": "user", "content": "a\x00b"}], "user_id": session})
    assert mem0.status_code == 200 and mem0.json()["results"][0]["memory"] == "a\x00b"


def test_a_nul_in_an_id_is_the_same_400_naming_the_field(api):
    session = "nul-" + uuid.uuid4().hex[:8]
    r = api.post(f"/v1/sessions/{session}/messages",
                 json={"messages": [{"role": "user", "content": "x", "id": "m\x001"}]})
    assert r.status_code == 400 and r.json()["error"] == {
        "code": "invalid_request", "message": "message 0: 'id' must not contain a NUL character, got 'm\\x001'"}
    assert api.get(f"/v1/sessions/{session}").status_code == 404  # nothing was written
