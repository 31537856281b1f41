"""Reopening a large session: how long ``MemoryManager`` takes to load 100,000 distinct messages.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/reopen_bench.py [--units 100000]

Each message is a LoCoMo turn with its number appended, so no two texts are
equal and no token count comes from a cache. The units are written as a
manager writes them (features, vector from the pool of ``store_bench.py``, and
the token count with the tokenizer that made it) through ``store.append`` in
batches into an SQLite file; then the session is opened four times, in
turn with another per-message overhead (every message is tokenised again,
as before stored counts were reused) and with the same tokenizer (the stored
counts are reused).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.simplefilter("ignore", RuntimeWarning)

from store_bench import LOCOMO, embed_cached, fill, locomo_turns, text_pool  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, default=100_000)
    args = ap.parse_args()
    if args.units <= 0:
        ap.error(f"--units must be > 0, got {args.units}")
    from rdmem import MemoryManager
    from rdmem.features import extract_features
    from rdmem._session import stored_features
    from rdmem.store import NewUnit, open_store
    from rdmem.tokens import get_tokenizer

    pool = text_pool(locomo_turns(LOCOMO))
    vectors = embed_cached(pool, "locomo-pool")
    tok = get_tokenizer("cl100k_base")

    def units():
        for j in range(args.units):
            p = j % len(pool)
            role = "user" if j % 2 == 0 else "assistant"
            msg = {"role": role, "content": f"{pool[p]} (note {j})"}
            feats = stored_features(extract_features(msg["content"], role), tok)
            tier = "working" if j >= args.units - 100 else "archive"
            yield NewUnit(msg, tok.message_tokens(msg), feats, vectors[p], tier, id=f"u{j}")

    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'reopen.db'}"
        store = open_store(url)
        secs = fill(store, "big", units())
        store.close()
        print(f"wrote {args.units:,} distinct messages in {secs:.0f} s", flush=True)
        same, other = ("same tokenizer: stored counts reused", None), ("overhead 5: all counted again", 5)
        for label, overhead in (other, same, other, same):
            t = time.perf_counter()
            mem = MemoryManager(budget=4000, policy="rd", store=url, session="big", message_overhead=overhead)
            n = len(mem)
            print(f"open {n:,} units, {label}: {time.perf_counter() - t:.1f} s", flush=True)
            mem.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
