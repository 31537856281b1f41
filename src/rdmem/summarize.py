"""Summarizers: turn a span of units into a short text under a token cap.

``ExtractiveSummarizer`` (default) needs no model: it keeps the most
informative sentences. ``LLMSummarizer`` calls any OpenAI-compatible chat
endpoint; when it fails it raises :class:`SummarizerError` and the caller keeps
the span as it was, so error text never becomes a summary.
"""

from __future__ import annotations

import heapq
import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ._openai import EndpointError, chat_completion
from .errors import RdmemError
from .features import content_words
from .tokens import Tokenizer
from .units import MemoryUnit

__all__ = ["Summarizer", "ExtractiveSummarizer", "LLMSummarizer", "SummarizerError", "split_sentences"]


class SummarizerError(RdmemError, RuntimeError):
    """A summarizer could not produce a summary (the span is kept as it was)."""


@runtime_checkable
class Summarizer(Protocol):
    def summarize(self, units: Sequence[MemoryUnit], max_tokens: int, tokenizer: Tokenizer) -> str: ...


# CJK sentence ends need no space after them.
_SENT = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n+")


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if s and s.strip()]


def _speaker(unit: MemoryUnit) -> str:
    name = unit.message.get("name")
    return str(name) if name else unit.role


@dataclass(frozen=True)
class ExtractiveSummarizer:
    """The most informative sentences of the span, in their original order, under ``max_tokens``.

    A sentence's score is the IDF mass of its content words not already
    covered by sentences chosen before it (so near-repeats add nothing),
    per token.
    """

    min_words: int = 3

    def summarize(self, units: Sequence[MemoryUnit], max_tokens: int, tokenizer: Tokenizer) -> str:
        cands: list[tuple[int, str, set[str]]] = []
        for u in units:
            if u.role == "tool" or not u.text:
                continue
            for s in split_sentences(u.text):
                words = set(content_words(s))
                if len(words) >= self.min_words or (words and len(units) < 4):
                    cands.append((len(cands), f"{_speaker(u)}: {s}", words))
        if not cands or max_tokens <= 0:
            return ""
        df: Counter[str] = Counter()
        for _, _, words in cands:
            df.update(words)
        n = len(cands)
        idf = {w: math.log((n + 1) / (c + 0.5)) for w, c in df.items()}
        costs = {i: tokenizer.count(text) + 1 for i, text, _ in cands}
        # Lazy greedy: coverage gains only shrink as sentences are chosen, so a stale
        # heap entry is an upper bound and most gains never need recomputing.
        covered: set[str] = set()
        chosen: list[int] = []
        used = 0
        heap = [(-math.fsum(idf[w] for w in words) / costs[i], i) for i, _, words in cands]
        heapq.heapify(heap)
        while heap:
            neg, i = heapq.heappop(heap)
            words = cands[i][2]
            gain = math.fsum(idf[w] for w in words - covered) / costs[i]
            if gain <= 0:
                continue
            if heap and gain < -heap[0][0] - 1e-12:
                heapq.heappush(heap, (-gain, i))
                continue
            if used + costs[i] <= max_tokens:
                chosen.append(i)
                used += costs[i]
                covered |= words
        return tokenizer.truncate("\n".join(cands[i][1] for i in sorted(chosen)), max_tokens)


@dataclass(frozen=True)
class LLMSummarizer:
    """Summaries from an OpenAI-compatible ``/chat/completions`` endpoint.

    ``base_url``, ``model`` and ``api_key`` default to the environment
    variables ``RDMEM_LLM_BASE_URL`` (or ``OPENAI_BASE_URL``), ``RDMEM_LLM_MODEL``
    and ``OPENAI_API_KEY``.
    """

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    timeout: float = 30.0
    prompt: str = (
        "Summarize the conversation below in at most {max_words} words. Keep names, numbers, dates, "
        "decisions, user preferences and instructions. Write plain sentences, no preamble."
    )

    def _config(self) -> tuple[str, str, str | None]:
        base = self.base_url or os.environ.get("RDMEM_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
        model = self.model or os.environ.get("RDMEM_LLM_MODEL")
        if not base:
            raise SummarizerError("no LLM endpoint: pass base_url or set RDMEM_LLM_BASE_URL")
        if not model:
            raise SummarizerError("no LLM model: pass model or set RDMEM_LLM_MODEL")
        return base.rstrip("/"), model, self.api_key or os.environ.get("OPENAI_API_KEY")

    def summarize(self, units: Sequence[MemoryUnit], max_tokens: int, tokenizer: Tokenizer) -> str:
        base, model, key = self._config()
        transcript = "\n".join(f"{_speaker(u)}: {u.text}" for u in units if u.text)
        body = {
            "model": model,
            "messages": [
                {"role": "system", "content": self.prompt.format(max_words=max(int(max_tokens * 0.7), 5))},
                {"role": "user", "content": transcript},
            ],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        try:
            text = chat_completion(base, body, key, self.timeout)
        except EndpointError as exc:
            raise SummarizerError(str(exc)) from exc
        return tokenizer.truncate(text.strip(), max_tokens)
