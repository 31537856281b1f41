from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import ScoringContext

__all__ = ["Relevance"]


@dataclass(frozen=True)
class Relevance:
    """Cosine similarity of each unit to the query, clipped at 0 (all zeros without a query)."""

    needs_embeddings: bool = True

    def score(self, ctx: ScoringContext) -> np.ndarray:
        q = ctx.query_embedding
        if q is None or not len(ctx):
            return np.zeros(len(ctx))
        return np.clip(ctx.embeddings @ q, 0.0, None).astype(np.float64)
