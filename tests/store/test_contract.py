"""The store protocol, checked on every backend: memory, SQLite file, PostgreSQL + pgvector."""

from __future__ import annotations

import numpy as np
import pytest

from rdmem.store import Store, StoredUnit, StoreError

PETS = [
    ("u0", "user", "I adopted a puppy named Max last week, he is a golden retriever."),
    ("a0", "assistant", "Congratulations on Max! Golden retrievers are very friendly dogs."),
    ("u1", "user", "My sister Ana is moving to Lisbon in September for her new job."),
    ("a1", "assistant", "Lisbon is lovely in September; the weather is still warm."),
    ("u2", "user", "I started learning the violin, practising every evening."),
    ("a2", "assistant", "Playing the violin every evening is a great habit."),
    ("u3", "user", "Remember that I'm allergic to peanuts."),
    ("a3", "assistant", "Noted: no peanuts in any recipe I suggest."),
]


def units_of(rows, embedder=None, tier="working", start=0):
    vecs = embedder.embed([t for _, _, t in rows]) if embedder is not None else [None] * len(rows)
    return [
        StoredUnit(i, start + n, {"role": r, "content": t}, 4 + len(t) // 4, {"n": n}, v, tier)
        for n, ((i, r, t), v) in enumerate(zip(rows, vecs))
    ]


def test_is_a_store(store):
    assert isinstance(store, Store)


def test_roundtrip_keeps_everything(store, session_name, minilm):
    tool_call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Köln"}'}}
    msgs = [
        {"role": "system", "content": "Be brief. Ünïcödé ✓ 漢字"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12 C, rain"},
        {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}], "name": "ana"},
    ]
    vecs = minilm.embed(["Be brief", "weather", "12 C, rain", "and tomorrow?"])
    units = [
        StoredUnit(f"id{i}", i, m, 10 + i, {"entities": ["Ana"], "directive": i == 0}, vecs[i] if i != 1 else None,
                   "archive" if i == 2 else "working")
        for i, m in enumerate(msgs)
    ]
    store.append(session_name, units[:2])
    store.append(session_name, units[2:])
    back = store.load(session_name)
    assert [u.id for u in back] == ["id0", "id1", "id2", "id3"]
    assert [u.message for u in back] == msgs
    assert [u.seq for u in back] == [0, 1, 2, 3]
    assert [u.tokens for u in back] == [10, 11, 12, 13]
    assert [u.tier for u in back] == ["working", "working", "archive", "working"]
    assert back[0].features == {"entities": ["Ana"], "directive": True}
    assert back[1].embedding is None
    for i in (0, 2, 3):
        assert back[i].embedding.dtype == np.float32
        np.testing.assert_array_equal(back[i].embedding, vecs[i])


def test_load_of_unknown_session_is_empty(store, session_name):
    assert store.load(session_name) == []
    assert store.search(session_name, "anything", None, k=5) == []


def test_duplicate_id_is_refused_and_nothing_written(store, session_name):
    store.append(session_name, units_of(PETS[:2]))
    with pytest.raises(StoreError, match="already has a unit with"):
        store.append(session_name, units_of([("new", "user", "fresh"), PETS[1]], start=2))
    assert [u.id for u in store.load(session_name)] == ["u0", "a0"]


def test_set_tier_moves_units_and_ignores_unknown_ids(store, session_name):
    store.append(session_name, units_of(PETS))
    store.set_tier(session_name, ["u0", "a0", "nope"], "archive")
    tiers = {u.id: u.tier for u in store.load(session_name)}
    assert tiers["u0"] == tiers["a0"] == "archive"
    assert {t for i, t in tiers.items() if i not in ("u0", "a0")} == {"working"}
    store.set_tier(session_name, ["a0"], "working")
    assert {u.id: u.tier for u in store.load(session_name)}["a0"] == "working"


def test_invalid_tier_is_a_value_error(store, session_name):
    store.append(session_name, units_of(PETS[:1]))
    with pytest.raises(ValueError, match="tier must be one of working, archive, got 'cold'"):
        store.set_tier(session_name, ["u0"], "cold")


