from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..features import content_words
from ._base import ScoringContext


@dataclass(frozen=True)
class Lexical:
    """Okapi BM25 of the query against each unit (all zeros without a query)."""

    k1: float = 1.2
    b: float = 0.75
    needs_embeddings: bool = False

    def score(self, ctx: ScoringContext) -> np.ndarray:
        if not ctx.query or not len(ctx):
            return np.zeros(len(ctx))
        terms = set(content_words(ctx.query))
        if not terms:
            return np.zeros(len(ctx))
        docs = ctx.unit_words
        lengths = np.array([len(d) for d in docs], dtype=np.float64)
        avg = max(lengths.mean(), 1.0)
        out = np.zeros(len(docs))
        for i, words in enumerate(docs):
            tf = Counter(w for w in words if w in terms)
            for term, f in tf.items():
                idf = max(ctx.idf_of(term), 0.0)
                out[i] += idf * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * lengths[i] / avg))
        return out
