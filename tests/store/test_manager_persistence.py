"""MemoryManager on persistent stores: sessions survive a restart exactly; archived units come back for a query."""

from __future__ import annotations

import json
import warnings

import pytest

from rdmem import MemoryManager
from rdmem.cli import main as cli_main
from rdmem.store import NewUnit, open_store
from rdmem.testing import agent_history
from rdmem.tokens import Tokenizer, get_tokenizer

_AGENT = agent_history()

FILLER = [
    "We talked about the weather in Porto and how windy the coast was.",
    "The train to Braga leaves every hour from Campanha station.",
    "I prefer window seats on long train journeys.",
    "The museum closes at six on weekdays and at eight on Saturdays.",
    "Dinner was grilled sardines with a glass of vinho verde.",
    "My phone battery keeps dying before the afternoon.",
    "The hotel breakfast had pastel de nata every morning.",
    "We walked along the Douro river until sunset.",
]


def history(agent_history):
    msgs = list(agent_history)
    msgs.append({"id": "code", "role": "user", "content": "My gym locker is the blue one next to the sauna."})
    for i in range(24):
        msgs.append({"id": f"f{i}", "role": "user" if i % 2 == 0 else "assistant", "content": FILLER[i % len(FILLER)]})
    return msgs


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mem.db'}"
    return request.getfixturevalue("pg_url")


def manager(url, session, embedder):
    # One batch for all texts up front (the cache then serves each add): much faster than one by one.
    embedder.embed([m["content"] or "" for m in history(_AGENT)] + ["Which locker at the gym is mine?"])
    # Small enough that even the locker fact, which rd's prior rates above the travel chatter, is archived.
    return MemoryManager(budget=160, policy="rd", store=url, session=session, embedder=embedder)


def test_reopening_restores_the_working_set_exactly(store_url, session_name, agent_history, minilm):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with manager(store_url, session_name, minilm) as mem:
            for m in history(agent_history):  # one by one: compactions along the way, as an agent streams
                mem.add(m)
            working, archived = mem.working_ids(), mem.archived_ids()
            plain = mem.context()
            asked = mem.context("Which locker at the gym is mine?")
        assert archived, "the budget is small enough that compaction archived something"
        with manager(store_url, session_name, minilm) as again:
            assert again.working_ids() == working
            assert again.archived_ids() == archived
            # The working set's vectors are compact arrays of their own, not views into a search matrix.
            assert all(u.embedding.flags.owndata for u in again._sync().working_units())
            assert again.context().messages == plain.messages
            assert again.context("Which locker at the gym is mine?").messages == asked.messages
            again.add(role="user", content="One more thing: my locker is on the second floor.")
            assert len(again) == len(history(agent_history)) + 1


def test_a_query_brings_an_archived_message_back(store_url, session_name, agent_history, minilm):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with manager(store_url, session_name, minilm) as mem:
            for m in history(agent_history):
                mem.add(m)
            assert "code" in mem.archived_ids()
            ctx = mem.context("Which locker at the gym is mine?")
            assert "code" in ctx.kept_ids
            assert "code" not in mem.context().kept_ids


def test_export_is_lossless(tmp_path, agent_history, capsys):
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    msgs = history(agent_history) + [
        {"id": "parts", "role": "user", "content": [{"type": "text", "text": "Ünïcödé ✓ 漢字"}], "name": "ana"}
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with MemoryManager(budget=260, policy="window", store=url, session="orig") as mem:
            mem.extend(msgs)
    assert cli_main(["sessions", "export", "orig", "--store", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    exported = [json.loads(line) for line in lines]
    assert exported == msgs  # our input messages were already clean (only API keys)
    with MemoryManager(budget=260, policy="window", store=url, session="copy") as mem:
        mem.extend(exported)
    assert cli_main(["sessions", "export", "copy", "--store", url]) == 0
    assert capsys.readouterr().out.splitlines() == lines


def test_reopening_reuses_token_counts_made_with_the_same_tokenizer(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    texts = [FILLER[i % len(FILLER)] + f" ({i})" for i in range(30)]
    with MemoryManager(budget=100, policy="window", store=url, session="s") as mem:
        for t in texts:
            mem.add(role="user", content=t)
        counted = {u.id: u.tokens for u in mem._sync().units}
    with open_store(url) as store:  # one more, written without a manager: its count is not vouched for
        store.append("s", [NewUnit({"role": "user", "content": "written directly"}, 999, id="extra")])
    calls = []
    real = Tokenizer.message_tokens
    monkeypatch.setattr(Tokenizer, "message_tokens", lambda self, m: calls.append(m) or real(self, m))
    reopened = MemoryManager(budget=100, policy="window", store=url, session="s")
    units = reopened._sync().units
    assert [m["content"] for m in calls] == ["written directly"]  # only the unvouched count is redone
    assert {u.id: u.tokens for u in units if u.id != "extra"} == counted
    assert units[-1].tokens == get_tokenizer("cl100k_base").message_tokens({"role": "user", "content": "written directly"})
    reopened.close()
    # Another per-message overhead is another count: every message is counted again.
    calls.clear()
    other = MemoryManager(budget=100, policy="window", store=url, session="s", message_overhead=7)
    units = other._sync().units
    assert len(calls) == len(texts) + 1
    assert {u.id: u.tokens for u in units if u.id != "extra"} == {i: n + 3 for i, n in counted.items()}
    other.close()
