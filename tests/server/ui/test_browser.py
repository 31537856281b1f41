"""The inspector in a real browser: Debian's chromium, driven by Playwright, on a real server holding the
adapters' 300-turn scenario. Every figure a page shows is checked against the REST API's own answer."""

from __future__ import annotations

import json

import httpx
import pytest

from ...integrations._scenario import BUDGET, DIRECTIVE
from ._site import SESSION

pytestmark = pytest.mark.slow  # a server, the real model and a browser


def api(site, tenant: str = "acme") -> httpx.Client:
    return httpx.Client(base_url=site.url, headers={"Authorization": f"Bearer {site.keys[tenant]}"}, timeout=120)


def signed_in(chromium, site, tenant: str):
    """A browser context signed in as ``tenant`` through the sign-in page, and its page."""
    context = chromium.new_context(base_url=site.url)
    page = context.new_page()
    page.goto("/ui/login")
    page.get_by_label("API key").fill(site.keys[tenant])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/ui/")
    return context, page


@pytest.fixture(scope="module")
def acme(chromium, site):
    context, page = signed_in(chromium, site, "acme")
    yield page
    context.close()


def all_ids(site) -> list[str]:
    ids, offset = [], 0
    with api(site) as http:
        while offset is not None:
            page = http.get(f"/v1/sessions/{SESSION}/messages", params={"offset": offset, "limit": 1000}).json()
            ids += [m["id"] for m in page["messages"]]
            offset = page["next_offset"]
    return ids


def states(page) -> dict[str, str]:
    return page.eval_on_selector_all("li.msg", "els => Object.fromEntries(els.map(e => [e.dataset.id, e.dataset.state]))")


def test_the_early_directive_shows_as_kept_at_2000_tokens_with_its_directive_score(acme, site):
    from playwright.sync_api import expect

    with api(site) as http:
        report = http.post(f"/v1/sessions/{SESSION}/explain", json={"budget": BUDGET}).json()["report"]
    directive = next(d for d in report if d["id"] == "m0")
    assert directive["decision"] == "kept" and directive["breakdown"]["prior.directive"] > 0.5
    acme.goto(f"/ui/session?name={SESSION}&budget={BUDGET}")
    row = acme.locator("#msg-m0")
    expect(row.locator(".text")).to_have_text(DIRECTIVE)
    expect(row.locator(".badge")).to_have_text("kept")  # the state as a word, not only a colour
    assert row.get_attribute("data-state") == "kept"
    why = row.locator("details.why")
    expect(why.locator("summary")).to_contain_text(f"directive {directive['breakdown']['prior.directive']:.3f}")
    why.locator("summary").click()
    term = why.locator("tr", has=acme.locator("code", has_text="prior.directive"))
    expect(term.locator("td.num")).to_have_text(f"{directive['breakdown']['prior.directive']:.3f}")
    expect(why).to_contain_text(directive["reason"])  # protected (qa mode)
    # Every message of the first screen has the API's decision for the same budget.
    decided = {d["id"]: d["decision"] for d in report}
    shown = states(acme)
    assert len(shown) >= 100 and all(shown[i] == decided.get(i, "archived") for i in shown)


def test_changing_the_budget_redraws_the_states_and_writes_nothing(acme, site):
    with api(site) as http:
        before = http.get(f"/v1/sessions/{SESSION}").json()
    last = (before["units"] - 1) // 100 * 100  # the newest messages' page: where a budget shows most
    acme.goto(f"/ui/session?name={SESSION}&budget={BUDGET}&offset={last}")
    at_2000 = states(acme)
    budget = acme.get_by_label("Budget (tokens)")
    budget.fill("300")
    budget.press("Tab")  # a change: the page redraws itself (the Show button does the same without a script)
    acme.wait_for_url("**budget=300**")
    assert f"offset={last}" in acme.url and states(acme).keys() == at_2000.keys()  # the same messages
    at_300 = states(acme)
    changed = [i for i in at_2000 if at_300.get(i) != at_2000[i]]
    assert changed, "a budget of 300 tokens should drop some of what 2,000 kept"
    first = changed[0]
    # A call's results are drawn inside it with their own badges: the message's own badge comes first.
    assert acme.locator(f"#msg-{first} .badge").first.inner_text() == at_300[first] != at_2000[first]
    with api(site) as http:
        after = http.get(f"/v1/sessions/{SESSION}").json()
    assert after == before  # nothing written: same messages, working set and last activity


