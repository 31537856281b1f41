"""The runner against an independent computation through the public API, and the outputs it writes."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from rdmem import MemoryManager
from rdmem.cli import main
from rdmem.eval import EvalConfig, load_locomo, parse_jsonl, run_eval, write_outputs
from rdmem.eval._jobs import latest_points
from rdmem.eval.report import to_markdown

from .conftest import SMALL_CONVERSATIONS

BUDGET = 600


@pytest.fixture(scope="module")
def conv26(locomo_path):
    return load_locomo(locomo_path, categories=[1, 2, 3, 4])[0]


@pytest.fixture(scope="module")
def window_result(conv26, hashing_embedder):
    config = EvalConfig(budgets=(BUDGET,), policies=("window",), calibrate_embedding=False, n_bootstrap=200)
    return run_eval([conv26], config, embedder=hashing_embedder, dataset="conv-26")


def test_evidence_recall_matches_an_independent_computation(conv26, window_result, hashing_embedder):
    """Done-when check: the harness's number equals what the public API gives, within 0.01."""
    mem = MemoryManager(budget=BUDGET, policy="window", embedder=hashing_embedder)
    for m in conv26.messages:
        mem.add(role=m["role"], content=m["content"], id=m["id"])
    working = set(mem.working_ids())
    labelled = [p for p in conv26.probes if p.evidence]
    streaming = np.mean([sum(e in working for e in p.evidence) / len(p.evidence) for p in labelled])
    query = np.mean([
        sum(e in kept for e in p.evidence) / len(p.evidence)
        for p in labelled
        for kept in [set(mem.context(query=p.question).kept_ids)]
    ])
    assert window_result.row("streaming", "window", BUDGET).evidence_recall == pytest.approx(streaming, abs=0.01)
    assert window_result.row("query", "window", BUDGET).evidence_recall == pytest.approx(query, abs=0.01)
    assert query > 0.0  # a real measurement, not two zeros agreeing


def test_rows_cover_categories_oracle_and_full_history(conv26, window_result):
    rows = {(r.regime, r.policy, r.budget, r.category): r for r in window_result.rows}
    for regime in ("streaming", "query"):
        for cat in ("all", "1", "2", "3", "4"):
            assert (regime, "window", BUDGET, cat) in rows
        window, oracle = rows[(regime, "window", BUDGET, "all")], rows[(regime, "oracle", BUDGET, "all")]
        assert window.n_questions == len(conv26.probes) == 152
        assert oracle.evidence_recall >= window.evidence_recall
        assert window.evidence_recall_lo <= window.evidence_recall <= window.evidence_recall_hi
        assert window.tokens_max <= BUDGET
        full = rows[(regime, "full", None, "all")]
        assert full.evidence_recall == 1.0 and full.tokens_mean > 20_000
    streaming = rows[("streaming", "window", BUDGET, "all")]
    assert streaming.ms_per_turn > 0 and math.isnan(streaming.ms_per_query)
    assert rows[("query", "window", BUDGET, "all")].ms_per_query > 0
    # Category rows partition the questions.
    assert sum(rows[("query", "window", BUDGET, c)].n_questions for c in "1234") == 152


def test_streaming_oracle_fits_the_budget_and_beats_policies(window_result):
    oracle_ctx = [c for c in window_result.contexts if c["policy"] == "oracle" and c["regime"] == "streaming"]
    assert oracle_ctx and all(c["tokens"] <= BUDGET for c in oracle_ctx)


