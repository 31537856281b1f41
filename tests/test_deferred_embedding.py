"""Store first, embed later: a deferred manager stores without vectors, a worker lands them, selections match."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rdmem import EmbeddingWorker, MemoryManager
from rdmem.compaction import NOT_EMBEDDED
from rdmem.manager import ON_DEMAND_EMBEDDINGS
from rdmem.store import open_store
from rdmem.store.postgres import PostgresStore
from rdmem.store.sqlite import SQLiteStore


class Counting:
    """An embedder that records every text it was asked to embed (and, for batches, each call's size)."""

    def __init__(self, inner):
        self.inner, self.texts, self.calls = inner, [], []
        self._lock = threading.Lock()

    @property
    def dim(self):
        return self.inner.dim

    def embed(self, texts):
        with self._lock:
            self.texts.extend(texts)
            self.calls.append(len(texts))
        return self.inner.embed(texts)


def chat(n: int) -> list[dict]:
    topics = ["my dog Max loves the beach", "the violin lesson moved to Friday", "Ana flies to Lisbon in May",
              "allergic to peanuts, remember that", "the tax form is due on the 15th"]
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{topics[i % 5]} (note {i})"}
            for i in range(n)]


def test_a_deferred_manager_stores_first_ranks_lexically_then_the_vectors_land(tmp_path, hashing_embedder):
    emb = Counting(hashing_embedder)
    store = SQLiteStore(tmp_path / "mem.db")
    # A budget that holds them all: every message is a candidate, more than a query embeds on demand.
    mem = MemoryManager(budget=3000, policy="rd", store=store, session="s", embedder=emb, embedding="deferred")
    n = ON_DEMAND_EMBEDDINGS + 16
    ids = mem.extend(chat(n))
    assert emb.texts == []  # nothing embedded on the way in
    assert all(u.embedding is None for u in store.load("s"))
    query = "when is the violin lesson?"
    before = mem.context(query)
    pending = [d for d in before.report if not d.embedded]
    assert pending and all(NOT_EMBEDDED in d.reason for d in pending)
    assert pending[0].to_dict()["embedded"] is False
    assert set(emb.texts) == {query}  # the query alone was embedded (one text, the numpy path)

    worker = EmbeddingWorker(store, emb, batch=16)
    assert worker.drain() == n
    assert emb.calls[-5:] == [16] * 5  # batches, not one call per message
    assert all(u.embedding is not None for u in store.load("s"))
    after = mem.context(query)  # the pooled manager sees the vectors through changes()
    assert all(d.embedded for d in after.report) and "embedded" not in after.report[0].to_dict()

    inline = MemoryManager(budget=3000, policy="rd", session="s", embedder=hashing_embedder)
    inline.extend(chat(n))
    for a, b in zip(store.load("s"), inline.store.load("s"), strict=True):
        assert np.allclose(a.embedding, b.embedding)  # the worker's vectors are the inline ones
    assert ids == [u.id for u in store.load("s")]


