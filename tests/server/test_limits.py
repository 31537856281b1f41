"""The limits at every door (issue 24, item 4): REST /v1, mem0, the proxy and MCP refuse what the limits say,
counting every field of a message, and a body of many tiny messages is refused before it is built whole."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from typing import Any

import httpx
import openai
import pytest

from rdmem.server import ServerSettings, create_app

from .conftest import LiveServer

pytestmark = pytest.mark.slow  # starts a server

LIMITS = "max_messages", "max_message_chars"
TOO_MANY = [{"role": "user", "content": f"turn {i}"} for i in range(3000)]
TOO_LONG = [{"role": "user", "content": "x" * 1_000_000}]


@pytest.fixture(scope="module")
def live(_fake_openai_server, hashing_embedder, tmp_path_factory):
    store = f"sqlite:///{tmp_path_factory.mktemp('limits') / 'limits.db'}"
    server = LiveServer(create_app(ServerSettings(store=store, policy="window", upstream=_fake_openai_server.url),
                                   embedder=hashing_embedder))
    yield server, _fake_openai_server
    server.stop()


@pytest.fixture(scope="module")
def api(live):
    with httpx.Client(base_url=live[0].url, timeout=60) as client:
        yield client


def refused(r: httpx.Response, *words: str) -> str:
    assert r.status_code == 400, r.text
    text = r.json()["error"]["message"]
    assert all(w in text for w in words), text
    return text


def stored(api: httpx.Client) -> list[str]:
    return [s["session"] for s in api.get("/v1/sessions").json()["sessions"]]


# -- the proxy ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("messages", "words"), [
    (TOO_MANY, ("more than 1000 messages", "max_messages")),
    (TOO_LONG, ("messages[0].content: 1000000 characters", "max_message_chars")),
])
def test_the_proxy_refuses_what_the_limits_say_and_forwards_nothing(live, api, messages, words):
    server, upstream = live
    upstream.reset()
    oai = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-upstream", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model="fake-model", messages=messages, extra_headers={"X-Rdmem-Session": "p"})
    text = caught.value.response.json()["error"]["message"]
    assert all(w in text for w in words), text
    assert upstream.requests == [] and "p" not in stored(api)


def test_a_photo_or_a_recording_is_bounded_by_the_body_alone(live, api):
    """A photo as a data URL (any over about 146 KB: 200,000 base64 characters), audio or a file's data was
    refused as a string over max_message_chars, even by the proxy without a session: a vision request could not
    go through. Their bytes are bounded by the body's size, as the model's API bounds them; the text beside them
    is counted as before."""
    server, upstream = live
    upstream.reset()
    blob = "A" * 400_000
    parts = [{"type": "text", "text": "What is in this picture?"},
             {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{blob}"}},
             {"type": "input_audio", "input_audio": {"data": blob, "format": "wav"}},
             {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{blob}", "filename": "a.pdf"}}]
    oai = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-upstream", max_retries=0)
    for headers in ({}, {"X-Rdmem-Session": "photo"}):
        oai.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": parts}],
                                    extra_headers=headers)
        assert upstream.requests[-1]["body"]["messages"][0]["content"] == parts
    stored_parts = api.get("/v1/sessions/photo/messages").json()["messages"][0]["content"]
    assert stored_parts == parts
    r = api.post("/v1/sessions/photo/messages", json={"messages": [{"role": "user", "content": [
        {"type": "text", "text": "x" * 300_000}, parts[1]]}]})
    refused(r, "messages[0].content[0].text: 300000 characters", "max_message_chars")


def test_the_proxy_refuses_deeply_nested_json_with_a_400(live, api):
    body = '{"model": "m", "messages": [{"role": "user", "content": "x", "metadata": ' + "[" * 200_000 + "]" * 200_000 \
        + "}]}"
    r = api.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text


# -- /v1 and mem0: every field counted ------------------------------------------------------------------------
def _call(arguments: str = "{}", name: str = "f") -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}


@pytest.mark.parametrize(("message", "field"), [
    (_call(arguments="x" * (7 * 1024 * 1024)), "tool_calls[0].function.arguments: 7340032 characters"),
    (_call(name="f" * (1024 * 1024)), "tool_calls[0].function.name: 1048576 characters"),
    ({"role": "user", "content": "hi", "name": "n" * (1024 * 1024)}, "messages[0].name: 1048576 characters"),
    ({"role": "user", "content": "hi", "metadata": {"note": "m" * 300_000}}, "metadata.note: 300000 characters"),
])
def test_v1_counts_every_field_of_a_message(api, message, field):
    refused(api.post("/v1/sessions/fields/messages", json={"messages": [message]}), "messages[0].",
            "over the limit of 200000 (max_message_chars)", field)
    assert "fields" not in stored(api)


def test_mem0_counts_metadata_and_every_message(api):
    refused(api.post("/memories", json={"messages": [{"role": "user", "content": "hi"}], "user_id": "u",
                                        "metadata": {"k": "v" * 300_000}}), "metadata.k", "max_message_chars")
    refused(api.post("/memories", json={"messages": TOO_MANY, "user_id": "u"}), "max_messages")
    refused(api.post("/search", json={"query": "q" * 300_000, "user_id": "u"}), "query: 300000 characters")


def test_a_body_of_many_tiny_messages_is_refused_before_it_is_built(api):
    """493k tiny messages (7.9 MB) were parsed whole before the count was checked (+480 MB): now the parse
    stops at the 1,001st message, so it allocates a small part of what the parsed body takes."""
    body = ("[" + ",".join(['{"role":"user"}'] * 250_000) + "]").encode()
    tracemalloc.start()
    json.loads(body)
    parsed = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    r = api.post("/v1/sessions/tiny/messages", content=body, headers={"content-type": "application/json"})
    served = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    refused(r, "more than 1000 messages", "max_messages")
    assert served < parsed / 3, (served, parsed)


# -- MCP ----------------------------------------------------------------------------------------------------
async def _mcp(url: str, tool: str, args: dict[str, Any]) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(timeout=60) as http:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            return await client.call_tool(tool, args)


def _texts(exc: BaseException) -> str:
    """Every message of an exception and of those it groups (anyio wraps the client's errors)."""
    inner = getattr(exc, "exceptions", ())
    return " | ".join([str(exc), *(_texts(e) for e in inner)])


@pytest.mark.parametrize(("args", "words"), [
    ({"messages": TOO_MANY, "session": "m"}, ("params.arguments.messages: more than 1000 messages", "max_messages")),
    ({"messages": TOO_LONG, "session": "m"}, ("messages[0].content: 1000000 characters", "max_message_chars")),
    ({"content": "x" * 1_000_000, "session": "m"}, ("content: 1000000 characters", "max_message_chars")),
])
def test_mcp_remember_refuses_what_the_limits_say(live, api, args, words):
    """A list of messages is refused while the body is parsed (a JSON-RPC error, before the SDK builds it);
    one long ``content``, by the tool (a tool error)."""
    pytest.importorskip("mcp")
    try:
        result = asyncio.run(_mcp(live[0].url, "remember", args))
        assert result.is_error, result.content
        text = result.content[0].text
    except Exception as exc:  # the JSON-RPC error, raised by the client
        text = _texts(exc)
    assert all(w in text for w in words), text
    assert "m" not in stored(api)
