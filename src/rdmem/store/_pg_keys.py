"""The PostgreSQL store's key table: the SQL behind :class:`~rdmem.store._keys.KeyStore` (the service's API keys)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._types import ApiKey

__all__ = ["PgKeys"]


class PgKeys:
    """:meth:`_insert_key`, :meth:`_keys`, :meth:`_revoke_key` and :meth:`_key_tenant` for
    :class:`~rdmem.store.postgres.PostgresStore`."""

    _run: Callable[..., Any]

    def _insert_key(self, key: ApiKey, digest: str) -> None:
        self._run(lambda conn: conn.execute(
            "INSERT INTO rdmem_keys (id, tenant, name, hash, created) VALUES (%s, %s, %s, %s, %s)",
            (key.id, key.tenant, key.name, digest, key.created)))

    def _keys(self) -> list[ApiKey]:
        rows = self._run(lambda conn: conn.execute(
            "SELECT id, tenant, name, created, revoked FROM rdmem_keys ORDER BY created, id").fetchall(), read=True)
        return [ApiKey(*r) for r in rows]

    def _revoke_key(self, key_id: str, when: float) -> bool:
        return self._run(lambda conn: conn.execute(
            "UPDATE rdmem_keys SET revoked = %s WHERE id = %s AND revoked IS NULL", (when, key_id)).rowcount > 0)

    def _key_tenant(self, digest: str) -> str | None:
        row = self._run(lambda conn: conn.execute(
            "SELECT tenant FROM rdmem_keys WHERE hash = %s AND revoked IS NULL", (digest,)).fetchone(), read=True)
        return row[0] if row else None