def test_outputs(window_result, tmp_path):
    paths = write_outputs(window_result, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert data["config"]["policies"] == ["window"] and data["meta"]["questions"] == 152
    row = next(r for r in data["rows"] if r["policy"] == "window" and r["regime"] == "query" and r["category"] == "all")
    assert row["evidence_recall"] == pytest.approx(window_result.row("query", "window", BUDGET).evidence_recall)
    assert row["information_coverage"] is None  # NaN is written as null
    with paths["csv"].open() as fh:
        table = list(csv.DictReader(fh))
    assert {r["policy"] for r in table} == {"window", "oracle", "full"}
    md = paths["markdown"].read_text()
    assert "## Streaming regime" in md and "| window |" in md and "Full history: evidence recall 1.000" in md
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = paths["questions"].read_text().splitlines()
    # Both regimes: window, full history and the streaming oracle answer all 152 questions; the query-time
    # oracle only the 150 that have evidence.
    assert len(lines) == 5 * 152 + 150


@pytest.fixture(scope="module")
def latest_result(conv26, hashing_embedder):
    config = EvalConfig(budgets=(BUDGET,), policies=("window",), regimes=("streaming", "latest"), latest_points=4,
                        calibrate_embedding=False, n_bootstrap=100)
    return run_eval([conv26], config, embedder=hashing_embedder, dataset="conv-26")


def test_latest_regime_matches_an_independent_computation(conv26, latest_result, hashing_embedder):
    """At each point: the context with the latest user turn as its query, every question scored on its evidence
    seen so far; the last point is the streaming regime's memory asked the last user turn."""
    n = len(conv26.messages)
    points = [round(n * j / 4) for j in (1, 2, 3, 4)]
    mem = MemoryManager(budget=BUDGET, policy="window", embedder=hashing_embedder)
    expected = []
    for k, m in enumerate(conv26.messages, start=1):
        mem.add(m)
        if k in points:
            query = next(x["content"] for x in reversed(conv26.messages[:k]) if x["role"] == "user")
            kept = set(mem.context(query=query).kept_ids)
            seen = set(conv26.ids[:k])
            for p in conv26.probes:
                ev = [e for e in p.evidence if e in seen]
                if ev:
                    expected.append(sum(e in kept for e in ev) / len(ev))
    row = latest_result.row("latest", "window", BUDGET)
    assert row.n_questions == len(expected) and row.n_contexts == 4
    assert row.evidence_recall == pytest.approx(float(np.mean(expected)), abs=1e-9)
    assert 0.0 < row.evidence_recall < 1.0
    records = [q for q in latest_result.questions if q["regime"] == "latest" and q["policy"] == "window"]
    assert sorted({q["point"] for q in records}) == points
    assert sum(q["point"] == n for q in records) == 150  # every question with evidence, at the end
    oracle, full = latest_result.row("latest", "oracle", BUDGET), latest_result.row("latest", "full", None)
    assert oracle.evidence_recall >= row.evidence_recall and full.evidence_recall == 1.0
    assert oracle.tokens_max <= BUDGET and row.tokens_max <= BUDGET
    assert row.ms_per_query > 0
    md = to_markdown(latest_result)
    assert "## Latest-turn regime (context(query=the latest user turn) at 4 points" in md


def test_latest_points_are_evenly_spaced_and_end_with_the_conversation():
    assert latest_points(10, 3) == [3, 7, 10]
    assert latest_points(2, 10) == [1, 2]
    assert latest_points(0, 10) == []


def test_config_validation_names_the_valid_choices():
    with pytest.raises(ValueError, match=r"unknown policy 'nope'; choose one of .*importance.*window"):
        EvalConfig(policies=("window", "nope"))
    with pytest.raises(ValueError, match="budgets must be ints > 0 tokens, got 0"):
        EvalConfig(budgets=(0, 100))
    with pytest.raises(ValueError, match="regimes must be among streaming, query"):
        EvalConfig(regimes=("batch",))
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        EvalConfig(workers=0)
    with pytest.raises(ValueError, match="latest_points must be an int >= 1, got 0"):
        EvalConfig(latest_points=0)
    assert EvalConfig().regimes == ("streaming", "query")  # the latest-turn regime is asked for by name
    assert EvalConfig(budgets=(800, 200, 800)).budgets == (200, 800)


def test_jsonl_proxies_with_minilm(minilm):
    convs = parse_jsonl([json.dumps(c) for c in SMALL_CONVERSATIONS])
    config = EvalConfig(budgets=(40, 400), policies=("window", "rd"), categories=None, proxies=True,
                        calibrate_embedding=False, n_bootstrap=100)
    result = run_eval(convs, config, embedder=minilm)
    small, large = result.row("streaming", "rd", 40), result.row("streaming", "rd", 400)
    assert 0.0 <= small.information_coverage < large.information_coverage == pytest.approx(1.0)
    assert 0.0 < small.embedding_coverage < large.embedding_coverage == pytest.approx(1.0, abs=1e-5)
    # Probes exist only in one conversation; the label-free proxies cover both.
    assert result.row("streaming", "rd", 400).n_contexts == 2
    assert result.row("query", "rd", 400).n_questions == 2


@pytest.mark.slow
def test_cli_end_to_end(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RDMEM_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in SMALL_CONVERSATIONS) + "\n")
    out = tmp_path / "out"
    code = main(["eval", "jsonl", str(path), "--budgets", "60,400", "--policies", "window,importance",
                 "--out", str(out), "--workers", "1", "--no-progress", "--bootstrap", "50", "--regime", "all",
                 "--latest-points", "3"])
    assert code == 0
    captured = capsys.readouterr()
    assert f"embeddings are cached in {tmp_path / 'cache' / 'embeddings'}" in captured.err
    assert "rm -rf" in captured.err
    assert "streaming: evidence recall by budget" in captured.out
    assert "latest: evidence recall by budget" in captured.out
    assert {p.name for p in out.iterdir()} == {"results.json", "results.csv", "results.md", "questions.jsonl",
                                               "rd_curve.png"}
    assert any(p.suffix == ".npz" for p in (tmp_path / "cache" / "embeddings").iterdir())
    code = main(["eval", "jsonl", str(path), "--policies", "window,bogus", "--out", str(out)])
    assert code == 2
    assert "unknown policy 'bogus'; choose one of" in capsys.readouterr().err


