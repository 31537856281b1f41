"""A session's embeddings as one column-major matrix, for exact cosine search in numpy (the SQLite store)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._search import top_k

__all__ = ["Dense"]


class Dense:
    """A session's embeddings as one matrix, one *column* per unit (insertion order), with ids and tiers.

    Columns, not rows: ``q @ M`` over a ``(dim, n)`` matrix streams memory in
    order and took half the CPU time of ``M @ q`` over ``(n, dim)`` rows in our
    measurements (100,000 x 384: 8.5 ms against 16 ms on one core). It grows by
    doubling, so appends are amortised O(1); units without an embedding (or
    with another dimension) are masked out of searches.

    ``window`` bounds what a search costs and what the matrix holds: a search
    scans the ``window`` most recent units only, and the matrix drops its
    oldest columns (keeping ``window``) whenever it passes twice that, so a
    session of any length costs at most ``window`` columns per search and
    ``2 * window`` in memory. ``None``: every unit, exactly.
    """

    def __init__(self, window: int | None = None) -> None:
        self.window = window
        self.dim: int | None = None
        self.n = 0
        self.uids = np.zeros(0, dtype=np.int64)
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.archived = np.zeros(0, dtype=bool)
        self.has = np.zeros(0, dtype=bool)
        self.columns = np.zeros((1, 0), dtype=np.float32)

    def _reserve(self, extra: int) -> None:
        need = self.n + extra
        cap = len(self.uids)
        if need <= cap and self.columns.shape[0] == (self.dim or 1):
            return
        cap = max(need, 2 * cap, 64) if need > cap else cap
        for name in ("uids", "archived", "has"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)
        columns = np.zeros((self.dim or 1, cap), dtype=np.float32)
        if self.columns.shape[0] == columns.shape[0]:
            columns[:, : self.n] = self.columns[:, : self.n]
        self.columns = columns

    def extend(self, rows: Sequence[tuple[int, str, str, bytes | None]]) -> list[np.ndarray | None]:
        """Add ``(uid, id, tier, blob)`` rows; return each one's vector (a read-only view) or ``None``."""
        if self.dim is None:
            self.dim = next((len(blob) // 4 for *_, blob in rows if blob), None)
        self._reserve(len(rows))
        start, d = self.n, self.dim
        with_vec = [i for i, (*_, blob) in enumerate(rows) if blob and d is not None and len(blob) == 4 * d]
        if with_vec:
            block = np.frombuffer(b"".join(rows[i][3] or b"" for i in with_vec), dtype="<f4").reshape(len(with_vec), -1)
            cols = np.asarray(with_vec, dtype=np.int64) + start
            self.columns[:, cols] = block.T
            self.has[cols] = True
        for i, (uid, uid_str, tier, _) in enumerate(rows):
            self.uids[start + i] = uid
            self.ids.append(uid_str)
            self.row_of[uid_str] = start + i
            self.archived[start + i] = tier == "archive"
        self.n += len(rows)
        out = [self.vector(start + i) for i in range(len(rows))]
        if self.window is not None and self.n > 2 * self.window:
            self._drop(self.n - self.window)
        return out

    def _drop(self, m: int) -> None:
        """Forget the oldest ``m`` units (into new arrays: vectors handed out before stay valid)."""
        keep = slice(m, self.n)
        self.uids, self.archived, self.has = self.uids[keep].copy(), self.archived[keep].copy(), self.has[keep].copy()
        self.columns = np.ascontiguousarray(self.columns[:, keep])
        self.ids = self.ids[m:]
        self.row_of = {uid: r for r, uid in enumerate(self.ids)}
        self.n -= m

    @property
    def first_uid(self) -> int | None:
        """The oldest unit held (``None``: none); older ones are outside the window."""
        return int(self.uids[0]) if self.n else None

    def set_vectors(self, rows: Sequence[tuple[str, bytes | None]]) -> None:
        """Give ``(id, blob)`` units already here the vectors that landed for them (an embedding worker's)."""
        if self.dim is None:
            self.dim = next((len(blob) // 4 for _, blob in rows if blob), None)
            if self.dim is None:
                return
            self._reserve(0)
        for uid, blob in rows:
            r = self.row_of.get(uid)
            if r is not None and blob and len(blob) == 4 * self.dim:
                self.columns[:, r] = np.frombuffer(blob, dtype="<f4")
                self.has[r] = True

    def vector(self, r: int) -> np.ndarray | None:
        if not self.has[r]:
            return None
        v = self.columns[:, r]
        v.flags.writeable = False
        return v

    def count_not_in(self, tier: str) -> int:
        """How many units are not of ``tier``."""
        archived = int(np.count_nonzero(self.archived[: self.n]))
        return self.n - archived if tier == "archive" else archived

    def identify(self, uids: Sequence[int], tier: str | None) -> list[tuple[int, str]] | None:
        """``(uid, id)`` of the given units that are of ``tier`` (or any), in the given order;
        ``None`` if one of them is not in this cache."""
        rows = np.searchsorted(self.uids[: self.n], np.asarray(uids, dtype=np.int64)).tolist()
        want = tier == "archive"
        out = []
        for uid, r in zip(uids, rows, strict=True):
            if r >= self.n or int(self.uids[r]) != uid:
                return None
            if tier is None or bool(self.archived[r]) == want:
                out.append((uid, self.ids[r]))
        return out

    def set_tier(self, ids: Sequence[str], tier: str) -> None:
        for i in ids:
            r = self.row_of.get(i)
            if r is not None:
                self.archived[r] = tier == "archive"

    def search(self, query_embedding: np.ndarray, k: int, tier: str | None) -> list[tuple[int, str]]:
        """``(uid, id)`` of the best ``k`` units of ``tier`` (or any) by cosine, best first."""
        q = np.asarray(query_embedding, dtype=np.float32).reshape(-1)
        if self.dim is None or q.shape[0] != self.dim or self.n == 0:
            return []
        lo = 0 if self.window is None else max(0, self.n - self.window)
        allowed = self.has[lo : self.n]
        if tier is not None:
            allowed = allowed & (self.archived[lo : self.n] == (tier == "archive"))
        rows = top_k(q @ self.columns[:, lo : self.n], k, allowed) + lo
        return [(int(self.uids[r]), self.ids[r]) for r in rows]
