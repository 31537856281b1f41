"""Screenshots of the web inspector (``docs/ui-*.png``, shown in README's "See what memory kept").

Starts ``rdmem serve``'s app on a free loopback port with the test suite's
scenario (the adapters' 300-turn conversation, continued through the proxy in
front of the tests' fake model), signs in with Debian's chromium under
Playwright and photographs each page; it also prints axe-core's findings of
every impact for each page.

    HF_HUB_OFFLINE=1 .venv/bin/python docs/make_screenshots.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests._fake_openai import FakeOpenAI  # noqa: E402
from tests.server.conftest import LiveServer  # noqa: E402
from tests.server.ui._site import SESSION, populate, settings  # noqa: E402
from tests.server.ui.conftest import CHROMIUM_FLAGS, chromium_path  # noqa: E402

SHOTS = [  # (file, URL, what to do first)
    ("ui-sessions.png", "/ui/", None),
    ("ui-timeline.png", f"/ui/session?name={SESSION}&budget=2000", "#msg-m0 details.why summary"),
    ("ui-timeline-tools.png", f"/ui/session?name={SESSION}&budget=2000&query=ferry+opening+hours", "li.msg:has(.call)"),
    ("ui-budget.png", f"/ui/budget?name={SESSION}&budget=2000", "curve"),
    ("ui-search.png", f"/ui/search?name={SESSION}&q=peanuts", "dialog"),
    ("ui-savings.png", "/ui/savings", None),
]


def main() -> None:
    from axe_playwright_python.sync_playwright import Axe
    from playwright.sync_api import expect, sync_playwright

    from rdmem.embed import CachedEmbedder, SentenceTransformerEmbedder
    from rdmem.server import create_app
    from rdmem.store import KeyStore, open_store

    work = Path(tempfile.mkdtemp(prefix="rdmem-shots-"))
    upstream = FakeOpenAI()
    upstream.text = "Try the grilled fish at Casa Alfama: no peanuts in the kitchen."
    url = f"sqlite:///{work / 'memory.db'}"
    with open_store(url) as store:
        _, key = KeyStore(store).create_key("acme")
    embedder = CachedEmbedder(SentenceTransformerEmbedder(), cache_dir=ROOT / ".rdmem-cache" / "tests")
    live = LiveServer(create_app(settings(url, upstream.url), embedder=embedder))
    try:
        populate(live.url, key)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
            context = browser.new_context(base_url=live.url, viewport={"width": 1280, "height": 860})
            page = context.new_page()
            page.goto("/ui/login")
            page.screenshot(path=ROOT / "docs" / "ui-sign-in.png")
            page.get_by_label("API key").fill(key)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url("**/ui/")
            for name, path, first in SHOTS:
                page.goto(path)
                if first == "curve":
                    expect(page.locator("#curve")).not_to_have_attribute("data-curve-pending", "", timeout=300_000)
                elif first == "dialog":
                    page.locator("#msg-m1").get_by_role("button", name="Delete…").click()
                elif first is not None:
                    target = page.locator(first).first
                    target.scroll_into_view_if_needed()
                    if first.endswith("summary"):
                        target.click()
                    else:
                        page.evaluate("el => el.scrollIntoView({block: 'center'})", target.element_handle())
                violations = Axe().run(page).response["violations"]
                print(f"{name}: axe {[(v['id'], v['impact'], len(v['nodes'])) for v in violations] or 'clean'}")
                page.screenshot(path=ROOT / "docs" / name)
            browser.close()
    finally:
        live.stop()
        upstream.stop()
        embedder.save()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
