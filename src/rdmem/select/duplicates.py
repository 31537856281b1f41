"""Near-duplicates: groups of items whose vectors are (almost) the same."""

from __future__ import annotations

import numpy as np

__all__ = ["near_duplicate_groups"]


def near_duplicate_groups(similarity: np.ndarray, eligible: np.ndarray, threshold: float) -> list[np.ndarray]:
    """Groups (of two or more) of the ``eligible`` items: the connected parts of the graph
    "similarity >= threshold", each an ascending array of indices, groups by their smallest label.

    >>> sim = np.array([[1.0, 0.99, 0.1], [0.99, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> [g.tolist() for g in near_duplicate_groups(sim, np.ones(3, bool), 0.97)]
    [[0, 1]]
    """
    if not eligible.any():
        return []
    close = similarity >= threshold
    np.fill_diagonal(close, False)
    close &= eligible[None, :]
    hot = np.flatnonzero(eligible & close.any(axis=1))
    if not len(hot):
        return []
    sub = close[hot][:, hot]
    # Connected parts by label propagation: each item takes the smallest label among its
    # neighbours until nothing changes (as many rounds as the longest chain of duplicates).
    label = np.arange(len(hot))
    while True:
        spread = np.minimum(label, np.where(sub, label[None, :], len(hot)).min(axis=1))
        if np.array_equal(spread, label):
            break
        label = spread
    order = np.argsort(label, kind="stable")
    return np.split(hot[order], np.flatnonzero(np.diff(label[order])) + 1)
