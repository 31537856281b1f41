"""LoCoMo conversion and the JSONL format, with its error messages."""

from __future__ import annotations

import json

import pytest

from rdmem.cli import main
from rdmem.eval import DatasetError, load_jsonl, load_locomo, parse_jsonl
from rdmem.datasets import locomo_conversation

from .conftest import SMALL_CONVERSATIONS

SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Caroline",
        "speaker_b": "Melanie",
        "session_2_date_time": "1:14 pm on 25 May, 2023",
        "session_2": [{"speaker": "Melanie", "dia_id": "D2:1", "text": "How was it?"}],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a support group."},
            {"speaker": "Melanie", "dia_id": "D1:2", "text": "Look at this!", "blip_caption": "a photo of a lake",
             "img_url": ["http://example.invalid/x.jpg"]},
        ],
    },
    "qa": [
        {"question": "When?", "answer": "7 May 2023", "evidence": ["D1:1"], "category": 2},
        {"question": "Both?", "answer": 2022, "evidence": ["D1:2; D2:1"], "category": 1},
        {"question": "Typo?", "answer": "x", "evidence": ["D:1:1", "D"], "category": 4},
        {"question": "Trick?", "adversarial_answer": "never", "evidence": [], "category": 5},
    ],
}


def test_locomo_turns_become_messages_in_session_order():
    conv = locomo_conversation(SAMPLE)
    assert [m["id"] for m in conv.messages] == ["D1:1", "D1:2", "D2:1"]
    assert conv.messages[0] == {"id": "D1:1", "role": "user",
                                "content": "[1:56 pm on 8 May, 2023] Caroline: I went to a support group."}
    assert conv.messages[1] == {"id": "D1:2", "role": "assistant", "content":
                                "[1:56 pm on 8 May, 2023] Melanie: Look at this! [shares a photo: a photo of a lake]"}
    assert conv.messages[2]["content"].startswith("[1:14 pm on 25 May, 2023] Melanie: ")


def test_locomo_evidence_is_repaired_or_dropped_with_a_note():
    conv = locomo_conversation(SAMPLE)
    assert [p.evidence for p in conv.probes] == [("D1:1",), ("D1:2", "D2:1"), ("D1:1",), ()]
    assert conv.probes[1].answer == "2022"
    assert conv.probes[3].answer == "never" and conv.probes[3].category == 5
    assert conv.notes == ("conv-x qa 2: evidence 'D' names no turn; dropped",)
    assert [p.category for p in conv.select([1, 2]).probes] == [2, 1]


def test_locomo_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"sample_id": "s1", "conversation": {"speaker_b": "x"}}]')
    with pytest.raises(DatasetError, match=r"bad.json: sample s1: 'conversation' has no 'speaker_a'"):
        load_locomo(bad)
    bad.write_text("[{")
    with pytest.raises(DatasetError, match=r"bad.json: invalid JSON at line 1 column 3"):
        load_locomo(bad)
    with pytest.raises(DatasetError, match="no such file"):
        load_locomo(tmp_path / "missing.json")


def test_locomo_dev_file_loads(locomo_path):
    convs = load_locomo(locomo_path, categories=[1, 2, 3, 4])
    assert [c.id for c in convs] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44"]
    assert sum(len(c.messages) for c in convs) == 3435
    assert all(p.category in (1, 2, 3, 4) for c in convs for p in c.probes)
    known = {m["id"] for c in convs for m in c.messages}
    assert all(e in known for c in convs for p in c.probes for e in p.evidence)


def test_jsonl_format(tmp_path):
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in SMALL_CONVERSATIONS) + "\n\n")
    trip, garden = load_jsonl(path)
    assert trip.id == "trip" and len(trip.messages) == 6 and trip.probes[1].evidence == ("t6",)
    assert trip.probes[0].answer == "peanuts" and trip.probes[0].id == "trip/q0"
    assert [m["id"] for m in garden.messages] == ["m0", "m1", "m2"]  # ids are optional
    assert garden.probes == ()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"line 2: invalid JSON \(Expecting property name enclosed in double quotes at column 2\)"),
        ("[1, 2]", "line 2: expected an object with 'messages', got list"),
        ('{"id": "a"}', "line 2: 'messages' must be a non-empty list of chat messages"),
        ('{"messages": [{"role": "robot", "content": "x"}]}', "line 2: message 0: invalid role 'robot'"),
        ('{"messages": [{"role": "user", "content": "x"}], "probes": [{"answer": "y"}]}',
         "line 2: probe 0 needs a non-empty string 'question'"),
        ('{"messages": [{"role": "user", "content": "x"}], "probes": [{"question": "q", "evidence": ["m7"]}]}',
         r"line 2: probe 0: evidence id\(s\) 'm7' name no message"),
        ('{"messages": [{"role": "user", "content": "x"}], "extra": 1}',
         "line 2: unknown key\\(s\\) extra; allowed: id, messages, probes"),
    ],
)
def test_jsonl_errors_name_the_line(line, message):
    good = json.dumps({"id": "ok", "messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(DatasetError, match=f"^logs.jsonl: {message}"):
        parse_jsonl([good, line], name="logs.jsonl")


def test_jsonl_reports_every_bad_line_and_duplicate_ids():
    good = json.dumps({"id": "c", "messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(DatasetError) as err:
        parse_jsonl([good, "oops", "", good, "[]"], name="f.jsonl")
    lines = str(err.value).splitlines()
    assert lines == [
        "f.jsonl: line 2: invalid JSON (Expecting value at column 1)",
        "f.jsonl: line 4: duplicate conversation id 'c' (first on line 1)",
        "f.jsonl: line 5: expected an object with 'messages', got list",
    ]
    with pytest.raises(DatasetError, match="no conversations"):
        parse_jsonl(["", "  "], name="f.jsonl")


def test_cli_exits_2_with_the_bad_line(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(SMALL_CONVERSATIONS[0]) + "\n" + '{"messages": []}\n')
    code = main(["eval", "jsonl", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{path}: line 2: 'messages' must be a non-empty list of chat messages" in err
    assert not (tmp_path / "out").exists()
