"""Budgeted submodular coverage: near-duplicates do not both take budget.

The objective is a facility-location coverage mixed with the plain sum of
values::

    F(S) = (1 - ρ) · Σ_{j∈S} v_j  +  ρ · Σ_i v_i · max_{j∈S} s_ij

where ``s_ij`` in [0, 1] says how well item ``j`` stands in for item ``i``
(``s_ii = 1``) and ρ is ``redundancy``. With ρ = 1 a second copy of a kept
item adds nothing; with ρ = 0 similarity is ignored and F is the knapsack
objective. F is monotone and submodular for every ρ in [0, 1] and values >= 0
(a non-negative sum of a modular and a facility-location function).

:func:`coverage` maximises F under a token budget with the cost-benefit
greedy (largest marginal gain per token first, skipping what does not fit),
evaluated lazily (CELF: a gain computed earlier is an upper bound on the gain
now, by submodularity), and returns the better of that set and the best
single item. That rule guarantees ``F(result) >= (1 - 1/e) / 2 · F(optimum)``
≈ 0.316 · optimum (Khuller, Moss & Naor 1999; Leskovec et al. 2007, "Cost-effective
outbreak detection in networks"); in practice it is usually much closer.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..errors import InvalidInput, InvalidType
from ._validate import check_arrays

__all__ = ["coverage", "coverage_objective", "prepare_similarity"]


def _check_params(redundancy: object, threshold: object) -> tuple[float, float]:
    if isinstance(redundancy, bool) or not isinstance(redundancy, (int, float, np.floating, np.integer)):
        raise InvalidType(f"redundancy must be a number in [0, 1], got {type(redundancy).__name__}")
    if not 0.0 <= float(redundancy) <= 1.0:
        raise InvalidInput(f"redundancy must be in [0, 1], got {redundancy}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating, np.integer)):
        raise InvalidType(f"threshold must be a number in [0, 1), got {type(threshold).__name__}")
    if not 0.0 <= float(threshold) < 1.0:
        raise InvalidInput(f"threshold must be in [0, 1), got {threshold}")
    return float(redundancy), float(threshold)


def prepare_similarity(similarity: np.ndarray, n: int, *, threshold: float = 0.0) -> np.ndarray:
    """The coverage matrix used by :func:`coverage`: clipped to [0, 1], diagonal 1.

    Similarities at or below ``threshold`` count as 0 and the rest are
    rescaled to ``(s - threshold) / (1 - threshold)``: sentence embeddings give
    unrelated chat turns cosines around 0.1–0.3, which should not count as
    partial copies.

    >>> prepare_similarity(np.array([[0.2, 0.8], [0.8, 1.0]]), 2, threshold=0.5).tolist()
    [[1.0, 0.6000000000000001], [0.6000000000000001, 1.0]]
    """
    s = np.array(similarity, dtype=np.float64)  # a copy: the caller's matrix is never touched
    if s.shape != (n, n):
        raise ValueError(f"similarity must be an (n, n) matrix for n = {n} items, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("similarity must be finite")
    if threshold > 0:
        s -= threshold
        s *= 1.0 / (1.0 - threshold)
    np.maximum(s, 0.0, out=s)
    np.minimum(s, 1.0, out=s)
    np.fill_diagonal(s, 1.0)
    return s


def coverage_objective(
    values: np.ndarray,
    similarity: np.ndarray,
    chosen: np.ndarray,
    *,
    redundancy: float = 1.0,
    threshold: float = 0.0,
) -> float:
    """F(chosen) as defined in the module docstring (same parameters as :func:`coverage`).

    >>> sim = np.array([[1.0, 1.0], [1.0, 1.0]])
    >>> coverage_objective(np.array([2.0, 2.0]), sim, np.array([0]))   # one copy covers both
    4.0
    >>> coverage_objective(np.array([2.0, 2.0]), sim, np.array([0, 1]))
    4.0
    """
    rho, thr = _check_params(redundancy, threshold)
    v = np.asarray(values, dtype=np.float64)
    idx = np.asarray(chosen, dtype=np.int64)
    if idx.size == 0:
        return 0.0
    s = prepare_similarity(similarity, len(v), threshold=thr)
    cover = s[:, idx].max(axis=1)
    return float((1.0 - rho) * v[idx].sum() + rho * (v * cover).sum())


def coverage(
    values: np.ndarray,
    costs: np.ndarray,
    budget: int,
    similarity: np.ndarray,
    *,
    redundancy: float = 1.0,
    threshold: float = 0.0,
) -> np.ndarray:
    """Ascending indices of a set that (approximately) maximises coverage F within ``budget`` tokens.

    Parameters
    ----------
    values:
        ``(n,)`` non-negative utilities.
    costs:
        ``(n,)`` tokens per item (whole numbers >= 0).
    budget:
        Tokens available.
    similarity:
        ``(n, n)``: ``similarity[i, j]`` is how well item ``j`` stands in for
        item ``i`` (cosine of embeddings, for instance); clipped to [0, 1],
        diagonal forced to 1, need not be symmetric.
    redundancy:
        ρ in [0, 1]: weight of the coverage term against the plain sum of
        values (1: a duplicate adds nothing; 0: plain knapsack objective).
    threshold:
        Similarities at or below it count as 0 (see :func:`prepare_similarity`).

    Lazy cost-benefit greedy plus the best single item: at least
    ``(1 - 1/e) / 2`` of the optimum (module docstring). Items with gain 0 are
    never taken; equal gains per token favour the later item.

    >>> v = np.array([3.0, 3.0, 2.0])
    >>> sim = np.array([[1.0, 0.95, 0.0], [0.95, 1.0, 0.0], [0.0, 0.0, 1.0]])
    >>> coverage(v, np.array([10, 10, 10]), 20, sim).tolist()   # not both near-duplicates
    [1, 2]
    >>> coverage(v, np.array([10, 10, 10]), 20, sim, redundancy=0.0).tolist()
    [0, 1]
    """
    v, c = check_arrays(values, costs, budget)
    rho, thr = _check_params(redundancy, threshold)
    n = len(v)
    if v.size and v.min() < 0:
        raise ValueError(f"values must be >= 0 for a monotone coverage objective, got {float(v.min())}")
    s = prepare_similarity(similarity, n, threshold=thr)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    cover = np.zeros(n)  # current max_{j in S} s_ij per item i

    def gain(j: int) -> float:
        return float((1.0 - rho) * v[j] + rho * (v * np.maximum(s[:, j] - cover, 0.0)).sum())

    # Initial gains in one matrix product: cover is 0, so gain_j = (1-ρ) v_j + ρ Σ_i v_i s_ij.
    g0 = (1.0 - rho) * v + rho * (v @ s)
    fits = c <= budget
    cl = c.tolist()
    # Heap of (-gain per token, -index, step computed): free items (cost 0) first; stale entries
    # are upper bounds. Plain Python floats: comparing numpy scalars makes the heap slow.
    heap = [
        (-(g / cl[j]) if cl[j] > 0 else -float("inf"), -j, 0)
        for j, g in enumerate(g0.tolist())
        if fits[j] and g > 0
    ]
    heapq.heapify(heap)
    chosen: list[int] = []
    left = int(budget)
    total = 0.0
    step = 0  # number of items chosen so far; an entry computed at the current step is fresh
    while heap:
        neg, negj, stamp = heapq.heappop(heap)
        j = -negj
        if cl[j] > left:
            continue  # gains only shrink and the leftover only shrinks: never again
        gj = gain(j)  # recomputed even when fresh: a ratio of -inf (cost 0) does not give the gain back
        if stamp != step:
            if gj > 1e-15:
                heapq.heappush(heap, (-(gj / cl[j]) if cl[j] > 0 else -float("inf"), -j, step))
            continue
        chosen.append(j)
        total += gj
        left -= cl[j]
        cover = np.maximum(cover, s[:, j])
        step += 1
    # The best single item that fits; F({j}) = g0[j].
    cand = np.flatnonzero(fits & (g0 > 0))
    if cand.size:
        best = int(cand[::-1][np.argmax(g0[cand][::-1])])  # ties: the later item
        if g0[best] > total + 1e-12 * max(1.0, total):
            return np.array([best], dtype=np.int64)
    return np.array(sorted(chosen), dtype=np.int64)
