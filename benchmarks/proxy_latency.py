"""The proxy's added latency, for several source trees side by side in one run (requests interleaved).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/proxy_latency.py --src main=/tmp/main-src [--settle 30]

Each tree (this checkout's ``src``, and each ``--src NAME=PATH``) runs its own
``rdmem serve --upstream`` (a process tree, fresh SQLite file, real MiniLM,
``PYTHONPATH=PATH``) in front of one fake OpenAI-compatible upstream on
loopback (tests/_fake_openai.py, answers at once). The ``openai`` client
sends a history that grows by a question and a reply per request, as a chat
client does; every request goes straight to the fake and through each proxy,
in an order shuffled for each request, so every tree meets the same machine.
Three cases: as ``serve_bench.py``'s proxy phase, a 10-turn history
in a 100,000-token window (never compacted; every body small enough to
fit by its size alone) and a 300-turn history in a 4,096-token window
(compacted on every request); and a 300-turn history in a 32,768-token
window, which fits but must be counted to know it (its body is over half
the window in bytes). The first two requests of
each case are not timed (they open the session and store the history);
``--settle S`` waits S seconds after them (the embedding worker lands the
history's vectors) before the timed ones. The added latency is the proxied
p50 (p95) less the direct one. ``--floor`` adds two references: this tree's
proxy without a session (nothing read or stored) and a bare pass-through
(``benchmarks/_passthrough.py``: Starlette and httpx, no rdmem), the cost of
any Python HTTP hop on the machine.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from serve_bench import Serve, _free_port  # noqa: E402
from store_bench import LOCOMO, locomo_turns, machine, pct  # noqa: E402

CASES = (("10-turn history, window 100,000 (no compaction)", 10, 100_000),
         ("300-turn history, window 4,096 (compacted)", 300, 4096),
         ("300-turn history, window 32,768 (fits once counted)", 300, 32_768))


def _passthrough(upstream: str, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``benchmarks/_passthrough.py`` under uvicorn: the cost of any Python HTTP hop, memory aside."""
    import httpx

    port = _free_port()
    log = open(work / "passthrough.log", "w")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "_passthrough:app", "--port", str(port),
                             "--log-level", "warning", "--app-dir", str(ROOT / "benchmarks")],
                            env={**os.environ, "PASSTHROUGH_UPSTREAM": upstream}, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError(f"the pass-through exited; see {work / 'passthrough.log'}")
        try:
            httpx.get(url + "/", timeout=2)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the pass-through did not start")


