"""Metrics on hand-made cases whose answers are known."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rdmem.eval.metrics import (
    all_evidence,
    answer_token_recall,
    bootstrap_ci,
    context_words,
    embedding_coverage,
    evidence_recall,
    information_coverage,
    locomo_f1,
    mean_ci,
    normalize_answer,
    oracle_ids,
    oracle_values,
    token_f1,
)


def test_evidence_recall_counts_each_evidence_id_once():
    assert evidence_recall(["D1:1", "D1:2", "D1:3"], {"D1:2", "D9:9"}) == pytest.approx(1 / 3)
    assert evidence_recall(["D1:1", "D1:1", "D1:2"], ["D1:1"]) == 0.5
    assert evidence_recall(["a"], []) == 0.0
    assert math.isnan(evidence_recall([], ["a"]))


def test_all_evidence_is_one_only_when_every_id_is_present():
    assert all_evidence(["a", "b"], {"a", "b", "c"}) == 1.0
    assert all_evidence(["a", "b"], {"a"}) == 0.0
    assert math.isnan(all_evidence([], {"a"}))


def test_answer_token_recall_uses_content_words_and_ignores_markers():
    messages = [
        {"role": "user", "content": "[12 messages omitted]"},
        {"role": "assistant", "content": "She studies psychology at night."},
        {"role": "system", "content": "[rdmem: summary of 3 earlier messages]\nuser: counseling certification"},
    ]
    words = context_words(messages)
    assert "omitted" not in words and "summary" not in words and "12" not in words
    assert answer_token_recall("Psychology, counseling certification", words) == 1.0
    assert answer_token_recall("psychology and painting", words) == 0.5
    assert answer_token_recall(2022, {"2022"}) == 1.0  # LoCoMo has numeric answers
    assert math.isnan(answer_token_recall("Yes", words))  # no content word to look for
    assert math.isnan(answer_token_recall(None, words))


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    values = np.array([0.0, 1.0] * 50)
    lo, hi = bootstrap_ci(values, seed=3)
    assert (lo, hi) == bootstrap_ci(values, seed=3)
    assert bootstrap_ci(values, seed=4) != (lo, hi)
    assert lo < 0.5 < hi
    # The standard error of a mean of 100 fair coin flips is 0.05: the 95% interval is about ±0.1.
    assert hi - lo == pytest.approx(0.196, abs=0.04)
    assert bootstrap_ci([0.7, 0.7, 0.7]) == pytest.approx((0.7, 0.7))
    assert all(math.isnan(x) for x in bootstrap_ci([math.nan]))


def test_mean_ci_ignores_nan_and_rejects_bad_parameters():
    m, lo, hi = mean_ci([1.0, math.nan, 0.0, 1.0, 1.0])
    assert m == 0.75 and lo <= m <= hi
    with pytest.raises(ValueError, match="n_resamples must be an int >= 1, got 0"):
        bootstrap_ci([1.0], n_resamples=0)
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\), got 1.5"):
        bootstrap_ci([1.0], confidence=1.5)


def test_information_coverage_weighs_rare_words_more():
    history = ["alpha beta", "alpha gamma", "alpha delta"]
    # idf = log((n + 1) / (df + 0.5)): alpha (df 3) -> log(4/3.5); beta, gamma, delta (df 1) -> log(4/1.5)
    common, rare = math.log(4 / 3.5), math.log(4 / 1.5)
    total = common + 3 * rare
    assert information_coverage(history, ["alpha"]) == pytest.approx(common / total)
    assert information_coverage(history, ["beta"]) == pytest.approx(rare / total)
    assert information_coverage(history, ["alpha beta gamma delta"]) == pytest.approx(1.0)
    assert information_coverage(history, []) == 0.0
    assert math.isnan(information_coverage(["the and of"], ["x"]))


def test_embedding_coverage_is_the_mean_best_cosine():
    e = np.eye(3)
    assert embedding_coverage(e, e) == pytest.approx(1.0)
    assert embedding_coverage(e, e[:1]) == pytest.approx(1 / 3)
    half = np.array([[math.sqrt(0.5), math.sqrt(0.5), 0.0]])
    assert embedding_coverage(e[:2], half) == pytest.approx(math.sqrt(0.5))
    assert embedding_coverage(e, np.zeros((0, 3))) == 0.0
    with pytest.raises(ValueError, match=r"context embeddings must have shape \(n, 3\)"):
        embedding_coverage(e, np.ones((2, 4)))


def test_oracle_values_split_each_question_over_its_evidence():
    v = oracle_values(["a", "b", "c", "d"], [["a"], ["a", "b"], ["c", "zzz"], []])
    # "zzz" names no unit: the question's weight goes to the evidence that exists.
    assert v.tolist() == [1.5, 0.5, 1.0, 0.0]


def test_oracle_is_the_exact_optimum_of_mean_evidence_recall():
    rng = np.random.default_rng(7)
    ids = [f"u{i}" for i in range(9)]
    costs = rng.integers(5, 40, size=9).tolist()
    evidence = [list(rng.choice(ids, size=rng.integers(1, 4), replace=False)) for _ in range(12)]
    budget = 80

    def mean_recall(kept):
        return np.mean([evidence_recall(ev, set(kept)) for ev in evidence])

    best = max(
        (mean_recall(subset), subset)
        for r in range(len(ids) + 1)
        for subset in itertools.combinations(ids, r)
        if sum(costs[ids.index(u)] for u in subset) <= budget
    )
    chosen = oracle_ids(ids, costs, evidence, budget)
    assert sum(costs[ids.index(u)] for u in chosen) <= budget
    assert mean_recall(chosen) == pytest.approx(best[0])


def test_oracle_rejects_a_negative_budget():
    with pytest.raises(ValueError, match="budget must be an int >= 0 tokens, got -1"):
        oracle_ids(["a"], [1], [["a"]], -1)


def test_locomo_normalisation_and_f1():
    assert normalize_answer("The Cat, and a Dog!") == "cat dog"
    assert token_f1("painted a sunrise", "sunrise") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert token_f1("running", "runs") == 1.0  # Porter stems both to "run"
    assert token_f1("no", "yes") == 0.0
    # Category 1: gold split on commas, each part scored against its best predicted part, then averaged.
    assert locomo_f1("psychology, counseling", "Psychology, counseling certification", 1) == pytest.approx(
        (1.0 + 2 / 3) / 2
    )
    # Category 3: only the gold answer's part before ';' counts.
    assert locomo_f1("likely yes", "Likely yes; she loves books", 3) == 1.0
    # Category 5: abstaining is right.
    assert locomo_f1("No information available.", "anything", 5) == 1.0
    assert locomo_f1("Paris", "anything", 5) == 0.0
