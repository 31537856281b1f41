"""Embedders: the real MiniLM model, the cache, the protocol."""

from __future__ import annotations

import numpy as np
import pytest

from rdmem import compact
from rdmem.embed import CachedEmbedder, Embedder, get_embedder
from rdmem.scoring import Relevance, ScoringContext, Uniqueness
from rdmem.units import encode_units

from ._checks import HashingEmbedder, check_compaction


def test_minilm_similarity_sanity(minilm):
    cat, kitten, stocks = minilm.embed(["cat", "kitten", "stock market"])
    assert cat.shape == (384,) and cat.dtype == np.float32
    assert np.linalg.norm(cat) == pytest.approx(1.0, abs=1e-5)
    assert float(cat @ kitten) > float(cat @ stocks) + 0.2


def test_minilm_relevance_ranks_the_right_turns(agent_history, minilm, cl100k):
    units = encode_units(agent_history, cl100k)
    ctx = ScoringContext(units, query="How warm will it be, and when is sunset?", embedder=minilm)
    scores = Relevance().score(ctx)
    top = units[int(np.argmax(scores))].id
    assert top in {"a4", "a5", "u3", "t2", "t3"}
    ctx = ScoringContext(units, query="Is there any food I must avoid?", embedder=minilm)
    ranked = [units[i].id for i in np.argsort(-Relevance().score(ctx), kind="stable")]
    assert ranked.index("u2") < ranked.index("u6")  # the allergy, not the chit-chat


def test_uniqueness_is_not_zero_for_everything(agent_history, minilm, cl100k):
    """The seed compared each unit with itself, so its uniqueness was always 0; ours excludes self."""
    units = encode_units(agent_history + [dict(agent_history[1], id="dup")], cl100k)
    u = Uniqueness().score(ScoringContext(units, embedder=minilm))
    assert (u > 0.05).sum() > len(units) // 2
    assert u[1] == pytest.approx(0.0, abs=1e-4) and u[-1] == pytest.approx(0.0, abs=1e-4)  # exact duplicates


@pytest.mark.parametrize("policy", ["seed", "rd"])
def test_embedding_policies_with_the_real_default_model(policy, agent_history, cl100k):
    result = compact(agent_history, budget=150, policy=policy, query="hotel and allergy")  # embedder=None: MiniLM
    check_compaction(result, agent_history, 150, cl100k)


def test_cache_embeds_each_text_once():
    inner = HashingEmbedder()
    cached = CachedEmbedder(inner)
    a = cached.embed(["x y", "z", "x y"])
    b = cached.embed(["z", "x y"])
    assert inner.calls == 1
    assert np.allclose(a[0], a[2]) and np.allclose(a[0], b[1])
    assert cached.embed([]).shape[0] == 0


def test_cache_on_disk(tmp_path):
    inner = HashingEmbedder()
    first = CachedEmbedder(inner, cache_dir=tmp_path)
    vec = first.embed(["persist me"])
    first.save()
    assert list(tmp_path.iterdir())
    second_inner = HashingEmbedder()
    second = CachedEmbedder(second_inner, cache_dir=tmp_path)
    assert np.allclose(second.embed(["persist me"]), vec)
    assert second_inner.calls == 0


def test_cache_is_bounded():
    cached = CachedEmbedder(HashingEmbedder(), max_items=3)
    cached.embed([f"t{i}" for i in range(10)])
    assert len(cached._mem) == 3


def test_get_embedder():
    custom = HashingEmbedder()
    assert isinstance(custom, Embedder)
    assert get_embedder(custom) is custom
    assert get_embedder() is get_embedder(None)
    with pytest.raises(TypeError, match="embedder must be None, a model name or an object with .embed"):
        get_embedder(3)  # type: ignore[arg-type]