def run_case(trees: Sequence[tuple[str, Path]], label: str, start: int, window: int, turns: Sequence[str],
             args: argparse.Namespace, work: Path) -> list[str]:
    import openai

    from tests._fake_openai import FakeOpenAI

    fake = FakeOpenAI()
    fake.text = "Noted."
    servers: dict[str, Serve] = {}
    bare = None
    try:
        for name, src in trees:
            servers[name] = Serve("--store", f"sqlite:///{work / f'{name}-{window}.db'}", "--upstream", fake.url,
                                  "--context-window", str(window), log=work / f"serve-{name}-{window}.log",
                                  env={"PYTHONPATH": str(src)})
        direct = openai.OpenAI(base_url=fake.url, api_key="sk-bench", max_retries=0)
        proxied = {n: openai.OpenAI(base_url=s.url + "/v1", api_key="sk-bench", max_retries=0)
                   for n, s in servers.items()}
        history = [{"role": "system", "content": "You are a helpful assistant."}]
        history += [{"role": "user" if i % 2 == 0 else "assistant", "content": turns[i]} for i in range(start)]
        headers = {"X-Rdmem-Session": f"bench-{window}"}
        bare = _passthrough(fake.url, work) if args.floor else None
        if bare is not None:
            proxied["bare pass-through"] = openai.OpenAI(base_url=bare[1] + "/v1", api_key="sk-bench", max_retries=0)
        names = [n for n, _ in trees] + (["this, no session", "bare pass-through"] if args.floor else [])
        times: dict[str, list[float]] = {n: [] for n in ["direct", *names]}
        compacted = dict.fromkeys(names, 0)
        rng = random.Random(window)
        for i in range(args.calls + 2):
            history.append({"role": "user", "content": f"{turns[start + i]} What do you think?"})
            order = ["direct", *names]
            rng.shuffle(order)  # a fresh order each time: the work one server leaves after its answer (its
            # worker's embedding, a trim) slows whichever request comes next, and a fixed cycle would always
            # give it to the same neighbour
            reply = None
            for who in order:
                t0 = time.perf_counter()
                if who == "direct":
                    direct.chat.completions.create(model="m", messages=history)
                    took = time.perf_counter() - t0
                else:
                    floor = who == "this, no session"  # nothing read or stored: the proxy's plumbing
                    plain = floor or who == "bare pass-through"
                    raw = proxied["this" if floor else who].chat.completions.with_raw_response.create(
                        model="m", messages=history, extra_headers={} if plain else headers)
                    took = time.perf_counter() - t0
                    reply = raw.parse().choices[0].message.content
                    if i >= 2:
                        compacted[who] += raw.headers.get("x-rdmem-compacted") == "true"
                if i >= 2:
                    times[who].append(took)
            history.append({"role": "assistant", "content": reply})
            if i == 1 and args.settle:
                time.sleep(args.settle)
    finally:
        for s in servers.values():
            s.stop()
        if bare is not None:
            bare[0].send_signal(signal.SIGINT)
            bare[0].wait(30)
        fake.stop()
    ms = {who: (pct(v, 50) * 1e3, pct(v, 95) * 1e3) for who, v in times.items()}
    lines = []
    for n in names:
        lines.append(f"| {label} | {n} | {len(times[n])} | {ms['direct'][0]:.1f} | {ms[n][0]:.1f} | "
                     f"{ms[n][0] - ms['direct'][0]:+.1f} | {ms['direct'][1]:.1f} | {ms[n][1]:.1f} | "
                     f"{ms[n][1] - ms['direct'][1]:+.1f} | {compacted[n]} of {len(times[n])} |")
        print(lines[-1], flush=True)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                    help="another source tree to run side by side (its src directory)")
    ap.add_argument("--calls", type=int, default=40, help="timed requests per case")
    ap.add_argument("--settle", type=float, default=0.0, help="seconds to wait after the untimed requests")
    ap.add_argument("--floor", action="store_true",
                    help="also time requests without a session to this tree's proxy (nothing read or stored), and "
                    "through a bare pass-through (benchmarks/_passthrough.py: Starlette and httpx, no rdmem)")
    ap.add_argument("--case", type=int, choices=(0, 1, 2), action="append", help="only these cases (0, 1, 2)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    trees = [("this", ROOT / "src")]
    for spec in args.src:
        name, _, path = spec.partition("=")
        if not name or not path or not (Path(path) / "rdmem").is_dir():
            ap.error(f"--src {spec!r}: expected NAME=PATH, PATH a source directory holding rdmem/")
        trees.append((name, Path(path).resolve()))
    head = [f"machine: {machine()}",
            f"command: benchmarks/proxy_latency.py {' '.join(argv if argv is not None else sys.argv[1:])}", "",
            "| requests | tree | n | direct p50 | proxied p50 | added p50 | direct p95 | proxied p95 | added p95 |"
            " compacted |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    print("\n".join(head), flush=True)
    turns = [t for s in locomo_turns(LOCOMO) for t in s]
    work = Path(tempfile.mkdtemp(prefix="rdmem-proxy-latency-"))
    lines = []
    for k, (label, start, window) in enumerate(CASES):
        if args.case is None or k in args.case:
            lines += run_case(trees, label, start, window, turns, args, work)
    print("\n## summary\n\n" + "\n".join(head + lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
