"""The MCP server, driven by the official SDK's client: in-process, over a real stdio subprocess, and mounted
at /mcp in ``rdmem serve`` (streamable HTTP) with the service's API keys."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP tests need the MCP SDK: pip install 'rdmem[mcp]'")

from mcp import Client, StdioServerParameters  # noqa: E402

from rdmem.cli import main as rdmem_main  # noqa: E402
from rdmem.mcp import SESSIONS_URI, create_mcp_server  # noqa: E402

from ..integrations._scenario import BUDGET, DIRECTIVE, FOOD_QUESTION, check_seen, conversation, tokens  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"remember", "recall", "context", "forget", "explain"}


async def ok(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    """A tool's structured result (its text content says the same, for clients that read only text)."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def error(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, result.structured_content
    return result.content[0].text


async def sessions(client: Client) -> dict[str, int]:
    listing = json.loads((await client.read_resource(SESSIONS_URI)).contents[0].text)
    return {s["session"]: s["units"] for s in listing["sessions"]}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- in-process --------------------------------------------------------------------------------------------
def test_tools_have_annotations_and_output_schemas():
    async def go():
        async with Client(create_mcp_server(policy="window")) as client:
            return (await client.list_tools()).tools, (await client.list_resources()).resources

    tools, resources = run(go())
    by_name = {t.name: t for t in tools}
    assert set(by_name) == TOOLS
    for name in ("recall", "context", "explain"):
        assert by_name[name].annotations.read_only_hint is True, name
        assert by_name[name].annotations.destructive_hint is False, name
    assert by_name["remember"].annotations.read_only_hint is False
    assert by_name["remember"].annotations.destructive_hint is False
    assert by_name["forget"].annotations.destructive_hint is True
    outputs = {n: set(t.output_schema["properties"]) for n, t in by_name.items()}
    assert outputs["remember"] == {"session", "ids", "already_stored"}
    assert {"messages", "tokens", "budget", "kept_ids", "sources"} <= outputs["context"]
    assert outputs["recall"] == {"session", "query", "results"}
    assert outputs["forget"] == {"session", "deleted", "session_deleted"}
    assert {"text", "decisions"} <= outputs["explain"]
    assert by_name["context"].input_schema["properties"]["budget"]["anyOf"][0]["minimum"] == 1
    assert [str(r.uri) for r in resources] == [SESSIONS_URI]


def test_every_tool_answers_with_its_model():
    async def go():
        async with Client(create_mcp_server(policy="window", budget=500, session="trip")) as client:
            first = await ok(client, "remember", content="Remember that I'm allergic to peanuts.")
            assert first == {"session": "trip", "ids": ["m0"], "already_stored": False}
            more = await ok(client, "remember", messages=[
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "function": {"name": "weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 22 C in Lisbon."},
                {"role": "assistant", "content": "It will be sunny.", "id": "a-sun"}])
            assert more["ids"] == ["m1", "m2", "a-sun"]
            hits = (await ok(client, "recall", query="Lisbon sunny weather"))["results"]
            # The three weather messages (the tool call names "weather"), not the peanuts; ranked as SQLite ranks.
            assert {h["id"] for h in hits} == {"m1", "m2", "a-sun"} and hits[0]["tier"] == "working"
            ctx = await ok(client, "context")
            assert [m["role"] for m in ctx["messages"]] == ["user", "assistant", "tool", "assistant"]
            assert ctx["messages"][1]["tool_calls"][0]["type"] == "function"  # filled in as the chat API wants
            assert ctx["tokens"] == tokens(ctx["messages"]) and ctx["budget"] == 500 and ctx["policy"] == "window"
            assert ctx["sources"] == ["m0", "m1", "m2", "a-sun"]
            why = await ok(client, "explain", budget=25)
            assert why["text"].startswith("policy=window budget=25")
            assert [d["id"] for d in why["decisions"]] == ["m0", "m1", "m2", "a-sun"]
            assert {d["decision"] for d in why["decisions"]} >= {"kept", "archived"}
            gone = await ok(client, "forget", ids=["m0"])
            assert gone == {"session": "trip", "deleted": ["m0"], "session_deleted": False}
            assert "peanuts" not in json.dumps((await ok(client, "context"))["messages"])
            assert all(h["id"] != "m0" for h in (await ok(client, "recall", query="peanuts allergic"))["results"])
            await ok(client, "remember", content="Another trip", session="paris")
            assert await sessions(client) == {"trip": 3, "paris": 1}
            wiped = await ok(client, "forget", whole_session=True, session="paris")
            assert wiped["session_deleted"] is True
            assert await sessions(client) == {"trip": 3}

    run(go())


