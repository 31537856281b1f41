"""What opening one session costs a server whose requests name different budgets: one read, or one per budget.

    cd benchmarks && HF_HUB_OFFLINE=1 nice -n 10 ../.venv/bin/python shared_view.py --archived 20000 \\
        --src before=/tmp/before-src

One SQLite session (the server's ``big``) is filled directly with
``--archived`` LoCoMo-drawn units and their real MiniLM vectors, as in
``scale.py``, then for each source tree (this checkout's ``src`` and each
``--src NAME=PATH``, run with ``PYTHONPATH=PATH``) a fresh ``rdmem serve
--upstream`` on a copy of that file is sent, with the ``openai`` client, the
same 10-turn request with ``max_tokens`` 500, 1,000, 2,000 and 4,000 (the
pool keeps a manager per budget), then the REST API's ``POST .../context`` with a query
(the server's budget). Printed: each call's wall time and the server's
resident memory (``VmRSS``, and its peak ``VmHWM``) at the end.
``--memory-timeout 300``: the calls time the server's work, not its
fail-open bound.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from scale import SESSION  # noqa: E402
from serve_bench import Serve  # noqa: E402
from store_bench import (  # noqa: E402
    bulk_units, fill, locomo_pool, machine, newest_turns,
)

MAX_TOKENS = (500, 1000, 2000, 4000)


def _memory(pid: int) -> tuple[float, float]:
    """The process tree's resident and peak memory in MB (the server is one process: no workers)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def one_tree(name: str, src: Path, db: Path, turns: list[str], work: Path) -> list[str]:
    import httpx
    import openai

    from tests._fake_openai import FakeOpenAI

    copy = work / f"{name}.db"
    shutil.copy(db, copy)
    fake = FakeOpenAI()
    server = Serve("--store", f"sqlite:///{copy}", "--upstream", fake.url, "--context-window", "100000",
                   "--memory-timeout", "300", log=work / f"serve-{name}.log", env={"PYTHONPATH": str(src)})
    out = []
    try:
        oai = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-bench", max_retries=0, timeout=600)
        history = [{"role": "user" if i % 2 == 0 else "assistant", "content": turns[i]} for i in range(10)]
        for m in MAX_TOKENS:
            t0 = time.perf_counter()
            raw = oai.chat.completions.with_raw_response.create(model="m", messages=history, max_tokens=m,
                                                                extra_headers={"X-Rdmem-Session": "big"})
            memory = raw.headers.get("x-rdmem-memory")
            out.append(f"{name}: proxy, max_tokens {m:>5}: {time.perf_counter() - t0:7.2f} s (memory: {memory}, "
                       f"compacted: {raw.headers.get('x-rdmem-compacted')})")
            history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"And then {m}?"}]
        t0 = time.perf_counter()
        r = httpx.post(f"{server.url}/v1/sessions/big/context", json={"query": "Where did they travel?"}, timeout=600)
        r.raise_for_status()
        out.append(f"{name}: REST context (query):      {time.perf_counter() - t0:7.2f} s")
        rss, peak = _memory(server.proc.pid)
        out.append(f"{name}: server memory: {rss:,.0f} MB resident, peak {peak:,.0f} MB")
    finally:
        server.stop()
        fake.stop()
        copy.unlink(missing_ok=True)
    for line in out:
        print(line, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archived", type=int, default=20000)
    ap.add_argument("--src", action="append", default=[], help="NAME=PATH of another source tree")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT / "src"))
    from rdmem.store import open_store

    print(f"machine: {machine()}", flush=True)
    turns, pool, vectors = locomo_pool()
    work = Path(tempfile.mkdtemp(prefix="rdmem-shared-view-"))
    db = work / "filled.db"
    store = open_store(f"sqlite:///{db}")
    t0 = time.perf_counter()
    fill(store, SESSION, bulk_units(pool, vectors, newest_turns(turns, 4000), args.archived, seed=0))
    store.close()
    print(f"filled {args.archived:,} archived units in {time.perf_counter() - t0:.0f} s", flush=True)
    trees = [("this", ROOT / "src")] + [(s.split("=", 1)[0], Path(s.split("=", 1)[1])) for s in args.src]
    for name, src in trees:
        one_tree(name, src, db, turns, work)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
