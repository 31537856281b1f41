"""Rendering selections back to chat messages, and rdmem's own validity check."""

from __future__ import annotations

import pytest

from rdmem import MemoryManager, compact, is_valid_history, validate_history
from rdmem.errors import InvalidInput
from rdmem.reconstruct import MARKER, check_markers, elision_marker, marker_count, render, summary_message
from rdmem.tokens import get_tokenizer
from rdmem.units import encode_units

from ._checks import history_problems

TOK = get_tokenizer(len)


def units_of(messages):
    return encode_units(messages, TOK)


HISTORY = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "u0"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "u2"},
    {"role": "assistant", "content": "a3"},
    {"role": "user", "content": "u4"},
]


def test_markers_stand_for_each_elided_run():
    out = render(units_of(HISTORY), {0: None, 2: None, 5: None})
    assert out == [
        {"role": "system", "content": "sys"},
        elision_marker(1),
        {"role": "assistant", "content": "a1"},
        elision_marker(2),
        {"role": "user", "content": "u4"},
    ]
    assert elision_marker(1)["content"] == "[1 message omitted]"
    assert elision_marker(3)["content"] == "[3 messages omitted]"


def test_a_merged_marker_stands_for_every_run_where_the_first_was():
    units = units_of(HISTORY)
    out = render(units, {0: None, 2: None, 5: None}, markers="merged", sources=(src := []))
    assert out == [{"role": "system", "content": "sys"}, elision_marker(3, merged=True),
                   {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u4"}]
    assert out[1]["content"] == "[3 messages omitted throughout]" and src == [0, None, 2, 5]
    assert MARKER.match(out[1]["content"]).group(1) == "3" and marker_count(out[1]) == 3
    # One run: the marker says where it is, as a marker per run does.
    assert render(units, {0: None, 4: None, 5: None}, markers="merged") == render(units, {0: None, 4: None, 5: None})
    assert render(units, {0: None, 1: None}, markers="merged")[-1] == elision_marker(4)


@pytest.mark.parametrize("bad", ["yes", 1.0, None, "MERGED"])
def test_markers_must_be_one_of_three(bad):
    with pytest.raises(InvalidInput, match=r"markers must be True .*'merged' .* or False \(none\), got"):
        check_markers(bad)
    with pytest.raises(InvalidInput, match="markers must be"):
        compact(HISTORY, budget=10, markers=bad)
    with pytest.raises(InvalidInput, match="markers must be"):
        MemoryManager(budget=10, markers=bad)
    assert MemoryManager(budget=10).markers == "merged"  # the default, as compact's


def test_trailing_gap_and_no_markers():
    units = units_of(HISTORY)
    assert render(units, {0: None, 1: None})[-1] == elision_marker(4)
    assert render(units, {0: None, 1: None}, markers=False) == [HISTORY[0], HISTORY[1]]


def test_summary_goes_after_the_system_prompt_and_replaces_markers():
    out = render(units_of(HISTORY), {0: None, 5: None}, summary="they chatted", summarized={1, 2, 3, 4})
    assert out == [HISTORY[0], summary_message("they chatted", 4), HISTORY[5]]
    assert out[1]["content"].startswith("[rdmem: summary of 4 earlier messages]\n")


def test_replaced_content_and_pinned_order():
    history = HISTORY + [{"role": "system", "content": "late rule"}]
    out = render(units_of(history), {0: None, 6: None, 5: "u4 (cut)"})
    assert out == [HISTORY[0], {"role": "system", "content": "late rule"}, elision_marker(4),
                   {"role": "user", "content": "u4 (cut)"}]


def test_sources_name_the_unit_behind_each_message():
    history = HISTORY + [{"role": "system", "content": "late rule"}]
    sources: list = []
    out = render(units_of(history), {0: None, 6: None, 2: None, 5: None}, summary="s", summarized={1}, sources=sources)
    assert [m["content"] for m in out] == ["sys", "late rule", summary_message("s", 1)["content"], "a1",
                                           elision_marker(2)["content"], "u4"]
    assert sources == [0, 6, None, 2, None, 5]


def test_units_archived_earlier_count_in_the_next_marker():
    units = units_of(HISTORY)
    later = [units[0], units[4], units[5]]  # units 1-3 left in an earlier compaction
    assert render(later, {0: None, 2: None}) == [HISTORY[0], elision_marker(4), HISTORY[5]]


def call(cid):
    return {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("messages", "valid"),
    [
        ([], True),
        (HISTORY, True),
        ([{"role": "user", "content": "x"}, {"role": "system", "content": "late"}], False),
        ([{"role": "tool", "tool_call_id": "c", "content": "x"}], False),
        ([{"role": "assistant", "content": None, "tool_calls": [call("c")]}], False),
        ([{"role": "assistant", "content": None, "tool_calls": [call("c")]},
          {"role": "tool", "tool_call_id": "c", "content": "x"}], True),
        ([{"role": "assistant", "content": None, "tool_calls": [call("c"), call("d")]},
          {"role": "tool", "tool_call_id": "c", "content": "x"},
          {"role": "user", "content": "?"}], False),
        ([{"role": "assistant", "content": None, "tool_calls": [call("c")]},
          {"role": "user", "content": "interrupts"},
          {"role": "tool", "tool_call_id": "c", "content": "x"}], False),
    ],
)
def test_validate_history_agrees_with_the_independent_checker(messages, valid):
    assert is_valid_history(messages) is valid
    assert (not validate_history(messages)) is valid
    assert (not history_problems(messages)) is valid