def test_tool_calls_are_drawn_with_their_results(acme, site):
    acme.goto(f"/ui/session?name={SESSION}&budget={BUDGET}")
    call = acme.locator("li.msg", has=acme.locator(".call code", has_text="lookup")).first
    result = call.locator("ol.results > li.role-tool").first
    assert "Opening hours for" in result.locator(".text").inner_text()
    assert result.locator(".badge").inner_text() in ("kept", "archived", "compressed", "truncated", "summarized")


def test_the_budget_bar_adds_up_and_the_curve_is_rdmem_evals(acme, site, minilm):
    from playwright.sync_api import expect

    from rdmem.datasets import parse_jsonl
    from rdmem.eval import EvalConfig, run_eval

    with api(site) as http:
        ctx = http.post(f"/v1/sessions/{SESSION}/context", json={"budget": BUDGET}).json()
    acme.goto(f"/ui/budget?name={SESSION}&budget={BUDGET}")
    cells = acme.locator("table.legend tbody tr").all_inner_texts()
    by_kind = {c.split("\t")[0].strip(): int(c.split("\t")[1].replace(",", "")) for c in cells}
    assert set(by_kind) >= {"system", "kept", "free"} and by_kind["kept"] > 0
    assert sum(v for k, v in by_kind.items() if k != "free") == ctx["tokens"]
    assert by_kind["free"] == BUDGET - ctx["tokens"]
    curve = acme.locator("#curve")
    expect(curve).not_to_have_attribute("data-curve-pending", "", timeout=240_000)
    expect(curve.locator("svg[role=img]")).to_have_count(2)
    shown = {tuple(r.split("\t")[:2]): r.split("\t") for r in curve.locator("tbody tr").all_inner_texts()}
    # The same numbers from `rdmem eval jsonl`'s code on the session as the API exports it.
    with api(site) as http:
        messages = http.get(f"/v1/sessions/{SESSION}/messages", params={"limit": 1000}).json()["messages"]
    line = json.dumps({"id": SESSION, "messages": [{k: m[k] for k in ("id", "role", "content", "tool_calls",
                                                                     "tool_call_id") if k in m} for m in messages]})
    budgets = tuple(sorted({int(b.replace(",", "")) for p, b in shown if p != "full history"}))
    result = run_eval(parse_jsonl([line]), EvalConfig(budgets=budgets, policies=("rd", "window"), regimes=("streaming",),
                                                      proxies=True, calibrate_embedding=False), embedder=minilm)
    for row in result.rows:
        if row.budget is not None and row.category == "all":
            cells = shown[(row.policy, f"{row.budget:,}")]
            assert cells[3] == f"{row.information_coverage:.3f}" and cells[4] == f"{row.embedding_coverage:.3f}"


def test_proxy_savings_per_session_and_overall(acme, site):
    sent, forwarded = sum(b for b, _ in site.proxied), sum(a for _, a in site.proxied)
    assert forwarded < sent
    for url in ("/ui/savings", f"/ui/savings?name={SESSION}"):
        acme.goto(url)
        summary = acme.locator("p.summary").inner_text()
        assert f"{len(site.proxied)} requests" in summary
        assert f"clients sent {sent:,} tokens" in summary and f"the model was sent {forwarded:,}" in summary
        assert acme.locator("figure.chart svg polyline").count() == 2


