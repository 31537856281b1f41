from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import ScoringContext

__all__ = ["Information"]


@dataclass(frozen=True)
class Information:
    """Information content: the sum of IDF over a unit's distinct content words."""

    needs_embeddings: bool = False

    def score(self, ctx: ScoringContext) -> np.ndarray:
        return ctx.information.copy()
