from __future__ import annotations

import numpy as np

__all__ = ["check_arrays"]


def check_arrays(values: object, costs: object, budget: object) -> tuple[np.ndarray, np.ndarray]:
    """Validate selector inputs: float values, int costs >= 0 of the same length, an int budget >= 0."""
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise TypeError(f"budget must be an int number of tokens, got {type(budget).__name__}")
    if budget < 0:
        raise ValueError(f"budget must be >= 0 tokens, got {budget}")
    v = np.asarray(values, dtype=np.float64)
    c = np.asarray(costs)
    if v.ndim != 1 or c.ndim != 1 or v.shape != c.shape:
        raise ValueError(f"values and costs must be 1-D of equal length, got shapes {v.shape} and {c.shape}")
    if c.size and not np.issubdtype(c.dtype, np.integer):
        if not np.all(np.equal(np.mod(c, 1), 0)):
            raise ValueError("costs must be whole numbers of tokens")
    c = c.astype(np.int64)
    if c.size and c.min() < 0:
        raise ValueError(f"costs must be >= 0 tokens, got {int(c.min())}")
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite")
    return v, c
