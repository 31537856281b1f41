"""A long session's view holds its newest places (issue 27 item 5): opening it reads a bounded part of it, what
lies further back is read as calls need it, and the manager's answers about the session are the same."""

from __future__ import annotations

import pytest

import rdmem._session
from rdmem import MemoryManager

FACT = "My gym locker code is 4411, next to the sauna."
QUESTION = "What is my gym locker code?"


def _filler(i: int) -> dict[str, str]:
    return {"role": "user" if i % 2 else "assistant", "content": f"note {i}: the weather report number {i} says rain"}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "memory":
        from rdmem.store import MemoryStore

        return MemoryStore()
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'w.db'}"
    return request.getfixturevalue("pg_url")


def _manager(url, session: str, embedder, policy: str = "rd") -> MemoryManager:
    return MemoryManager(budget=300, policy=policy, store=url, session=session, embedder=embedder)


def _fill(mem: MemoryManager, n: int) -> None:
    msgs = [_filler(i) for i in range(n)]
    msgs[3] = {"role": "user", "content": FACT}
    for k in range(0, n, 20):
        mem.extend(msgs[k:k + 20])


def test_a_long_session_opens_with_its_newest_places_and_reads_older_ones_as_calls_need_them(
        url, request, monkeypatch, hashing_embedder):
    session = f"window-{request.node.callspec.id}"
    _fill(_manager(url, session, hashing_embedder, "window"), 300)  # its working set: the newest messages
    whole = _manager(url, session, hashing_embedder)  # the default view holds all of it
    monkeypatch.setattr(rdmem._session, "VIEW_ROWS", 50)
    mem = _manager(url, session, hashing_embedder)
    assert len(mem) == len(whole) == 300
    view = mem._session()
    assert view.start == 250 and len(view.units) == 50
    assert len(view.by_id) == 50 + sum(1 for i in mem.working_ids() if view.by_id[i].index < 250)  # nothing else read
    assert mem.stats() == whole.stats()
    assert (mem.working_ids(), mem.archived_ids()) == (whole.working_ids(), whole.archived_ids())

    fact_id = whole.history(offset=3, limit=1)[0]["id"]
    assert fact_id not in view.by_id and fact_id in mem.archived_ids()
    kept = mem.context(QUESTION)
    assert fact_id in kept.kept_ids and FACT in [m["content"] for m in kept.messages]
    assert view.by_id[fact_id].index == 3  # at its place, with its neighbours
    assert {2, 4} <= set(view.at)
    hit = mem.search("gym locker code", k=3)[0]
    assert (hit["id"], hit["tier"], hit["message"]["content"]) == (fact_id, "archive", FACT)
    assert mem.originals([fact_id, "nope"]) == whole.originals([fact_id]) == {fact_id: {"id": fact_id, "role": "user",
                                                                                   "content": FACT}}

    # A client resending more than the view holds: nothing of it is new.
    sent = [{"role": h["role"], "content": h["content"]} for h in whole.history()[-80:]]
    assert mem.resent(sent) == ([], [])
    assert mem.resent(sent + [{"role": "user", "content": "and one more"}]) == ([80], [])

    mem.feedback([whole.history(offset=1, limit=1)[0]["id"]], reward=0.0)  # an id older than the view: read


def test_a_growing_view_stays_bounded_and_counts_words_as_a_fresh_one_does(tmp_path, monkeypatch, hashing_embedder):
    monkeypatch.setattr(rdmem._session, "VIEW_ROWS", 40)
    url = f"sqlite:///{tmp_path / 'g.db'}"
    mem = _manager(url, "g", hashing_embedder)
    _fill(mem, 260)
    view = mem._session()
    for i in range(12):  # each context fetches older units (up to its 200 hits and their neighbours)
        mem.context(f"what did note {i * 20 + 3} say about the weather?")
        # held: at most 2 x 40 newest places, 40 older units kept from before, and this call's fetch
        assert len(view.units) <= 2 * 40 and len(view.by_id) <= 2 * 40 + 40 + 250 + len(mem.working_ids())
    fresh = _manager(url, "g", hashing_embedder)
    fresh_view = fresh._session()
    assert len(fresh) == len(mem) == 260
    assert (view.df, view.df_n, view.next_place) == (fresh_view.df, fresh_view.df_n, fresh_view.next_place)
    assert view.df_n == 40  # the newest 40 places
    for q in (QUESTION, "what did note 17 say?", None):
        assert mem.context(q).messages == fresh.context(q).messages


def test_a_delete_moves_the_later_units_up_and_the_view_reads_its_window_again(tmp_path, monkeypatch, hashing_embedder):
    monkeypatch.setattr(rdmem._session, "VIEW_ROWS", 30)
    url = f"sqlite:///{tmp_path / 'd.db'}"
    mem = _manager(url, "d", hashing_embedder)
    _fill(mem, 100)
    ids = [h["id"] for h in mem.history()]
    tokens = mem.stats()["tokens"]
    gone = mem.history(offset=95, limit=2)
    mem.delete([ids[95], ids[96]])
    assert len(mem) == 98 and mem.stats()["units"] == 98
    assert mem.stats()["tokens"] == tokens - sum(mem.tokenizer.message_tokens(
        {"role": g["role"], "content": g["content"]}) for g in gone)
    view = mem._session()
    assert ids[95] not in view.by_id and view.next_place == 98 and view.start == 68
    assert [u.index for u in view.units] == list(range(68, 98)) and view.by_id[ids[97]].index == 95
    assert [u.seq for u in mem.store.load("d", offset=94)] == [94, 95, 96, 97]  # places stay 0, 1, ...
    assert FACT in [m["content"] for m in mem.messages(QUESTION)]
