"""Stores: where units live. ``open_store(url)`` resolves ``memory://``, ``sqlite:///path`` and ``postgresql://``."""

from __future__ import annotations

from ._base import SessionInfo, Store, StoredUnit, StoreError, Tier
from .memory import MemoryStore

__all__ = ["Store", "StoredUnit", "SessionInfo", "StoreError", "Tier", "MemoryStore", "open_store"]

_SCHEMES = ("memory://", "sqlite:///", "postgresql://", "postgres://")


def open_store(url: str | Store | None) -> Store:
    """A store from a URL (``None`` or ``"memory://"``: in-memory) or a store object."""
    if url is None or url == "memory://" or url == "memory":
        return MemoryStore()
    if isinstance(url, Store):
        return url
    if not isinstance(url, str):
        raise TypeError(f"store must be a URL string or a Store, got {type(url).__name__}")
    if url.startswith("sqlite:///"):
        from .sqlite import SQLiteStore

        return SQLiteStore(url[len("sqlite:///"):])
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(f"unknown store URL {url!r}; use one of {', '.join(_SCHEMES)}")
