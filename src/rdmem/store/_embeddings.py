"""The store's side of deferred embedding: leased claims on units without a vector, and vectors landing.

See :mod:`rdmem._embedding` for the worker that uses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import InvalidInput, InvalidType
from ._keys import check_name
from ._types import StoredUnit, Written

__all__ = ["EmbeddingsMixin"]


class EmbeddingsMixin:
    """:meth:`claim_unembedded` and :meth:`set_embeddings`, checked once for every backend."""

    def version(self, session: str) -> int:
        raise NotImplementedError
    def claim_unembedded(self, worker: str, *, limit: int = 64, lease: float = 60.0) -> list[tuple[str, StoredUnit]]:
        """Claim, for ``lease`` seconds, at most ``limit`` units of any session that have no vector and no
        live claim by anyone; ``(session, unit)`` pairs. Half of a claim is the oldest such units, half the
        newest (the built-in stores), so a message stored behind another session's long backlog (one tenant's
        bulk import) is embedded at the next claim, and the backlog still goes on. Atomic: two workers
        (threads or processes on one database) never get the same unit while a claim lives, so a unit is
        embedded once.
        """
        if not isinstance(worker, str) or not worker:
            raise InvalidInput(f"worker must be a non-empty string naming the claimant, got {worker!r}")
        check_name(worker, "worker")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidInput(f"limit must be an int >= 0, got {limit!r}")
        if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not lease > 0:
            raise InvalidInput(f"lease must be a number of seconds > 0, got {lease!r}")
        return self._claim_unembedded(worker, limit, float(lease)) if limit else []

    def set_embeddings(self, session: str, vectors: Mapping[str, Any], *, claimed_by: str | None = None) -> Written:
        """Write the vectors of units of ``session`` that have none yet (ids it does not have, and units that
        already have one, are ignored), releasing their claims; a new version of the session if any landed,
        with the units changed in it (readers pick the vectors up through :meth:`changes`). ``claimed_by``: only
        units this worker's claim holds (a message deleted and stored again under its id since the claim is
        another message: the deleted one's vector must not land on it)."""
        if not isinstance(session, str) or not session:
            raise InvalidInput(f"session must be a non-empty string, got {session!r}")
        check_name(session, "session")
        if not isinstance(vectors, Mapping):
            raise InvalidType(f"vectors must be a dict of id -> vector, got {type(vectors).__name__}")
        checked: dict[str, np.ndarray] = {}
        for uid, v in vectors.items():
            if not isinstance(uid, str):
                raise InvalidType(f"vector ids must be strings, got {uid!r}")
            vec = np.array(v, dtype=np.float32).reshape(-1)
            if not vec.size or not np.isfinite(vec).all():
                raise InvalidInput(f"unit {uid!r}: embedding must be a non-empty vector of finite numbers")
            if "\x00" not in uid:
                checked[uid] = vec
        if claimed_by is not None:
            check_name(claimed_by, "claimed_by")
        if not checked:
            v = self.version(session)
            return Written(v, v)
        return self._set_embeddings(session, checked, claimed_by)

    def _claim_unembedded(self, worker: str, limit: int, lease: float) -> list[tuple[str, StoredUnit]]:
        raise NotImplementedError
    def _set_embeddings(self, session: str, vectors: dict[str, np.ndarray], claimed_by: str | None) -> Written:
        raise NotImplementedError
