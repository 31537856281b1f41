from __future__ import annotations

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
        if self.stem:
            terms = {stem(t) for t in terms}
            docs, counts = ctx.stemmed_words, ctx.stem_counts
        else:
            docs, counts = ctx.unit_words, ctx.word_counts
        n = len(docs)
        lengths = np.array([len(d) for d in docs], dtype=np.float64)
        norm = self.k1 * (1 - self.b + self.b * lengths / max(lengths.mean(), 1.0))
        out = np.zeros(n)
        for term in sorted(terms):
            tf = np.fromiter((c.get(term, 0) for c in counts), dtype=np.float64, count=n)
            if not tf.any():
                continue
            # Stems have no session-wide counts: their IDF comes from the units being scored.
            idf = float(np.log((n + 1) / ((tf > 0).sum() + 0.5))) if self.stem else ctx.idf_of(term)
            out += max(idf, 0.0) * tf * (self.k1 + 1) / (tf + norm)
        return out
