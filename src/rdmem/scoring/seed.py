"""The seed document's scorer (section 4.2.2), faithful but for the uniqueness fix."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ._base import ScoringContext
from .recency import Recency
from .relevance import Relevance
from .uniqueness import Uniqueness
from .weighted import Weighted

__all__ = ["SeedMetadata", "seed_scorer"]

_SEED_ENTITY = re.compile(r"\b[A-Z][a-z]+\b")
_SEED_FACT = re.compile(r"\d")


@dataclass(frozen=True)
class SeedMetadata:
    """The seed's bonuses with the seed's own detectors: "remember"/"记住" anywhere (+3),
    a capitalised word (+1), a digit (+0.5)."""

    needs_embeddings: bool = False

    def score(self, ctx: ScoringContext) -> np.ndarray:
        out = np.zeros(len(ctx))
        for i, u in enumerate(ctx.units):
            t = u.text
            out[i] = (
                3.0 * ("记住" in t or "remember" in t.lower())
                + 1.0 * bool(_SEED_ENTITY.search(t))
                + 0.5 * bool(_SEED_FACT.search(t))
            )
        return out


def seed_scorer() -> Weighted:
    """2·recency(λ=0.1 per turn of two messages) + 1.5·relevance + 1·uniqueness + bonuses, unnormalised."""
    return Weighted(
        terms=(
            ("recency", 2.0, Recency(decay=0.1, per_turn=2.0)),
            ("relevance", 1.5, Relevance()),
            ("uniqueness", 1.0, Uniqueness()),
            ("metadata", 1.0, SeedMetadata()),
        ),
        normalize="none",
    )
