"""A writer process for the durability and concurrency tests.

:func:`run` adds messages with ids PREFIX<k> to a session through a
MemoryManager on an SQLite file and writes each id to a pipe once add() has
returned (an acknowledgement). The tests fork it (so it starts in
milliseconds, with rdmem already imported) and SIGKILL it at random moments.
``python _writer.py DB SESSION PREFIX N`` runs it standalone, printing the ids.
"""

from __future__ import annotations

import os
import sys
import time
import warnings


def text_for(mid: str) -> str:
    return f"message {mid}: the quick brown fox number {sum(map(ord, mid)) % 97} jumps over the lazy dog."


def run(db: str, session: str, prefix: str, n: int, out_fd: int, start_file: str | None = None) -> None:
    warnings.simplefilter("ignore", RuntimeWarning)
    from rdmem import MemoryManager

    # "window" needs no embeddings; a small budget makes compactions (tier moves) happen all the time.
    mem = MemoryManager(budget=300, policy="window", store=f"sqlite:///{db}", session=session)
    first = len(mem)  # a restarted writer continues after whatever is already stored
    os.write(out_fd, b"ready\n")
    if start_file:
        while not os.path.exists(start_file):
            time.sleep(0.002)
    for k in range(first, first + n):
        mid = f"{prefix}{k}"
        mem.add(role="user" if k % 2 else "assistant", content=text_for(mid), id=mid)
        os.write(out_fd, f"{mid}\n".encode())
    mem.close()


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.stdout.fileno())
