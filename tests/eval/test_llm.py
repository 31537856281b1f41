"""The LLM QA client against a local OpenAI-compatible server: answers, judging, and every failure mode."""

from __future__ import annotations

import math

import pytest

from rdmem.eval import EvalConfig, LLMConfig, LLMError, parse_jsonl, run_eval
from rdmem.eval.llm import answer_question, judge_answer, parse_judgement, score_question

CONTEXT = [{"role": "user", "content": "[8 May, 2023] Caroline: I went to the support group yesterday."}]


@pytest.fixture
def cfg(llm_server):
    url, _ = llm_server
    return LLMConfig(base_url=url, model="test-model", api_key="sk-test", timeout=0.5)


def test_answer_sends_the_context_and_question(cfg, llm_server):
    _, requests = llm_server
    assert answer_question(cfg, "When did Caroline go? -> 7 May 2023", CONTEXT) == "7 May 2023"
    req = requests[-1]
    assert req["path"] == "/v1/chat/completions" and req["model"] == "test-model"
    assert req["auth"] == "Bearer sk-test" and req["temperature"] == 0
    assert "Caroline: I went to the support group yesterday." in req["messages"][0]["content"]


def test_judge_follows_the_correct_wrong_protocol(cfg):
    assert judge_answer(cfg, "When?", "7 May 2023", "On 7 May 2023, a Sunday") is True
    assert judge_answer(cfg, "When?", "7 May 2023", "In June") is False


def test_parse_judgement():
    assert parse_judgement('Same date. {"label": "CORRECT"}') is True
    assert parse_judgement("It is WRONG.") is False
    with pytest.raises(LLMError, match="no CORRECT/WRONG label"):
        parse_judgement("maybe")
    with pytest.raises(LLMError, match="both labels"):
        parse_judgement("CORRECT or WRONG")


@pytest.mark.parametrize(
    ("trigger", "message"),
    [
        ("SLOW", "LLM endpoint unreachable"),  # the server sleeps past the 0.5 s timeout
        ("FAIL500", "LLM endpoint answered HTTP 500"),
        ("GARBAGE", "LLM endpoint returned invalid JSON"),
        ("NOCHOICES", r"LLM reply has no choices\[0\].message.content"),
    ],
)
def test_failures_raise_llm_error(cfg, trigger, message):
    with pytest.raises(LLMError, match=message):
        answer_question(cfg, f"{trigger} question?", CONTEXT)


def test_unreachable_endpoint_is_an_error_not_a_crash():
    cfg = LLMConfig(base_url="http://127.0.0.1:9/v1", model="m", timeout=0.5)
    result = score_question(cfg, "q?", "gold", 4, CONTEXT)
    assert result.answer is None and math.isnan(result.f1) and result.error.startswith("answer: LLM endpoint")


def test_score_question_records_judge_failures(cfg):
    ok = score_question(cfg, "Where? -> Lisbon, Portugal", "Lisbon", 4, CONTEXT)
    assert ok.answer == "Lisbon, Portugal" and ok.judge == 1.0 and ok.error is None
    assert ok.f1 == pytest.approx(2 / 3)
    bad = score_question(cfg, "Where NOLABEL? -> Lisbon", "Lisbon", 4, CONTEXT)
    assert bad.f1 == 1.0 and math.isnan(bad.judge) and bad.error.startswith("judge: judge reply has no")
    adversarial = score_question(cfg, "Trick?", "x", 5, CONTEXT)  # category 5: F1 only, no judge
    assert adversarial.f1 == 1.0 and math.isnan(adversarial.judge)


def test_config_from_env_and_validation():
    assert LLMConfig.from_env(environ={}) is None
    env = {"RDMEM_LLM_BASE_URL": "http://h:1/v1/", "RDMEM_LLM_MODEL": "m", "OPENAI_API_KEY": "k"}
    cfg = LLMConfig.from_env(environ=env)
    assert (cfg.base_url, cfg.model, cfg.api_key) == ("http://h:1/v1", "m", "k")
    assert "api_key" not in cfg.describe()
    with pytest.raises(ValueError, match="no model"):
        LLMConfig.from_env(environ={"RDMEM_LLM_BASE_URL": "http://h"})
    with pytest.raises(ValueError, match="base_url must be an http"):
        LLMConfig(base_url="h:1", model="m")
    with pytest.raises(ValueError, match="timeout must be > 0 seconds"):
        LLMConfig(base_url="http://h", model="m", timeout=0)


def test_failures_show_up_in_eval_results(cfg, hashing_embedder):
    line = (
        '{"id": "c", "messages": ['
        '{"id": "a", "role": "user", "content": "I moved to Lisbon in 2021 with my dog Rex."},'
        '{"id": "b", "role": "assistant", "content": "How is Rex adapting to the city?"}],'
        '"probes": ['
        '{"question": "Where does the user live? -> Lisbon", "answer": "Lisbon", "evidence": ["a"]},'
        '{"question": "FAIL500 Who is Rex?", "answer": "a dog", "evidence": ["a"]},'
        '{"question": "GARBAGE When did they move?", "answer": "2021", "evidence": ["a"]}]}'
    )
    convs = parse_jsonl([line])
    config = EvalConfig(budgets=(200,), policies=("window",), regimes=("streaming",), llm=cfg,
                        calibrate_embedding=False)
    result = run_eval(convs, config, embedder=hashing_embedder)
    row = result.row("streaming", "window", 200)
    assert row.llm_errors == 2 and row.qa_f1 == 1.0 and row.judge_accuracy == 1.0
    errors = sorted(q["llm_error"] for q in result.questions if q["policy"] == "window" and q["llm_error"])
    assert errors == ["answer: LLM endpoint answered HTTP 500", "answer: LLM endpoint returned invalid JSON"]
    full = result.row("streaming", "full", None)
    assert full.llm_errors == 2 and full.qa_f1 == 1.0
