"""Training the value models: the salience direction, old model files, and a fit-save-load round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rdmem.datasets import load_locomo
from rdmem.learn import PRIOR_FEATURES, LogisticModel, default_models
from rdmem.scoring.value_features import model_prior_matrix, prior_matrix
from rdmem.learn.train import fit_models, salience_direction, save_models, with_salience
from rdmem.scoring import LearnedValue, ScoringContext
from rdmem.units import encode_units


def _synthetic_rows(rng: np.random.Generator, n: int, dim: int = 24) -> dict[str, np.ndarray]:
    """Units whose vectors lean along axis 0 are the ones questions need; the hand-made features are noise."""
    needed = rng.random(n) < 0.3
    e = rng.normal(size=(n, dim))
    e[needed, 0] += 2.0
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    xp = rng.normal(size=(n, len(PRIOR_FEATURES)))
    xp[:, PRIOR_FEATURES.index("salience")] = 0.0
    return {"xp": xp, "yp": needed.astype(float), "e": e.astype(np.float32)}


def test_salience_direction_finds_the_direction_that_needed_units_lie_along():
    rng = np.random.default_rng(0)
    rows = [_synthetic_rows(rng, 300) for _ in range(3)]
    d = salience_direction(rows, components=8)
    assert d is not None and d.shape == (24,)
    assert d[0] > 0 and abs(d[0]) == pytest.approx(np.abs(d).max())
    # On fresh units, the projection ranks needed ones first (AUC well above chance).
    test = _synthetic_rows(rng, 400)
    s = with_salience(test, d)[:, PRIOR_FEATURES.index("salience")]
    pos, neg = s[test["yp"] == 1], s[test["yp"] == 0]
    auc = (pos[:, None] > neg[None, :]).mean()
    assert auc > 0.85


def test_salience_direction_needs_vectors_of_one_dimension():
    rng = np.random.default_rng(1)
    a, b = _synthetic_rows(rng, 50, dim=24), _synthetic_rows(rng, 50, dim=16)
    assert salience_direction([a, b]) is None
    assert salience_direction([{"xp": a["xp"][:0], "yp": a["yp"][:0], "e": a["e"][:0]}]) is None
    assert np.array_equal(with_salience(a, None), a["xp"])  # no direction: the column stays 0


def test_a_model_saved_before_salience_still_scores(cl100k, hashing_embedder):
    """Models are read by feature name: an older file without ``salience`` (and the features added after it)
    picks its own columns."""
    units = encode_units([{"role": "user", "content": f"I moved to Porto in May {i}"} for i in range(5)], cl100k)
    ctx = ScoringContext(units, embedder=hashing_embedder)
    old_features = PRIOR_FEATURES[: PRIOR_FEATURES.index("salience")]
    old = LogisticModel(old_features).fit(np.random.default_rng(0).normal(size=(40, 15)), np.arange(40) % 2)
    x = model_prior_matrix(old, ctx)
    assert x.shape == (5, 15)
    assert np.array_equal(x, prior_matrix(ctx)[:, : len(old_features)])
    assert old.predict(x).shape == (5,)
    bad = LogisticModel(("log_info", "shoe_size")).fit(np.zeros((4, 2)), np.array([0, 1, 0, 1.0]))
    with pytest.raises(ValueError, match=r"unknown prior features \['shoe_size'\]"):
        model_prior_matrix(bad, ctx)


def test_proper_nouns_and_first_person_events_read_the_body_not_the_label(cl100k, hashing_embedder):
    texts = ["[8 May, 2023] Caroline: Hey Mel! How are you?",
             "[8 May, 2023] Caroline: We went to Paris with Tom, and I bought a painting by Monet."]
    units = encode_units([{"role": "user", "content": t} for t in texts], cl100k)
    x = prior_matrix(ScoringContext(units, embedder=hashing_embedder))
    proper, events = PRIOR_FEATURES.index("proper_nouns"), PRIOR_FEATURES.index("first_person_events")
    assert x[0, proper] == pytest.approx(np.log1p(1))  # "Mel"; not "Caroline" (the label) nor "Hey"/"How"
    assert x[1, proper] == pytest.approx(np.log1p(3))  # Paris, Tom, Monet; not "We"
    assert (x[0, events], x[1, events]) == (0.0, 2.0)


def test_the_shipped_prior_carries_a_salience_direction_for_minilm():
    prior = default_models()["prior"]
    assert "salience" in prior.features
    assert len(prior.meta["salience"]) == 384  # all-MiniLM-L6-v2
    assert prior.weights_[prior.features.index("salience")] > 0


def test_fit_save_load_round_trip(tmp_path, locomo_path, cl100k, minilm):
    conv = load_locomo(locomo_path)[0].select([1, 2, 3, 4])
    models = fit_models([conv], cl100k, minilm)
    prior = models["prior"]
    assert len(prior.meta["salience"]) == 384 and prior.meta["conversations"] == [conv.id]
    path = tmp_path / "value.json"
    save_models(models, path)
    value = LearnedValue.from_file(str(path))
    units = encode_units(conv.messages[:60], cl100k)
    for query in (None, conv.probes[0].question):
        fresh = LearnedValue(prior=prior, query=models["query"]).score(ScoringContext(units, query, minilm))
        loaded = value.score(ScoringContext(units, query, minilm))
        assert np.allclose(fresh, loaded)
    # The salience column is the units' vectors projected on the saved direction.
    ctx = ScoringContext(units, embedder=minilm)
    col = model_prior_matrix(value.prior, ctx)[:, PRIOR_FEATURES.index("salience")]
    assert np.allclose(col, ctx.embeddings @ np.asarray(prior.meta["salience"], dtype=np.float32), atol=1e-5)
    assert np.std(col) > 0


def test_rdmem_train_on_jsonl_writes_models_that_rd_uses(tmp_path, capsys, cl100k, minilm):
    from rdmem.cli import main as cli_main

    facts = ["I moved to Porto on 2 May.", "My sister Ana starts at Farfetch in June.", "We adopted a cat called Mio."]
    chat = ["haha nice", "ok sounds good", "lol", "cool cool", "thanks!", "see you"]
    lines = []
    for k in range(3):
        texts = chat[: 2 + k] + facts + chat[2 + k:]
        messages = [{"id": f"c{k}m{i}", "role": "user", "content": t} for i, t in enumerate(texts)]
        probes = [{"question": "Where did I move?", "evidence": [f"c{k}m{2 + k}"]},
                  {"question": "What is the cat called?", "evidence": [f"c{k}m{4 + k}"]}]
        lines.append(json.dumps({"id": f"conv{k}", "messages": messages, "probes": probes}))
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "model.json"
    assert cli_main(["train", str(data), "--format", "jsonl", "--out", str(out),
                     "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "value models fitted on 3 conversations" in capsys.readouterr().out
    value = LearnedValue.from_file(str(out))
    assert len(value.prior.meta["salience"]) == 384
    # What it learned: the facts that questions asked about are worth more than the chat around them.
    units = encode_units([{"role": "user", "content": t} for t in chat + facts], cl100k)
    p = value.score(ScoringContext(units, embedder=minilm))
    assert p[len(chat)] > p[: len(chat)].max() and p[len(chat) + 2] > p[: len(chat)].max()


@pytest.mark.parametrize(
    ("prior", "message"),
    [
        ({"features": ["log_info", "shoe_size"]}, r"unknown prior features \['shoe_size'\]"),
        ({"features": ["log_info"], "meta": {"salience": "up"}}, r"salience direction .* must be a non-empty list"),
        ({"features": ["log_info"], "meta": {"salience": [1.0, None]}}, r"salience direction .* must be a non-empty list"),
    ],
)
def test_a_bad_model_file_is_refused_when_loaded(tmp_path, prior, message):
    n = len(prior["features"])
    model = {"l2": 1.0, "weights": [0.1] * n, "bias": 0.0, "mean": [0.0] * n, "scale": [1.0] * n, **prior}
    query = {"features": ["cos"], "weights": [1.0], "bias": 0.0, "mean": [0.0], "scale": [1.0]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"models": {"prior": model, "query": query}}))
    with pytest.raises(ValueError, match=f"cannot read value models from .*bad.json.*{message}"):
        LearnedValue.from_file(str(path))


def test_neighbour_max_reach_takes_the_best_present_unit_within_the_window() -> None:
    from rdmem.scoring.value_features import _neighbour_max

    index = np.array([0, 1, 4, 9, 10])  # turns 2, 3, 5-8 are not candidates
    values = np.array([0.0, 1.0, 5.0, 2.0, 3.0])
    # reach 1: only turns right next door, when present
    assert _neighbour_max(values, index).tolist() == [1.0, 0.0, 0.0, 3.0, 2.0]
    # reach 5: turn 4's value reaches turns 0, 1 and 9 but not 10 (six turns away)
    assert _neighbour_max(values, index, reach=5).tolist() == [5.0, 5.0, 2.0, 5.0, 2.0]


def test_a_query_model_saved_before_win5_still_scores_as_it_was_fitted(tmp_path, cl100k, hashing_embedder):
    """Query models are read by feature name too: a file fitted before ``win5_cos_z`` picks its own columns,
    and scores exactly as a model over those columns alone."""
    from rdmem.learn import QUERY_FEATURES
    from rdmem.scoring.value_features import model_query_matrix, query_matrix

    texts = [f"We drove to Porto on day {i}; the bakery there sold {i} kinds of bread." for i in range(14)]
    units = encode_units([{"role": "user", "content": t} for t in texts], cl100k)
    ctx = ScoringContext(units, query="Which city did they drive to?", embedder=hashing_embedder)
    old_features = QUERY_FEATURES[: QUERY_FEATURES.index("win5_cos_z")]
    rng = np.random.default_rng(0)
    old = LogisticModel(old_features).fit(rng.normal(size=(60, len(old_features))), np.arange(60) % 2)
    logit = np.zeros(len(units))
    x = model_query_matrix(old, ctx, logit)
    assert np.array_equal(x, query_matrix(ctx, logit)[:, : len(old_features)])
    prior = default_models()["prior"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"models": {"prior": prior.to_dict(), "query": old.to_dict()}}))
    served = LearnedValue.from_file(str(path)).score(ctx)
    by_hand = old.predict(model_query_matrix(old, ctx, prior.decision(model_prior_matrix(prior, ctx))))
    assert np.allclose(served, by_hand)
    bad = {**old.to_dict(), "features": [*old_features[:-1], "shoe_size"]}
    path.write_text(json.dumps({"models": {"prior": prior.to_dict(), "query": bad}}))
    with pytest.raises(ValueError, match=r"unknown query features \['shoe_size'\]"):
        LearnedValue.from_file(str(path))


def test_win5_takes_the_best_query_similarity_within_five_turns(cl100k, hashing_embedder):
    from rdmem.learn import QUERY_FEATURES
    from rdmem.scoring.value_features import WIN_REACH, query_matrix

    texts = ["The weather was grey all week."] * 20
    texts[10] = "Caroline adopted a rescue dog named Biscuit."
    units = encode_units([{"role": "user", "content": t} for t in texts], cl100k)
    ctx = ScoringContext(units, query="What is the name of Caroline's dog?", embedder=hashing_embedder)
    x = query_matrix(ctx, np.zeros(len(units)))
    cos_z, win = x[:, QUERY_FEATURES.index("cos_z")], x[:, QUERY_FEATURES.index("win5_cos_z")]
    assert WIN_REACH == 5 and cos_z.argmax() == 10
    near = [i for i in range(20) if 0 < abs(i - 10) <= 5]
    far = [i for i in range(20) if abs(i - 10) > 5]
    assert np.allclose(win[near], cos_z[10])  # a turn within five of the hit takes the hit's similarity
    assert (win[far] < cos_z[10]).all()  # one further away does not
    # win5_first: the same over the first pass (meaning and words), the candidate itself included
    first = x[:, QUERY_FEATURES.index("win5_first")]
    top = first[10]
    assert top == first.max() and top > cos_z[10]  # the hit matches in words too: its own first pass is the best
    assert np.allclose(first[near], top) and (first[far] < top).all()
    x_far = query_matrix(ScoringContext([units[i] for i in far], query=ctx.query, embedder=hashing_embedder),
                         np.zeros(len(far)))
    assert np.ptp(x_far[:, QUERY_FEATURES.index("win5_first")]) == 0  # without the hit: nothing stands out
