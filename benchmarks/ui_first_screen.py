"""The inspector's first screen of a 10,000-message session: how long ``rdmem serve`` takes to answer it.

Builds (once; reused on later runs) an SQLite store holding one session of
10,000 messages (the adapters' scenario, lengthened: chatter, tool calls and
their results, the early directive), embedded with the real MiniLM. Then
starts ``rdmem serve`` on it as a user does, and times, over HTTP:

- the first screen cold (the first request after start: the server reads
  the session from the store);
- the first screen warm (the same page again, and with other budgets, each a
  new context);
- with a query (the model embeds it), and the last page of the timeline;
- in chromium (if installed), the browser's own navigation timing.

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python benchmarks/ui_first_screen.py [--store DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integrations._scenario import conversation  # noqa: E402

N = 10_000
SESSION = "big"


def build(path: Path) -> None:
    """The store: one session of ``N`` messages of tenant ``default``, as the REST API would name it."""
    from rdmem import MemoryManager
    from rdmem.embed import CachedEmbedder, SentenceTransformerEmbedder

    embedder = CachedEmbedder(SentenceTransformerEmbedder(), cache_dir=ROOT / ".rdmem-cache" / "bench")
    history = conversation(N)[:N]
    t0 = time.perf_counter()
    mem = MemoryManager(budget=4000, store=f"sqlite:///{path}", session=f"t/default/{SESSION}", embedder=embedder)
    for i in range(0, N, 500):
        mem.extend(history[i:i + 500])
        embedder.save()
        print(f"  stored {min(i + 500, N):,} of {N:,} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    mem.close()


def timed(http: httpx.Client, url: str) -> float:
    t0 = time.perf_counter()
    page = http.get(url)
    ms = 1000 * (time.perf_counter() - t0)
    page.raise_for_status()
    assert 'class="msg' in page.text or "sessions" in page.text.lower()
    return ms


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return f"p50 {statistics.median(ordered):.0f} ms, p95 {p95:.0f} ms, max {ordered[-1]:.0f} ms (n={len(ordered)})"


def browser_timing(url: str) -> list[float]:
    """Navigation to the first screen in chromium: responseEnd and domContentLoaded (ms from the start)."""
    import shutil

    path = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return []
    if path is None:
        return []
    from tests.server.ui.conftest import CHROMIUM_FLAGS

    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        page = browser.new_page()
        for _ in range(10):
            page.goto(url)
            timing = page.evaluate("JSON.stringify(performance.getEntriesByType('navigation')[0])")
            out.append(json.loads(timing)["domContentLoadedEventEnd"])
        browser.close()
    return out


@contextlib.contextmanager
def serving(path: Path) -> Iterator[str]:
    """``rdmem serve`` on the store, as a user starts it; its base URL once it answers."""
    port = 18765
    server = subprocess.Popen([sys.executable, "-m", "rdmem.cli", "serve", "--store", f"sqlite:///{path}",
                               "--port", str(port), "--log-level", "warning"], stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("rdmem serve did not start")
            time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=str(ROOT / ".rdmem-cache" / "bench"), help="where the store is kept")
    args = parser.parse_args()
    path = Path(args.store) / f"ui-{N}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        print(f"building {path} (once)", file=sys.stderr)
        build(path)
    load = os.getloadavg()[0]
    cold, warm, budgets, last, queries, sessions, query0, shown = [], [], [], [], [], [], [], []
    first = f"/ui/session?name={SESSION}"
    rest_cold = []
    for run in range(4):  # four starts: the first request of each is cold (the REST API's context on the odd ones)
        with serving(path) as base, httpx.Client(base_url=base, timeout=120) as http:
            if run % 2:
                t0 = time.perf_counter()
                http.post(f"/v1/sessions/{SESSION}/context", json={"budget": 4000}).raise_for_status()
                rest_cold.append(1000 * (time.perf_counter() - t0))
                continue
            cold.append(timed(http, first))
            if run:
                continue
            warm = [timed(http, first) for _ in range(20)]
            budgets = [timed(http, f"{first}&budget={b}") for b in range(1000, 8000, 350)]
            last = [timed(http, f"{first}&offset={N - 100}") for _ in range(10)]
            query0.append(timed(http, f"{first}&query=peanuts+restaurant"))
            queries = [timed(http, f"{first}&query={q}") for q in
                       ("ferry+to+Belem", "tram+in+Alfama", "opening+hours+of+the+museum", "football+tickets",
                        "weather+on+the+coast", "a+bookshop+in+Chiado", "train+times+to+Porto", "fado+tonight")]
            sessions = [timed(http, "/ui/") for _ in range(10)]
            shown = browser_timing(base + first)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"session: {N:,} messages, SQLite, rdmem serve (one process), tenant default")
    print(f"first screen (100 messages, budget 4,000, no query), cold (the first request after a start: the server "
          f"reads the session from the store): {', '.join(f'{c:.0f}' for c in cold)} ms; the REST API's "
          f"POST /v1/sessions/{SESSION}/context as the first request: {', '.join(f'{c:.0f}' for c in rest_cold)} ms")
    print(f"first screen again: {summary(warm)}")
    print(f"first screen at 20 other budgets (a new context each): {summary(budgets)}")
    print(f"last page (offset {N - 100:,}): {summary(last)}")
    print(f"with a query, first (loads the embedding model): {query0[0]:.0f} ms; then {summary(queries)}")
    print(f"sessions list: {summary(sessions)}")
    if shown:
        print(f"chromium, DOMContentLoaded of the first screen: {summary(shown)}")
    else:
        print("chromium: not measured (needs Playwright and Debian's chromium)")


if __name__ == "__main__":
    main()