def test_a_query_embeds_the_few_candidates_whose_vectors_have_not_landed(hashing_embedder):
    """A fact stored a moment ago is ranked by meaning when a query comes before the worker: the context is the
    inline manager's, and nothing in the report is "not yet embedded"."""
    emb = Counting(hashing_embedder)
    deferred = MemoryManager(budget=300, policy="rd", embedder=emb, embedding="deferred")
    inline = MemoryManager(budget=300, policy="rd", embedder=hashing_embedder)
    for mem in (deferred, inline):
        mem.extend(chat(ON_DEMAND_EMBEDDINGS // 2))
    query = "when is the violin lesson?"
    got, want = deferred.context(query, budget=120), inline.context(query, budget=120)
    assert all(d.embedded for d in got.report)
    assert [m["content"] for m in got.messages] == [m["content"] for m in want.messages]
    assert len(emb.texts) == ON_DEMAND_EMBEDDINGS // 2 + 1  # the candidates in one batch, and the query


def test_once_the_vectors_have_landed_the_selections_are_the_inline_ones(hashing_embedder):
    """Streamed one message at a time, the worker landing each vector and maintain() trimming then: the working
    set after every message, and the context of a query, are an inline manager's."""
    inline = MemoryManager(budget=200, policy="rd", embedder=hashing_embedder)
    deferred = MemoryManager(budget=200, policy="rd", embedder=hashing_embedder, embedding="deferred")
    worker = EmbeddingWorker(deferred.store, hashing_embedder, on_landed=lambda s: deferred.maintain())
    trimmed = False
    for m in chat(50):
        inline.add(m)
        deferred.add(m)
        worker.drain()
        assert deferred.working_ids() == inline.working_ids()
        trimmed = trimmed or bool(inline.archived_ids())
    assert trimmed
    for q in ("when is the violin lesson?", "what is Max?"):
        assert deferred.context(q).kept_ids == inline.context(q).kept_ids


def test_a_memory_that_is_never_embedded_still_works(hashing_embedder):
    mem = MemoryManager(budget=120, policy="rd", embedder=hashing_embedder, embedding="deferred")
    mem.extend(chat(30))
    ctx = mem.context("peanuts")
    assert ctx.messages and ctx.tokens <= 120
    assert any("peanuts" in m["content"] for m in ctx.messages)
    assert mem.archived_ids()  # the working set was trimmed without vectors


def test_embedding_must_be_inline_or_deferred():
    from rdmem.errors import InvalidInput

    with pytest.raises(InvalidInput, match="embedding must be 'inline' or 'deferred'"):
        MemoryManager(budget=100, embedding="later")


def test_a_new_worker_finds_what_an_earlier_process_left_unembedded(tmp_path, hashing_embedder):
    path = tmp_path / "mem.db"
    with MemoryManager(budget=500, policy="rd", store=f"sqlite:///{path}", session="a", embedder=hashing_embedder,
                       embedding="deferred") as mem:
        mem.extend(chat(12))
    with open_store(f"sqlite:///{path}") as store:  # "after a restart": a new connection, a new worker
        assert EmbeddingWorker(store, hashing_embedder).drain() == 12
        assert all(u.embedding is not None for u in store.load("a"))


def test_one_message_the_embedder_refuses_does_not_hold_back_its_batch(tmp_path, hashing_embedder, caplog):
    """An embedder that refuses one text (an API's limit, say) failed its whole batch, and again on every retry
    after the lease: the 11 other messages never got vectors. Now each is tried alone once the batch fails."""

    class Refusing:
        dim = hashing_embedder.dim

        def embed(self, texts):
            if any("(note 5)" in t for t in texts):
                raise ValueError("input rejected")
            return hashing_embedder.embed(texts)

    with open_store(f"sqlite:///{tmp_path / 'mem.db'}") as store:
        MemoryManager(budget=500, policy="rd", store=store, session="a", embedder=hashing_embedder,
                      embedding="deferred").extend(chat(12))
        with caplog.at_level("WARNING"):
            worker = EmbeddingWorker(store, Refusing(), batch=64)
            assert worker.drain() == 12 and worker.embedded == 11
        missing = [u.id for u in store.load("a") if u.embedding is None]
        assert len(missing) == 1 and f"message {missing[0]!r} of session 'a' could not be embedded" in caplog.text


def _race(stores, emb, n_units: int) -> list[EmbeddingWorker]:
    """Workers on separate connections claiming at once, in small batches, until nothing is left."""
    workers = [EmbeddingWorker(s, emb, batch=3, name=f"w{i}") for i, s in enumerate(stores)]
    barrier = threading.Barrier(len(workers))

    def run(w):
        barrier.wait()
        w.drain()

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return workers


def test_two_workers_on_one_sqlite_file_never_embed_a_message_twice(tmp_path, hashing_embedder):
    path = tmp_path / "mem.db"
    writer = SQLiteStore(path)
    mem = MemoryManager(budget=10_000, policy="rd", store=writer, session="s", embedder=hashing_embedder,
                        embedding="deferred")
    msgs = chat(60)
    mem.extend(msgs)
    emb = Counting(hashing_embedder)
    workers = _race([SQLiteStore(path), SQLiteStore(path)], emb, 60)
    assert sorted(emb.texts) == sorted(m["content"] for m in msgs)  # each message once, none twice
    assert sum(w.embedded for w in workers) == 60  # (which worker took how many is the scheduler's choice)
    assert all(u.embedding is not None for u in writer.load("s"))


def test_two_workers_on_one_postgresql_never_embed_a_message_twice(pg_fresh_url, hashing_embedder):
    session = "deferred-race"
    with PostgresStore(pg_fresh_url) as a, PostgresStore(pg_fresh_url) as b:
        mem = MemoryManager(budget=10_000, policy="rd", store=a, session=session, embedder=hashing_embedder,
                            embedding="deferred")
        msgs = chat(45)
        mem.extend(msgs)
        emb = Counting(hashing_embedder)
        workers = _race([a, b], emb, 45)
        assert sorted(emb.texts) == sorted(m["content"] for m in msgs)  # each message once, none twice
        assert sum(w.embedded for w in workers) == 45
        assert all(u.embedding is not None for u in a.load(session))


def test_vectors_whose_write_failed_are_written_at_the_next_round_not_after_their_lease(tmp_path, hashing_embedder):
    """The database went away between a batch's claim and its write (a PostgreSQL restart under
    ``rdmem serve --workers 2``: 128 messages left without vectors): the worker held their claims, so no one
    claimed them again until the lease (120 s) lapsed, and then they were embedded again."""
    from rdmem.errors import StoreError

    with open_store(f"sqlite:///{tmp_path / 'mem.db'}") as store:
        MemoryManager(budget=500, policy="rd", store=store, session="a", embedder=hashing_embedder,
                      embedding="deferred").extend(chat(12))
        real, failed = store.set_embeddings, []

        def away_once(session, vectors, **kw):
            if not failed:
                failed.append(session)
                raise StoreError("the database is unreachable")
            return real(session, vectors, **kw)

        store.set_embeddings = away_once
        emb = Counting(hashing_embedder)
        worker = EmbeddingWorker(store, emb, batch=64)
        with pytest.raises(StoreError):
            worker.run_once()
        worker.run_once()  # the database is back
        assert all(u.embedding is not None for u in store.load("a"))
        assert len(emb.texts) == 12 and worker.embedded == 12  # each embedded once
