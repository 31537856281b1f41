from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import ScoringContext

__all__ = ["Uniqueness"]


@dataclass(frozen=True)
class Uniqueness:
    """``1 − max cosine`` to the *other* units (the seed compared a unit with itself, giving 0 always)."""

    needs_embeddings: bool = True

    def score(self, ctx: ScoringContext) -> np.ndarray:
        n = len(ctx)
        if n < 2:
            return np.ones(n)
        e = ctx.embeddings
        sim = e @ e.T
        np.fill_diagonal(sim, -np.inf)
        return np.clip(1.0 - sim.max(axis=1), 0.0, 2.0).astype(np.float64)