def test_bad_input_is_a_tool_error_that_names_the_problem():
    async def go():
        async with Client(create_mcp_server(policy="window", max_budget=10_000)) as client:
            await ok(client, "remember", content="hello")
            assert "budget" in (text := await error(client, "context", budget=0)) and "greater than or equal to 1" in text
            assert "budget must be at most 10000 tokens, got 20000" in await error(client, "context", budget=20_000)
            assert "has no message 'nope'; nothing was deleted" in await error(client, "forget", ids=["m0", "nope"])
            assert "no session 'elsewhere'" in await error(client, "forget", whole_session=True, session="elsewhere")
            assert "give ids" in await error(client, "forget")
            assert "give content (one message) or messages" in await error(client, "remember")
            assert "tool_call_id" in await error(client, "remember", messages=[{"role": "tool", "content": "x"}])
            assert "already has" in await error(client, "remember", messages=[{"role": "user", "content": "x",
                                                                              "id": "m0"}])
            assert "query" in await error(client, "recall", query="")
            assert "a session name may not hold control characters" in await error(client, "remember", content="x",
                                                                                   session="a\x00b")
            assert "at most 256 char" in await error(client, "context", session="s" * 300)
            assert "at most 10000 tokens" in await error(client, "context", budget=10**12)
            # Nothing of it broke the server or the session.
            assert [m["content"] for m in (await ok(client, "context"))["messages"]] == ["hello"]

    run(go())


def test_an_unknown_argument_or_a_lax_flag_is_refused_and_nothing_is_done():
    """The ninth review: the SDK dropped unknown arguments, so remember(session_id="alice") and ("bob") stored both
    PINs in the shared default session, and recall(session_id="alice") found Bob's; forget took "yes" or 1 for
    whole_session (and deleted the session); an error listed every unknown id (3 MB for 300,000); recall's
    schema said "le" where JSON Schema says "maximum"."""
    from mcp import MCPError

    async def go():
        async with Client(create_mcp_server(policy="window")) as client:
            await ok(client, "remember", content="hello")
            for tool, args in (("remember", {"content": "alice's PIN is 1234", "session_id": "alice"}),
                               ("recall", {"query": "PIN", "session_id": "alice"}),
                               ("context", {"max_tokens": 5})):
                with pytest.raises(MCPError, match=f"{tool}: no argument '[a-z_]+' \\(it takes .*session"):
                    await client.call_tool(tool, args)
            for lax in ("yes", "1", 1, 1.0):
                assert "whole_session" in await error(client, "forget", whole_session=lax)
            text = await error(client, "forget", ids=[f"x{i}" for i in range(1000)])
            assert "and 995 more; nothing was deleted" in text and len(text) < 300
            assert [m["content"] for m in (await ok(client, "context"))["messages"]] == ["hello"]  # nothing done
            assert await sessions(client) == {"default": 1}
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["recall"].input_schema["properties"]["k"]["maximum"] == 200

    run(go())


class _NoModel:
    """An embedder as a user without the embeddings extra has it: loading the model fails (as rdmem.embed
    says it)."""

    def embed(self, texts):
        from rdmem.errors import MissingDependency

        raise MissingDependency("the default embedder needs sentence-transformers: pip install 'rdmem[embeddings]'")


