from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import ScoringContext

__all__ = ["Metadata"]


@dataclass(frozen=True)
class Metadata:
    """Additive bonuses for user directives, named entities, and numbers or dates."""

    directive: float = 3.0
    entity: float = 1.0
    factual: float = 0.5
    needs_embeddings: bool = False

    def score(self, ctx: ScoringContext) -> np.ndarray:
        out = np.zeros(len(ctx))
        for i, u in enumerate(ctx.units):
            f = u.features
            out[i] = (
                self.directive * f.directive
                + self.entity * bool(f.entities)
                + self.factual * bool(f.numbers or f.dates)
            )
        return out
