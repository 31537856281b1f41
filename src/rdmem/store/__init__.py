"""Stores: where units live. ``open_store(url)`` resolves ``memory://``, ``sqlite:///path`` and ``postgresql://``."""

from __future__ import annotations

from typing import Any

from ._base import check_tenant
from ._types import (
    ApiKey, Changes, DuplicateIdError, NewUnit, SessionInfo, Store, StoredUnit, StoreError, Tier, UnknownIdError,
    VersionConflict, Written,
)
from .memory import MemoryStore

__all__ = [
    "Store", "NewUnit", "StoredUnit", "Written", "Changes", "SessionInfo", "ApiKey", "check_tenant",
    "StoreError", "DuplicateIdError", "UnknownIdError",
    "VersionConflict", "Tier", "MemoryStore", "open_store",
]

_SCHEMES = ("memory://", "sqlite:///", "postgresql://", "postgres://")


def open_store(url: str | Store | None, *, readonly: bool = False) -> Store:
    """A store from a URL (``None`` or ``"memory://"``: in-memory) or a store object.

    ``readonly`` opens an SQLite file for reading only (it must exist; nothing is written to it).
    """
    if url is None or url == "memory://" or url == "memory":
        return MemoryStore()
    if isinstance(url, Store):
        return url
    if not isinstance(url, str):
        raise TypeError(f"store must be a URL string or a Store, got {type(url).__name__}")
    if url.startswith("sqlite:///"):
        from .sqlite import SQLiteStore

        path, _, params = url[len("sqlite:///"):].partition("?")
        if not path:
            raise ValueError(f"store URL {url!r} has no file path; use sqlite:///relative.db or sqlite:////abs/path.db")
        options = _query_options(url, params, allowed=("synchronous",))
        return SQLiteStore(path, readonly=readonly, **options)
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(f"unknown store URL {url!r}; use one of {', '.join(_SCHEMES)}")


def _query_options(url: str, params: str, *, allowed: tuple[str, ...]) -> dict[str, Any]:
    from urllib.parse import parse_qsl

    options = dict(parse_qsl(params, keep_blank_values=True))
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"store URL {url!r}: unknown option {unknown[0]!r}; allowed: {', '.join(allowed)}")
    return options
