"""Memory units: normalisation of input messages, costs, groups."""

from __future__ import annotations

import copy

import pytest

from rdmem.tokens import get_tokenizer
from rdmem.history import validate_history
from rdmem.units import encode_units, group_indices, normalize_messages


def call(cid, name="f"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_ids_default_to_position_and_must_be_strings():
    pairs = normalize_messages([{"role": "user", "content": "a"}, {"role": "user", "content": "b", "id": "7"}])
    assert [mid for mid, _ in pairs] == ["m0", "7"]
    # An int id would come back as a string from every store: refused at input instead, with the fix.
    with pytest.raises(ValueError, match=r"message 1: 'id' must be a non-empty string, got int 7 \(ids are strings: use '7'\)"):
        normalize_messages([{"role": "user", "content": "a"}, {"role": "user", "content": "b", "id": 7}])


def test_clean_copies_keep_only_api_keys_and_never_alias_the_input():
    msg = {"role": "user", "content": [{"type": "text", "text": "hi"}], "id": "x", "timestamp": 3, "name": "ana"}
    before = copy.deepcopy(msg)
    ((_, clean),) = normalize_messages([msg])
    assert clean == {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ana"}
    clean["content"][0]["text"] = "changed"
    assert msg == before


def test_missing_content_and_empty_tool_calls():
    pairs = normalize_messages([
        {"role": "user"},
        {"role": "assistant", "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "done", "tool_calls": []},
    ])
    assert pairs[0][1] == {"role": "user", "content": ""}
    assert pairs[1][1]["content"] is None
    assert pairs[3][1] == {"role": "assistant", "content": "done"}  # the API rejects an empty tool_calls list


def _deep(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("messages", "exc", "match"),
    [
        ("hello", TypeError, "messages must be a list of message dicts, got str"),
        (None, TypeError, "messages must be a list of message dicts, got null"),
        ({"role": "user", "content": "x"}, TypeError, r"got one dict \(wrap a single message in a list\)"),
        (["hi"], TypeError, "message 0 must be a dict with 'role' and 'content', got str"),
        ([{"content": "x"}], ValueError, r"message 0: invalid role None; expected one of system, developer"),
        ([{"role": "wizard", "content": "x"}], ValueError, "message 0: invalid role 'wizard'"),
        ([{"role": "user", "content": 5}], ValueError, "message 0: 'content' must be a string, a list of text parts"),
        ([{"role": "user", "content": [1, 2]}], ValueError, r"message 0: content\[0\] must be a content part"),
        ([{"role": "user", "content": [{"type": "text", "text": 5}]}], ValueError,
         r"message 0: content\[0\]\.text must be a string, got int"),
        ([{"role": "user", "content": [{"text": "x"}]}], ValueError, r"message 0: content\[0\]\.type must be a string"),
        ([{"role": "user", "content": "x", "name": 5}], ValueError, "message 0: 'name' must be a string, got int"),
        ([{"role": "user", "content": "bad \ud800 text"}], ValueError,
         r"message 0: content is not valid Unicode: a lone surrogate '\\ud800' at character 4"),
        ([{"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": None}]}], ValueError,
         r"message 0: tool_calls\[0\]\.function must be a dict with 'name' and 'arguments', got null"),
        ([{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": 5}}]}],
         ValueError, r"message 0: tool_calls\[0\]\.function\.arguments must be a JSON string, got int"),
        ([{"role": "tool", "content": "x"}], ValueError, "message 0: a tool message needs a string 'tool_call_id'"),
        ([{"role": "assistant", "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "sh"}}]}], ValueError,
         r"message 0: tool_calls\[0\]\.custom must be a dict with the strings 'name' and 'input', got dict"),
        ([{"role": "user", "content": "x", "tool_calls": [call("c")]}], ValueError,
         "message 0: only assistant messages may carry 'tool_calls'"),
        ([{"role": "assistant", "content": "x", "tool_calls": [{"function": {}}]}], ValueError,
         r"message 0: tool_calls\[0\]\.id must be a non-empty string, got null"),
        ([{"role": "user", "content": "a", "id": "x"}, {"role": "user", "content": "b", "id": "x"}], ValueError,
         "message 1: duplicate id 'x'"),
        ([{"role": "user", "content": "a", "id": 1.5}], ValueError, "message 0: 'id' must be a non-empty string, got float 1.5"),
        ([{"role": "user", "content": "a", "meta": {"k": ["\udc00"]}}], ValueError,
         r"message 0: field 'meta'\.k\[0\] is not valid Unicode"),
        ([{"role": "user", "content": "a", "meta": {"\ud800": 1}}], ValueError,
         r"message 0: field 'meta' \(a key\) is not valid Unicode"),
        ([{"role": "user", "content": "a", "meta": _deep(65)}], ValueError,
         "message 0: field 'meta' nests more than 64 levels deep"),
        ([{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"a": _deep(70)}}}]}],
         ValueError, r"message 0: tool_calls\[0\] nests more than 64 levels deep"),
    ],
)
def test_bad_messages_name_the_problem(messages, exc, match):
    with pytest.raises(exc, match=match):
        normalize_messages(messages)


def test_a_custom_tool_s_call_is_a_call_its_input_counted(cl100k):
    """OpenAI's custom tools (free-form input, ``type: "custom"``) were refused as calls without a function: an
    agent that used one was never stored, and its loop never compacted (review 20)."""
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "shell", "input": "ls -la /var/log"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "syslog auth.log"}
    units = encode_units([call, result], tokenizer=cl100k)
    assert units[0].message["tool_calls"] == call["tool_calls"]
    bare = cl100k.message_tokens({"role": "assistant", "content": None,
                                  "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "", "input": ""}}]})
    assert units[0].tokens > bare  # the name and the input are what the model reads
    assert validate_history([call, result]) == []


def test_costs_and_features(cl100k):
    units = encode_units([
        {"role": "user", "content": "Remember: my sister Ana lands at 9:15 on 12 May."},
        {"role": "tool", "tool_call_id": "x", "content": "Remember to rotate the keys."},
    ], cl100k)
    assert units[0].tokens == cl100k.message_tokens({"role": "user", "content": units[0].text})
    assert units[0].features.directive and not units[1].features.directive
    assert units[0].features.entities == ("Ana",)
    assert units[0].digest and units[0].digest != units[1].digest
    assert [u.index for u in units] == [0, 1]


def test_groups_tie_calls_to_their_results():
    tok = get_tokenizer(len)
    units = encode_units([
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2")]},
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
        {"role": "tool", "tool_call_id": "zz", "content": "orphan"},
        {"role": "assistant", "content": "a"},
    ], tok)
    assert group_indices(units) == [[0], [1], [2, 3, 4], [5], [6]]
    assert units[0].pinned and not units[1].pinned
