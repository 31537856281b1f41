"""What a store keeps and returns: units, versions, errors, and the protocol every backend implements."""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from ..errors import DuplicateIdError, InvalidInput, StoreError, UnknownIdError, VersionConflict

__all__ = [
    "Tier", "TIERS", "NewUnit", "StoredUnit", "Written", "Changes", "SessionInfo", "ApiKey", "Store",
    "StoreError", "DuplicateIdError", "UnknownIdError", "VersionConflict", "retired_digest", "check_prefix",
    "name_after", "takes_prefix", "Bounded", "SESSION_CACHES",
]

#: Sessions a store keeps search state for (a long-running server touches many more): the newest kept.
SESSION_CACHES = 256


class Bounded(OrderedDict):  # type: ignore[type-arg]
    """A dict of at most ``most`` entries: one more forgets the one used longest ago (read or set; a cache per
    session, whose sessions come and go). Used under its owner's lock."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most = most

    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.most:
            self.popitem(last=False)

Tier = Literal["working", "archive"]
TIERS: tuple[Tier, ...] = ("working", "archive")


@dataclass
class NewUnit:
    """A message to append: the store gives it its place (``seq``) and, when ``id`` is ``None``, an id.

    ``message`` is the message as the caller gave it, every field included
    (fields the chat API does not know round-trip; ``id`` travels apart).
    ``tokens`` is its verbatim cost and ``features`` whatever the caller
    wants back with it (JSON).
    """

    message: dict[str, Any]
    tokens: int
    features: dict[str, Any] = field(default_factory=dict)
    embedding: np.ndarray | None = None
    tier: Tier = "working"
    id: str | None = None


@dataclass
class StoredUnit:
    """One message as persisted: its id, its place in the session (``seq``), cost, features, vector, tier."""

    id: str
    seq: int
    message: dict[str, Any]
    tokens: int
    features: dict[str, Any] = field(default_factory=dict)
    embedding: np.ndarray | None = None
    tier: Tier = "working"


@dataclass(frozen=True)
class Written:
    """What a write did: the session's version before (``prev``; 0 for a new session) and after it.

    Versions come from one clock per store, so they only grow, also across a
    session deleted and created again. ``units`` are the appended units with
    their ids and places; ``deleted`` the ids a delete removed.
    """

    prev: int
    version: int
    units: list[StoredUnit] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Changes:
    """A session's state after ``since``: the units added or moved since then, or all of them.

    ``full`` says ``units`` is the whole session, in order (a first read, or
    units were deleted since ``since``); otherwise ``units`` are the ones
    appended or moved to another tier after ``since``, in order. ``version``
    is what to pass as ``since`` next time (0: no such session). ``state``
    is the session's state record (see :meth:`Store.update_state`).

    A full read asked for the newest ``rows`` only (``changes(..., rows=N)``)
    holds every unit from place ``start`` on and the working units before it
    (``start`` is 0 when it holds the whole session). ``size`` is the
    session's number of units and their tokens, whatever was read.
    """

    version: int
    full: bool
    units: list[StoredUnit]
    state: dict[str, Any]
    start: int = 0
    size: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class SessionInfo:
    session: str
    units: int
    working: int
    archived: int
    created: float
    updated: float


@dataclass(frozen=True)
class ApiKey:
    """An API key of the service, as listed: never its secret (a store keeps only its hash)."""

    id: str
    tenant: str
    name: str
    created: float
    revoked: float | None = None


@runtime_checkable
class Store(Protocol):
    """Persistence for memory managers, and the source of truth of each session.

    Every write is durable and atomic when the call returns, and moves the
    session to a new version. Ids and places are allocated by the store, so
    any number of managers, in any number of processes, may write one
    session: each reads :meth:`changes` since the version it last saw, and a
    conditional write (``expect=``) fails with :class:`VersionConflict` if
    someone else wrote in between.

    A unit's place (``seq``) is its position in the session: places are 0,
    1, ... with no gaps (a delete moves the later units up), so a manager can
    read the newest places alone (``changes(..., rows=N)``) and older units by
    place or id (:meth:`pick`) when a call needs them.
    """

    def append(self, session: str, units: Sequence[NewUnit], *, log: Mapping[str, Any] | None = None,
               expect: int | None = None) -> Written: ...

    def load(self, session: str, *, offset: int = 0, limit: int | None = None) -> list[StoredUnit]: ...

    def changes(self, session: str, since: int = 0, *, rows: int | None = None) -> Changes: ...

    def pick(self, session: str, *, ids: Sequence[str] = (), places: Sequence[int] = ()) -> list[StoredUnit]: ...

    def version(self, session: str) -> int: ...

    def set_tier(
        self, session: str, ids: Sequence[str], tier: Tier, *, expect: int | None = None,
        log: Mapping[str, Any] | None = None,
    ) -> Written: ...

    def delete(self, session: str, ids: Sequence[str]) -> Written: ...

    def claim_unembedded(self, worker: str, *, limit: int = 64, lease: float = 60.0) -> list[tuple[str, StoredUnit]]: ...

    def set_embeddings(self, session: str, vectors: Mapping[str, Any], *, claimed_by: str | None = None) -> Written: ...

    def update_state(self, session: str, patch: Mapping[str, Any], *, expect: int | None = None) -> Written: ...

    def log_compaction(self, session: str, record: Mapping[str, Any]) -> None: ...

    def compaction_log(self, session: str) -> list[dict[str, Any]]: ...

    def search(
        self, session: str, query: str, query_embedding: np.ndarray | None, *, k: int, tier: Tier | None = None
    ) -> list[tuple[str, float]]: ...

    def sessions(self, prefix: str = "") -> list[SessionInfo]:
        """Every session whose name starts with ``prefix`` (all: ``""``), by name, read without the others'
        messages (a tenant's listing does not grow, nor take longer, with another tenant's)."""
        ...

    def delete_session(self, session: str) -> None: ...

    def close(self) -> None: ...


def retired_digest(session: str) -> str:
    """What a store keeps of a deleted session's name beside its id counter (so that the name written again
    never reuses an id): a digest, not the name."""
    return hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()


def check_prefix(prefix: object) -> str:
    """``prefix`` for :meth:`Store.sessions` (a string), or an :class:`~rdmem.errors.InvalidInput` naming it."""
    if not isinstance(prefix, str):
        raise InvalidInput(f"prefix must be a string, got {type(prefix).__name__}")
    return prefix


@functools.cache
def takes_prefix(store_type: type) -> bool:
    """Whether a store class's ``_sessions`` hook takes the prefix (one written before it did lists every
    session, and the base filters)."""
    return len(inspect.signature(store_type._sessions).parameters) > 1


def name_after(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` (not empty), by code point: those are
    exactly the strings ``s`` with ``prefix <= s < name_after(prefix)``. ``None``: none is above them all.

    >>> name_after("t/acme/"), name_after("a\U0010ffff"), name_after("\U0010ffff")
    ('t/acme0', 'b', None)
    """
    head = prefix.rstrip("\U0010ffff")
    if not head:
        return None
    code = ord(head[-1]) + 1
    return head[:-1] + chr(0xE000 if 0xD800 <= code < 0xE000 else code)
