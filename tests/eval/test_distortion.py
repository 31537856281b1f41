"""Model-measured distortion in the harness: the sample, the statistics, the flags (rdmem eval --lm)."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from rdmem.cli import main
from rdmem.datasets import Conversation, Probe
from rdmem.eval.distortion import LMEvalConfig, lm_plan, lm_stats
from rdmem.eval.metrics import gain_kept_ci

from ..conftest import LOCOMO


def _conv(cid: str, n: int, probes: list[tuple[int, str]]) -> Conversation:
    messages = [{"id": f"{cid}:{i}", "role": "user", "content": f"line {i}"} for i in range(n)]
    return Conversation(cid, messages, tuple(
        Probe(f"q{k}?", "a", (f"{cid}:{k}",), cat, f"{cid}/q{k}") for k, cat in probes
    ))


def test_the_config_names_what_is_wrong():
    with pytest.raises(ValueError, match="lm sample must be an int >= 1 or None"):
        LMEvalConfig(sample=0)
    with pytest.raises(ValueError, match="lm turns must be an int >= 0, got -1"):
        LMEvalConfig(turns=-1)
    with pytest.raises(ValueError, match="lm max_tokens must be an int >= 256 or None, got 100"):
        LMEvalConfig(max_tokens=100)
    with pytest.raises(ValueError, match="lm device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got 'tpu'"):
        LMEvalConfig(device="tpu")


def test_the_sample_is_stratified_by_category_deterministic_and_bounded():
    convs = [_conv("a", 40, [(i, 1 if i < 10 else 2) for i in range(12)]), _conv("b", 30, [(i, 4) for i in range(3)])]
    plan = lm_plan(convs, LMEvalConfig(sample=6, turns=5), seed=0)
    assert plan == lm_plan(convs, LMEvalConfig(sample=6, turns=5), seed=0)
    chosen = [(ci, pid) for ci, p in enumerate(plan) for pid in p.probes]
    assert len(chosen) == 6
    cats = {pid: pr.category for c in convs for pr in c.probes for pid in [pr.id]}
    # Three categories take turns: two questions of each, though category 1 has ten.
    assert sorted(cats[pid] for _, pid in chosen) == [1, 1, 2, 2, 4, 4]
    assert [len(p.cuts) for p in plan] == [3, 2]
    for conv, p in zip(convs, plan, strict=True):
        assert all(len(conv.messages) // 2 <= t < len(conv.messages) for t in p.cuts)
    everything = lm_plan(convs, LMEvalConfig(sample=None, turns=0), seed=3)
    assert sum(len(p.probes) for p in everything) == 15 and all(not p.cuts for p in everything)


def test_adversarial_questions_are_not_sampled():
    convs = [_conv("a", 20, [(0, 5), (1, 5), (2, 4)])]
    assert lm_plan(convs, LMEvalConfig(sample=None, turns=0), seed=0)[0].probes == {"a/q2"}


class _CountingLM:
    """Stands in for the model where only the joining of scores to records is tested: the NLL of a target
    is the number of context lines, plus 0.5 when no line mentions the answer (deterministic, no model)."""

    window, name = 10_000, "counting"
    torch_model = type("M", (), {"device": "cpu"})()

    def encode(self, messages):
        return [0] * (1 + len(messages))

    def target_ids(self, target):
        return [1], [2]

    def fit(self, messages, reserve=0):
        return list(messages)

    def nll(self, messages, targets):
        return [len(messages) + (0.0 if any(t.text.strip() in m["content"] for m in messages) else 0.5)
                for t in targets]


def test_scores_join_their_own_conversation_even_when_probe_ids_repeat():
    from rdmem.eval.defaults import FULL
    from rdmem.eval.distortion import LMPlan, score_items

    a = Conversation("a", [{"id": "a:0", "role": "user", "content": "the code is red"}],
                     (Probe("code?", "red", ("a:0",), None, "q1"),))
    b = Conversation("b", [{"id": "b:0", "role": "user", "content": "hello"},
                           {"id": "b:1", "role": "user", "content": "the code is blue"}],
                     (Probe("code?", "blue", ("b:1",), None, "q1"),))
    plans = [LMPlan(frozenset({"q1"}), ()), LMPlan(frozenset({"q1"}), ())]
    items, questions = [], []
    for conv in (a, b):
        for policy, budget, msgs in (("window", 10, conv.messages[-1:]), (FULL, None, conv.messages)):
            items.append({"kind": "qa", "conversation": conv.id, "regime": "query", "policy": policy,
                          "budget": budget, "messages": msgs, "probes": ["q1"]})
            questions.append({"conversation": conv.id, "probe": "q1", "regime": "query", "policy": policy,
                              "budget": budget})
    meta = score_items(_CountingLM(), items, questions, [], [a, b], plans)
    got = {(q["conversation"], q["policy"]): (q["lm_nll"], q["lm_nll_full"], q["lm_nll_none"]) for q in questions}
    assert got[("a", "window")] == (1.0, 1.0, 0.5)
    assert got[("b", "window")] == (1.0, 2.0, 0.5)
    assert got[("b", FULL)] == (2.0, 2.0, 0.5)
    assert meta["questions"] == 2 and meta["targets_too_long"] == 0


def test_gain_kept_is_a_ratio_of_sums_with_a_paired_interval():
    none, full = np.array([4.0, 3.0, 5.0, 4.0]), np.array([2.0, 2.0, 2.0, 2.0])
    g, lo, hi = gain_kept_ci(none, full, full, seed=0, n_resamples=200)
    assert (g, lo, hi) == (1.0, 1.0, 1.0)
    g, lo, hi = gain_kept_ci(none, none, full)
    assert (g, lo, hi) == (0.0, 0.0, 0.0)
    policy = np.array([3.0, 2.5, 2.0, 4.0])
    g, lo, hi = gain_kept_ci(none, policy, full, seed=1, n_resamples=500)
    assert g == pytest.approx((1 + 0.5 + 3 + 0) / (2 + 1 + 3 + 2))
    assert lo <= g <= hi
    assert all(math.isnan(x) for x in gain_kept_ci([1.0], [2.0], [3.0]))  # the full context gains nothing


def test_row_statistics_pair_each_question_with_its_own_references():
    group = [{"lm_nll": 3.0, "lm_nll_full": 2.0, "lm_nll_none": 4.0},
             {"lm_nll": 2.0, "lm_nll_full": 2.0, "lm_nll_none": 3.0},
             {"evidence_recall": 1.0}]  # not in the model's sample
    cs = [{"lm_coherence": [3.0, 5.0], "lm_coherence_full": [2.0, 4.0]}]
    s = lm_stats(group, cs, seed=0, n_bootstrap=100)
    assert s["lm_questions"] == 2
    assert s["lm_nll"] == pytest.approx(2.5) and s["lm_delta_nll"] == pytest.approx(0.5)
    assert s["lm_gain_kept"] == pytest.approx((1 + 1) / (2 + 1))
    assert s["lm_coherence_nll"] == pytest.approx(4.0) and s["lm_coherence_delta"] == pytest.approx(1.0)


def test_cli_flags_are_checked_before_any_work(tmp_path, capsys, monkeypatch):
    assert main(["eval", "locomo", str(LOCOMO), "--lm", "--lm-max-tokens", "100", "--out", str(tmp_path)]) == 2
    assert "--lm: lm max_tokens must be an int >= 256 or None, got 100" in capsys.readouterr().err
    assert main(["eval", "locomo", str(LOCOMO), "--lm", "--lm-sample", "0"]) == 2
    assert "--lm-sample must be a whole number >= 1 or 'all'" in capsys.readouterr().err
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "kvpress" else real(name, *a))
    assert main(["eval", "locomo", str(LOCOMO), "--lm", "--out", str(tmp_path)]) == 2
    assert "--lm: the language model needs kvpress: pip install 'rdmem[lm]'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_rdmem_eval_lm_on_a_tiny_file_writes_the_new_columns(tmp_path, capsys, monkeypatch, smollm):
    from ..lm.conftest import LM_CACHE

    monkeypatch.setenv("RDMEM_CACHE_DIR", str(LM_CACHE))  # the converted model is there already
    sample = json.loads(LOCOMO.read_text())[0]
    conv = sample["conversation"]
    kept = {k: v for k, v in conv.items() if not k.startswith("session_") or k.split("_")[1] == "1"}
    ids = {t["dia_id"] for t in kept["session_1"]}
    qa = [q for q in sample["qa"] if q.get("evidence") and set(q["evidence"]) <= ids and "answer" in q][:2]
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([{**sample, "conversation": kept, "qa": qa}]))
    out = tmp_path / "out"
    code = main(["eval", "locomo", str(path), "--budgets", "150", "--policies", "window", "--lm",
                 "--lm-sample", "1", "--lm-turns", "1", "--lm-max-tokens", "512", "--out", str(out),
                 "--workers", "1", "--no-progress", "--bootstrap", "20"])
    assert code == 0
    assert "share of the full history's gain kept" in capsys.readouterr().out
    rows = {(r["regime"], r["policy"], r["budget"], r["category"]): r
            for r in csv.DictReader((out / "results.csv").open())}
    for regime in ("streaming", "query"):
        row = rows[(regime, "window", "150", "all")]
        assert row["lm_questions"] == "1"
        assert float(row["lm_nll"]) > 0 and row["lm_gain_kept"] and row["lm_delta_nll"]
        full = rows[(regime, "full", "", "all")]
        assert float(full["lm_delta_nll"]) == 0.0 and float(full["lm_gain_kept"]) == pytest.approx(1.0)
    assert float(rows[("streaming", "window", "150", "all")]["lm_coherence_nll"]) > 0
    assert "## Model-measured distortion (language model)" in (out / "results.md").read_text()
    assert (out / "rd_curve_lm.png").stat().st_size > 0
    meta = json.loads((out / "results.json").read_text())["meta"]["lm"]
    assert meta["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and meta["questions"] == 1 and meta["window"] == 512
