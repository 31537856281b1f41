"""Issue 25's proxy replay: what ``rdmem serve``'s proxy forwards when the latest user turn is the query.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/proxy_replay.py [--data LOCOMO_JSON] [--budgets 2000,4000]
        [--every 10] [--conversations conv-26,conv-30]

Each LoCoMo conversation (categories 1–4) is replayed as a chat client replays
one: speaker A is the user, speaker B the assistant, each turn a message as
``rdmem eval`` renders it. At points every ``--every`` turns (where A speaks and
B answers next) the ``openai`` SDK sends the whole history so far through
``rdmem serve --upstream`` (fresh SQLite file, the real MiniLM, the session named
by ``X-Rdmem-Session``, ``--context-window`` = the budget + the 1,024-token reply
reserve, ``--budget`` the same); the fake upstream (tests/_fake_openai.py, on
loopback) answers with B's real next turn, so the reply the proxy stores is the
message the client's next request carries. Most of these latest turns are small
talk: the case the issue found (the last message named nothing, and relevance
to it pushed out what the prior had kept).

At every point, three contexts of the same session at the same budget, each
scored as ``rdmem eval --regime latest`` scores (every question on its evidence
seen so far; a turn counts when its text is there verbatim):

- ``forwarded``: the messages the upstream received (the proxy's compaction,
  the last user turn as the query);
- ``REST, latest turn``: ``POST /v1/sessions/{s}/context`` (httpx) with that
  turn as the query;
- ``REST, no query``: the same without a query (what the prior keeps).

Printed: evidence recall over all points and at the last point, per budget,
with the forwarded request's tokens.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from serve_bench import Serve  # noqa: E402
from store_bench import LOCOMO, machine  # noqa: E402

RESERVE = 1024  # rdmem serve's default --reply-reserve
WAYS = ("forwarded", "REST, latest turn", "REST, no query")


def points(roles: Sequence[str], every: int) -> list[int]:
    """Message counts at which the client sends its history: the first count at or after each multiple of
    ``every`` whose last message is the user's and whose next is the assistant's (the fake's answer)."""
    out, n = [], len(roles)
    for k in range(every, n, every):
        t = next((t for t in range(k, n) if roles[t - 1] == "user" and roles[t] == "assistant"), None)
        if t is not None and (not out or t > out[-1]):
            out.append(t)
    return out


def replay(conv, budget: int, every: int, work: Path) -> tuple[dict[str, list[tuple[int, float]]], list[int]]:
    """One conversation through a fresh server: ``{way: [(point, recall of one question), ...]}`` and the
    forwarded requests' tokens."""
    import httpx
    import openai

    from rdmem.eval._jobs import seen_probes
    from rdmem.eval.metrics import evidence_recall
    from tests._fake_openai import FakeOpenAI

    msgs = [{"role": m["role"], "content": m["content"]} for m in conv.messages]
    id_of = {m["content"]: str(m["id"]) for m in conv.messages}
    fake = FakeOpenAI()
    server = Serve("--store", f"sqlite:///{work / f'{conv.id}-{budget}.db'}", "--upstream", fake.url,
                   "--context-window", str(budget + RESERVE), "--budget", str(budget), "--max-messages", "5000",
                   log=work / f"serve-{conv.id}-{budget}.log")
    out: dict[str, list[tuple[int, float]]] = {w: [] for w in WAYS}
    tokens: list[int] = []
    session = f"replay-{conv.id}"
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-replay", max_retries=0, timeout=120)
        rest = httpx.Client(base_url=server.url + "/v1", timeout=120)
        for seen in points([m["role"] for m in msgs], every):
            fake.requests.clear()
            fake.text = msgs[seen]["content"]  # B's real next turn: the reply stored is what the client resends
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=msgs[:seen], extra_headers={"X-Rdmem-Session": session})
            raw.parse()
            tokens.append(int(raw.headers.get("x-rdmem-tokens-after", "0")))
            kept = {"forwarded": {id_of[m["content"]] for m in fake.requests[-1]["body"]["messages"]
                                  if isinstance(m.get("content"), str) and m["content"] in id_of}}
            for way, body in (("REST, latest turn", {"budget": budget, "query": msgs[seen - 1]["content"]}),
                              ("REST, no query", {"budget": budget})):
                r = rest.post(f"/sessions/{session}/context", json=body)
                r.raise_for_status()
                kept[way] = {id_of[m["content"]] for m in r.json()["messages"]
                             if isinstance(m.get("content"), str) and m["content"] in id_of}
            for probe in seen_probes(conv, seen):
                for way in WAYS:
                    out[way].append((seen, evidence_recall(probe.evidence, kept[way])))
        rest.close()
    finally:
        server.stop()
        fake.stop()
    return out, tokens


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(LOCOMO))
    ap.add_argument("--budgets", default="2000,4000")
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--conversations", default="", help="comma-separated ids (default: all)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rdmem.datasets import load_locomo

    convs = load_locomo(args.data, categories=(1, 2, 3, 4))
    if args.conversations:
        wanted = set(args.conversations.split(","))
        convs = [c for c in convs if c.id in wanted]
    print(f"# {machine()}; every {args.every} turns; {len(convs)} conversations", flush=True)
    print("| budget | context | all points | last point | forwarded tokens p50 / max | seconds |")
    print("|---:|---|---:|---:|---|---:|")
    with tempfile.TemporaryDirectory(prefix="rdmem-replay-") as tmp:
        for budget in (int(b) for b in args.budgets.split(",")):
            t0 = time.perf_counter()
            runs = [replay(c, budget, args.every, Path(tmp)) for c in convs]
            took = time.perf_counter() - t0
            toks = [t for _, tokens in runs for t in tokens]
            for way in WAYS:
                every_point = [v for r, _ in runs for _, v in r[way]]
                last = [v for r, _ in runs for p, v in r[way] if p == max(q for q, _ in r[way])]
                print(f"| {budget:,} | {way} | {np.mean(every_point):.3f} | {np.mean(last):.3f} | "
                      f"{int(np.median(toks))} / {int(max(toks))} | {took:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