def test_search_then_delete_behind_the_confirmation(acme, site):
    from playwright.sync_api import expect

    acme.goto(f"/ui/search?name={SESSION}&q=peanuts")
    row = acme.locator("#msg-m1")
    expect(row).to_contain_text("no peanuts")
    assert float(row.locator("td.num").nth(1).inner_text()) > 0  # its score
    row.get_by_role("button", name="Delete…").click()
    dialog = acme.get_by_role("dialog")
    expect(dialog).to_contain_text("permanent")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert "m1" in all_ids(site)  # cancelled: nothing happened
    row.get_by_role("button", name="Delete…").click()
    dialog.get_by_role("button", name="Delete permanently").click()
    expect(row).to_have_count(0)
    expect(acme.locator("#status")).to_have_text("Deleted message \u2068m1\u2069.")  # the id isolated (its direction)
    assert "m1" not in all_ids(site)
    with api(site) as http:
        hits = http.post(f"/v1/sessions/{SESSION}/search", json={"query": "peanuts", "k": 50}).json()["results"]
    assert hits and "m1" not in {h["id"] for h in hits}


def test_tenant_b_sees_nothing_of_tenant_a(chromium, site):
    context, page = signed_in(chromium, site, "globex")
    try:
        assert page.locator("table.data tbody th").all_inner_texts() == ["tenant-b-private"]
        for url in (f"/ui/session?name={SESSION}", f"/ui/budget?name={SESSION}", f"/ui/search?name={SESSION}&q=peanuts",
                    f"/ui/savings?name={SESSION}", f"/ui/curve?name={SESSION}"):
            response = page.goto(url)
            assert response.status == 404, url
            assert "allergic" not in page.content() and "Opening hours" not in page.content()
        page.goto("/ui/savings")
        assert SESSION not in page.content()
        refused = page.request.post("/ui/api/delete", data={"session": SESSION, "id": "m0"},
                                    headers={"content-type": "application/json"})
        assert refused.status == 404
        assert "m0" in all_ids(site)
    finally:
        context.close()


def test_a_page_of_another_site_cannot_frame_the_inspector(chromium, site):
    """A page on another origin frames the inspector: chromium refuses to show it (it rendered, clickable)."""
    context = chromium.new_context()
    try:
        page = context.new_page()
        with page.expect_response(f"{site.url}/ui/login") as framed:
            page.set_content(f'<iframe src="{site.url}/ui/login" width="800" height="400"></iframe>')
        assert framed.value.status == 200
        page.wait_for_timeout(500)
        frame = page.frames[1]
        assert 'id="login"' not in frame.content() and frame.url != f"{site.url}/ui/login"
    finally:
        context.close()


def test_no_key_means_401_and_the_sign_in_page(chromium, site):
    context = chromium.new_context(base_url=site.url)
    try:
        page = context.new_page()
        for url in ("/ui/", f"/ui/session?name={SESSION}", f"/ui/budget?name={SESSION}", "/ui/savings",
                    f"/ui/search?name={SESSION}&q=peanuts"):
            response = page.goto(url)
            assert response.status == 401, url
            assert page.get_by_label("API key").is_visible()
            assert "allergic" not in page.content() and "Opening hours" not in page.content()
        page.get_by_label("API key").fill("not-a-key")
        page.get_by_role("button", name="Sign in").click()
        from playwright.sync_api import expect

        expect(page.locator("#status")).to_have_text("invalid or revoked API key")
    finally:
        context.close()


def test_keyboard_alone_opens_a_breakdown_and_the_confirmation(acme, site):
    from playwright.sync_api import expect

    acme.goto(f"/ui/session?name={SESSION}&budget={BUDGET}")
    summary = acme.locator("#msg-m0 details.why summary")
    summary.focus()
    acme.keyboard.press("Enter")
    expect(acme.locator("#msg-m0 details.why")).to_have_attribute("open", "")
    acme.keyboard.press("Shift+Tab")  # back to the message's Delete button
    expect(acme.locator("#msg-m0 [data-delete]")).to_be_focused()
    acme.keyboard.press("Enter")
    dialog = acme.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()  # the safe choice first
    acme.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(acme.locator("#msg-m0 [data-delete]")).to_be_focused()
    assert "m0" in all_ids(site)