def test_a_write_whose_outcome_is_unknown_does_not_say_retry():
    """``remember`` whose commit's answer was lost said "retry later": the retry stored the memory twice."""
    from rdmem.errors import WriteOutcomeUnknown
    from rdmem.store import MemoryStore

    class Lost(MemoryStore):
        def _append(self, session, units):
            raise WriteOutcomeUnknown("the connection was lost during a write, which may or may not have been stored")

    async def go():
        async with Client(create_mcp_server(store=Lost(), policy="window")) as client:
            return await error(client, "remember", content="I like tea")

    text = run(go())
    assert "went away during the write" in text and "may have been stored; recall before remembering it again" in text
    assert "retry" not in text


def test_a_remember_retried_with_its_ids_is_stored_once():
    """A client whose ``remember`` timed out (the store was busy) cannot know whether it was stored: its retry
    stored the memory twice, and nothing let it say "this is the same one". With ids of its own a retry is
    answered with the stored ids and ``already_stored``; an id reused for something else is still refused."""
    from rdmem.store import MemoryStore

    store = MemoryStore()

    async def go():
        async with Client(create_mcp_server(store=store, policy="window")) as client:
            first = await ok(client, "remember", content="Pay invoice 42 (EUR 900)", id="inv-42")
            again = await ok(client, "remember", content="Pay invoice 42 (EUR 900)", id="inv-42")
            batch = [{"role": "user", "content": "book the 9:40 train", "id": "t1"},
                     {"role": "assistant", "content": "Booked.", "id": "t2"}]
            await ok(client, "remember", messages=batch)
            batch_again = await ok(client, "remember", messages=batch)
            other = await error(client, "remember", content="Pay invoice 43 (EUR 10)", id="inv-42")
            both = await error(client, "remember", messages=batch, id="t1")
            return first, again, batch_again, other, both

    first, again, batch_again, other, both = run(go())
    assert first == {"session": "default", "ids": ["inv-42"], "already_stored": False}
    assert again == {"session": "default", "ids": ["inv-42"], "already_stored": True}
    assert batch_again == {"session": "default", "ids": ["t1", "t2"], "already_stored": True}
    assert "inv-42" in other and "id names the one message of content" in both
    assert [u.message["content"] for u in store.load("default")] == [
        "Pay invoice 42 (EUR 900)", "book the 9:40 train", "Booked."]


def test_a_missing_embedding_model_is_a_tool_error_that_says_what_to_install():
    async def go():
        async with Client(create_mcp_server(embedder=_NoModel())) as client:  # rd, the default policy
            assert "pip install 'rdmem[embeddings]'" in await error(client, "remember", content="hello")

    run(go())


def test_the_scenario_fits_holds_the_directive_and_recall_finds_it(minilm):
    """300 turns with tool calls, then a food question: what context gives fits, is valid, keeps the directive."""
    async def go():
        async with Client(create_mcp_server(budget=BUDGET, embedder=minilm, session="scenario")) as client:
            ids = (await ok(client, "remember", messages=conversation()))["ids"]
            assert len(ids) == len(conversation())
            await ok(client, "remember", content=FOOD_QUESTION)
            ctx = await ok(client, "context", query=FOOD_QUESTION, budget=BUDGET)
            check_seen(ctx["messages"], BUDGET, food=True)
            assert ctx["messages"][-1] == {"role": "user", "content": FOOD_QUESTION}
            assert len(ctx["kept_ids"]) < len(ids) / 2  # it did compact
            plain = await ok(client, "context", budget=BUDGET)  # no query: recent turns, still valid
            check_seen(plain["messages"], BUDGET, food=False)
            hits = (await ok(client, "recall", query="peanut allergy", k=3))["results"]
            assert hits[0]["content"] == DIRECTIVE and hits[0]["id"] == ids[0]

    run(go())


