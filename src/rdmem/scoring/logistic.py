"""A small L2-regularised logistic regression, fitted by Newton's method (no extra dependencies)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidInput

__all__ = ["LogisticModel", "default_models"]


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -35, 35)))


@dataclass
class LogisticModel:
    """``p = sigmoid(w · standardise(x) + b)``.

    Parameters are the feature names and the L2 strength; ``fit`` sets the
    learned state (``weights_``, ``bias_``, ``mean_``, ``scale_``).

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(400, 1)); y = (x[:, 0] + 0.3 * rng.normal(size=400) > 0).astype(float)
    >>> m = LogisticModel(("x",)).fit(x, y)
    >>> bool(m.weights_[0] > 1.0), bool(m.predict(np.array([[2.0]]))[0] > 0.9)
    (True, True)
    """

    features: tuple[str, ...]
    l2: float = 1.0
    weights_: np.ndarray | None = field(default=None, repr=False)
    bias_: float = 0.0
    mean_: np.ndarray | None = field(default=None, repr=False)
    scale_: np.ndarray | None = field(default=None, repr=False)
    meta: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.l2 >= 0:
            raise InvalidInput(f"l2 must be >= 0, got {self.l2!r}")

    def _check(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(self.features):
            raise ValueError(f"expected a (n, {len(self.features)}) feature matrix, got shape {x.shape}")
        return x

    def fit(self, x: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None, iters: int = 30) -> LogisticModel:
        """Fit on features ``x`` (n, d) and labels ``y`` in [0, 1]."""
        x = self._check(x)
        y = np.asarray(y, dtype=np.float64)
        if y.shape != (x.shape[0],):
            raise ValueError(f"y must have shape ({x.shape[0]},), got {y.shape}")
        sw = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        self.mean_ = x.mean(axis=0)
        self.scale_ = np.where(x.std(axis=0) > 1e-9, x.std(axis=0), 1.0)
        z = np.hstack([(x - self.mean_) / self.scale_, np.ones((len(x), 1))])
        w = np.zeros(z.shape[1])
        reg = np.full(z.shape[1], self.l2)
        reg[-1] = 0.0
        for _ in range(iters):
            p = _sigmoid(z @ w)
            grad = z.T @ (sw * (p - y)) + reg * w
            hess = (z * (sw * p * (1 - p))[:, None]).T @ z + np.diag(reg + 1e-9)
            step = np.linalg.solve(hess, grad)
            w -= step
            if np.abs(step).max() < 1e-7:
                break
        self.weights_, self.bias_ = w[:-1], float(w[-1])
        return self

    def decision(self, x: np.ndarray) -> np.ndarray:
        if self.weights_ is None or self.mean_ is None or self.scale_ is None:
            raise RuntimeError("model is not fitted: call fit() or load weights")
        x = self._check(x)
        return ((x - self.mean_) / self.scale_) @ self.weights_ + self.bias_

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Probabilities, one per row of ``x``."""
        return _sigmoid(self.decision(x))

    def contributions(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Each feature's additive share of the logit, for explanations."""
        x = self._check(x)
        assert self.weights_ is not None and self.mean_ is not None and self.scale_ is not None
        z = (x - self.mean_) / self.scale_ * self.weights_
        return {name: z[:, k] for k, name in enumerate(self.features)}

    def to_dict(self) -> dict[str, Any]:
        if self.weights_ is None:
            raise RuntimeError("model is not fitted")
        return {
            "features": list(self.features),
            "l2": self.l2,
            "weights": self.weights_.tolist(),
            "bias": self.bias_,
            "mean": self.mean_.tolist(),  # type: ignore[union-attr]
            "scale": self.scale_.tolist(),  # type: ignore[union-attr]
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogisticModel:
        try:
            m = cls(tuple(data["features"]), float(data.get("l2", 1.0)), meta=dict(data.get("meta", {})))
            m.weights_ = np.asarray(data["weights"], dtype=np.float64)
            m.bias_ = float(data["bias"])
            m.mean_ = np.asarray(data["mean"], dtype=np.float64)
            m.scale_ = np.asarray(data["scale"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"not a valid value-model file: {exc}") from None
        if not (len(m.weights_) == len(m.mean_) == len(m.scale_) == len(m.features)):
            raise InvalidInput("not a valid value-model file: lengths of features, weights, mean and scale differ")
        return m

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> LogisticModel:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidInput(f"cannot read value model {str(path)!r}: {exc}") from None


@lru_cache(maxsize=1)
def default_models() -> dict[str, LogisticModel]:
    """The models shipped in the package (``rdmem/data/value_model.json``): ``prior`` and ``query``."""
    text = resources.files("rdmem").joinpath("data/value_model.json").read_text()
    data = json.loads(text)
    return {name: LogisticModel.from_dict(d) for name, d in data["models"].items()}
