"""The inspector over HTTP (httpx against a live server): who may see what, what refuses, what is recorded,
and that it ships whole. The browser tests (``test_browser.py``) drive the same pages in chromium."""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from rdmem.server import ServerSettings, create_app
from rdmem.server.savings import session_savings, tenant_savings
from rdmem.store import KeyStore

from ...integrations._scenario import conversation
from ..conftest import settle_embeddings

pytestmark = pytest.mark.slow  # starts servers

PAGES = ("/ui/", "/ui/session?name=trip", "/ui/session?name=trip&budget=300&query=ferry&offset=100",
         "/ui/budget?name=trip", "/ui/search?name=trip&q=peanuts", "/ui/savings", "/ui/savings?name=trip",
         "/ui/curve?name=trip")
UI = Path(__file__).resolve().parents[3] / "src" / "rdmem" / "server" / "ui"


@pytest.fixture
def keyed(serve, tmp_path, hashing_embedder, fake_openai):
    """A server with keys for tenants acme and globex, acme's session ``trip`` holding 80 scenario messages."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    app = create_app(ServerSettings(store=url, upstream=fake_openai.url, context_window=1000, reply_reserve=100),
                     embedder=hashing_embedder)
    live = serve(app)
    store = app.state.rdmem.store
    live.keys = {t: KeyStore(store).create_key(t)[1] for t in ("acme", "globex")}
    live.store = store
    http = httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {live.keys['acme']}"}, timeout=60)
    http.post("/v1/sessions/trip/messages", json={"messages": conversation(80)}).raise_for_status()
    settle_embeddings(app)
    live.http = http
    yield live
    http.close()


def test_without_a_key_every_page_and_action_is_401(keyed):
    with httpx.Client(base_url=keyed.url) as anonymous:
        for path in PAGES:
            page = anonymous.get(path)
            assert page.status_code == 401, path
            assert 'id="login"' in page.text and "allergic" not in page.text
        refused = anonymous.post("/ui/api/delete", json={"session": "trip", "id": "m0"})
        assert refused.status_code == 401
    # Neither the key, nor the digest the store keeps of it (a backup, a read-only database user has it), nor a
    # token signed by another server or expired, signs in.
    from rdmem.server.auth import SIGN_IN_S, SignIns

    digest = KeyStore(keyed.store).valid_digest(keyed.keys["acme"])
    far = int(time.time()) + 3600
    for forged_value in ("not-a-key", keyed.keys["acme"], f"ui_{digest}", f"ui_{digest}.{far}.{'0' * 64}",
                         SignIns(KeyStore(keyed.store), secret="another server").token(keyed.keys["acme"]),
                         keyed.app.state.rdmem.sign_ins.token(keyed.keys["acme"], now=time.time() - SIGN_IN_S - 1)):
        with httpx.Client(base_url=keyed.url, cookies={f"rdmem_ui_{keyed.port}": forged_value}) as forged:
            assert forged.get("/ui/").status_code == 401, forged_value
    # odd tokens are a 401, never a 500: Latin-1 digits (int() refused them), a non-ASCII MAC (compare_digest did)
    for odd in (f"ui_{digest}.\xb2.{'0' * 64}", f"ui_{digest}.{far}.\xe9{'0' * 63}", f"ui_{digest}.{'9' * 150}.{'0' * 64}",
                f"ui_{digest}.{far}.{'0' * 64}.x"):
        cookie = f"rdmem_ui_{keyed.port}={odd}".encode("latin-1")
        assert httpx.get(f"{keyed.url}/ui/", headers={"Cookie": cookie}).status_code == 401, odd
    good = keyed.app.state.rdmem.sign_ins.token(keyed.keys["acme"])
    with httpx.Client(base_url=keyed.url, cookies={f"rdmem_ui_{keyed.port}": good}) as signed:
        assert signed.get("/ui/").status_code == 200
    assert keyed.http.get("/v1/sessions/trip/messages").json()["messages"][0]["id"] == "m0"


def test_no_page_may_be_framed_by_another_site(keyed):
    """Every page (and the sign-in page, and a refusal) says no frame may show it: a page of another site framed
    the inspector (a keyless server's delete is two clicks, no sign-in) and could lure clicks onto it."""
    with httpx.Client(base_url=keyed.url, headers={"Authorization": f"Bearer {keyed.keys['acme']}"}) as http:
        for path in (*PAGES, "/ui/login", "/docs", "/v1/sessions"):
            page = http.get(path)
            assert page.status_code in ((200, 202) if path.startswith("/ui/curve") else (200,)), path  # 202: computing
            assert page.headers["x-frame-options"] == "DENY", path
            policy = page.headers["content-security-policy"]
            assert policy.startswith("frame-ancestors 'none'"), path
            # the inspector runs only its own script file (the eighth review: no script policy at all)
            assert ("script-src 'self'; object-src 'none'; base-uri 'none'" in policy) == path.startswith("/ui"), path
    refused = httpx.get(f"{keyed.url}/ui/", headers={"Host": "evil.example"})
    assert refused.status_code == 421 and refused.headers["x-frame-options"] == "DENY"


def test_no_answer_is_kept_by_the_browser_but_the_static_files(keyed):
    """Nothing said Cache-Control: after Sign out, the browser's Back button showed a tenant's page again."""
    with httpx.Client(base_url=keyed.url, headers={"Authorization": f"Bearer {keyed.keys['acme']}"}) as http:
        for path in (*PAGES, "/ui/login", "/v1/sessions", "/v1/sessions/trip/messages"):
            assert http.get(path).headers["cache-control"] == "no-store", path
        assert http.get("/ui/").status_code == 200
        assert "no-store" not in http.get("/ui/static/ui.js").headers.get("cache-control", "")
    assert httpx.get(f"{keyed.url}/ui/").headers["cache-control"] == "no-store"  # the sign-in page too


def test_another_tenants_session_is_a_404_and_absent_from_every_list(keyed):
    with httpx.Client(base_url=keyed.url, headers={"X-Rdmem-Key": keyed.keys["globex"]}) as other:
        assert "trip" not in other.get("/ui/").text
        for path in PAGES[1:]:
            page = other.get(path)
            if "name=trip" in path:
                assert page.status_code == 404, path
                assert "no session &#39;trip&#39;" in page.text and "allergic" not in page.text
        assert other.post("/ui/api/delete", json={"session": "trip"}).status_code == 404
    assert keyed.http.get("/v1/sessions/trip").status_code == 200


def test_the_sign_in_cookie_is_the_servers_alone_and_a_revoked_key_stops_at_once(keyed):
    """The cookie held the API key itself, under one name for every server: browsers send a host's cookies to
    all its ports, so another server on the host got the full key (the ninth review), and two rdmem servers
    overwrote each other's sign-in. It is named after the port now, and holds a token the API refuses."""
    with httpx.Client(base_url=keyed.url) as browser:
        signed = browser.post("/ui/api/login", json={"key": keyed.keys["acme"]})
        assert signed.json() == {"tenant": "acme"}
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
        assert cookie.startswith(f"rdmem_ui_{keyed.port}=") and keyed.keys["acme"] not in cookie
        assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
        # Signed in from an https page through a proxy that ends TLS (the request arrives as http): the cookie is
        # Secure, never sent over plain http (it was not, and worked over http for 12 hours).
        https = browser.post("/ui/api/login", json={"key": keyed.keys["acme"]},
                             headers={"Origin": f"https://127.0.0.1:{keyed.port}"})
        assert https.status_code == 200 and "Secure" in https.headers["set-cookie"]
        browser.cookies.clear()
        browser.post("/ui/api/login", json={"key": keyed.keys["acme"]})
        token = browser.cookies[f"rdmem_ui_{keyed.port}"]
        for header in ({"Authorization": f"Bearer {token}"}, {"X-Rdmem-Key": token}):  # no API key
            assert httpx.get(f"{keyed.url}/v1/sessions/trip/messages", headers=header).status_code == 401
        assert browser.get("/ui/").status_code == 200 and "trip" in browser.get("/ui/").text
        assert browser.post("/ui/api/login", json={"key": "wrong"}).status_code == 401
        key_id = next(k.id for k in KeyStore(keyed.store).list_keys("acme"))
        KeyStore(keyed.store).revoke_key(key_id)
        assert browser.get("/ui/").status_code == 401


def test_actions_take_json_from_this_origin_only(keyed):
    headers = {"X-Rdmem-Key": keyed.keys["acme"]}
    with httpx.Client(base_url=keyed.url, headers=headers) as http:
        form = http.post("/ui/api/delete", data={"session": "trip", "id": "m0"})
        assert form.status_code == 415 and "application/json" in form.json()["error"]["message"]
        foreign = http.post("/ui/api/delete", json={"session": "trip", "id": "m0"},
                            headers={"Origin": "http://attacker.example"})
        assert foreign.status_code == 403 and "attacker.example" in foreign.json()["error"]["message"]
        cross = http.post("/ui/api/delete", json={"session": "trip", "id": "m0"}, headers={"Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403
        assert http.post("/ui/api/delete", json={"session": "trip", "id": "nope"}).status_code == 404
        # An https page of this host behind a proxy that ends TLS without saying so (no X-Forwarded-Proto): the
        # request arrives as http; it was refused as "another origin", so no one could sign in or delete there.
        host = f"127.0.0.1:{keyed.port}"
        behind = http.post("/ui/api/delete", json={"session": "trip", "id": "nope"}, headers={"Origin": f"https://{host}"})
        assert behind.status_code == 404
        other = http.post("/ui/api/delete", json={"session": "trip", "id": "m0"},
                          headers={"Origin": f"https://{host}.attacker.example"})
        assert other.status_code == 403
    assert keyed.http.get("/v1/sessions/trip/messages").json()["messages"][0]["id"] == "m0"


def test_a_delete_is_the_apis_and_pages_write_nothing(keyed):
    before = keyed.http.get("/v1/sessions/trip").json()
    version = keyed.store.version("t/acme/trip")
    with httpx.Client(base_url=keyed.url, headers={"X-Rdmem-Key": keyed.keys["acme"]}) as ui:
        for path in PAGES:
            assert ui.get(path).status_code in (200, 202), path
        assert keyed.store.version("t/acme/trip") == version
        assert keyed.http.get("/v1/sessions/trip").json() == before
        ok = ui.post("/ui/api/delete", json={"session": "trip", "id": "m3"})
        assert ok.status_code == 204
        assert "m3" not in {m["id"] for m in keyed.http.get("/v1/sessions/trip/messages").json()["messages"]}
        assert ui.post("/ui/api/delete", json={"session": "trip"}).status_code == 204
    assert keyed.http.get("/v1/sessions/trip").status_code == 404


def test_bad_parameters_are_pages_that_name_them(keyed):
    ui = httpx.Client(base_url=keyed.url, headers={"X-Rdmem-Key": keyed.keys["acme"]})
    cases = {"/ui/session?name=trip&budget=abc": (400, "budget must be a whole number from 1 to 1000000, got &#39;abc&#39;"),
             "/ui/session?name=trip&budget=0": (400, "budget must be a whole number from 1 to 1000000, got &#39;0&#39;"),
             "/ui/session?name=trip&policy=best": (400, "unknown policy &#39;best&#39;; choose one of"),
             "/ui/session?name=trip&offset=-1": (400, "offset must be a whole number"),
             "/ui/session": (400, "name the session"),
             "/ui/search?name=trip&q=x&k=5000": (400, "k must be a whole number from 1 to 1000, got &#39;5000&#39;"),
             "/ui/session?name=%3Cscript%3E": (404, "no session &#39;&lt;script&gt;&#39;")}
    for path, (status, text) in cases.items():
        page = ui.get(path)
        assert page.status_code == status and text in page.text, (path, page.text[-800:])
        assert page.headers["content-type"].startswith("text/html")


def test_the_proxy_records_each_requests_tokens_for_its_tenant_and_session(keyed, fake_openai):
    history = [{"role": "system", "content": "You are a travel assistant."}, *conversation(80)]
    seen = []
    with httpx.Client(base_url=keyed.url, timeout=60) as client:
        for question in ("Which tram goes to Belem?", "And the ferry?"):
            history.append({"role": "user", "content": question})
            answer = client.post("/v1/chat/completions", json={"model": "m", "messages": history},
                                 headers={"X-Rdmem-Key": keyed.keys["acme"], "X-Rdmem-Session": "trip"})
            seen.append((int(answer.headers["x-rdmem-tokens-before"]), int(answer.headers["x-rdmem-tokens-after"]),
                         answer.headers["x-rdmem-compacted"] == "true"))
            history.append({"role": "assistant", "content": "ok"})
    rows = session_savings(keyed.store, "acme", "trip")
    assert [(r.sent, r.forwarded, r.compacted) for r in rows] == seen and all(r.compacted for r in rows)
    assert rows[0].time <= rows[1].time
    assert tenant_savings(keyed.store, "acme") == {"trip": rows} and tenant_savings(keyed.store, "globex") == {}
    page = keyed.http.get("/ui/savings", headers={"X-Rdmem-Key": keyed.keys["acme"]}).text
    assert f"clients sent <strong>{sum(s for s, _, _ in seen):,}</strong> tokens" in page
    keyed.http.delete("/v1/sessions/trip")
    assert session_savings(keyed.store, "acme", "trip") == []


def test_a_keyless_server_shows_the_default_tenant_and_no_ui_means_no_ui(serve, tmp_path, hashing_embedder):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    live = serve(create_app(ServerSettings(store=url), embedder=hashing_embedder))
    page = httpx.get(live.url + "/ui/")
    assert page.status_code == 200 and "Tenant <strong>default</strong>" in page.text and "no API keys" in page.text
    assert not any(p.startswith("/ui") for p in httpx.get(live.url + "/openapi.json").json()["paths"])
    off = serve(create_app(ServerSettings(store=url, ui=False), embedder=hashing_embedder))
    for path in ("/ui/", "/ui/session?name=x", "/ui/static/ui.css"):
        assert httpx.get(off.url + path).status_code == 404
    with pytest.raises(ValueError, match="ui must be True or False, got 'no'"):
        ServerSettings(ui="no")


def test_a_store_that_fails_is_a_page_saying_so_not_the_apis_json(keyed, monkeypatch):
    """While the database is down, the inspector answered the API's JSON 503 to the browser."""
    from rdmem.errors import StoreError

    def down(*args, **kwargs):
        raise StoreError("PostgreSQL store at db:5432/rdmem: connection refused")

    monkeypatch.setattr(type(keyed.store), "sessions", down)
    page = httpx.get(keyed.url + "/ui/", headers={"Authorization": f"Bearer {keyed.keys['acme']}"})
    assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
    assert "the store is unavailable (error " in page.text and page.headers["retry-after"] == "1"
    assert page.headers["x-rdmem-error-id"] in page.text  # the id the server's log line carries


def test_the_wheel_ships_the_templates_and_assets(tmp_path):
    root = UI.parents[3]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
                    str(root)], check=True, timeout=300)
    wheel = next(tmp_path.glob("rdmem-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {f"rdmem/server/ui/{p.relative_to(UI)}" for p in [*UI.glob("templates/*.html"), *UI.glob("static/*")]}
    assert wanted and wanted <= names, wanted - names


@pytest.mark.parametrize("flags, ui", [([], True), (["--no-ui"], False)])
def test_rdmem_serve_no_ui(flags, ui, tmp_path, monkeypatch, capsys):
    """``rdmem serve --no-ui`` hands ``ui=False`` to every worker (the server itself is not started here)."""
    import uvicorn

    from rdmem.cli import main
    from rdmem.server.settings import SETTINGS_ENV

    monkeypatch.setenv(SETTINGS_ENV, "")  # restored after the test
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    main(["serve", "--store", f"sqlite:///{tmp_path / 'm.db'}", "--port", "1", *flags])
    assert ServerSettings.from_env().ui is ui
    assert ("inspector at http://127.0.0.1:1/ui" in capsys.readouterr().err) is ui


def test_a_long_sessions_curve_is_of_its_newest_messages_and_says_so(keyed, monkeypatch):
    """Found by the eighth review: a curve replays every message (205 s of CPU for 20,000): it reads the newest
    CURVE_MESSAGES, and its table says of how many."""
    import time

    from rdmem.server.ui import _views

    monkeypatch.setattr(_views, "CURVE_MESSAGES", 30)
    deadline = time.monotonic() + 120
    while (page := keyed.http.get("/ui/curve?name=trip")).status_code == 202 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert page.status_code == 200, page.text[:300]
    units = keyed.http.get("/v1/sessions/trip").json()["units"]
    assert units > 30 and f"of the newest 30 of the session&#39;s {units} messages" in page.text
