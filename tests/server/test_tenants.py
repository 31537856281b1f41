"""Tenants: with keys, every call needs one, and no call of one tenant reaches another tenant's data."""

from __future__ import annotations

import httpx
import openai
import pytest

from rdmem.server import ServerSettings, create_app
from rdmem.store import KeyStore, open_store

pytestmark = pytest.mark.slow  # starts servers


@pytest.fixture
def keyed(serve, tmp_path, hashing_embedder, fake_openai):
    url = f"sqlite:///{tmp_path / 'keyed.db'}"
    with open_store(url) as store:
        (acme, acme_secret), (_, globex_secret) = KeyStore(store).create_key("acme"), KeyStore(store).create_key("globex")
    live = serve(create_app(ServerSettings(store=url, upstream=fake_openai.url, context_window=4000),
                            embedder=hashing_embedder))

    def client(secret: str | None) -> httpx.Client:
        return httpx.Client(base_url=live.url, timeout=30,
                            headers={"Authorization": f"Bearer {secret}"} if secret else {})

    a, b = client(acme_secret), client(globex_secret)
    a.post("/v1/sessions/shared/messages", json={"messages": [
        {"role": "user", "content": "Acme's secret plan: launch on 3 May."},
        {"role": "assistant", "content": "Noted."}]}).raise_for_status()
    memory = a.post("/memories", json={"messages": [{"role": "user", "content": "Acme likes red."}],
                                       "user_id": "alice"}).json()["results"][0]["id"]
    yield live, a, b, client, acme.id, memory, url, fake_openai
    a.close()
    b.close()


ROUTES = [
    ("GET", "/v1/sessions/shared", None),
    ("GET", "/v1/sessions/shared/messages", None),
    ("POST", "/v1/sessions/shared/context", {"budget": 100}),
    ("POST", "/v1/sessions/shared/search", {"query": "plan"}),
    ("POST", "/v1/sessions/shared/feedback", {"ids": ["m0"], "reward": 1}),
    ("POST", "/v1/sessions/shared/explain", {"budget": 100}),
    ("DELETE", "/v1/sessions/shared/messages/m0", None),
    ("DELETE", "/v1/sessions/shared", None),
]


