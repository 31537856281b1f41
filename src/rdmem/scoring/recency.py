from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInput
from ._base import ScoringContext

__all__ = ["Recency"]


@dataclass(frozen=True)
class Recency:
    """``exp(-decay · age)``, age in messages (the newest has age 0).

    >>> from rdmem.scoring import ScoringContext
    >>> from rdmem.units import encode_units
    >>> from rdmem.tokens import get_tokenizer
    >>> units = encode_units([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], get_tokenizer(len))
    >>> Recency(decay=1.0).score(ScoringContext(units)).round(3).tolist()
    [0.368, 1.0]
    """

    decay: float = 0.1
    per_turn: float = 1.0
    needs_embeddings: bool = False

    def __post_init__(self) -> None:
        if not self.decay >= 0:
            raise InvalidInput(f"decay must be >= 0, got {self.decay!r}")
        if not self.per_turn > 0:
            raise InvalidInput(f"per_turn must be > 0 messages, got {self.per_turn!r}")

    def score(self, ctx: ScoringContext) -> np.ndarray:
        age = (ctx.current_index - 1 - ctx.indices) / self.per_turn
        return np.exp(-self.decay * np.maximum(age, 0.0))
