"""The store contract (``rdmem.testing``), checked on every backend: memory, SQLite file, PostgreSQL + pgvector."""

from __future__ import annotations

import pytest

from rdmem.testing import STORE_CHECKS
from rdmem.store import KeyStore, NewUnit, keeps_keys
from rdmem.testing._store import PETS, plain, units_of


@pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_contract(check, store, session_name):
    check(store, session_name)


def test_every_built_in_store_keeps_the_servers_keys_which_no_store_method_exposes(store):
    """Keys are the server's (a KeyStore over the store's key table), not a part of the Store protocol: the
    contract's key check runs on every built-in store, and a store of the user's own need not keep keys."""
    assert keeps_keys(store) and not hasattr(store, "create_key")
    assert not keeps_keys(object())
    with pytest.raises(TypeError, match="object keeps no API keys"):
        KeyStore(object())


def test_dense_search_finds_paraphrases_with_the_real_model(store, session_name, minilm):
    """The contract's vectors are made up; with MiniLM's, a paraphrase that shares no word is found too."""
    units = units_of(PETS)
    vectors = minilm.embed([u.message["content"] for u in units])
    for u, v in zip(units, vectors, strict=True):
        u.embedding = v
    store.append(session_name, units)
    query = "What kind of pet does the user own?"
    hits = store.search(session_name, query, minilm.embed([query])[0], k=3)
    assert hits[0][0] in ("u0", "a0")


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


def test_a_message_of_very_many_distinct_words_is_stored_whole_on_every_store(store, session_name):
    """Found by the seventh review: on PostgreSQL a message of ~1.5 million characters of distinct words was
    over the 1 MiB a word vector may hold, and every write of its session failed (a proxy session stored
    nothing more). Every store now indexes the message's first SEARCHABLE_CHARS characters and keeps it whole."""
    import random
    import string

    from rdmem.store._base import SEARCHABLE_CHARS

    rng = random.Random(1)
    words = " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(6, 12))) for _ in range(160_000))
    assert len(words) > 10 * SEARCHABLE_CHARS
    message = {"role": "user", "content": [{"type": "text", "text": words}, {"type": "text", "text": "zebra tail"}]}
    store.append(session_name, [NewUnit(message, 9, {}, id="big"), plain("the zebra crossing", uid="small")])
    assert store.load(session_name)[0].message == message
    first = words.split()[0]
    assert [i for i, _ in store.search(session_name, first, None, k=3)] == ["big"]
    assert [i for i, _ in store.search(session_name, "zebra", None, k=3)] == ["small"]  # past the indexed part


@pytest.mark.parametrize(("call", "match"), [
    (lambda s, n: s.append(n, [plain("x", uid="a\x00b")]), r"unit 0: id must not contain a NUL character, got 'a\\x00b'"),
    (lambda s, n: s.append(n + "\x00", [plain("x")]), r"session must not contain a NUL character, got '.*\\x00'"),
    (lambda s, n: s.load(n + "\x00"), r"session must not contain a NUL character"),
    (lambda s, n: KeyStore(s).create_key("t", name="a\x00"), r"name must not contain a NUL character, got 'a\\x00'"),
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
    assert KeyStore(store).revoke_key("key\x00") is False
    assert [u.tier for u in store.load(session_name)] == ["working"]
