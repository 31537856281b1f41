"""The first proxy request of a long conversation: the model is called at once, the vectors land afterwards.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/first_request.py                # 1,000 messages
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/first_request.py --messages 84

A client that starts using ``rdmem serve --upstream`` on a conversation it
already has sends it whole in its first request. The server stores every
message and calls the model without embedding them (issue 27: "upstream
called within 2 s, every message stored, embedded within 60 s after"); the
pool's embedding worker embeds them in batches afterwards. Measured, on
loopback:

- ``rdmem serve --upstream`` as a user starts it (a separate process, the
  real MiniLM embedder, a fresh SQLite file), in front of a fake
  OpenAI-compatible endpoint (tests/_fake_openai.py) that records when it
  is called;
- ``--settle`` seconds (5) after the server answers, one request through the ``openai`` client with ``--messages`` LoCoMo
  turns (real texts, alternating user/assistant, a question last);
- when the fake upstream was called, counted from the request's start;
  when the reply came back; then the store is read (read-only, this
  process) every 0.25 s until every message of the session has its vector.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from serve_bench import Serve  # noqa: E402
from store_bench import LOCOMO, locomo_turns, machine  # noqa: E402


def conversation(n: int) -> list[dict[str, str]]:
    turns = [t for session in locomo_turns(LOCOMO) for t in session]
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": turns[i % len(turns)]} for i in range(n - 1)]
    return msgs + [{"role": "user", "content": "What did we talk about first?"}]


def counts(path: Path, session: str) -> tuple[int, int]:
    """(messages stored, messages with a vector) of ``session``, read from the file without writing to it."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        row = conn.execute("SELECT count(*), count(embedding) FROM units WHERE session = ?", (session,)).fetchone()
        return int(row[0]), int(row[1])
    except sqlite3.OperationalError:
        return 0, 0
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds between the server's start and the request")
    ap.add_argument("--wait", type=float, default=180.0, help="seconds to wait for the vectors at most")
    args = ap.parse_args()

    import openai

    from tests._fake_openai import FakeOpenAI, Reply, completion

    fake = FakeOpenAI()
    called: list[float] = []

    def respond(req: dict) -> Reply:
        if not req["path"].endswith("/chat/completions"):
            return Reply(body={"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0,
                                                            "owned_by": "bench"}]})
        called.append(time.perf_counter())
        return Reply(body=completion("We first talked about your week."))

    fake.respond = respond
    tmp = Path(tempfile.mkdtemp(prefix="rdmem-first-"))
    db = tmp / "mem.db"
    server = Serve("--store", f"sqlite:///{db}", "--upstream", fake.url, "--context-window", "16000",
                   "--budget", "4000", log=tmp / "serve.log")
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=600, max_retries=0)
        client.models.list()  # the server is up and routes to the fake (not timed)
        time.sleep(args.settle)  # a server that has been up a moment (its worker loaded the model)
        msgs = conversation(args.messages)
        t0 = time.perf_counter()
        client.chat.completions.create(model="fake-model", messages=msgs,  # type: ignore[arg-type]
                                       extra_headers={"X-Rdmem-Session": "first"})
        t_reply = time.perf_counter()
        stored, embedded = counts(db, "t/default/first")
        t_embedded = None
        while time.perf_counter() - t_reply < args.wait:
            stored, embedded = counts(db, "t/default/first")
            if stored and embedded == stored:
                t_embedded = time.perf_counter()
                break
            time.sleep(0.25)
    finally:
        server.stop()
        fake.stop()
    upstream = called[0] - t0 if called else float("nan")
    print(f"machine: {machine()}")
    print(f"messages in the request: {len(msgs)}; stored in the session: {stored} (the reply included)")
    print(f"upstream called after {upstream:.2f} s; reply after {t_reply - t0:.2f} s")
    if t_embedded is not None:
        print(f"every stored message embedded {t_embedded - t_reply:.1f} s after the reply")
    else:
        print(f"NOT every message embedded after {args.wait:.0f} s: {embedded} of {stored}")
    return 0 if called and t_embedded is not None else 1


if __name__ == "__main__":
    sys.exit(main())
