"""The store protocol, checked on every backend: memory, SQLite file, PostgreSQL + pgvector."""

from __future__ import annotations

import numpy as np
import pytest

from rdmem.store import DuplicateIdError, NewUnit, Store, VersionConflict

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


def units_of(rows, embedder=None, tier="working"):
    vecs = embedder.embed([t for _, _, t in rows]) if embedder is not None else [None] * len(rows)
    return [
        NewUnit({"role": r, "content": t}, 4 + len(t) // 4, {"n": n}, v, tier, id=i)
        for n, ((i, r, t), v) in enumerate(zip(rows, vecs))
    ]


def plain(text, uid=None, tier="working"):
    return NewUnit({"role": "user", "content": text}, 5, tier=tier, id=uid)


def test_is_a_store(store):
    assert isinstance(store, Store)


def test_roundtrip_keeps_everything(store, session_name, minilm):
    tool_call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Köln"}'}}
    msgs = [
        {"role": "system", "content": "Be brief. Ünïcödé ✓ 漢字"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12 C, rain"},
        {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}], "name": "ana",
         "metadata": {"source": "slack", "thread": [1, 2]}, "timestamp": "2026-12-01T10:00:00Z"},
    ]
    vecs = minilm.embed(["Be brief", "weather", "12 C, rain", "and tomorrow?"])
    units = [
        NewUnit(m, 10 + i, {"entities": ["Ana"], "directive": i == 0}, vecs[i] if i != 1 else None,
                "archive" if i == 2 else "working", id=f"id{i}")
        for i, m in enumerate(msgs)
    ]
    first = store.append(session_name, units[:2])
    second = store.append(session_name, units[2:])
    assert [u.seq for u in first.units + second.units] == [0, 1, 2, 3]
    back = store.load(session_name)
    assert [u.id for u in back] == ["id0", "id1", "id2", "id3"]
    assert [u.message for u in back] == msgs  # fields the chat API does not know come back too
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
    assert store.version(session_name) == 0
    changes = store.changes(session_name)
    assert (changes.version, changes.full, changes.units, changes.state) == (0, True, [], {})


def test_automatic_ids_never_meet_explicit_ones(store, session_name):
    got = store.append(session_name, [plain("a"), plain("b", "m2"), plain("c")]).units
    assert [u.id for u in got] == ["m3", "m2", "m4"]  # automatic ids come after every m<n> given
    got = store.append(session_name, [plain("d"), plain("e", "x7"), plain("f")]).units
    assert [u.id for u in got] == ["m5", "x7", "m6"]
    assert [u.message["content"] for u in store.load(session_name)] == list("abcdef")


def test_duplicate_id_is_refused_and_the_session_stays_usable(store, session_name):
    store.append(session_name, units_of(PETS[:2]))
    version = store.version(session_name)
    with pytest.raises(DuplicateIdError, match=f"session '{session_name}' already has a message with id 'a0'"):
        store.append(session_name, units_of([("new", "user", "fresh"), PETS[1]]))
    with pytest.raises(ValueError, match="id 'x' appears twice in one append"):
        store.append(session_name, [plain("1", "x"), plain("2", "x")])
    assert [u.id for u in store.load(session_name)] == ["u0", "a0"]
    assert store.version(session_name) == version
    assert store.append(session_name, [plain("later")]).units[0].id == "m0"


def test_versions_grow_and_changes_say_what_moved(store, session_name):
    w1 = store.append(session_name, units_of(PETS[:4]))
    assert w1.prev == 0 and w1.version > 0
    w2 = store.set_tier(session_name, ["u0", "nope"], "archive")
    assert w2.prev == w1.version and w2.version > w1.version
    w3 = store.append(session_name, units_of(PETS[4:6]))
    changes = store.changes(session_name, w1.version)
    assert not changes.full and changes.version == w3.version == store.version(session_name)
    assert [(u.id, u.tier) for u in changes.units] == [("u0", "archive"), ("u2", "working"), ("a2", "working")]
    assert store.changes(session_name, w3.version).units == []
    everything = store.changes(session_name, 0)
    assert everything.full and [u.id for u in everything.units] == ["u0", "a0", "u1", "a1", "u2", "a2"]


def test_conditional_writes_fail_when_someone_else_wrote(store, session_name):
    seen = store.append(session_name, units_of(PETS[:4])).version
    store.append(session_name, units_of(PETS[4:5]))
    with pytest.raises(VersionConflict, match=f"session '{session_name}' is at version"):
        store.set_tier(session_name, ["u0"], "archive", expect=seen, log={"archived": ["u0"]})
    with pytest.raises(VersionConflict):
        store.update_state(session_name, {"k": 1}, expect=seen)
    assert {u.id: u.tier for u in store.load(session_name)}["u0"] == "working"
    assert store.compaction_log(session_name) == []
    now = store.version(session_name)
    store.set_tier(session_name, ["u0"], "archive", expect=now, log={"archived": ["u0"]})
    assert {u.id: u.tier for u in store.load(session_name)}["u0"] == "archive"
    assert [r["archived"] for r in store.compaction_log(session_name)] == [["u0"]]


