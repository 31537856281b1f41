"""The SQLite store's key table: the SQL behind :class:`~rdmem.store._keys.KeyStore` (the service's API keys)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ._types import ApiKey

__all__ = ["SQLiteKeys"]


class SQLiteKeys:
    """:meth:`_insert_key`, :meth:`_keys`, :meth:`_revoke_key` and :meth:`_key_tenant` for
    :class:`~rdmem.store.sqlite.SQLiteStore`."""

    _write: Callable[..., Any]
    _reading: Callable[..., AbstractContextManager[sqlite3.Connection]]

    def _insert_key(self, key: ApiKey, digest: str) -> None:
        self._write("", lambda conn: conn.execute(
            "INSERT INTO keys (id, tenant, name, hash, created) VALUES (?, ?, ?, ?, ?)",
            (key.id, key.tenant, key.name, digest, key.created)))

    def _keys(self) -> list[ApiKey]:
        with self._reading() as db:
            rows = db.execute("SELECT id, tenant, name, created, revoked FROM keys ORDER BY created, id").fetchall()
        return [ApiKey(*r) for r in rows]

    def _revoke_key(self, key_id: str, when: float) -> bool:
        return self._write("", lambda conn: conn.execute(
            "UPDATE keys SET revoked = ? WHERE id = ? AND revoked IS NULL", (when, key_id)).rowcount > 0)

    def _key_tenant(self, digest: str) -> str | None:
        with self._reading() as db:
            row = db.execute("SELECT tenant FROM keys WHERE hash = ? AND revoked IS NULL", (digest,)).fetchone()
        return row[0] if row else None
