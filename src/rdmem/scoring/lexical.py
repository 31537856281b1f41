from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..features import content_words, stem
from ._base import ScoringContext

__all__ = ["Lexical"]


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
            counts = ctx.stem_counts
        else:
            counts = ctx.word_counts
        n = len(counts)
        lengths = ctx.word_lengths
        norm = self.k1 * (1 - self.b + self.b * lengths / max(lengths.mean(), 1.0))
        # One disjointness test per unit (in C) finds the few units that hold any query term.
        hits = [i for i, c in enumerate(counts) if not terms.isdisjoint(c)]
        out = np.zeros(n)
        for term in sorted(terms):
            where = [i for i in hits if term in counts[i]]
            if not where:
                continue
            tf = np.array([counts[i][term] for i in where], dtype=np.float64)
            # Stems have no session-wide counts: their IDF comes from the units being scored.
            idf = float(np.log((n + 1) / (len(where) + 0.5))) if self.stem else ctx.idf_of(term)
            out[where] += max(idf, 0.0) * tf * (self.k1 + 1) / (tf + norm[where])
        return out
