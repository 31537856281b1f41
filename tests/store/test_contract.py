"""The store contract (``rdmem.testing``), checked on every backend: memory, SQLite file, PostgreSQL + pgvector."""

from __future__ import annotations

import pytest

from rdmem.testing import STORE_CHECKS
from rdmem.testing._store import PETS, units_of


@pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_contract(check, store, session_name):
    check(store, session_name)


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
