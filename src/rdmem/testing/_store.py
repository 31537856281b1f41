"""The store contract: what every backend (memory, SQLite, PostgreSQL, yours) must do, one check per function.

Each check takes a store and a session name no one else uses, and fails
with an ``AssertionError`` that says what went wrong. Vectors are made up
(one direction per topic), so no model is needed: the checks test the
store's search, not a model's sense.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..store import DuplicateIdError, KeyStore, NewUnit, Store, StoredUnit, Tier, VersionConflict, keeps_keys
from ._assert import equal, expect, raises
from ._store_shared import (
    check_a_message_behind_another_sessions_backlog_is_claimed_at_the_next_claim,
    check_a_session_written_again_after_its_delete_never_reuses_an_id,
    check_sessions_under_a_prefix_are_listed_and_no_other, plain,
)

__all__ = ["STORE_CHECKS", "StoreCheck"]

StoreCheck = Callable[[Store, str], None]

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
DIM = 16


def topic(t: int, variant: int = 0) -> np.ndarray:
    """A unit vector near direction ``t`` (``variant`` tilts it a little, so that units differ)."""
    v = np.zeros(DIM, dtype=np.float32)
    v[t] = 1.0
    if variant:
        v[8 + variant % 8] = 0.3
    return v / np.float32(np.linalg.norm(v))


def units_of(rows: list[tuple[str, str, str]], *, tier: Tier = "working") -> list[NewUnit]:
    """Rows of ``PETS`` as units, with made-up vectors: each pair of turns (a topic) has its own direction."""
    order = [r[0] for r in PETS]
    out = []
    for uid, role, text in rows:
        n = order.index(uid) if uid in order else len(PETS)
        out.append(NewUnit({"role": role, "content": text}, 4 + len(text) // 4, {"n": n}, topic(n // 2, n + 1),
                           tier, id=uid))
    return out


def ids(units: list[Any]) -> list[str]:
    return [u.id for u in units]


def check_is_a_store(store: Store, session: str) -> None:
    expect(isinstance(store, Store), f"{type(store).__name__} does not implement rdmem.store.Store")


def check_roundtrip_keeps_everything(store: Store, session: str) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Köln"}'}}
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief. Ünïcödé ✓ 漢字"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12 C, rain"},
        {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}], "name": "ana",
         "metadata": {"source": "slack", "thread": [1, 2]}, "timestamp": "2026-12-01T10:00:00Z"},
    ]
    vecs = [topic(i, i + 1) for i in range(4)]
    units = [NewUnit(m, 10 + i, {"entities": ["Ana"], "directive": i == 0}, vecs[i] if i != 1 else None,
                     "archive" if i == 2 else "working", id=f"id{i}") for i, m in enumerate(msgs)]
    first = store.append(session, units[:2])
    second = store.append(session, units[2:])
    equal([u.seq for u in first.units + second.units], [0, 1, 2, 3], "places of the appended units")
    back = store.load(session)
    equal(ids(back), ["id0", "id1", "id2", "id3"], "ids loaded")
    equal([u.message for u in back], msgs, "messages loaded (every field, those the chat API does not know too)")
    equal([u.seq for u in back], [0, 1, 2, 3], "places loaded")
    equal([u.tokens for u in back], [10, 11, 12, 13], "token counts loaded")
    equal([u.tier for u in back], ["working", "working", "archive", "working"], "tiers loaded")
    equal(back[0].features, {"entities": ["Ana"], "directive": True}, "features loaded")
    expect(back[1].embedding is None, f"a unit stored without a vector came back with {back[1].embedding!r}")
    for i in (0, 2, 3):
        vec = back[i].embedding
        expect(vec is not None and vec.dtype == np.float32 and np.array_equal(vec, vecs[i]),
               f"unit {i}'s vector did not come back exactly (float32): {vec!r}")


def check_unknown_session_is_empty(store: Store, session: str) -> None:
    equal(store.load(session), [], "load of a session never written")
    equal(store.search(session, "anything", None, k=5), [], "search of a session never written")
    equal(store.version(session), 0, "version of a session never written")
    changes = store.changes(session)
    equal((changes.version, changes.full, changes.units, changes.state), (0, True, [], {}),
          "changes of a session never written (version, full, units, state)")


def check_automatic_ids_never_meet_explicit_ones(store: Store, session: str) -> None:
    got = store.append(session, [plain("a"), plain("b", "m2"), plain("c")]).units
    equal(ids(got), ["m3", "m2", "m4"], "automatic ids after an explicit m2")
    got = store.append(session, [plain("d"), plain("e", "x7"), plain("f")]).units
    equal(ids(got), ["m5", "x7", "m6"], "automatic ids around an explicit x7")
    equal([u.message["content"] for u in store.load(session)], list("abcdef"), "contents in order")


def check_duplicate_id_is_refused_and_the_session_stays_usable(store: Store, session: str) -> None:
    store.append(session, units_of(PETS[:2]))
    version = store.version(session)
    raises(DuplicateIdError, f"session '{session}' already has a message with id 'a0'",
           lambda: store.append(session, units_of([("new", "user", "fresh"), PETS[1]])), "appending an id again")
    raises(ValueError, "id 'x' appears twice in one append",
           lambda: store.append(session, [plain("1", "x"), plain("2", "x")]), "one append with an id twice")
    equal(ids(store.load(session)), ["u0", "a0"], "ids after the refused appends (nothing written)")
    equal(store.version(session), version, "version after the refused appends")
    equal(store.append(session, [plain("later")]).units[0].id, "m0", "the next automatic id")


def check_versions_grow_and_changes_say_what_moved(store: Store, session: str) -> None:
    w1 = store.append(session, units_of(PETS[:4]))
    expect(w1.prev == 0 and w1.version > 0, f"first write of a session: prev {w1.prev}, version {w1.version}")
    w2 = store.set_tier(session, ["u0", "nope"], "archive")
    expect(w2.prev == w1.version and w2.version > w1.version, f"second write: {w2} after {w1}")
    w3 = store.append(session, units_of(PETS[4:6]))
    changes = store.changes(session, w1.version)
    expect(not changes.full and changes.version == w3.version == store.version(session),
           f"changes since the first write: full={changes.full}, version {changes.version}, expected {w3.version}")
    equal([(u.id, u.tier) for u in changes.units], [("u0", "archive"), ("u2", "working"), ("a2", "working")],
          "changes since the first write")
    equal(store.changes(session, w3.version).units, [], "changes since the last write")
    everything = store.changes(session, 0)
    expect(everything.full, "changes since version 0 are not the whole session")
    equal(ids(everything.units), ["u0", "a0", "u1", "a1", "u2", "a2"], "changes since version 0")


def check_conditional_writes_fail_when_someone_else_wrote(store: Store, session: str) -> None:
    seen = store.append(session, units_of(PETS[:4])).version
    store.append(session, units_of(PETS[4:5]))
    raises(VersionConflict, f"session '{session}' is at version",
           lambda: store.set_tier(session, ["u0"], "archive", expect=seen, log={"archived": ["u0"]}),
           "set_tier expecting an old version")
    raises(VersionConflict, "", lambda: store.update_state(session, {"k": 1}, expect=seen),
           "update_state expecting an old version")
    equal({u.id: u.tier for u in store.load(session)}["u0"], "working", "u0's tier after the refused move")
    equal(store.compaction_log(session), [], "the log after the refused move")
    now = store.version(session)
    store.set_tier(session, ["u0"], "archive", expect=now, log={"archived": ["u0"]})
    equal({u.id: u.tier for u in store.load(session)}["u0"], "archive", "u0's tier after the move")
    equal([r["archived"] for r in store.compaction_log(session)], [["u0"]], "the log after the move")


def check_state_is_patched_and_read_back_with_changes(store: Store, session: str) -> None:
    store.update_state(session, {"feedback": [0.5, -1.0], "settings": {"budget": 300}})
    store.update_state(session, {"settings": None, "other": True})
    equal(store.changes(session).state, {"feedback": [0.5, -1.0], "other": True}, "state after two patches")
    equal(store.load(session), [], "units of a session with only state")
    raises(ValueError, "session state must be JSON", lambda: store.update_state(session, {"bad": object()}),
           "a state that is not JSON")


def check_delete_removes_units_everywhere_and_makes_readers_start_over(store: Store, session: str) -> None:
    store.append(session, units_of(PETS, tier="archive"))
    before = store.version(session)
    first = store.search(session, "Which pet does the user have?", topic(0), k=2)
    expect(first and first[0][0] in ("u0", "a0"), f"search for the pets' topic found {first}")
    gone = store.delete(session, ["u0", "a0", "nope"])
    expect(gone.deleted == ["u0", "a0"] and gone.version > before, f"delete answered {gone}")
    equal(ids(store.load(session)), ["u1", "a1", "u2", "a2", "u3", "a3"], "ids after the delete")
    hits = {i for i, _ in store.search(session, "puppy Max golden retriever", topic(0), k=8)}
    expect(hits and not hits & {"u0", "a0"}, f"search after the delete found {sorted(hits)}")
    changes = store.changes(session, before)
    expect(changes.full, "changes across a delete are not the whole session (readers must start over)")
    equal(ids(changes.units), ["u1", "a1", "u2", "a2", "u3", "a3"], "changes across the delete")
    equal([u.seq for u in changes.units], list(range(6)), "places after the delete (the later units move up)")
    equal(store.delete(session, ["nope"]).deleted, [], "deleting an unknown id")


def check_a_window_of_the_newest_places_and_units_picked_by_id_or_place(store: Store, session: str) -> None:
    store.append(session, [plain(f"note {i}", tier="archive") for i in range(8)] + [plain("the newest")])
    store.set_tier(session, ["m1"], "working")
    whole = store.changes(session)
    tokens = sum(u.tokens for u in whole.units)
    equal((whole.start, whole.size), (0, (9, tokens)), "a full read's start and the session's size")
    part = store.changes(session, rows=3)
    expect(part.full and part.start == 6, f"changes(rows=3) read from place {part.start}, full={part.full}")
    equal(ids(part.units), ["m1", "m6", "m7", "m8"], "changes(rows=3): the working unit before, then the newest")
    equal(part.size, (9, tokens), "changes(rows=3): the size of the whole session")
    equal(ids(store.changes(session, rows=50).units), ids(whole.units), "changes(rows=50) of a 9-unit session")
    equal(ids(store.pick(session, ids=["m4", "nope", "m2"], places=[0, 2, 99])), ["m0", "m2", "m4"], "pick")
    equal([u.seq for u in store.pick(session, ids=["m4"])], [4], "pick: a unit's place")
    equal(store.pick(session), [], "pick of nothing")
    raises(ValueError, "rows must be an int >= 1 or None, got 0", lambda: store.changes(session, rows=0), "rows=0")
    small = store.changes(session, whole.version)
    equal((small.full, small.units, small.size), (False, [], (9, tokens)), "changes since now: the size still")


def check_load_pages_in_order(store: Store, session: str) -> None:
    store.append(session, [plain(f"note {i}") for i in range(7)])
    equal(ids(store.load(session, offset=2, limit=3)), ["m2", "m3", "m4"], "load(offset=2, limit=3)")
    equal(ids(store.load(session, offset=5)), ["m5", "m6"], "load(offset=5)")
    equal(store.load(session, offset=9), [], "load past the end")
    raises(ValueError, "offset must be an int >= 0, got -1", lambda: store.load(session, offset=-1), "load(offset=-1)")


def check_set_tier_moves_units_and_ignores_unknown_ids(store: Store, session: str) -> None:
    store.append(session, units_of(PETS))
    store.set_tier(session, ["u0", "a0", "nope"], "archive")
    tiers = {u.id: u.tier for u in store.load(session)}
    expect(tiers["u0"] == tiers["a0"] == "archive", f"tiers after archiving u0 and a0: {tiers}")
    equal({t for i, t in tiers.items() if i not in ("u0", "a0")}, {"working"}, "tiers of the others")
    store.set_tier(session, ["a0"], "working")
    equal({u.id: u.tier for u in store.load(session)}["a0"], "working", "a0's tier after moving it back")


# Deliberately wrong calls: the store is Any here so that a type checker lets them through.
BAD_CALLS: list[tuple[Callable[[Any, str], object], type[Exception], str]] = [
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
    (lambda s, n: s.append(n, [NewUnit({"role": "user", "t": object()}, 1)]), ValueError,
     "unit 0: message and features must be JSON"),
    (lambda s, n: s.append(n, [NewUnit({"role": "user"}, -2)]), ValueError, "unit 0: tokens must be an int >= 0"),
    (lambda s, n: s.set_tier(n, [], "archive", expect=-1), ValueError, "expect must be a session version"),
    (lambda s, n: s.log_compaction(n, ["x"]), TypeError, "a log record must be a dict"),
]


def check_arguments_are_checked_the_same_way(store: Store, session: str) -> None:
    store.append(session, units_of(PETS[:1]))
    for i, (call, exc, match) in enumerate(BAD_CALLS):
        raises(exc, match, lambda: call(store, session), f"bad call {i} (expected: {match})")
        equal(ids(store.load(session)), ["u0"], f"the session after bad call {i}")


def check_lexical_search_finds_the_matching_unit(store: Store, session: str) -> None:
    store.append(session, units_of(PETS))
    hits = store.search(session, "Which instrument, the violin?", None, k=3)
    expect(hits and hits[0][0] in ("u2", "a2"), f"search for 'violin' without a vector found {hits}")
    expect({i for i, _ in hits} <= {"u2", "a2"}, f"search for 'violin' found units without it: {hits}")
    expect(all(s > 0 for _, s in hits), f"scores of matches must be > 0: {hits}")


def check_dense_search_finds_what_shares_no_word(store: Store, session: str) -> None:
    store.append(session, units_of(PETS))
    hits = store.search(session, "What kind of pet does the user own?", topic(0), k=3)
    expect(hits and hits[0][0] in ("u0", "a0"), f"search by the pets' vector found {hits}")


def check_search_respects_tier_and_k(store: Store, session: str) -> None:
    store.append(session, units_of(PETS))
    store.set_tier(session, ["u0", "a0", "u1"], "archive")
    q = "dog puppy Max Lisbon violin peanuts"
    qv = sum((topic(t) for t in range(4)), np.zeros(DIM, dtype=np.float32)) / np.float32(2.0)
    archived = store.search(session, q, qv, k=10, tier="archive")
    equal({i for i, _ in archived}, {"u0", "a0", "u1"}, "search of the archive tier")
    working = store.search(session, q, qv, k=10, tier="working")
    expect(not {i for i, _ in working} & {"u0", "a0", "u1"}, f"search of the working tier found archived units: "
           f"{working}")
    equal(len(store.search(session, q, qv, k=2)), 2, "hits with k=2")
    scores = [s for _, s in store.search(session, q, qv, k=8)]
    equal(scores, sorted(scores, reverse=True), "scores, best first")


def check_search_sees_writes_made_after_a_cached_search(store: Store, session: str) -> None:
    store.append(session, units_of(PETS))
    q, qv = "saxophone lessons", topic(5)
    equal(store.search(session, q, None, k=3, tier="archive"), [], "search of an empty archive")
    sax = NewUnit({"role": "user", "content": "I take saxophone lessons on Mondays."}, 12, {}, topic(5, 2),
                  "archive", id="u9")
    store.append(session, [sax])
    for vector in (None, qv):
        hits = store.search(session, q, vector, k=3, tier="archive")
        expect(hits and hits[0][0] == "u9", f"search after a write (vector: {vector is not None}) found {hits}")
    store.set_tier(session, ["u9"], "working")
    equal(store.search(session, q, qv, k=3, tier="archive"), [], "search of the archive after moving u9 out")


def check_sessions_are_isolated(store: Store, session: str) -> None:
    other = session + "-other"
    try:
        store.append(session, units_of(PETS[:4]))
        store.append(other, units_of(PETS[4:]))
        hits = {i for i, _ in store.search(session, "violin", topic(2), k=10)}
        expect(hits and hits <= {u for u, _, _ in PETS[:4]}, f"search of one session found {sorted(hits)}")
        infos = {i.session: i for i in store.sessions()}
        mine = infos[session]
        equal((mine.units, mine.working, mine.archived), (4, 4, 0), "sessions(): units, working, archived")
        expect(mine.created <= mine.updated, f"sessions(): created {mine.created} after updated {mine.updated}")
    finally:
        store.delete_session(other)


def check_delete_session_removes_it_and_nothing_else(store: Store, session: str) -> None:
    other = session + "-keep"
    try:
        store.append(session, units_of(PETS))
        store.append(other, units_of(PETS))
        store.log_compaction(session, {"archived": ["u0"]})
        old = store.version(session)
        store.delete_session(session)
        equal(store.load(session), [], "load of a deleted session")
        equal(store.search(session, "violin", None, k=5), [], "search of a deleted session")
        equal(store.compaction_log(session), [], "log of a deleted session")
        expect(session not in {i.session for i in store.sessions()}, "a deleted session is still listed")
        equal(ids(store.load(other)), [u for u, _, _ in PETS], "the other session's ids")
        hits = store.search(other, "violin", None, k=1)
        expect(hits and hits[0][0] in ("u2", "a2"), f"search of the other session found {hits}")
        # Created again: a reader that saw the old session starts over (versions never repeat).
        store.append(session, [plain("fresh start")])
        changes = store.changes(session, old)
        expect(changes.full, "changes across a re-created session are not the whole session")
        equal([u.message["content"] for u in changes.units], ["fresh start"], "the re-created session")
    finally:
        store.delete_session(other)


def check_compaction_log_roundtrip(store: Store, session: str) -> None:
    store.log_compaction(session, {"archived": ["a", "b"], "kept": 3, "policy": "rd"})
    store.log_compaction(session, {"archived": ["c"], "kept": 2, "policy": "rd"})
    log = store.compaction_log(session)
    equal([r["archived"] for r in log], [["a", "b"], ["c"]], "the compaction log")
    expect(all(isinstance(r["time"], float) and math.isfinite(r["time"]) for r in log),
           f"every log record has a float time: {log}")


def check_api_keys_are_stored_hashed_listed_and_revoked_at_once(store: Store, session: str) -> None:
    """Through a :class:`~rdmem.store.KeyStore`, for a store that keeps the server's keys (one without the
    key hooks is for the library alone: nothing to check)."""
    if not keeps_keys(store):
        return
    keys = KeyStore(store)
    tenant = "t" + "".join(c for c in session if c.isalnum())[-20:]  # a shared database may hold other keys
    key, secret = keys.create_key(tenant, name="ci")
    other, other_secret = keys.create_key(tenant + "x")
    expect(secret.startswith("rdmem_") and len(secret) > 40 and key.id.startswith("key_"),
           f"a key's secret starts with rdmem_ (and is long) and its id with key_: {key.id}")
    equal((keys.key_tenant(secret), keys.key_tenant(other_secret)), (tenant, tenant + "x"), "tenants of the keys")
    equal((keys.key_tenant("rdmem_" + "x" * 43), keys.key_tenant("garbage")), (None, None), "tenants of non-keys")
    listed = {k.id: k for k in keys.list_keys(tenant)}
    expect(key.id in listed and listed[key.id].name == "ci" and listed[key.id].revoked is None
           and other.id not in listed, f"list_keys({tenant!r}) gave {list(listed.values())}")
    expect(secret not in repr(listed[key.id]), "a listed key shows its secret")
    expect(keys.has_keys(), "has_keys() is false with keys")
    expect(keys.revoke_key(key.id) is True, "revoking a key answered False")
    equal(keys.key_tenant(secret), None, "the tenant of a revoked key")
    expect(keys.revoke_key(key.id) is False and keys.revoke_key("key_nope") is False,
           "revoking a revoked or unknown key answered True")
    expect({k.id: k for k in keys.list_keys(tenant)}[key.id].revoked is not None, "a revoked key is not marked")
    keys.revoke_key(other.id)
    raises(ValueError, "tenant must be 1-64 letters", lambda: keys.create_key("bad tenant/with slash"),
           "a tenant name with a slash")


def _claimed(store: Store, session: str, worker: str, lease: float = 60.0) -> list[StoredUnit]:
    """What ``worker`` claims of ``session`` (the store may hold other sessions' unembedded units too)."""
    return [u for s, u in store.claim_unembedded(worker, limit=10**6, lease=lease) if s == session]


def check_units_without_vectors_are_claimed_once_and_their_vectors_land(store: Store, session: str) -> None:
    store.append(session, [plain("first note", "p0"), plain("second note", "p1"), *units_of(PETS[:1])])
    before = store.version(session)
    mine = _claimed(store, session, "worker-1")
    equal(ids(mine), ["p0", "p1"], "units claimed for embedding (those without a vector, oldest first)")
    equal(mine[0].message, {"role": "user", "content": "first note"}, "a claimed unit's message")
    equal(_claimed(store, session, "worker-2"), [], "a second worker's claim while the first one's lease lives")
    equal(store.version(session), before, "the session's version after claims (a claim is not a change)")
    written = store.set_embeddings(session, {"p0": topic(6), "u0": topic(7), "nope": topic(1)})
    expect(written.version > before, f"set_embeddings did not move the version ({before} -> {written.version})")
    changed = store.changes(session, before)
    equal(ids(changed.units), ["p0"], "units changed by set_embeddings (a unit with a vector keeps it)")
    got = changed.units[0].embedding
    expect(got is not None and np.allclose(got, topic(6)), "the landed vector, read back")
    u0 = next(u for u in store.load(session) if u.id == "u0")
    expect(u0.embedding is not None and np.allclose(u0.embedding, topic(0, 1)), "u0's own vector, unchanged")
    hits = store.search(session, "note", topic(6), k=1)
    equal(ids_of(hits), ["p0"], "search after a vector landed (lexical tie, broken by the vector)")
    again = store.set_embeddings(session, {"p0": topic(5)})
    equal(again.version, again.prev, "set_embeddings of a unit that has its vector already (nothing written)")
    other = session + "-lease"
    store.append(other, [plain("third note", "q0")])
    equal(ids(_claimed(store, other, "worker-1", lease=0.05)), ["q0"], "a short claim")
    time.sleep(0.1)
    equal(ids(_claimed(store, other, "worker-2")), ["q0"], "a claim whose lease ran out, claimed again")
    raises(ValueError, "worker must be", lambda: store.claim_unembedded("", limit=1), "an empty worker name")
    raises(ValueError, "lease must be", lambda: store.claim_unembedded("w", lease=0), "a lease of 0 seconds")
    raises(ValueError, "finite", lambda: store.set_embeddings(session, {"p1": [float("nan")]}), "a NaN vector")
    # A message deleted and stored again under its id while a worker embedded it is another message: the deleted
    # one's vector must not land on it (its meaning would rank the new one), and the new one's must.
    again_id = session + "-reused"
    store.append(again_id, [plain("the vault combination is 31-07-55", "x")])
    equal(ids(_claimed(store, again_id, "worker-1")), ["x"], "the claim of a message about to be deleted")
    store.delete(again_id, ["x"])
    store.append(again_id, [plain("tomorrow I will bake a cake", "x")])
    stale = store.set_embeddings(again_id, {"x": topic(3)}, claimed_by="worker-1")
    equal(stale.version, stale.prev, "a vector claimed for a deleted message, given to the one stored under its id")
    equal(ids(_claimed(store, again_id, "worker-2")), ["x"], "the new message, claimed for its own vector")
    store.set_embeddings(again_id, {"x": topic(4)}, claimed_by="worker-2")
    x = next(u for u in store.load(again_id) if u.id == "x")
    expect(x.embedding is not None and np.allclose(x.embedding, topic(4)), "the new message's own vector")


def ids_of(hits: list[tuple[str, float]]) -> list[str]:
    return [i for i, _ in hits]


#: Every store check, in the order they run.
STORE_CHECKS: tuple[StoreCheck, ...] = (
    check_is_a_store, check_roundtrip_keeps_everything, check_unknown_session_is_empty,
    check_automatic_ids_never_meet_explicit_ones, check_duplicate_id_is_refused_and_the_session_stays_usable,
    check_versions_grow_and_changes_say_what_moved, check_conditional_writes_fail_when_someone_else_wrote,
    check_state_is_patched_and_read_back_with_changes,
    check_delete_removes_units_everywhere_and_makes_readers_start_over,
    check_a_window_of_the_newest_places_and_units_picked_by_id_or_place, check_load_pages_in_order,
    check_set_tier_moves_units_and_ignores_unknown_ids, check_arguments_are_checked_the_same_way,
    check_lexical_search_finds_the_matching_unit, check_dense_search_finds_what_shares_no_word,
    check_search_respects_tier_and_k, check_search_sees_writes_made_after_a_cached_search,
    check_sessions_are_isolated, check_delete_session_removes_it_and_nothing_else, check_compaction_log_roundtrip,
    check_api_keys_are_stored_hashed_listed_and_revoked_at_once,
    check_units_without_vectors_are_claimed_once_and_their_vectors_land,
    check_a_message_behind_another_sessions_backlog_is_claimed_at_the_next_claim,
    check_a_session_written_again_after_its_delete_never_reuses_an_id,
    check_sessions_under_a_prefix_are_listed_and_no_other,
)
