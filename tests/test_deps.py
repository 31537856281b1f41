"""Dependencies: corrections linked to what they correct, answers to their question, blocks merged."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rdmem.deps import find_links, merge_blocks
from rdmem.units import encode_units


def _units(cl100k, turns):
    messages = [t if isinstance(t, dict) else {"role": t[0], "content": t[1]} for t in turns]
    return encode_units(messages, cl100k)


def test_but_not_green_apples(cl100k):
    units = _units(cl100k, [
        ("user", "I like apples."),
        ("assistant", "Noted, I will add fruit to the list."),
        ("user", "I also need bread."),
        ("user", "But not green apples."),
    ])
    assert find_links(units) == [(3, 0, "correction")]


def test_correction_without_shared_words_goes_to_the_same_speaker(cl100k):
    units = _units(cl100k, [
        ("user", "Book the team dinner on Monday."),
        ("assistant", "Which restaurant should I pick?"),
        ("user", "Actually, make it Tuesday."),
    ])
    links = find_links(units)
    assert (2, 0, "correction") in links
    assert (1, 0, "answer") not in links  # "Book ..." is not a question
    assert (2, 1, "answer") in links      # the assistant asked; the user's next turn replies


def test_correction_prefers_the_similar_unit_over_the_recent_one(cl100k):
    units = _units(cl100k, [
        ("user", "My sister Ana lives in Lisbon."),
        ("user", "I ran 5 km this morning."),
        ("user", "The weather is nice today."),
        ("user", "Not anymore: Ana lives in Porto since March."),
    ])
    assert find_links(units) == [(3, 0, "correction")]


def test_locomo_prefix_words_do_not_count(cl100k):
    # Without the "[date] Name:" prefix the corrected turn is the one about the cat, not the one
    # that shares the whole prefix.
    units = _units(cl100k, [
        ("user", "[1 April, 2023] Ann: My cat is named Tom."),
        ("assistant", "[9 May, 2023] Bob: I ran 9 km on the 9th of May, 2023."),
        ("user", "[9 May, 2023] Ann: Actually, the cat is named Tim now."),
    ])
    assert find_links(units)[0] == (2, 0, "correction")


def test_window_limits_how_far_back(cl100k):
    turns = [("user", "I like apples.")] + [("user", f"Filler number {i}.") for i in range(5)]
    units = _units(cl100k, turns + [("user", "But not green apples.")])
    assert find_links(units, window=10) == [(6, 0, "correction")]
    assert find_links(units, window=3)[0][1] in (3, 4, 5)


def test_question_answer_pairs(cl100k):
    units = _units(cl100k, [
        ("user", "Have you been to Rome?"),
        ("assistant", "Yes, twice."),
        ("user", "What did you like most?"),
        ("user", "Also, the food?"),       # same speaker again: no answer link for the first question
        ("assistant", "The food, above all."),
    ])
    assert find_links(units) == [(1, 0, "answer"), (4, 3, "answer")]


def test_links_of_the_kinds_asked_for_only(cl100k):
    units = _units(cl100k, [
        ("user", "I like apples. Do you?"),
        ("assistant", "Yes, red ones."),
        ("user", "But not green apples."),
    ])
    assert find_links(units) == [(1, 0, "answer"), (2, 0, "correction")]
    assert find_links(units, kinds=("correction",)) == [(2, 0, "correction")]
    assert find_links(units, kinds=("answer",)) == [(1, 0, "answer")]
    for bad in ("correction", ("typo",), 3):
        with pytest.raises(ValueError, match="kinds must be link kinds"):
            find_links(units, kinds=bad)


def test_answer_link_skips_tool_traffic(cl100k):
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": "Rome"})}}
    units = _units(cl100k, [
        {"role": "user", "content": "What's the weather in Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 24 C."},
        {"role": "assistant", "content": "Sunny and 24 C in Rome."},
    ])
    assert find_links(units) == [(3, 0, "answer")]


def test_nothing_to_link(cl100k):
    assert find_links([]) == []
    assert find_links(_units(cl100k, [("user", "Hello there."), ("assistant", "Hi.")])) == []


def test_embeddings_pick_by_cosine(cl100k):
    units = _units(cl100k, [("user", "a"), ("user", "b"), ("user", "c"), ("user", "Actually, no.")])
    emb = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.1, 1.0]])
    assert find_links(units, emb) == [(3, 1, "correction")]
    with pytest.raises(ValueError, match=r"embeddings must be an \(n, d\) array with one row per unit \(n = 4\)"):
        find_links(units, emb[:3])


@pytest.mark.slow
def test_minilm_links_the_day_change_to_the_plan(cl100k, minilm):
    units = _units(cl100k, [
        ("user", "Let's have the team dinner on Monday evening."),
        ("assistant", "Great, I'll look for a restaurant."),
        ("user", "I love hiking in the mountains."),
        ("user", "My cat sleeps all day."),
        ("user", "Actually, make the dinner Tuesday."),
    ])
    emb = minilm.embed([u.text for u in units])
    assert (4, 0, "correction") in find_links(units, emb)


def test_merge_blocks_unions_by_kind():
    blocks = [np.array([0]), np.array([1, 2]), np.array([3]), np.array([4])]
    links = [(3, 0, "correction"), (4, 3, "answer"), (2, 1, "answer")]
    merged = merge_blocks(blocks, links)
    assert [b.tolist() for b in merged] == [[0, 3], [1, 2], [4]]
    merged = merge_blocks(blocks, links, kinds=("correction", "answer"))
    assert [b.tolist() for b in merged] == [[0, 3, 4], [1, 2]]
    assert [b.tolist() for b in merge_blocks(blocks, links, kinds=())] == [[0], [1, 2], [3], [4]]


def test_merge_blocks_sorts_and_ignores_unknown_positions():
    blocks = [np.array([5, 4]), np.array([0]), np.array([2])]
    merged = merge_blocks(blocks, [(2, 5, "correction"), (9, 0, "correction")])
    assert [b.tolist() for b in merged] == [[0], [2, 4, 5]]


def test_merge_blocks_chains_transitively():
    blocks = [np.array([i]) for i in range(4)]
    merged = merge_blocks(blocks, [(1, 0, "correction"), (3, 2, "correction"), (2, 1, "correction")])
    assert [b.tolist() for b in merged] == [[0, 1, 2, 3]]


def test_merge_blocks_errors():
    with pytest.raises(ValueError, match="blocks must be disjoint; position 1 is in blocks 0 and 1"):
        merge_blocks([np.array([0, 1]), np.array([1])], [])
    with pytest.raises(TypeError, match="kinds must be a sequence of link kinds"):
        merge_blocks([np.array([0])], [], kinds="correction")
    with pytest.raises(ValueError, match="unknown link kind 'tool'"):
        merge_blocks([np.array([0])], [], kinds=("tool",))


def test_find_links_errors(cl100k):
    units = _units(cl100k, [("user", "hi")])
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        find_links(units, window=0)
    with pytest.raises(ValueError, match="same_speaker_bonus must be a number >= 0"):
        find_links(units, same_speaker_bonus=-1)
