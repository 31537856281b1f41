"""Stores: where units live. ``open_store(url)`` resolves ``memory://``, ``sqlite:///path`` and ``postgresql://``."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInput, InvalidType
from ._base import check_session, check_tenant
from ._keys import KeyStore, keeps_keys
from ._pg_pool import redact_url
from ._types import (
    ApiKey, Changes, DuplicateIdError, NewUnit, SessionInfo, Store, StoredUnit, StoreError, Tier, UnknownIdError,
    VersionConflict, Written,
)
from .memory import MemoryStore

__all__ = [
    "Store", "NewUnit", "StoredUnit", "Written", "Changes", "SessionInfo", "ApiKey", "check_session", "check_tenant",
    "StoreError", "DuplicateIdError", "UnknownIdError",
    "VersionConflict", "Tier", "MemoryStore", "KeyStore", "keeps_keys", "open_store", "check_store", "sqlite_path", "redact_url",
]

_SCHEMES = ("memory://", "sqlite:///", "postgresql://", "postgres://")


def open_store(url: str | Store | None, *, readonly: bool = False, create: bool = True) -> Store:
    """A store from a URL (``None`` or ``"memory://"``: in-memory) or a store object.

    ``readonly`` opens an SQLite file for reading only (it must exist; nothing is written to it).
    ``create=False`` refuses an SQLite file that does not exist yet (:class:`StoreError` "no such store
    file"), so a command that only reads or changes a store never leaves an empty one behind.
    """
    kind, target, options = _parse(url)
    if kind == "memory":
        return MemoryStore()
    if kind == "object":
        return target  # type: ignore[return-value]
    if kind == "sqlite":
        from .sqlite import SQLiteStore

        return SQLiteStore(target, readonly=readonly, create=create, **options)
    from .postgres import PostgresStore

    return PostgresStore(target)


def check_store(url: str | Store | None) -> None:
    """Refuse, without opening anything, a store argument :func:`open_store` would refuse for its form (a
    wrong type, an unknown scheme, an SQLite URL without a path, an unknown option)."""
    _parse(url)


def sqlite_path(url: str) -> str | None:
    """The file an ``sqlite:///`` URL names; ``None`` for any other store."""
    kind, target, _ = _parse(url)
    return target if kind == "sqlite" else None  # type: ignore[return-value]


def _parse(url: object) -> tuple[str, object, dict[str, Any]]:
    """``(kind, target, options)``: ``memory``, ``object`` (a store), ``sqlite`` (its path), ``postgres`` (its URL)."""
    if url is None or url == "memory://" or url == "memory":
        return "memory", None, {}
    if isinstance(url, Store):
        return "object", url, {}
    if not isinstance(url, str):
        raise InvalidType(f"store must be a URL string or a Store, got {type(url).__name__}")
    if url.startswith("sqlite:///"):
        path, _, params = url[len("sqlite:///"):].partition("?")
        if not path:
            raise InvalidInput(f"store URL {url!r} has no file path; use sqlite:///relative.db or sqlite:////abs/path.db")
        return "sqlite", path, _query_options(url, params, allowed=("synchronous",))
    if url.startswith(("postgresql://", "postgres://")):
        return "postgres", url, {}
    raise InvalidInput(f"unknown store URL {redact_url(url)!r}; use one of {', '.join(_SCHEMES)}")


def _query_options(url: str, params: str, *, allowed: tuple[str, ...]) -> dict[str, Any]:
    from urllib.parse import parse_qsl

    options = dict(parse_qsl(params, keep_blank_values=True))
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise InvalidInput(f"store URL {url!r}: unknown option {unknown[0]!r}; allowed: {', '.join(allowed)}")
    return options
