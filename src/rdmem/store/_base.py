"""The store protocol: every unit of every session, forever, with its tier."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Self, runtime_checkable

import numpy as np

from ..units import VALID_ROLES

__all__ = [
    "Store", "StoredUnit", "SessionInfo", "Tier", "StoreError", "check_session", "damaged_unit", "decode_unit",
]

Tier = Literal["working", "archive"]


class StoreError(RuntimeError):
    """The store cannot be used: unreachable, corrupt, or written by a newer rdmem."""


@dataclass
class StoredUnit:
    """One message as persisted: the original message, its order, cost, features, vector and tier."""

    id: str
    seq: int
    message: dict[str, Any]
    tokens: int
    features: dict[str, Any] = field(default_factory=dict)
    embedding: np.ndarray | None = None
    tier: Tier = "working"


def damaged_unit(where: str, session: str, uid: str, what: str) -> StoreError:
    """The error for a stored unit that cannot be read back: which store, session and unit, and what is wrong."""
    return StoreError(f"{where}: session {session!r}, unit {uid!r}: {what}; the store is damaged (nothing was changed)")


def decode_unit(
    where: str, session: str, uid: str, seq: Any, message: Any, tokens: Any, features: Any,
    embedding: np.ndarray | None, tier: Tier,
) -> StoredUnit:
    """A row read back from a database as a :class:`StoredUnit` (``message`` and ``features`` as JSON text).

    A damaged row (edited by hand, or a corrupt file that SQLite still
    opens) is a :class:`StoreError` naming the store, the session and the
    unit, not an exception from deep inside the manager.
    """
    def damaged(what: str) -> StoreError:
        return damaged_unit(where, session, uid, what)

    try:
        msg, feats = json.loads(message), json.loads(features)
    except (TypeError, ValueError) as exc:
        raise damaged(f"stored JSON does not parse ({exc})") from None
    if not isinstance(msg, dict) or msg.get("role") not in VALID_ROLES:
        raise damaged("the stored message is not a chat message (a JSON object with a valid 'role')")
    if not isinstance(feats, dict):
        raise damaged("the stored features are not a JSON object")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise damaged(f"the stored token count {tokens!r} is not an int >= 0")
    return StoredUnit(uid, int(seq), msg, tokens, feats, embedding, tier)


@dataclass(frozen=True)
class SessionInfo:
    session: str
    units: int
    working: int
    archived: int
    created: float
    updated: float


@runtime_checkable
class Store(Protocol):
    """Persistence for memory managers. All writes are durable when the call returns.

    ``search`` ranks a session's units of one tier (or all) for a query,
    fusing lexical and dense retrieval; it returns ``(id, score)`` pairs, best
    first.
    """

    def append(self, session: str, units: Sequence[StoredUnit]) -> None: ...

    def load(self, session: str) -> list[StoredUnit]: ...

    def set_tier(self, session: str, ids: Sequence[str], tier: Tier) -> None: ...

    def log_compaction(self, session: str, record: dict[str, Any]) -> None: ...

    def compaction_log(self, session: str) -> list[dict[str, Any]]: ...

    def search(
        self, session: str, query: str, query_embedding: np.ndarray | None, *, k: int, tier: Tier | None = None
    ) -> list[tuple[str, float]]: ...

    def sessions(self) -> list[SessionInfo]: ...

    def delete_session(self, session: str) -> None: ...

    def close(self) -> None: ...


def check_session(session: str) -> None:
    """A session id is a non-empty string."""
    if not isinstance(session, str) or not session:
        raise ValueError(f"session must be a non-empty string, got {session!r}")


class ConnectionLifecycle:
    """``close()`` and context-manager support for stores holding ``_conn``, ``_lock`` and ``_caches``."""

    _conn: Any
    _lock: Any
    _caches: dict[Any, Any]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._caches.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