@pytest.mark.parametrize("args, named", [(["--policy", "nope"], "nope"), (["--tenant", "a/b"], "--tenant")])
def test_the_command_line_refuses_a_bad_policy_or_tenant_in_one_line(capsys, args, named):
    assert rdmem_main(["mcp", "--store", "memory://", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rdmem: error:") and named in err[0]


def test_with_a_tenant_it_sees_what_the_server_shows_that_tenant_and_nothing_else(keyless_server):
    """Found by the sixth review: ``rdmem mcp`` on a server's store named sessions as the store does, so a
    keyless server's ``notes`` (``t/default/notes``) was not its ``notes``, and ``t/alice/x`` reached another
    tenant's session. With ``tenant`` it names them as the server does, and another tenant's are out of reach."""
    import httpx

    from rdmem.store import open_store

    live, url = keyless_server
    httpx.post(f"{live.url}/v1/sessions/notes/messages", json={"role": "user", "content": "The code is 4242."}
               ).raise_for_status()
    with open_store(url) as store:
        from rdmem import MemoryManager

        MemoryManager(budget=500, policy="window", store=store, session="t/alice/x").extend(
            [{"role": "user", "content": "Alice's pin is 1111."}])

    async def go():
        async with Client(create_mcp_server(store=url, tenant="default", policy="window", session="notes")) as client:
            listed = await sessions(client)
            hits = (await ok(client, "recall", query="code"))["results"]
            await ok(client, "remember", content="And the door is blue.")
            foreign = (await ok(client, "recall", query="pin", session="t/alice/x"))["results"]
            return listed, hits, foreign

    listed, hits, foreign = run(go())
    assert listed == {"notes": 1} and [h["content"] for h in hits] == ["The code is 4242."]
    assert foreign == []  # t/default/t/alice/x: a session of this tenant, empty
    got = httpx.get(f"{live.url}/v1/sessions/notes/messages").json()["messages"]
    assert [m["content"] for m in got] == ["The code is 4242.", "And the door is blue."]
    with pytest.raises(ValueError, match="tenant must be 1-64 letters"):
        create_mcp_server(store=url, tenant="a/b")


# -- over stdio, in new processes --------------------------------------------------------------------------
def rdmem_mcp(store: str, *args: str) -> StdioServerParameters:
    """``rdmem mcp`` as an MCP client starts it (``python -m rdmem`` is the ``rdmem`` command)."""
    return StdioServerParameters(command=sys.executable, args=["-m", "rdmem", "mcp", "--store", store,
                                                               "--session", "s", *args],
                                 env={"HF_HUB_OFFLINE": "1"}, cwd=str(REPO))


@pytest.mark.slow  # starts two server processes
def test_a_second_process_sees_what_the_first_remembered(tmp_path):
    store = f"sqlite:///{tmp_path / 'm.db'}"

    async def first():
        async with Client(rdmem_mcp(store, "--policy", "window", "--budget", "300")) as client:
            ids = (await ok(client, "remember", messages=conversation(40)))["ids"]
            ctx = await ok(client, "context")
            check_seen(ctx["messages"], 300, food=False)
            return ids

    async def second(ids):
        async with Client(rdmem_mcp(store, "--policy", "window", "--budget", "300")) as client:
            assert await sessions(client) == {"s": len(ids)}
            await ok(client, "remember", content="And what about tomorrow?")
            ctx = await ok(client, "context")
            hits = (await ok(client, "recall", query="peanuts allergic"))["results"]
            return ctx, hits

    ids = run(first())
    ctx, hits = run(second(ids))
    check_seen(ctx["messages"], 300, food=False)
    assert ctx["messages"][-2]["content"] == conversation(40)[-1]["content"]  # the first process's last turn
    assert ctx["messages"][-1]["content"] == "And what about tomorrow?"
    assert hits[0]["id"] == ids[0] and hits[0]["tier"] == "archive"


@pytest.mark.slow  # starts a server process
def test_rdmem_mcp_takes_the_limits_rdmem_serve_takes(tmp_path):
    store = f"sqlite:///{tmp_path / 'm.db'}"

    async def go():
        async with Client(rdmem_mcp(store, "--policy", "window", "--max-message-chars", "40", "--max-messages", "2",
                                    "--max-budget", "500")) as client:
            long = await error(client, "remember", content="x" * 41)
            many = await error(client, "remember", messages=conversation(3))
            budget = await error(client, "context", budget=501)
            await ok(client, "remember", content="x" * 40)
            return long, many, budget

    long, many, budget = run(go())
    assert "40" in long and "content" in long
    assert "2" in many and "messages" in many
    assert "500" in budget and "budget" in budget


@pytest.mark.slow  # each process loads the model
def test_the_scenario_continues_in_a_new_process(tmp_path):
    store = f"sqlite:///{tmp_path / 'm.db'}"

    async def remember():
        async with Client(rdmem_mcp(store, "--budget", str(BUDGET))) as client:
            await ok(client, "remember", messages=conversation())

    async def ask():
        async with Client(rdmem_mcp(store, "--budget", str(BUDGET))) as client:
            await ok(client, "remember", content=FOOD_QUESTION)
            return await ok(client, "context", query=FOOD_QUESTION, budget=BUDGET)

    run(remember())
    ctx = run(ask())
    check_seen(ctx["messages"], BUDGET, food=True)
    assert ctx["messages"][-1]["content"] == FOOD_QUESTION


# -- mounted at /mcp in rdmem serve ------------------------------------------------------------------------
@pytest.fixture
def keyed_server(tmp_path, hashing_embedder):
    from rdmem.server import ServerSettings, create_app
    from rdmem.store import KeyStore, open_store

    from ..server.conftest import LiveServer

    url = f"sqlite:///{tmp_path / 'keyed.db'}"
    with open_store(url) as store:
        (_, acme), (_, globex) = KeyStore(store).create_key("acme"), KeyStore(store).create_key("globex")
    live = LiveServer(create_app(ServerSettings(store=url, policy="window"), embedder=hashing_embedder))
    yield live, acme, globex, url
    live.stop()


@pytest.fixture
def keyless_server(tmp_path, hashing_embedder):
    from rdmem.server import ServerSettings, create_app

    from ..server.conftest import LiveServer

    url = f"sqlite:///{tmp_path / 'keyless.db'}"
    live = LiveServer(create_app(ServerSettings(store=url, policy="window"), embedder=hashing_embedder))
    yield live, url
    live.stop()


async def over_http(live: Any, secret: str | None, steps: Any) -> Any:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(f"{live.url}/mcp", http_client=http)) as client:
            return await steps(client)


@pytest.mark.slow  # starts a server
def test_mounted_each_tenant_reaches_only_its_own_sessions(keyed_server):
    import httpx

    from rdmem.store import open_store

    live, acme, globex, url = keyed_server

    async def acme_writes(client):
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        ids = (await ok(client, "remember", content="Acme's secret plan: launch on 3 May.", session="plans"))["ids"]
        hits = (await ok(client, "recall", query="secret plan launch", session="plans"))["results"]
        return ids, hits, await sessions(client)

    async def globex_looks(client):
        hits = (await ok(client, "recall", query="secret plan launch", session="plans"))["results"]
        ctx = await ok(client, "context", session="plans")
        refused = await error(client, "forget", ids=["m0"], session="plans")
        wiped = await error(client, "forget", whole_session=True, session="plans")
        return hits, ctx, refused, wiped, await sessions(client)

    ids, hits, listed = run(over_http(live, acme, acme_writes))
    assert [h["content"] for h in hits] == ["Acme's secret plan: launch on 3 May."] and listed == {"plans": 1}
    hits, ctx, refused, wiped, listed = run(over_http(live, globex, globex_looks))
    assert hits == [] and ctx["messages"] == [] and listed == {}
    assert "has no message 'm0'" in refused and "no session 'plans'" in wiped
    # MCP and the REST routes name a tenant's sessions alike; acme's memory is untouched.
    r = httpx.get(f"{live.url}/v1/sessions/plans/messages", headers={"Authorization": f"Bearer {acme}"})
    assert [m["id"] for m in r.json()["messages"]] == ids
    with open_store(url) as store:
        assert [s.session for s in store.sessions()] == ["t/acme/plans"]


@pytest.mark.slow  # starts a server
def test_mounted_without_a_valid_key_is_401(keyed_server):
    import httpx

    live, *_ = keyed_server
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer rdmem_" + "x" * 43}, {"Authorization": "Basic abc"}):
        r = httpx.post(f"{live.url}/mcp", json=body, headers={**headers, **auth})
        assert r.status_code == 401, (auth, r.text)
        error = r.json()["error"]  # a JSON-RPC error, which the MCP client shows with its message
        assert error["data"] == {"status": 401, "code": "unauthorized"} and "API key" in error["message"]
        assert r.headers["www-authenticate"] == "Bearer"

    assert "MCPError: an API key is required" in refused_over_http(live)


@pytest.mark.slow  # starts a server
def test_mounted_with_the_store_down_says_so_as_json_rpc(keyless_server, monkeypatch):
    """The caller check needs the store even without keys: its StoreError came back as the REST routes' 503,
    which the MCP client reported as "Server returned an error response" (message and Retry-After lost)."""
    import httpx

    from rdmem.store import KeyStore, StoreError

    live, _ = keyless_server

    def down(self, *args, **kwargs):
        raise StoreError("connection refused")
    monkeypatch.setattr(KeyStore, "has_keys", down)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    r = httpx.post(f"{live.url}/mcp", json=body, headers={"Accept": "application/json, text/event-stream"})
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.headers["x-rdmem-error-id"]
    assert r.json()["error"]["data"] == {"status": 503, "code": "store_unavailable"}

    assert "MCPError: the store is unavailable (error " in refused_over_http(live)


def refused_over_http(live: Any) -> str:
    """What the MCP client raises when the server refuses its first call (the SDK's task groups wrap it)."""
    async def listing(client):
        return await client.list_tools()

    def leaves(exc: BaseException) -> list[BaseException]:
        return [x for e in getattr(exc, "exceptions", ()) for x in leaves(e)] or [exc]

    try:
        run(over_http(live, None, listing))
    except Exception as exc:  # noqa: BLE001 - the test reads what the client says
        return "; ".join(f"{type(e).__name__}: {e}" for e in leaves(exc))
    raise AssertionError("the call was not refused")


@pytest.mark.slow  # starts a server
def test_mounted_a_bad_session_name_or_number_says_why_and_logs_no_traceback(keyless_server, caplog):
    """``forget`` with a control character in the name answered "Error executing tool forget" with no reason,
    and logged a traceback; ``budget: true`` was taken as 1."""
    live, _ = keyless_server

    async def steps(client):
        await ok(client, "remember", content="kept", session="s")
        return [await error(client, "forget", whole_session=True, session="a\x01b"),
                await error(client, "forget", ids=["m0"], session="a\x85b"),
                await error(client, "remember", content="x", session="line\u2028two"),
                await error(client, "context", session="s", budget=True),
                await error(client, "recall", query="kept", session="s", k="3")]

    with caplog.at_level("WARNING"):
        texts = run(over_http(live, None, steps))
    assert "session 'a\\x01b': a session name may not hold control characters or line separators" in texts[0]
    assert "found '\\x85' at 1" in texts[1] and "found '\\u2028' at 4" in texts[2]
    assert "budget" in texts[3] and "valid integer" in texts[3]
    assert "k" in texts[4] and "valid integer" in texts[4]
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


@pytest.mark.slow  # starts a server
def test_mounted_a_body_within_the_servers_limit_is_taken(keyless_server):
    """The SDK's own bound (4 MiB) answered a bare-text 413 to a body within the server's (8 MiB)."""
    live, _ = keyless_server
    batch = [{"role": "user", "content": f"{i} " + "word " * 10_000} for i in range(100)]  # 5 MB of JSON

    async def steps(client):
        return await ok(client, "remember", messages=batch, session="big")

    assert len(run(over_http(live, None, steps))["ids"]) == 100


# -- the example -------------------------------------------------------------------------------------------
@pytest.mark.slow  # its server processes load the model
def test_the_example_runs():
    done = subprocess.run([sys.executable, str(REPO / "examples" / "mcp_client.py")], capture_output=True,
                          text=True, timeout=600, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "tools: remember, recall, context, forget, explain" in out
    fit = next(line for line in out.splitlines() if line.startswith("context:"))
    used, budget = int(fit.split()[3]), int(fit.split("budget ")[1].rstrip(")"))
    assert used <= budget == 300
    assert "user: Remember that I'm allergic to peanuts." in out
    assert "recall 'peanut allergy': m0 Remember that I'm allergic to peanuts." in out
    assert "newest: Thanks! And a dessert without nuts?" in out
    assert '"session":"alice","units":65' in out


class _Broken:
    """Sessions whose every call hits a bug (not the caller's fault)."""

    def manager(self, session):
        raise RuntimeError("secret internals")

    extend = sessions = delete_session = manager


def test_a_bug_is_an_error_id_for_the_client_and_a_traceback_in_the_log(caplog):
    """Only InvalidInput's text reaches the client; anything else is an error id, logged with its traceback."""
    async def go():
        async with Client(create_mcp_server(policy="window", sessions_for=lambda request: _Broken())) as client:
            return await error(client, "recall", query="x")

    with caplog.at_level("ERROR", logger="rdmem.mcp"):
        text = run(go())
    assert text.startswith("Error executing tool recall: internal error ") and "secret" not in text
    error_id = text.split("internal error ")[1].split(";")[0]
    logged = [r for r in caplog.records if r.name == "rdmem.mcp" and error_id in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info and "secret internals" in str(logged[0].exc_info[1])


def test_the_old_import_path_still_works_and_says_where_the_server_moved():
    import importlib

    sys.modules.pop("rdmem.integrations.mcp", None)
    with pytest.warns(DeprecationWarning, match="moved to rdmem.mcp"):
        old = importlib.import_module("rdmem.integrations.mcp")
    assert old.create_mcp_server is create_mcp_server and old.SESSIONS_URI == SESSIONS_URI


@pytest.mark.slow  # starts a server
def test_a_get_of_the_mounted_endpoint_is_a_405_not_an_event_stream_held_open(keyed_server):
    """The endpoint is stateless and has nothing to push: a GET answered 200 text/event-stream, then sent
    nothing and never closed (a review held a hundred such streams open). The MCP client goes on as before."""
    import httpx

    live, acme, _, _ = keyed_server
    r = httpx.get(f"{live.url}/mcp", headers={"Authorization": f"Bearer {acme}", "Accept": "text/event-stream",
                                              "MCP-Protocol-Version": "2025-06-18"}, timeout=10)
    assert r.status_code == 405

    async def remembers(client):
        return (await ok(client, "remember", content="The tram to Belem is the 15E.", session="trip"))["ids"]

    assert run(over_http(live, acme, remembers)) == ["m0"]


@pytest.mark.slow  # starts a server
def test_a_lone_surrogate_is_named_by_its_field_as_at_every_other_door(keyed_server):
    """The SDK's parser answered "unexpected end of hex escape at line 1 column 147", naming no field."""
    import httpx

    live, acme, _, _ = keyed_server
    body = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "remember", "arguments": '
            '{"content": "x\\ud800", "session": "s"}}}')
    r = httpx.post(f"{live.url}/mcp", content=body, timeout=10, headers={
        "Authorization": f"Bearer {acme}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "params.arguments.content is not valid Unicode (a lone surrogate)"
    emoji = body.replace("\\ud800", "\\ud83d\\ude00")  # a pair is fine
    assert "lone surrogate" not in httpx.post(f"{live.url}/mcp", content=emoji, timeout=10, headers={
        "Authorization": f"Bearer {acme}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}).text
