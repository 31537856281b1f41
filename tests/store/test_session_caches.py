"""A store's per-session caches are bounded: a shared store (``rdmem serve``'s) that has served many sessions held
the search state of every one (600 sessions of 200 messages: 176 MB of vectors, never let go)."""

from __future__ import annotations

import numpy as np

from rdmem.store import NewUnit
from rdmem.store.sqlite import SQLiteStore
from rdmem.store._types import SESSION_CACHES, Bounded


def test_the_search_caches_keep_the_newest_sessions_only(tmp_path):
    store = SQLiteStore(tmp_path / "m.db")
    vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
    for i in range(SESSION_CACHES + 40):
        session = f"s{i}"
        store.append(session, [NewUnit({"role": "user", "content": f"note {i}"}, 3, id="a", embedding=vector)])
        assert store.search(session, "note", vector, k=1)[0][0] == "a"
    assert len(store._caches) == SESSION_CACHES and len(store._results) == SESSION_CACHES
    assert "s0" not in store._caches and f"s{SESSION_CACHES + 39}" in store._caches
    assert store.search("s0", "note", vector, k=1)[0][0] == "a"  # a forgotten session is read again
    store.close()


def test_bounded_forgets_what_was_used_longest_ago():
    cache = Bounded(2)
    cache["a"], cache["b"] = 1, 2
    cache["a"] = 3  # set again: the newest
    cache["c"] = 4
    assert list(cache.items()) == [("a", 3), ("c", 4)]
    assert cache.get("a") == 3 and cache.get("zz") is None  # read: the newest
    cache["d"] = 5
    assert list(cache.items()) == [("a", 3), ("d", 5)]


def test_a_session_searched_all_along_keeps_its_cache(tmp_path):
    """Eviction was by when a session was cached, not used: a session searched between every two new ones was
    rebuilt every 256 sessions."""
    store = SQLiteStore(tmp_path / "m.db")
    vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
    store.append("hot", [NewUnit({"role": "user", "content": "hot note"}, 3, id="h", embedding=vector)])
    store.search("hot", "note", vector, k=1)
    hot = store._caches["hot"]
    for i in range(SESSION_CACHES + 10):
        store.append(f"s{i}", [NewUnit({"role": "user", "content": f"note {i}"}, 3, id="a", embedding=vector)])
        store.search(f"s{i}", "note", vector, k=1)
        store.search("hot", f"note {i}", vector, k=1)  # a new query: past the results cache, to the search state
    assert store._caches.get("hot") is hot
    store.close()
