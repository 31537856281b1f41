from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import InvalidInput
from ._base import Scorer, ScoringContext

__all__ = ["Weighted"]


def _minmax(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    if hi - lo < 1e-12:
        return np.where(x > 0, 1.0, 0.0) if hi > 0 else np.zeros_like(x)
    return (x - lo) / (hi - lo)


def _max(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x
    hi = float(np.abs(x).max())
    return x / hi if hi > 1e-12 else np.zeros_like(x)


_NORMALIZERS = {"none": lambda x: x, "minmax": _minmax, "max": _max}


@dataclass(frozen=True)
class Weighted:
    """A weighted sum of named scorers, each normalised first.

    ``normalize`` is ``"none"`` (raw values), ``"minmax"`` (each signal to
    [0, 1] over the units) or ``"max"`` (divided by its largest magnitude).
    :meth:`breakdown` returns each weighted term, for reports.
    """

    terms: tuple[tuple[str, float, Scorer], ...]
    normalize: Literal["none", "minmax", "max"] = "none"

    def __post_init__(self) -> None:
        if self.normalize not in _NORMALIZERS:
            raise InvalidInput(f"normalize must be one of {sorted(_NORMALIZERS)}, got {self.normalize!r}")
        names = [t[0] for t in self.terms]
        if len(set(names)) != len(names):
            raise InvalidInput(f"term names must be unique, got {names}")

    @property
    def needs_embeddings(self) -> bool:
        return any(s.needs_embeddings for _, w, s in self.terms if w)

    def breakdown(self, ctx: ScoringContext) -> dict[str, np.ndarray]:
        norm = _NORMALIZERS[self.normalize]
        return {name: w * norm(np.asarray(s.score(ctx), dtype=np.float64)) for name, w, s in self.terms if w}

    def score(self, ctx: ScoringContext) -> np.ndarray:
        parts = self.breakdown(ctx)
        return sum(parts.values(), np.zeros(len(ctx)))
