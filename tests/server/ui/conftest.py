"""The inspector's fixtures: a real server with the scenario stored (two tenants with keys), and Debian's
chromium driven by Playwright (the browser tests skip, saying why, where either is missing)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from ..conftest import LiveServer, settle_embeddings

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="package")
def chromium():
    """Debian's chromium under Playwright (never a downloaded browser)."""
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("the browser tests need Playwright: pip install playwright (make test installs it)")
    path = chromium_path()
    if path is None:
        pytest.skip("the browser tests need Debian's chromium: apt-get install chromium (make test installs it "
                    "when run as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory, minilm, _fake_openai_server):
    """``rdmem serve``'s app on a free loopback port, an SQLite store with keys for tenants ``acme`` and
    ``globex``, the scenario stored in acme's session ``trip-lisbon`` (partly through the proxy)."""
    from rdmem.server import create_app
    from rdmem.store import KeyStore, open_store

    from ._site import populate, settings

    _fake_openai_server.reset()
    _fake_openai_server.text = "Try the grilled fish at Casa Alfama: no peanuts in the kitchen."
    url = f"sqlite:///{tmp_path_factory.mktemp('ui') / 'memory.db'}"
    with open_store(url) as store:
        _, key_a = KeyStore(store).create_key("acme")
        _, key_b = KeyStore(store).create_key("globex")
    app = create_app(settings(url, _fake_openai_server.url), embedder=minilm)
    live = LiveServer(app)
    try:
        live.keys = {"acme": key_a, "globex": key_b}
        live.proxied = populate(live.url, key_a, other=key_b)
        settle_embeddings(app)
        yield live
    finally:
        live.stop()
        _fake_openai_server.reset()
