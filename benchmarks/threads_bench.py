"""Math threads on a busy machine: MiniLM (numpy) and ``rdmem serve`` with one thread and with every core.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/threads_bench.py [--busy 0 1 2] [--requests 100]

"Busy" is made here, so that it can be rerun: ``--busy K`` starts K processes
that spin on a core each (bounded in time, stopped after each measurement),
on top of whatever else the machine runs (the load average is printed).

- Embedding: a fresh process per setting, ``OPENBLAS_NUM_THREADS`` and
  ``OMP_NUM_THREADS`` set to the thread count before numpy loads; one LoCoMo
  text at a time (``--single`` texts: p50 and p95 latency), then a batch of
  256 texts (texts per second).
- Service: ``rdmem serve`` (one worker, SQLite in a temporary directory) as a
  user starts it, once with its own choice of threads (``rdmem.server._workers
  .worker_threads``) and once with every core (what it ran with before);
  ``--requests`` sequential ``POST /v1/sessions/s/messages`` of one new
  message each (each is embedded), p50 and p95 over httpx on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

EMBED = r"""
import json, statistics, sys, time
from rdmem._minilm import NumpyMiniLM
texts = json.loads(sys.stdin.read())
model = NumpyMiniLM()
model.embed(texts[:2])
ms = []
for t in texts[2:2 + int(sys.argv[1])]:
    start = time.perf_counter()
    model.embed([t])
    ms.append((time.perf_counter() - start) * 1000)
batch = texts[-256:]
start = time.perf_counter()
model.embed(batch)
print(json.dumps({"ms": ms, "rate": len(batch) / (time.perf_counter() - start)}))
"""


def locomo_texts(n: int) -> list[str]:
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    texts = [t["text"] for c in data for k, v in c["conversation"].items()
             if k.startswith("session_") and isinstance(v, list) for t in v]
    return list(dict.fromkeys(texts))[:n]


@contextmanager
def busy(k: int, seconds: float = 600):
    """``k`` processes spinning on a core each (for at most ``seconds``)."""
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(k)]
    try:
        time.sleep(0.5 if k else 0)
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def env_with(threads: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    if threads is not None:
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    return env


def pct(ms: list[float], q: float) -> float:
    ms = sorted(ms)
    return ms[int(q * (len(ms) - 1))]


def embedding(threads: int, k: int, texts: list[str], single: int) -> str:
    with busy(k):
        done = subprocess.run([sys.executable, "-c", EMBED, str(single)], input=json.dumps(texts), text=True,
                              capture_output=True, env=env_with(threads), timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    r = json.loads(done.stdout)
    return (f"| {k} | {threads} | {statistics.median(r['ms']):.1f} | {pct(r['ms'], 0.95):.1f} | "
            f"{r['rate']:.1f} |")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def service(threads: int | None, k: int, texts: list[str], requests: int) -> str:
    import httpx

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp, busy(k):
        log = open(Path(tmp) / "serve.log", "w+")
        proc = subprocess.Popen([sys.executable, "-m", "rdmem.cli", "serve", "--port", str(port), "--store",
                                 f"sqlite:///{tmp}/m.db", "--log-level", "warning"], stdout=log,
                                stderr=subprocess.STDOUT, env=env_with(threads))
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"rdmem serve did not start:\n{log.read()}")
                time.sleep(0.1)
            ms = []
            with httpx.Client(base_url=url, timeout=60) as client:
                client.post("/v1/sessions/s/messages", json={"messages": [{"role": "user", "content": "warm up"}]})
                for i, text in enumerate(texts[:requests]):
                    msg = {"role": "user" if i % 2 == 0 else "assistant", "content": text}
                    start = time.perf_counter()
                    client.post("/v1/sessions/s/messages", json={"messages": [msg]}).raise_for_status()
                    ms.append((time.perf_counter() - start) * 1000)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            log.seek(0)
            said = [line.split("rdmem serve: ", 1)[1].strip() for line in log if "math thread" in line]
            log.close()
    return (f"| {k} | {said[0] if said else threads} | {statistics.median(ms):.1f} | {pct(ms, 0.95):.1f} | "
            f"{max(ms):.1f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    ap.add_argument("--single", type=int, default=100)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--skip-service", action="store_true")
    args = ap.parse_args()
    if not LOCOMO.is_file():
        ap.error(f"LoCoMo not found at {LOCOMO}")
    texts = locomo_texts(2 + max(args.single, args.requests) + 256)
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, load average "
          f"{os.getloadavg()[0]:.1f} at start", flush=True)
    print("\nMiniLM in numpy, one process per row\n\n| busy processes | threads | one text p50 ms | p95 ms | "
          "256 texts/s |\n| ---: | ---: | ---: | ---: | ---: |", flush=True)
    for k in args.busy:
        for threads in args.threads:
            print(embedding(threads, k, texts, args.single), flush=True)
    if not args.skip_service:
        print(f"\nrdmem serve, one worker: {args.requests} sequential adds of one message\n\n| busy processes | "
              "threads | p50 ms | p95 ms | max ms |\n| ---: | --- | ---: | ---: | ---: |", flush=True)
        for k in args.busy:
            for threads in (None, os.cpu_count() or 1):
                print(service(threads, k, texts[2:], args.requests), flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