def test_lexical_search_finds_the_matching_unit(store, session_name):
    store.append(session_name, units_of(PETS))
    hits = store.search(session_name, "Which instrument, the violin?", None, k=3)
    assert hits[0][0] in ("u2", "a2")
    assert {i for i, _ in hits} <= {"u2", "a2"}
    assert all(s > 0 for _, s in hits)


def test_dense_search_finds_paraphrases(store, session_name, minilm):
    store.append(session_name, units_of(PETS, minilm))
    query = "What kind of pet does the user own?"
    hits = store.search(session_name, query, minilm.embed([query])[0], k=3)
    assert hits[0][0] in ("u0", "a0")


def test_search_respects_tier_and_k(store, session_name, minilm):
    store.append(session_name, units_of(PETS, minilm))
    store.set_tier(session_name, ["u0", "a0", "u1"], "archive")
    q = "dog puppy Max Lisbon violin peanuts"
    qv = minilm.embed([q])[0]
    archived = store.search(session_name, q, qv, k=10, tier="archive")
    assert {i for i, _ in archived} == {"u0", "a0", "u1"}
    working = store.search(session_name, q, qv, k=10, tier="working")
    assert not {i for i, _ in working} & {"u0", "a0", "u1"}
    assert len(store.search(session_name, q, qv, k=2)) == 2
    scores = [s for _, s in store.search(session_name, q, qv, k=8)]
    assert scores == sorted(scores, reverse=True)


def test_search_sees_writes_made_after_a_cached_search(store, session_name, minilm):
    store.append(session_name, units_of(PETS, minilm))
    q = "saxophone lessons"
    qv = minilm.embed([q])[0]
    first = store.search(session_name, q, None, k=3, tier="archive")
    assert first == []
    store.append(session_name, units_of([("u9", "user", "I take saxophone lessons on Mondays.")], minilm,
                                        tier="archive", start=8))
    assert store.search(session_name, q, None, k=3, tier="archive")[0][0] == "u9"
    assert store.search(session_name, q, qv, k=3, tier="archive")[0][0] == "u9"
    store.set_tier(session_name, ["u9"], "working")
    assert store.search(session_name, q, qv, k=3, tier="archive") == []


def test_sessions_are_isolated(store, session_name, minilm):
    other = session_name + "-other"
    store.append(session_name, units_of(PETS[:4], minilm))
    store.append(other, units_of(PETS[4:], minilm))
    q = "violin"
    assert store.search(session_name, q, minilm.embed([q])[0], k=10)
    assert {i for i, _ in store.search(session_name, q, minilm.embed([q])[0], k=10)} <= {u for u, _, _ in PETS[:4]}
    infos = {i.session: i for i in store.sessions()}
    assert (infos[session_name].units, infos[session_name].working, infos[session_name].archived) == (4, 4, 0)
    assert infos[session_name].created <= infos[session_name].updated
    store.delete_session(other)


def test_delete_session_removes_it_and_nothing_else(store, session_name):
    other = session_name + "-keep"
    store.append(session_name, units_of(PETS))
    store.append(other, units_of(PETS))
    store.log_compaction(session_name, {"archived": ["u0"]})
    store.delete_session(session_name)
    assert store.load(session_name) == []
    assert store.search(session_name, "violin", None, k=5) == []
    assert store.compaction_log(session_name) == []
    assert session_name not in {i.session for i in store.sessions()}
    assert [u.id for u in store.load(other)] == [u for u, _, _ in PETS]
    assert store.search(other, "violin", None, k=1)[0][0] in ("u2", "a2")
    store.delete_session(other)


def test_compaction_log_roundtrip(store, session_name):
    store.log_compaction(session_name, {"archived": ["a", "b"], "kept": 3, "policy": "rd"})
    store.log_compaction(session_name, {"archived": ["c"], "kept": 2, "policy": "rd"})
    log = store.compaction_log(session_name)
    assert [r["archived"] for r in log] == [["a", "b"], ["c"]]
    assert all(isinstance(r["time"], float) for r in log)
