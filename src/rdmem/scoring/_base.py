"""What every scorer sees, and the scorer protocol."""

from __future__ import annotations

import math
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..embed import Embedder, get_embedder
from ..features import text_words
from ..tokens import content_text
from ..units import MemoryUnit

__all__ = ["Scorer", "ScoringContext", "WordCounts"]


@dataclass
class ScoringContext:
    """The units to score, the query, and lazily computed shared quantities.

    Quantities that several scorers need (embeddings, IDF, the query's
    vector) are computed once here, on first use, so a policy that needs no
    embeddings never loads a model.
    """

    units: Sequence[MemoryUnit]
    query: str | None = None
    embedder: Embedder | None = None
    now: int | None = None
    doc_freq: tuple[Counter[str], int] | None = None
    #: ``False``: a unit without a vector (its embedding not landed yet) is not embedded here: it gets a
    #: zero vector (no dense relevance, no similarity to anything), so the lexical and prior terms rank it.
    embed_missing: bool = True
    _cache: dict[str, object] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.units)

    def without_query(self) -> ScoringContext:
        """The same units without the query, sharing what is already computed (vectors, words, IDF)."""
        if not self.query:
            return self
        other = ScoringContext(self.units, None, self.embedder, self.now, self.doc_freq, self.embed_missing)
        other.__dict__.update({k: v for k, v in self.__dict__.items() if k not in _PER_QUERY})
        return other

    @property
    def current_index(self) -> int:
        """The position of "now": one past the newest unit."""
        if self.now is not None:
            return self.now
        return int(self.indices.max()) + 1 if self.units else 0

    @cached_property
    def _embedder(self) -> Embedder:
        return self.embedder if self.embedder is not None else get_embedder()

    @cached_property
    def embeddings(self) -> np.ndarray:
        """Unit vectors, one row per unit (computed for units that lack one)."""
        missing = [u for u in self.units if u.embedding is None]
        if missing and self.embed_missing:
            vecs = self._embedder.embed([embed_text(u) for u in missing])
            for u, v in zip(missing, vecs, strict=True):
                u.embedding = v
        if not self.units:
            return np.zeros((0, 1), dtype=np.float32)
        if missing and not self.embed_missing:
            dim = next((len(u.embedding) for u in self.units if u.embedding is not None), None)
            if dim is None:
                q = self.query_embedding
                dim = len(q) if q is not None else 1
            out = np.zeros((len(self.units), dim), dtype=np.float32)
            for i, u in enumerate(self.units):
                if u.embedding is not None:
                    out[i] = u.embedding
            return out
        return np.array([u.embedding for u in self.units], dtype=np.float32)

    @cached_property
    def similarity(self) -> np.ndarray:
        """Cosine similarity of every pair of units (``embeddings @ embeddings.T``; read-only, shared)."""
        e = self.embeddings
        sim = e @ e.T
        sim.flags.writeable = False
        return sim

    @cached_property
    def query_embedding(self) -> np.ndarray | None:
        if not self.query:
            return None
        return self._embedder.embed([self.query])[0]

    @cached_property
    def _text_words(self) -> list[tuple[tuple[str, ...], tuple[str, ...], dict[str, int], dict[str, int]]]:
        return [text_words(u.text) for u in self.units]

    @cached_property
    def unit_words(self) -> list[tuple[str, ...]]:
        return [t[0] for t in self._text_words]

    @cached_property
    def stemmed_words(self) -> list[tuple[str, ...]]:
        return [t[1] for t in self._text_words]

    @cached_property
    def word_counts(self) -> list[dict[str, int]]:
        return [t[2] for t in self._text_words]

    @cached_property
    def stem_counts(self) -> list[dict[str, int]]:
        return [t[3] for t in self._text_words]

    @cached_property
    def word_lengths(self) -> np.ndarray:
        """Content words per unit (as many as stems), as float64: BM25's document lengths."""
        return np.fromiter((len(t[0]) for t in self._text_words), dtype=np.float64, count=len(self.units))

    @cached_property
    def indices(self) -> np.ndarray:
        """Each unit's position in the whole history (``MemoryUnit.index``), as int64."""
        return np.fromiter((u.index for u in self.units), dtype=np.int64, count=len(self.units))

    @cached_property
    def token_costs(self) -> np.ndarray:
        """Each unit's verbatim cost in tokens (``MemoryUnit.tokens``), as float64."""
        return np.fromiter((u.tokens for u in self.units), dtype=np.float64, count=len(self.units))

    @cached_property
    def _df(self) -> tuple[Counter[str], int]:
        if self.doc_freq is not None:
            return self.doc_freq
        df: Counter[str] = Counter()
        for words in self.unit_words:
            df.update(set(words))
        return df, len(self.units)

    def idf_of(self, word: str) -> float:
        """Smoothed inverse document frequency over the history (units as documents).

        ``doc_freq`` lets a caller supply counts over a longer history than the
        units being scored (a memory manager's whole session)."""
        cache = self._idf_cache
        v = cache.get(word)
        if v is None:
            df, n = self._df
            v = cache[word] = math.log((max(n, 1) + 1) / (df.get(word, 0) + 0.5))
        return v

    @cached_property
    def _idf_cache(self) -> dict[str, float]:
        return {}

    @cached_property
    def information(self) -> np.ndarray:
        """Information content of each unit: the sum of IDF (clipped at 0) over its distinct content words.

        With a session-wide ``doc_freq`` the values are memoised per text until
        that table grows: a session's texts are scored again on every query.
        """
        memo = _information_memo(self.doc_freq)
        out = np.empty(len(self.units))
        todo = []
        for i, (u, words) in enumerate(zip(self.units, self.unit_words, strict=True)):
            v = memo.get(u.text)
            if v is None:
                todo.append((i, u.text, set(words)))
            else:
                out[i] = v
        if todo:
            # Each word's clipped IDF once, then one exactly rounded sum per text (math.fsum: the same value
            # whatever the order of its words).
            (df, n), cache, log = self._df, self._idf_cache, math.log
            top, count = max(n, 1) + 1, df.get
            clipped = {}
            for w in set().union(*(t[2] for t in todo)):
                v = cache.get(w)
                if v is None:  # idf_of, inline
                    v = cache[w] = log(top / (count(w, 0) + 0.5))
                clipped[w] = v if v > 0.0 else 0.0
            get = clipped.__getitem__
            for i, text, words in todo:
                out[i] = memo[text] = math.fsum(map(get, words))
        return out