def test_the_default_embedder_goes_to_worker_processes_as_a_recipe(tmp_path):
    """With workers > 1 the disk-cached default embedder is sent as a recipe (its vectors stay on disk)."""
    import pickle

    from rdmem.embed import CachedEmbedder, MiniLMEmbedder
    from rdmem.eval import cached_embedder
    from rdmem.eval._jobs import EmbedderFactory
    from rdmem.eval.runner import _shippable

    shipped = _shippable(cached_embedder(tmp_path))
    assert isinstance(shipped, EmbedderFactory)
    made = pickle.loads(pickle.dumps(shipped))()
    assert isinstance(made, CachedEmbedder) and isinstance(made.inner, MiniLMEmbedder)
    assert str(made.cache_dir) == str(tmp_path / "embeddings")


def test_two_evaluations_in_one_process_at_once_do_not_share_a_worker(locomo_path, hashing_embedder):
    """The inspector computes a curve in a server thread while its caller may run its own: in-process runs
    keep their state per thread (they shared one: each ran on whichever set it up last, and the first to end
    dropped it under the other)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from rdmem.eval import _jobs

    config = EvalConfig(budgets=(BUDGET,), policies=("window",), calibrate_embedding=False, n_bootstrap=50)
    convs = load_locomo(locomo_path, categories=[1, 2, 3, 4])[:2]  # each run its own conversation

    def rows(result):
        return [(r.policy, r.budget, r.category, r.evidence_recall) for r in result.rows]

    alone = [rows(run_eval([c], config, embedder=hashing_embedder)) for c in convs]
    assert alone[0] != alone[1]
    gate = threading.Barrier(2, timeout=30)
    run_job = _jobs.run_job

    def in_step(job):  # every job of one run waits for the other's: both are set up before either runs one
        gate.wait()
        return run_job(job)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("rdmem.eval.runner.run_job", in_step)
        with ThreadPoolExecutor(2) as pool:
            runs = [pool.submit(run_eval, [c], config, embedder=hashing_embedder) for c in convs]
            together = [rows(r.result(timeout=300)) for r in runs]
    assert together == alone