def test_state_is_patched_and_read_back_with_changes(store, session_name):
    store.update_state(session_name, {"feedback": [0.5, -1.0], "settings": {"budget": 300}})
    store.update_state(session_name, {"settings": None, "other": True})
    assert store.changes(session_name).state == {"feedback": [0.5, -1.0], "other": True}
    assert store.load(session_name) == []
    with pytest.raises(ValueError, match="session state must be JSON"):
        store.update_state(session_name, {"bad": object()})


def test_delete_removes_units_everywhere_and_makes_readers_start_over(store, session_name, minilm):
    store.append(session_name, units_of(PETS, minilm, tier="archive"))
    before = store.version(session_name)
    q = "Which pet does the user have?"
    assert store.search(session_name, q, minilm.embed([q])[0], k=2)[0][0] in ("u0", "a0")
    gone = store.delete(session_name, ["u0", "a0", "nope"])
    assert gone.deleted == ["u0", "a0"] and gone.version > before
    assert [u.id for u in store.load(session_name)] == ["u1", "a1", "u2", "a2", "u3", "a3"]
    hits = {i for i, _ in store.search(session_name, "puppy Max golden retriever", minilm.embed([q])[0], k=8)}
    assert hits and not hits & {"u0", "a0"}
    changes = store.changes(session_name, before)
    assert changes.full and [u.id for u in changes.units] == ["u1", "a1", "u2", "a2", "u3", "a3"]
    assert store.delete(session_name, ["nope"]).deleted == []


def test_load_pages_in_order(store, session_name):
    store.append(session_name, [plain(f"note {i}") for i in range(7)])
    assert [u.id for u in store.load(session_name, offset=2, limit=3)] == ["m2", "m3", "m4"]
    assert [u.id for u in store.load(session_name, offset=5)] == ["m5", "m6"]
    assert store.load(session_name, offset=9) == []
    with pytest.raises(ValueError, match="offset must be an int >= 0, got -1"):
        store.load(session_name, offset=-1)


def test_set_tier_moves_units_and_ignores_unknown_ids(store, session_name):
    store.append(session_name, units_of(PETS))
    store.set_tier(session_name, ["u0", "a0", "nope"], "archive")
    tiers = {u.id: u.tier for u in store.load(session_name)}
    assert tiers["u0"] == tiers["a0"] == "archive"
    assert {t for i, t in tiers.items() if i not in ("u0", "a0")} == {"working"}
    store.set_tier(session_name, ["a0"], "working")
    assert {u.id: u.tier for u in store.load(session_name)}["a0"] == "working"


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda s, n: s.set_tier(n, ["u0"], "cold"), ValueError, "tier must be one of working, archive, got 'cold'"),
        (lambda s, n: s.set_tier(n, "u0", "archive"), TypeError, "ids must be a list of message ids, got str"),
        (lambda s, n: s.delete(n, [1]), TypeError, "ids must be strings, got 1"),
        (lambda s, n: s.search(n, "x", None, k=-1), ValueError, "k must be an int >= 0, got -1"),
        (lambda s, n: s.search(n, "x", None, k=1, tier="hot"), ValueError, "tier must be one of working, archive or None"),
        (lambda s, n: s.search(n, 5, None, k=1), TypeError, "query must be a string, got int"),
        (lambda s, n: s.search(n, "x", np.array([np.nan]), k=1), ValueError, "query_embedding must be"),
        (lambda s, n: s.append("", [plain("x")]), ValueError, "session must be a non-empty string"),
        (lambda s, n: s.append(n, plain("x")), TypeError, "units must be a list of NewUnit"),
        (lambda s, n: s.append(n, [plain("x", uid="")]), ValueError, "unit 0: id must be a non-empty string or None"),
        (lambda s, n: s.append(n, [NewUnit({"role": "x"}, 1)]), ValueError, "unit 0: message must be a dict with a valid"),
        (lambda s, n: s.append(n, [NewUnit({"role": "user", "t": object()}, 1)]), ValueError, "unit 0: message and features must be JSON"),
        (lambda s, n: s.append(n, [NewUnit({"role": "user"}, -2)]), ValueError, "unit 0: tokens must be an int >= 0"),
        (lambda s, n: s.set_tier(n, [], "archive", expect=-1), ValueError, "expect must be a session version"),
        (lambda s, n: s.log_compaction(n, ["x"]), TypeError, "a log record must be a dict"),
    ],
)
def test_every_backend_checks_its_arguments_the_same_way(store, session_name, call, exc, match):
    store.append(session_name, units_of(PETS[:1]))
    with pytest.raises(exc, match=match):
        call(store, session_name)
    assert [u.id for u in store.load(session_name)] == ["u0"]


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
                                        tier="archive"))
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
    old = store.version(session_name)
    store.delete_session(session_name)
    assert store.load(session_name) == []
    assert store.search(session_name, "violin", None, k=5) == []
    assert store.compaction_log(session_name) == []
    assert session_name not in {i.session for i in store.sessions()}
    assert [u.id for u in store.load(other)] == [u for u, _, _ in PETS]
    assert store.search(other, "violin", None, k=1)[0][0] in ("u2", "a2")
    # Created again: a reader that saw the old session starts over (versions never repeat).
    store.append(session_name, [plain("fresh start")])
    changes = store.changes(session_name, old)
    assert changes.full and [u.message["content"] for u in changes.units] == ["fresh start"]
    store.delete_session(other)


