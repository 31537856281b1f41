"""What opening a long session costs: seconds and peak memory of a fresh process, per tree.

    cd benchmarks && HF_HUB_OFFLINE=1 ../.venv/bin/python open_session.py --sizes 100000,1000000 \\
        --src before=/tmp/before-wt/src --src now=../src

For each size and tree: a fresh SQLite file filled by that tree's store (``scale.py``'s data: LoCoMo texts
and their real MiniLM vectors, bulk ``append`` in batches of 5,000, then a working set), then a new process
that opens it the way a manager does and reports:

- ``store``: ``open_store(url)`` alone (the file's check);
- ``open``: ``MemoryManager(...)`` until ``len()`` answers (the session read into the manager's view);
- ``first query``: the first ``messages(query)`` (the search's caches built), with the query's vector looked up;
- ``peak RSS``: the opening process's peak resident memory (``ru_maxrss``), after the first query.

Each measurement runs in its own process, so nothing is cached in Python between them (the OS file cache
is: the fill just wrote the file). Bounded: one open and one query per size and tree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

_FILL = """
import sys, time
sys.path.insert(0, {here!r})
from scale import SESSION
from store_bench import bulk_units, embed_cached, fill, locomo_pool, newest_turns
from rdmem.store import open_store
turns, pool, vectors = locomo_pool()
store = open_store({url!r})
t0 = time.perf_counter()
fill(store, SESSION, bulk_units(pool, vectors, newest_turns(turns, 4000), {n}, seed=0))
store.close()
print(time.perf_counter() - t0)
"""

_OPEN = """
import json, resource, sys, time
sys.path.insert(0, {here!r})
from scale import SESSION
from store_bench import LookupEmbedder, embed_cached, locomo_questions, LOCOMO
from rdmem import MemoryManager
from rdmem.store import open_store
q = locomo_questions(LOCOMO)[0]
emb = LookupEmbedder([q], embed_cached([q], "open-question"))
t0 = time.perf_counter()
open_store({url!r}).close()
t1 = time.perf_counter()
mem = MemoryManager(budget=4000, policy="rd", store={url!r}, session=SESSION, embedder=emb)
n = len(mem)
t2 = time.perf_counter()
mem.messages(q)
t3 = time.perf_counter()
print(json.dumps({{"units": n, "store_s": t1 - t0, "open_s": t2 - t1, "first_s": t3 - t2,
                   "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def run(code: str, src: str) -> str:
    env = dict(os.environ, PYTHONPATH=src, HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=HERE, capture_output=True, text=True,
                         timeout=3600)
    if out.returncode:
        raise SystemExit(f"failed ({src}):\n{out.stderr[-3000:]}")
    return out.stdout.strip().splitlines()[-1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--src", action="append", default=[], help="name=path of a tree's src (repeatable)")
    args = ap.parse_args()
    trees = [s.split("=", 1) for s in args.src] or [["now", str(HERE.parent / "src")]]
    work = Path(tempfile.mkdtemp(prefix="rdmem-open-"))
    print("| archived | tree | fill s | store opened s | session opened s | first query s | peak RSS MB |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for n in (int(x) for x in args.sizes.split(",")):
        for name, src in trees:
            db = work / f"{name}-{n}.db"
            url = f"sqlite:///{db}"
            fill_s = float(run(_FILL.format(here=str(HERE), url=url, n=n), os.path.abspath(src)))
            r = json.loads(run(_OPEN.format(here=str(HERE), url=url), os.path.abspath(src)))
            print(f"| {n:,} | {name} | {fill_s:.0f} | {r['store_s']:.2f} | {r['open_s']:.2f} | {r['first_s']:.2f} | "
                  f"{r['rss_mb']:,.0f} |", flush=True)
            for p in work.glob(f"{name}-{n}.db*"):
                p.unlink()
    work.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
