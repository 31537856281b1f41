"""The command line: JSON/JSONL in, JSON out; bad input exits 2 with one line on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rdmem
from rdmem.cli import main

from .._checks import history_problems

BIN = Path(sys.executable).with_name("rdmem")


def run_cli(args, stdin=None):
    """Run the installed console script (or ``python -m rdmem.cli``) in a subprocess."""
    cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "rdmem.cli"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(cmd + list(args), input=stdin, capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def history_file(tmp_path, agent_history):
    path = tmp_path / "history.json"
    path.write_text(json.dumps(agent_history))
    return path


def test_compact_json_file(history_file, agent_history, cl100k):
    proc = run_cli(["compact", str(history_file), "--budget", "120", "--policy", "window"])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"messages", "tokens", "kept_ids", "report"} <= set(out)
    assert out["tokens"] == cl100k.messages_tokens(out["messages"]) <= 120
    assert not history_problems(out["messages"])
    assert set(out["kept_ids"]) <= {m["id"] for m in agent_history}
    assert [d["id"] for d in out["report"]] == [m["id"] for m in agent_history]


def test_compact_jsonl_from_stdin(agent_history):
    jsonl = "\n".join(json.dumps(m) for m in agent_history) + "\n"
    proc = run_cli(["compact", "-", "--budget", "150", "--policy", "window", "--compact-json"], stdin=jsonl)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 1
    assert json.loads(proc.stdout)["tokens"] <= 150


def test_compact_with_a_query_in_process(history_file, capsys, minilm, cl100k):
    # In-process, so the embedding model loaded once for the session is reused.
    code = main(["compact", str(history_file), "--budget", "150", "--policy", "importance",
                 "--query", "peanut allergy"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["tokens"] == cl100k.messages_tokens(out["messages"]) <= 150


def test_policies_lists_every_policy():
    proc = run_cli(["policies"])
    assert proc.returncode == 0
    lines = proc.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == sorted(rdmem.POLICIES)
    assert all(len(line.split(None, 1)) == 2 for line in lines)


BAD = [
    ("invalid.json", '[{"role": "user", "content": "hi"', [], r"invalid\.json: invalid JSON at line 1"),
    ("invalid.jsonl", '{"role": "user", "content": "a"}\nnot json\n', [], r"invalid\.jsonl: line 2: invalid JSON"),
    ("object.json", '{"history": [{"role": "user", "content": "hi"}]}', [],
     "expected a JSON list of messages, JSONL .*or an object with a \"messages\" list, got a JSON object"),
    ("body.json", '{"model": "m", "messages": [{"role": "user", "content": "hi"}, 3]}', [], "message 1 is not an object"),
    ("number.json", "42", [], "got a JSON number"),
    ("items.json", '[1, 2]', [], "message 0 is not an object"),
    ("norole.json", '[{"content": "hi"}]', [], r"message 0: invalid role None"),
    ("badrole.json", '[{"role": "wizard", "content": "hi"}]', [], r"message 0: invalid role 'wizard'"),
    ("ok.json", '[{"role": "user", "content": "hi"}]', ["--budget", "0"], r"--budget: must be > 0 tokens, got 0"),
    ("ok.json", '[{"role": "user", "content": "hi"}]', ["--budget", "-4"], r"--budget: must be > 0 tokens, got -4"),
    ("ok.json", '[{"role": "user", "content": "hi"}]', ["--budget", "lots"], "must be a whole number of tokens"),
    ("ok.json", '[{"role": "user", "content": "hi"}]', ["--policy", "magic"], r"unknown policy 'magic'; choose one of"),
    ("ok.json", '[{"role": "user", "content": "hi"}]', ["--tokenizer", "klingon"], r"unknown tokenizer 'klingon'"),
    ("ok.json", '[{"role": "user", "content": "hi"}]', ["--tokenizer", "/no/tok.json"], "does not exist"),
]


def _check_error(code, err, pattern):
    import re

    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("rdmem: error: ")
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize(("name", "text", "extra", "pattern"), BAD)
def test_bad_input_in_process(tmp_path, capsys, name, text, extra, pattern):
    path = tmp_path / name
    path.write_text(text)
    args = ["compact", str(path)] + (extra if "--budget" in extra else ["--budget", "100"] + extra)
    code = main(args)
    captured = capsys.readouterr()
    _check_error(code, captured.err, pattern)
    assert captured.out == ""


@pytest.mark.parametrize(("name", "text", "extra", "pattern"), [BAD[0], BAD[2], BAD[5], BAD[7], BAD[10]])
def test_bad_input_through_the_console_script(tmp_path, name, text, extra, pattern):
    path = tmp_path / name
    path.write_text(text)
    args = ["compact", str(path)] + (extra if "--budget" in extra else ["--budget", "100"] + extra)
    proc = run_cli(args)
    _check_error(proc.returncode, proc.stderr, pattern)
    assert proc.stdout == ""


def test_missing_file_and_missing_budget(tmp_path):
    proc = run_cli(["compact", str(tmp_path / "nope.json"), "--budget", "10"])
    _check_error(proc.returncode, proc.stderr, r"nope\.json: no such file")
    proc = run_cli(["compact", str(tmp_path / "nope.json")])
    _check_error(proc.returncode, proc.stderr, "the following arguments are required: --budget")


def test_o200k_offline_is_a_clean_error_or_works(history_file):
    proc = run_cli(["compact", str(history_file), "--budget", "100", "--tokenizer", "o200k_base", "--policy", "window"])
    if proc.returncode == 0:
        assert json.loads(proc.stdout)["tokens"] <= 100
    else:
        _check_error(proc.returncode, proc.stderr, "tokenizer 'o200k_base' could not be loaded")


def test_a_request_body_and_compacts_own_output_are_read_for_their_messages(history_file, agent_history):
    body = json.dumps({"model": "gpt-4o", "temperature": 0, "messages": agent_history})
    proc = run_cli(["compact", "-", "--budget", "150", "--policy", "window"], stdin=body)
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)
    assert [d["id"] for d in first["report"]] == [m["id"] for m in agent_history]
    again = run_cli(["compact", "-", "--budget", "80", "--policy", "window"], stdin=proc.stdout)  # a pipe
    assert again.returncode == 0, again.stderr
    out = json.loads(again.stdout)
    assert 0 < out["tokens"] <= 80
    assert [d["id"] for d in out["report"]] == [m.get("id") or f"m{i}" for i, m in enumerate(first["messages"])]


def test_one_line_message_is_one_line_jsonl(tmp_path, capsys):
    path = tmp_path / "one.jsonl"
    path.write_text('{"role": "user", "content": "hi"}\n')
    assert main(["compact", str(path), "--budget", "50", "--policy", "window"]) == 0
    assert json.loads(capsys.readouterr().out)["kept_ids"] == ["m0"]


def test_empty_file_gives_an_empty_context(tmp_path, capsys):
    path = tmp_path / "empty.json"
    path.write_text("")
    assert main(["compact", str(path), "--budget", "50"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["messages"] == [] and out["tokens"] == 0


def test_explain(history_file, capsys):
    assert main(["explain", str(history_file), "--budget", "100", "--policy", "window"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("policy=window budget=100") and "u7" in text


def test_version_and_usage():
    proc = run_cli(["--version"])
    assert proc.returncode == 0 and proc.stdout.strip() == f"rdmem {rdmem.__version__}"
    proc = run_cli([])
    assert proc.returncode == 2 and "usage: rdmem" in proc.stderr and "compact" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_directory_is_not_a_file(tmp_path):
    proc = run_cli(["compact", str(tmp_path), "--budget", "10"])
    _check_error(proc.returncode, proc.stderr, "is a directory, not a file of messages")


def test_warnings_go_to_stderr_and_explain_shows_them(tmp_path, capsys):
    history = [{"id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant", "content": f"short turn {i}"}
               for i in range(10)]
    history.append({"id": "q", "role": "user", "content": "Summarise: " + "The fox jumps over the dog. " * 200})
    path = tmp_path / "h.json"
    path.write_text(json.dumps(history))
    assert main(["compact", str(path), "--budget", "300", "--policy", "window"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["warnings"][0].startswith("the newest user message 'q'")
    assert captured.err.startswith("rdmem: warning: the newest user message 'q'")
    assert main(["explain", str(path), "--budget", "300", "--policy", "window"]) == 0
    captured = capsys.readouterr()
    assert "warning: the newest user message 'q'" in captured.out


@pytest.mark.slow  # loads the (numpy) model in a subprocess
def test_the_default_policy_starts_quickly_without_torch(history_file):
    """'rdmem compact' with rd (embeddings) never imports torch for a small history."""
    code = ("import sys, runpy; sys.argv = ['rdmem', 'compact', %r, '--budget', '100']; "
            "from rdmem.cli import main; rc = main(); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr); sys.exit(rc)") % str(history_file)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "NO-TORCH"
    assert json.loads(proc.stdout)["tokens"] <= 100


def test_long_histories_show_progress_on_stderr(tmp_path, capsys, minilm):
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} about topic {i % 17}"}
               for i in range(260)]
    path = tmp_path / "long.json"
    path.write_text(json.dumps(history))
    assert main(["compact", str(path), "--budget", "400"]) == 0
    err = capsys.readouterr().err
    assert "rdmem: embedding 260 messages..." in err and "rdmem: embedded 260 messages in" in err


def test_markers_flag_chooses_how_left_out_messages_are_shown(tmp_path, capsys, minilm):
    # Directives (kept by "importance") between long chatter: the kept messages are scattered.
    history = []
    for i in range(24):
        text = (f"Remember that my locker code is 4{i:02d}." if i % 4 == 0 else
                f"Chatting about the weather and the harbour boats, nothing much at all, turn {i}. " * 2)
        history.append({"id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant", "content": text})
    path = tmp_path / "h.json"
    path.write_text(json.dumps(history))

    def markers(*flag: str) -> tuple[list[int], list[dict]]:
        assert main(["compact", str(path), "--budget", "160", "--policy", "importance", *flag]) == 0
        out = json.loads(capsys.readouterr().out)
        counts = [int(m["content"].split()[0][1:]) for m in out["messages"] if rdmem.reconstruct.MARKER.match(m["content"])]
        return counts, out["report"]

    runs, _ = markers("--markers", "runs")
    assert len(runs) >= 2  # the data leaves out several runs
    merged, report = markers()  # the default
    assert len(merged) == 1 and merged[0] == sum(d["decision"] == "archived" for d in report)
    assert markers("--markers", "none")[0] == []
    assert main(["compact", str(path), "--budget", "160", "--markers", "all"]) == 2
    assert "invalid choice: 'all'" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"messages": ' + "[" * 50_000 + "]" * 50_000 + "}",
                                  "[" * 3_000 + "]" * 3_000 + "\n"])
def test_json_nested_past_the_parser_is_one_line_not_a_traceback(tmp_path, capsys, text):
    """A file nested 100,000 deep was a RecursionError traceback (500-900 levels got the one-line "nests more than
    64 levels" already)."""
    path = tmp_path / "deep.json"
    path.write_text(text)
    assert main(["compact", str(path), "--budget", "100", "--policy", "window"]) == 2
    err = capsys.readouterr().err
    assert err == f"rdmem: error: {path}: the JSON nests too deeply to read (a message nests at most 64 levels)\n"
    assert main(["eval", "jsonl", str(path), "--budgets", "100", "--policies", "window", "--no-plot"]) == 2
    assert "nests too deeply" in capsys.readouterr().err