#: What :meth:`ScoringContext.without_query` does not share: the query and what depends on it.
_PER_QUERY = frozenset({"query", "query_embedding", "_cache"})

# id(table) -> (weak reference to the table, (its document count, generation), {text: information}).
_INFO_MEMO: dict[int, tuple[weakref.ref[Counter[str]], tuple[int, int], dict[str, float]]] = {}


class WordCounts(Counter[str]):
    """Document frequencies that may also lose documents (a session view's window slides): ``generation``
    counts the removals, so that memos made from the table know it changed at an unchanged count."""

    generation = 0

    def remove(self, words: set[str]) -> None:
        """One document with ``words`` leaves the table."""
        self.generation += 1
        for w in words:
            left = self[w] - 1
            if left > 0:
                self[w] = left
            else:
                del self[w]


def _information_memo(doc_freq: tuple[Counter[str], int] | None) -> dict[str, float]:
    """The memo of :attr:`ScoringContext.information` for a session-wide table (a fresh dict without one).

    A table is appended to (its document count grows with it) and, a :class:`WordCounts`, may lose documents
    (its ``generation`` grows), so a memo stays valid while the table is alive and both are unchanged.
    """
    if doc_freq is None:
        return {}
    table, n = doc_freq
    key = (n, getattr(table, "generation", 0))
    entry = _INFO_MEMO.get(id(table))
    if entry is not None and entry[0]() is table and entry[1] == key:
        return entry[2]
    for key in [k for k, (ref, _, _) in _INFO_MEMO.items() if ref() is None]:
        del _INFO_MEMO[key]
    memo: dict[str, float] = {}
    _INFO_MEMO[id(table)] = (weakref.ref(table), key, memo)
    return memo


def embed_text(unit: MemoryUnit) -> str:
    """The text embedded for a unit: its content, or its tool calls when it has none."""
    return _embed_text(unit.text, unit.message)


def message_embed_text(message: Mapping[str, Any]) -> str:
    """:func:`embed_text` of a stored message (what a background embedding worker embeds): the same text."""
    return _embed_text(content_text(message.get("content")), message)


def _embed_text(text: str, message: Mapping[str, Any]) -> str:
    if text:
        return text
    calls = message.get("tool_calls") or ()
    return " ".join(str((c.get("function") or c.get("custom") or {}).get("name", "")) for c in calls) \
        or str(message.get("role"))


@runtime_checkable
class Scorer(Protocol):
    """Maps a scoring context to one utility per unit (higher means keep).

    ``needs_embeddings`` tells the caller whether the scorer will touch
    ``ctx.embeddings`` (so policies that do not need a model never load one).
    """

    @property
    def needs_embeddings(self) -> bool: ...  # read-only: a frozen dataclass's field qualifies

    def score(self, ctx: ScoringContext) -> np.ndarray: ...