def test_every_route_needs_a_key(keyed):
    live, _, _, client, *_ = keyed
    anonymous, wrong = client(None), client("rdmem_" + "x" * 43)
    for c in (anonymous, wrong):
        for method, path, body in ROUTES + [("GET", "/v1/sessions", None), ("POST", "/v1/sessions/x/messages",
                                            {"messages": [{"role": "user", "content": "x"}]}),
                                            ("GET", "/memories?user_id=alice", None), ("GET", "/metrics", None),
                                            ("POST", "/search", {"query": "x", "user_id": "alice"})]:
            r = c.request(method, path, json=body)
            assert r.status_code == 401, (method, path, r.text)
            assert r.json()["error"]["code"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"
    assert anonymous.get("/healthz").status_code == 200  # liveness stays open


def test_no_route_of_one_tenant_reaches_another_tenants_data(keyed):
    live, a, b, _, _, memory, _, _ = keyed
    assert b.get("/v1/sessions").json()["sessions"] == []
    for method, path, body in ROUTES:
        r = b.request(method, path, json=body)
        assert r.status_code == 404, (method, path, r.text)
    b.post("/v1/sessions/shared/messages", json={"messages": [{"role": "user", "content": "Globex here."}]})
    assert [m["content"] for m in b.get("/v1/sessions/shared/messages").json()["messages"]] == ["Globex here."]
    assert [m["content"] for m in a.get("/v1/sessions/shared/messages").json()["messages"]] == [
        "Acme's secret plan: launch on 3 May.", "Noted."]
    assert b.get("/memories", params={"user_id": "alice"}).json() == {"results": []}
    assert b.post("/search", json={"query": "red", "user_id": "alice"}).json() == {"results": []}
    assert b.get(f"/memories/{memory}").status_code == 404
    assert b.delete(f"/memories/{memory}").status_code == 404
    b.delete("/memories", params={"user_id": "alice"})
    assert a.get(f"/memories/{memory}").json()["memory"] == "Acme likes red."  # still there
    assert [s["session"] for s in a.get("/v1/sessions").json()["sessions"]] == ["mem0:user_id=alice", "shared"]


def test_the_proxy_scopes_by_its_own_key_header(keyed):
    live, _, b, _, _, _, _, upstream = keyed
    headers = {"X-Rdmem-Session": "shared"}
    anonymous = openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-up", max_retries=0, default_headers=headers)
    with pytest.raises(openai.AuthenticationError):
        anonymous.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    # The rdmem key travels in X-Rdmem-Key; Authorization carries the client's key for the upstream.
    secret = b.headers["Authorization"].split()[1]
    globex = openai.OpenAI(base_url=f"{live.url}/v1", api_key="sk-up", max_retries=0,
                           default_headers={**headers, "X-Rdmem-Key": secret})
    globex.chat.completions.create(model="m", messages=[{"role": "user", "content": "What is Acme's plan?"}])
    assert upstream.requests[-1]["auth"] == "Bearer sk-up"
    assert "x-rdmem-key" not in {k.lower() for k in upstream.requests[-1]["headers"]}  # never forwarded
    assert "Acme's secret" not in str(upstream.requests[-1]["body"]["messages"])


def test_a_revoked_key_stops_working_at_once(keyed):
    live, a, _, _, acme_id, _, url, _ = keyed
    assert a.get("/v1/sessions").status_code == 200
    with open_store(url) as store:  # revoked from elsewhere (rdmem keys revoke), the server keeps running
        assert KeyStore(store).revoke_key(acme_id)
    r = a.get("/v1/sessions")
    assert r.status_code == 401 and r.json()["error"]["message"] == "invalid or revoked API key"


def test_tenants_do_not_share_cached_vectors(keyed):
    """A vector cache shared by tenants let one tell, by timing its own searches, whether another had stored
    or asked an exact text (a cached query answered five times faster). Each tenant's queries go through a
    cache of its own, and the background worker embeds stored messages without one."""
    live, a, b, *_ = keyed
    pool = live.app.state.rdmem.pool
    secret = "Acme's secret plan: launch on 3 May."
    assert a.post("/v1/sessions/shared/search", json={"query": secret}).status_code == 200
    assert b.post("/v1/sessions/theirs/messages", json={"messages": [{"role": "user", "content": "hi"}]}).status_code == 201
    assert b.post("/v1/sessions/theirs/search", json={"query": "what is the plan?"}).status_code == 200
    acme, globex = pool.embedder_for("acme"), pool.embedder_for("globex")
    assert acme is not globex and pool.embedder_for("acme") is acme
    from rdmem.embed import content_key

    cached = lambda cache, text: content_key(text) in cache._mem  # noqa: E731
    assert cached(acme, secret) and not cached(globex, secret)  # acme's query, cached for acme only
    assert cached(globex, "what is the plan?") and not cached(acme, "what is the plan?")
    assert not hasattr(pool.embedder, "_mem")  # the shared model (and the worker) keep no vectors


def test_a_server_started_without_keys_stays_keyed_once_a_key_was_used_and_every_key_revoked(
        serve, tmp_path, hashing_embedder):
    """Only a keyless request made the server check for keys: one started keyless whose callers all sent the
    key created later fell back to serving anyone as ``default`` once that key was revoked (the keyless era's
    data included). A second server process on the store, which never served the key, is asked too."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    one, other = (serve(create_app(ServerSettings(store=url), embedder=hashing_embedder)) for _ in range(2))
    assert httpx.post(f"{one.url}/v1/sessions/default-era/messages",
                      json={"role": "user", "content": "the wifi password is hunter2"}).is_success
    with open_store(url) as store:
        key, secret = KeyStore(store).create_key("acme")
    with_key = {"Authorization": f"Bearer {secret}"}
    assert httpx.get(f"{one.url}/v1/sessions", headers=with_key).status_code == 200
    with open_store(url) as store:
        assert KeyStore(store).revoke_key(key.id)
    for live in (one, other):
        for path in ("/v1/sessions", "/v1/sessions/default-era/messages"):
            r = httpx.get(f"{live.url}{path}")
            assert r.status_code == 401 and "an API key is required" in r.json()["error"]["message"], (live.url, path)