def test_no_serious_accessibility_violations(chromium, acme, site):
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    pages = ["/ui/", f"/ui/session?name={SESSION}&budget={BUDGET}", f"/ui/session?name={SESSION}&budget=300&query=ferry",
             f"/ui/budget?name={SESSION}&budget={BUDGET}", f"/ui/search?name={SESSION}&q=ferry", "/ui/savings",
             f"/ui/savings?name={SESSION}", "/ui/session?name=no-such-session"]
    found = {}
    for url in pages:
        acme.goto(url)
        found[url] = axe.run(acme).response["violations"]
    anonymous = chromium.new_context(base_url=site.url)
    try:
        page = anonymous.new_page()
        page.goto("/ui/")
        found["/ui/ (sign-in)"] = axe.run(page).response["violations"]
    finally:
        anonymous.close()
    serious = {url: [(v["id"], v["impact"], v["help"]) for v in vs if v["impact"] in ("serious", "critical")]
               for url, vs in found.items()}
    assert all(not v for v in serious.values()), serious


def test_deleting_a_whole_session_behind_the_confirmation(acme, site):
    from playwright.sync_api import expect

    acme.goto("/ui/session?name=notes")
    acme.get_by_role("button", name="Delete this session…").click()
    dialog = acme.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete session “\u2068notes\u2069” and every message in it?")
    expect(dialog).to_contain_text("This is permanent.")
    dialog.get_by_role("button", name="Delete permanently").click()
    acme.wait_for_url("**/ui/?deleted=notes")
    expect(acme.get_by_role("status").first).to_contain_text("Deleted session “notes”")
    assert "notes" not in acme.locator("table.data tbody th").all_inner_texts()
    with api(site) as http:
        assert http.get("/v1/sessions/notes").status_code == 404


def test_after_sign_out_the_back_button_shows_no_tenant_page(chromium, site):
    """No answer said Cache-Control: chromium's Back button brought a tenant's timeline back after Sign out
    (the ninth review)."""
    context, page = signed_in(chromium, site, "acme")
    try:
        page.goto(f"/ui/session?name={SESSION}")
        assert DIRECTIVE[:30] in page.content()
        page.get_by_role("button", name="Sign out").click()
        page.wait_for_url("**/ui/login")
        assert context.cookies() == []
        page.go_back()
        page.wait_for_load_state()
        assert DIRECTIVE[:30] not in page.content() and 'id="login"' in page.content()
    finally:
        context.close()


def test_deleting_a_tool_call_leaves_its_results_shown_as_they_stay_stored(acme, site):
    """A call's results are shown under it: deleting the call took them off the page, though they stay stored
    (and came back on reload), so the user believed a result holding an account number gone."""
    from playwright.sync_api import expect

    call = {"role": "assistant", "content": None, "id": "call-msg",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "balance", "arguments": "{}"}}]}
    with api(site) as http:
        assert http.post("/v1/sessions/bank/messages", json={"messages": [
            {"role": "user", "content": "My balance?", "id": "ask"}, call,
            {"role": "tool", "tool_call_id": "c1", "content": "account 9912-4431, balance 12,400", "id": "result"}],
        }).status_code == 201
    acme.goto("/ui/session?name=bank")
    acme.locator("#msg-call-msg").get_by_role("button", name="Delete…").first.click()
    dialog = acme.get_by_role("dialog")
    expect(dialog).to_contain_text("Its tool results stay")
    dialog.get_by_role("button", name="Delete permanently").click()
    expect(acme.locator("#msg-call-msg")).to_have_count(0)
    expect(acme.locator("#msg-result")).to_contain_text("account 9912-4431")  # still shown: still stored
    with api(site) as http:
        assert [m["id"] for m in http.get("/v1/sessions/bank/messages").json()["messages"]] == ["ask", "result"]
    acme.reload()
    expect(acme.locator("#msg-result")).to_contain_text("account 9912-4431")
