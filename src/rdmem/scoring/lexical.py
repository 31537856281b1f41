from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..features import content_words, stem
from ._base import ScoringContext


@dataclass(frozen=True)
class Lexical:
    """Okapi BM25 of the query against each unit (all zeros without a query); ``stem`` matches word forms."""

    k1: float = 1.2
    b: float = 0.75
    stem: bool = False
    needs_embeddings: bool = False

    def score(self, ctx: ScoringContext) -> np.ndarray:
        if not ctx.query or not len(ctx):
            return np.zeros(len(ctx))
        terms = set(content_words(ctx.query))
        if not terms:
            return np.zeros(len(ctx))
        docs = ctx.unit_words
        idf_of = ctx.idf_of
        if self.stem:
            terms = {stem(t) for t in terms}
            docs = ctx.stemmed_words
            df = Counter(w for d in docs for w in set(d) if w in terms)
            n = len(docs)

            def idf_of(term: str) -> float:
                return float(np.log((n + 1) / (df.get(term, 0) + 0.5)))
        lengths = np.array([len(d) for d in docs], dtype=np.float64)
        avg = max(lengths.mean(), 1.0)
        out = np.zeros(len(docs))
        for i, words in enumerate(docs):
            tf = Counter(w for w in words if w in terms)
            for term, f in tf.items():
                idf = max(idf_of(term), 0.0)
                out[i] += idf * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * lengths[i] / avg))
        return out