def test_compaction_log_roundtrip(store, session_name):
    store.log_compaction(session_name, {"archived": ["a", "b"], "kept": 3, "policy": "rd"})
    store.log_compaction(session_name, {"archived": ["c"], "kept": 2, "policy": "rd"})
    log = store.compaction_log(session_name)
    assert [r["archived"] for r in log] == [["a", "b"], ["c"]]
    assert all(isinstance(r["time"], float) for r in log)


def test_api_keys_are_stored_hashed_listed_and_revoked_at_once(store):
    assert not store.has_keys() or store.list_keys()  # a shared PostgreSQL may hold other tests' keys
    key, secret = store.create_key("acme", name="ci")
    other, other_secret = store.create_key("globex")
    assert secret.startswith("rdmem_") and len(secret) > 40 and key.id.startswith("key_")
    assert store.key_tenant(secret) == "acme" and store.key_tenant(other_secret) == "globex"
    assert store.key_tenant("rdmem_" + "x" * 43) is None and store.key_tenant("garbage") is None
    listed = {k.id: k for k in store.list_keys("acme")}
    assert listed[key.id].name == "ci" and listed[key.id].revoked is None and other.id not in listed
    assert store.has_keys()
    assert store.revoke_key(key.id) is True
    assert store.key_tenant(secret) is None  # at once
    assert store.revoke_key(key.id) is False and store.revoke_key("key_nope") is False
    assert {k.id: k for k in store.list_keys("acme")}[key.id].revoked is not None
    store.revoke_key(other.id)
    with pytest.raises(ValueError, match="tenant must be 1-64 letters"):
        store.create_key("bad tenant/with slash")


def test_nul_characters_in_content_round_trip_and_are_searchable_on_every_store(store, session_name):
    """A NUL is text like any other in what a message says: every store keeps it exactly (PostgreSQL's text
    cannot hold one, so it travels escaped in the message's JSON, and the full-text index reads a space)."""
    call = {"id": "call\x000", "type": "function", "function": {"name": "look\x00up", "arguments": '{"q": "a\\u0000b"}'}}
    messages = [
        {"role": "user", "content": "before\x00after the kayak trip", "meta": {"k\x00": "v\x00"}},
        {"role": "assistant", "content": [{"type": "text", "text": "part\x00one"}], "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call\x000", "content": "\x00", "name": "look\x00up"},
    ]
    written = store.append(session_name, [NewUnit(m, 3, {"f\x00": "\x00"}, id=f"n{i}") for i, m in enumerate(messages)])
    assert [u.message for u in written.units] == messages
    loaded = store.load(session_name)
    assert [u.message for u in loaded] == messages and loaded[0].features == {"f\x00": "\x00"}
    assert [i for i, _ in store.search(session_name, "kayak", None, k=3)] == ["n0"]
    assert store.search(session_name, "after\x00kayak", None, k=3)[0][0] == "n0"
    store.update_state(session_name, {"note": "x\x00y"})
    store.log_compaction(session_name, {"why": "\x00"})
    assert store.changes(session_name).state["note"] == "x\x00y"
    assert store.compaction_log(session_name)[-1]["why"] == "\x00"


@pytest.mark.parametrize(("call", "match"), [
    (lambda s, n: s.append(n, [plain("x", uid="a\x00b")]), r"unit 0: id must not contain a NUL character, got 'a\\x00b'"),
    (lambda s, n: s.append(n + "\x00", [plain("x")]), r"session must not contain a NUL character, got '.*\\x00'"),
    (lambda s, n: s.load(n + "\x00"), r"session must not contain a NUL character"),
    (lambda s, n: s.create_key("t", name="a\x00"), r"name must not contain a NUL character, got 'a\\x00'"),
])
def test_nul_characters_in_names_are_refused_the_same_way_by_every_store(store, session_name, call, match):
    """Ids and names are not text to keep but keys to find things by: a NUL in one is refused, before the
    store, with the same InvalidInput everywhere (SQLite would keep it, PostgreSQL cannot)."""
    from rdmem.errors import InvalidInput

    store.append(session_name, [plain("x", uid="u0")])
    with pytest.raises(InvalidInput, match=match):
        call(store, session_name)
    assert [u.id for u in store.load(session_name)] == ["u0"]
    # an id no unit can have is simply not in the session
    assert store.delete(session_name, ["u0\x00"]).deleted == []
    store.set_tier(session_name, ["u0\x00"], "archive")
    assert store.revoke_key("key\x00") is False
    assert [u.tier for u in store.load(session_name)] == ["working"]
