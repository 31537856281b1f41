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


@pytest.mark.slow
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


@pytest.mark.slow
def test_numpy_minilm_gives_the_sentence_transformers_vectors(locomo_path):
    """The torch-free default gives the same vectors as sentence-transformers (within 1e-3; ~3e-7 here)."""
    import json

    from rdmem._minilm import NumpyMiniLM
    from rdmem.embed import SentenceTransformerEmbedder

    data = json.loads(locomo_path.read_text(encoding="utf-8"))
    texts = [t["text"] for k, v in data[0]["conversation"].items() if k.startswith("session_") and isinstance(v, list)
             for t in v][:200]
    texts += ["", "x", "word " * 400, "记住我对花生过敏", "Ünïcödé ✓ naïve café", "\n\t  ", "a" * 3000]
    ours = NumpyMiniLM().embed(texts)
    theirs = SentenceTransformerEmbedder().embed(texts)
    assert ours.shape == theirs.shape == (len(texts), 384) and ours.dtype == np.float32
    assert float(np.abs(ours - theirs).max()) < 1e-3
    assert float((ours * theirs).sum(axis=1).min()) > 0.99999


@pytest.mark.slow  # loads the (numpy) model in a subprocess
def test_default_embedder_starts_without_torch():
    """A fresh process gets the default model's vectors without importing torch (the CLI's start-up)."""
    import subprocess
    import sys

    code = ("import sys; from rdmem.embed import get_embedder; v = get_embedder().embed(['hello world']); "
            "print(v.shape, 'torch' in sys.modules, 'sentence_transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["(1,", "384)", "False", "False"]


class _Slow:
    """An embedder that takes its time and counts its calls (the batcher's work is to make fewer)."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.inner = HashingEmbedder()
        self.calls: list[int] = []
        self.fail_on = fail_on

    def embed(self, texts):
        import time

        time.sleep(0.02)
        if self.fail_on in texts:
            raise RuntimeError("the model failed")
        self.calls.append(len(texts))
        return self.inner.embed(texts)


def test_batching_embedder_batches_concurrent_calls_and_answers_each_its_own():
    from concurrent.futures import ThreadPoolExecutor

    from rdmem.embed import BatchingEmbedder

    slow = _Slow()
    batcher = BatchingEmbedder(slow, max_batch=64)
    texts = [[f"text {i} a", f"text {i} b"] if i % 3 == 0 else [f"text {i}"] for i in range(48)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        got = list(pool.map(batcher.embed, texts))
    for t, vecs in zip(texts, got, strict=True):
        assert np.array_equal(vecs, HashingEmbedder().embed(t))
    assert sum(slow.calls) == sum(len(t) for t in texts)  # every text once
    assert len(slow.calls) < len(texts) / 2 and max(slow.calls) <= 64  # in batches, none over the cap
    assert batcher.embed([]).shape == (0, 0)


def test_batching_embedder_gives_the_model_error_to_the_calls_of_that_batch():
    from concurrent.futures import ThreadPoolExecutor

    from rdmem.embed import BatchingEmbedder

    batcher = BatchingEmbedder(_Slow(fail_on="bad"))
    with pytest.raises(RuntimeError, match="the model failed"):
        batcher.embed(["bad"])
    with ThreadPoolExecutor(max_workers=4) as pool:  # and it keeps working afterwards
        assert all(v.shape == (1, HashingEmbedder().embed(["x"]).shape[1]) for v in pool.map(
            lambda i: batcher.embed([f"fine {i}"]), range(8)))
