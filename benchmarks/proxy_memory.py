"""The proxy's memory side in-process, without HTTP: where a request's milliseconds go.

    HF_HUB_OFFLINE=1 PYTHONPATH=src .venv/bin/python benchmarks/proxy_memory.py --turns 300 --window 4096
    HF_HUB_OFFLINE=1 PYTHONPATH=OTHER/src .venv/bin/python benchmarks/proxy_memory.py ...   # another tree

Drives ``rdmem.server._proxy_memory`` as ``rdmem serve --upstream`` does (a
fresh SQLite file, the real MiniLM behind the server's pool, its embedding
worker running, one math thread as ``rdmem serve`` gives one worker on two
cores): a history of ``--turns`` LoCoMo turns that grows by a question and a
reply per request; each request is read (``read_request``: the bounded
parse), prepared (``prepare``: what is new stored, compacted if over the
window) and its reply stored (``store_reply``). The first request (the whole
history) and the second are not timed; ``--settle`` lets the worker land the
history's vectors first (``drain``). ``--profile`` prints cProfile's top
functions of the timed requests.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from store_bench import LOCOMO, locomo_turns, machine, pct  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--settle", action="store_true", help="land every vector before the timed requests")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    import rdmem
    from rdmem.server._proxy_memory import prepare, store_reply
    from rdmem.server.app import ServerState
    from rdmem.server.metrics import Metrics
    from rdmem.server.routes_proxy import read_request
    from rdmem.server.sessions import SessionPool
    from rdmem.server.settings import ServerSettings
    from rdmem.store import open_store

    turns = [t for s in locomo_turns(LOCOMO) for t in s]
    settings = ServerSettings(upstream="http://127.0.0.1:9", context_window=args.window)
    store = open_store(f"sqlite:///{Path(tempfile.mkdtemp(prefix='rdmem-proxy-memory-')) / 'p.db'}")
    try:  # the keys became the server's own object (KeyStore) after ac3a240
        from rdmem.store import KeyStore

        state = ServerState(settings, store, SessionPool(store, settings), Metrics(), KeyStore(store))
    except ImportError:
        state = ServerState(settings, store, SessionPool(store, settings), Metrics())
    state.pool.start()
    budget = args.window - settings.reply_reserve
    history = [{"role": "system", "content": "You are a helpful assistant."}]
    history += [{"role": "user" if i % 2 == 0 else "assistant", "content": turns[i]} for i in range(args.turns)]
    prof = cProfile.Profile()
    spans: dict[str, list[float]] = {"read": [], "prepare": [], "reply": []}
    compacted = 0
    try:
        for i in range(args.calls + 2):
            history.append({"role": "user", "content": f"{turns[args.turns + i]} What do you think?"})
            raw = json.dumps({"model": "m", "messages": history}).encode()
            timed = i >= 2
            if timed and args.profile:
                prof.enable()
            t0 = time.perf_counter()
            body = read_request(raw, settings)
            t1 = time.perf_counter()
            done = prepare(state, "default", "bench", False, body, budget)
            t2 = time.perf_counter()
            reply = {"role": "assistant", "content": "Noted."}
            if hasattr(done, "saving"):  # the one-pass proxy: the request's record travels with the reply
                store_reply(state, "default", "bench", budget, done.saving, reply)
            else:
                store_reply(state, "default", "bench", budget, reply)
            t3 = time.perf_counter()
            if timed and args.profile:
                prof.disable()
            history.append(reply)
            if timed:
                for k, v in zip(spans, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                    spans[k].append(v * 1e3)
                compacted += done.compacted
            if i == 0 and args.settle:
                state.pool.worker.drain()
            time.sleep(0.05)  # the model's answer
    finally:
        state.pool.stop()
        store.close()
    print(f"machine: {machine()}")
    print(f"rdmem at {Path(rdmem.__file__).parent}; {args.turns} turns, window {args.window}, "
          f"settle {args.settle}; compacted {compacted} of {args.calls}")
    for k, v in spans.items():
        print(f"{k}: p50 {pct(v, 50):.1f} ms, p95 {pct(v, 95):.1f} ms")
    if args.profile:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
