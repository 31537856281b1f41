"""rdmem serve stores without embedding: its worker embeds the messages in batches, in its own thread."""

from __future__ import annotations

import threading
import time

import httpx

from rdmem.server.app import create_app
from rdmem.server.settings import ServerSettings
from rdmem.store import NewUnit
from rdmem.store.sqlite import SQLiteStore


class ThreadRecording:
    """An embedder that records which thread embedded each text."""

    def __init__(self, inner):
        self.inner, self.threads = inner, {}

    @property
    def dim(self):
        return self.inner.dim

    def embed(self, texts):
        name = threading.current_thread().name
        for t in texts:
            self.threads.setdefault(t, set()).add(name)
        return self.inner.embed(texts)


def test_messages_are_stored_at_once_and_embedded_by_the_worker_thread(serve, tmp_path, hashing_embedder):
    emb = ThreadRecording(hashing_embedder)
    store = SQLiteStore(tmp_path / "m.db")
    # One message left unembedded by "an earlier process": the worker finds it at start.
    store.append("t/default/old", [NewUnit({"role": "user", "content": "left from before the restart"}, 8)])
    live = serve(create_app(ServerSettings(), store=store, embedder=emb))
    texts = [f"note {i}: the ferry leaves at {i} o'clock" for i in range(30)]
    r = httpx.post(f"{live.url}/v1/sessions/a/messages",
                   json={"messages": [{"role": "user", "content": t} for t in texts]}, timeout=30)
    assert r.status_code == 201
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(u.embedding is None for s in ("t/default/a", "t/default/old")
                                              for u in store.load(s)):
        time.sleep(0.05)
    assert all(u.embedding is not None for u in store.load("t/default/a"))
    assert all(u.embedding is not None for u in store.load("t/default/old"))
    assert {t: emb.threads[t] for t in texts} == {t: {"rdmem-embedding"} for t in texts}
    # Search finds them through the landed vectors and the lexical index alike.
    hits = httpx.post(f"{live.url}/v1/sessions/a/search", json={"query": "ferry at 7 o'clock", "k": 3},
                      timeout=30).json()["results"]
    assert hits and "ferry" in hits[0]["message"]["content"]
