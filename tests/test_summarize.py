"""Summarizers: the extractive default, and an LLM summarizer against a local OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

from rdmem import compact
from rdmem.summarize import ExtractiveSummarizer, LLMSummarizer, SummarizerError, split_sentences
from rdmem.units import encode_units

from ._fake_openai import Reply, completion

ERROR_TEXT = "Traceback: upstream model exploded"


def _summarizer_reply(mode: str):
    reply = "The user is allergic to peanuts and booked Baixa Suites in Lisbon for 16-18 May."
    return {
        "ok": Reply(body=completion(reply)),
        "timeout": Reply(delay=1.5, body=completion(reply)),  # the client gave up after 0.5 s
        "500": Reply(500, ERROR_TEXT.encode()),
        "garbage": Reply(200, b"<html>" + ERROR_TEXT.encode() + b"</html>"),
        "no_choices": Reply(200, {"error": {"message": ERROR_TEXT}}),
        "empty": Reply(200, {"choices": [{"message": {"content": "  "}}]}),
    }[mode]


@pytest.fixture
def llm_server(fake_openai):
    fake_openai.respond = lambda req: _summarizer_reply(fake_openai.mode)
    fake_openai.mode = "ok"
    return fake_openai


@pytest.fixture
def long_history(agent_history):
    """The agent history with enough chit-chat in the middle that summary_buffer must summarize."""
    filler = [{"id": f"f{i}", "role": "user" if i % 2 == 0 else "assistant",
               "content": f"Small talk number {i} about the tram 28 and pastel de nata in Belem."} for i in range(12)]
    return agent_history[:7] + filler + agent_history[7:]


def test_split_sentences():
    assert split_sentences("One. Two!  Three?\nFour。五") == ["One.", "Two!", "Three?", "Four。", "五"]


def test_extractive_summary_respects_the_cap(agent_history, cl100k):
    units = encode_units(agent_history, cl100k)
    for cap in (0, 5, 20, 60, 500):
        text = ExtractiveSummarizer().summarize(units, cap, cl100k)
        assert cl100k.count(text) <= cap
        if cap >= 20:
            assert text  # something informative survives
    full = ExtractiveSummarizer().summarize(units, 500, cl100k)
    assert "peanuts" in full
    assert "Remember to book early" not in full  # tool results are not summarized as if someone said them


def test_summary_buffer_puts_the_summary_after_the_system_prompt(long_history, cl100k):
    result = compact(long_history, budget=200, policy="summary_buffer")
    assert result.summary and result.summarized_ids
    assert result.messages[0]["content"] == long_history[0]["content"]
    assert result.messages[1]["role"] == "system" and result.messages[1]["content"].startswith("[rdmem: summary of")
    assert result.tokens == cl100k.messages_tokens(result.messages) <= 200
    assert set(result.summarized_ids).isdisjoint(result.kept_ids)


def test_llm_summarizer_success(llm_server, long_history, cl100k):
    summarizer = LLMSummarizer(base_url=llm_server.url, model="tiny", api_key="sk-test", timeout=5)
    result = compact(long_history, budget=200, policy="summary_buffer", summarizer=summarizer)
    assert "allergic to peanuts" in result.summary
    assert any("allergic to peanuts" in (m["content"] or "") for m in result.messages)
    assert not result.warnings
    req = llm_server.requests[-1]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    assert req["body"]["model"] == "tiny" and req["body"]["max_tokens"] > 0
    assert "Small talk number 0" in req["body"]["messages"][1]["content"]
    assert result.tokens <= 200


def test_llm_summarizer_reads_the_environment(llm_server, monkeypatch, agent_history, cl100k):
    monkeypatch.setenv("RDMEM_LLM_BASE_URL", llm_server.url)
    monkeypatch.setenv("RDMEM_LLM_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    text = LLMSummarizer(timeout=5).summarize(encode_units(agent_history, cl100k), 50, cl100k)
    assert "peanuts" in text and cl100k.count(text) <= 50
    assert llm_server.requests[-1]["body"]["model"] == "env-model"
    assert llm_server.requests[-1]["auth"] == "Bearer sk-env"


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("500", "HTTP 500"), ("timeout", "unreachable"), ("garbage", "invalid JSON"),
     ("no_choices", "no choices"), ("empty", "empty")],
)
def test_llm_failure_keeps_the_span_archived_and_reports_it(llm_server, long_history, cl100k, mode, reason):
    llm_server.mode = mode
    summarizer = LLMSummarizer(base_url=llm_server.url, model="tiny", timeout=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = compact(long_history, budget=200, policy="summary_buffer", summarizer=summarizer)
    assert result.summary is None and result.summarized_ids == []
    assert len(result.warnings) == 1 and "summarizer failed" in result.warnings[0] and reason in result.warnings[0]
    assert any("summarizer failed" in str(w.message) for w in caught)
    everything = json.dumps(result.messages)
    assert ERROR_TEXT not in everything and "summary of" not in everything
    assert result.tokens == cl100k.messages_tokens(result.messages) <= 200
    assert result.archived_ids  # the older span stays archived (not lost: it is in the report)


def test_llm_summarizer_without_configuration(monkeypatch, agent_history, cl100k):
    for var in ("RDMEM_LLM_BASE_URL", "OPENAI_BASE_URL", "RDMEM_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    units = encode_units(agent_history, cl100k)
    with pytest.raises(SummarizerError, match="no LLM endpoint: pass base_url or set RDMEM_LLM_BASE_URL"):
        LLMSummarizer().summarize(units, 50, cl100k)
    with pytest.raises(SummarizerError, match="no LLM model: pass model or set RDMEM_LLM_MODEL"):
        LLMSummarizer(base_url="http://127.0.0.1:9").summarize(units, 50, cl100k)


def test_unreachable_endpoint(agent_history, cl100k):
    units = encode_units(agent_history, cl100k)
    with pytest.raises(SummarizerError, match="LLM endpoint unreachable"):
        LLMSummarizer(base_url="http://127.0.0.1:9", model="m", timeout=1).summarize(units, 50, cl100k)


# Cases (conversation, first message, messages, token cap) whose summary depended on Python's
# string-hash seed before the coverage gains were summed exactly (math.fsum): summing the IDF of a set
# of words in hash order changed the last bits of near-equal gains, and so which sentence won.
_HASH_SENSITIVE = [(1, 182, 59, 460), (3, 443, 42, 423), (5, 567, 35, 228)]

_SUMMARIZE_SCRIPT = """
import hashlib, json, sys, warnings
warnings.simplefilter("ignore")
from rdmem.datasets import load_locomo
from rdmem.summarize import ExtractiveSummarizer
from rdmem.tokens import get_tokenizer
from rdmem.units import encode_units
convs = load_locomo(sys.argv[1])
tok = get_tokenizer("cl100k_base")
out = []
for c, start, length, cap in json.loads(sys.argv[2]):
    units = encode_units(convs[c].messages[start:start + length], tok)
    out.append(hashlib.sha1(ExtractiveSummarizer().summarize(units, cap, tok).encode()).hexdigest())
print(json.dumps(out))
"""


def test_extractive_summary_does_not_depend_on_the_hash_seed(locomo_path):
    """The same input gives the same summary in every process (string hashing is randomised per process)."""
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", _SUMMARIZE_SCRIPT, str(locomo_path), json.dumps(_HASH_SENSITIVE)],
            env=env, capture_output=True, text=True, timeout=120,
        )
        assert run.returncode == 0, run.stderr
        digests = json.loads(run.stdout)
        assert len(digests) == len(_HASH_SENSITIVE)
        outputs.add(tuple(digests))
    assert len(outputs) == 1, outputs
