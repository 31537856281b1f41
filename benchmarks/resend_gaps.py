"""What lining up a resend costs (``MemoryManager.resent``): a chat's own history resent into a session where
another chat's turns lie between its own (one end user's two chats in a proxy ``user`` session), against the
plain resend of the whole session, at three sizes. Run it on two trees (``PYTHONPATH=<tree>/src``) to compare.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/resend_gaps.py [--turns 50,250,1000] [--calls 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rdmem import MemoryManager  # noqa: E402


def _p50(call, calls: int) -> float:
    call()  # the resend keys of the stored messages are made once, then held by the view
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="50,250,1000", help="turns of each chat, comma-separated")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print("| stored | resend of chat A | interleaved: p50 ms | stored again | whole session resent: p50 ms |")
    print("|---:|---:|---:|---:|---:|")
    for turns in (int(t) for t in args.turns.split(",")):
        stored, chat_a = [], []
        for t in range(turns):
            for chat in "AB":
                pair = [{"role": "user", "content": f"chat {chat} question {t} about the trip"},
                        {"role": "assistant", "content": f"chat {chat} answer {t}: take tram 15"}]
                stored += pair
                chat_a += pair if chat == "A" else []
        mem = MemoryManager(budget=100_000, policy="window")
        mem.extend(stored)
        new = {"role": "user", "content": "a new question"}
        again = len(mem.resent([*chat_a, new])[0]) - 1
        print(f"| {len(stored):,} | {len(chat_a) + 1:,} | {_p50(lambda: mem.resent([*chat_a, new]), args.calls):.2f} "
              f"| {again:,} | {_p50(lambda: mem.resent([*stored, new]), args.calls):.2f} |")


if __name__ == "__main__":
    main()
