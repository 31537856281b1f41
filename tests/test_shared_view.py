"""Managers of one session may share one view of it (a server's pool does, one manager per budget):
what one writes or learns, the others see."""

from __future__ import annotations

import pytest

from rdmem import MemoryManager
from rdmem.errors import InvalidInput
from rdmem.store import MemoryStore


def _pair(shared, hashing_embedder, **second):
    first = MemoryManager(budget=400, policy="rd", store=shared, session="s", embedder=hashing_embedder)
    other = MemoryManager(**{"budget": 200, "policy": "rd", "store": shared, "session": "s",
                             "embedder": hashing_embedder, **second})
    return first, other


def test_a_manager_sharing_a_view_sees_the_others_writes_and_feedback(hashing_embedder):
    store = MemoryStore()
    first, other = _pair(store, hashing_embedder)
    other._share_session(first)
    ids = first.extend([{"role": "user", "content": f"We booked the hotel in Porto for night {i}."}
                        for i in range(12)])
    assert other.history() == first.history() and len(other) == 12
    assert other._session() is first._session()
    first.feedback(ids[:3], 1.0)
    alone = MemoryManager(budget=200, policy="rd", store=store, session="s", embedder=hashing_embedder)
    len(alone)  # opens its own view, takes the saved feedback
    len(other)  # its next call takes it from the shared view
    assert other._learning.feedback.values() == alone._learning.feedback.values() != \
        MemoryManager(budget=200, policy="rd", store=MemoryStore(), embedder=hashing_embedder)._learning.feedback.values()
    other.reset_feedback()
    assert first.context("Porto").report == alone.context("Porto").report  # the reset reached the sharer


def test_sharing_needs_one_store_session_and_tokenizer_before_first_use(hashing_embedder):
    store = MemoryStore()
    first, other = _pair(store, hashing_embedder, session="t")
    with pytest.raises(InvalidInput, match="one store, session and tokenizer"):
        other._share_session(first)
    first, other = _pair(store, hashing_embedder, store=MemoryStore())
    with pytest.raises(InvalidInput, match="one store, session and tokenizer"):
        other._share_session(first)
    first, other = _pair(store, hashing_embedder, tokenizer=lambda text: len(text.split()))
    with pytest.raises(InvalidInput, match="one store, session and tokenizer"):
        other._share_session(first)
    first, other = _pair(store, hashing_embedder)
    len(other)
    with pytest.raises(InvalidInput, match="before its first use"):
        other._share_session(first)
