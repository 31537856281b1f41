"""The service's API keys (:class:`KeyStore`), kept in a store's key table: a tenant's name and a hash of each
secret, never the secret; and the name rules every store checks."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from typing import Any

from ..errors import InvalidInput, InvalidType
from ._types import ApiKey

__all__ = ["KeyStore", "keeps_keys", "check_name", "check_tenant", "key_hash", "TENANT", "KEYLESS_TENANT"]

#: A tenant's name: what a key belongs to and what the service scopes sessions by.
TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")  # whole names only: fullmatch
_KEY_PREFIX = "rdmem_"
#: The tenant of every caller of a server without keys; no key is made for it.
KEYLESS_TENANT = "default"


def check_tenant(tenant: object) -> str:
    if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
        raise InvalidInput(f"tenant must be 1-64 letters, digits, '_', '.' or '-' (not first), got {tenant!r}")
    return tenant


def check_name(name: str, what: str) -> None:
    """Ids and names are keys to find things by, not text to keep: a NUL in one is refused on every store
    (PostgreSQL's ``text`` cannot hold it; what a message *says* may, see :func:`~._base.searchable`)."""
    if "\x00" in name:
        raise InvalidInput(f"{what} must not contain a NUL character, got {name!r}")


def key_hash(secret: str) -> str:
    """What a store keeps of a key: its SHA-256 (the secret is 256 random bits, so a fast hash is enough)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class KeyStore:
    """The service's API keys, kept in a store's key table: who may call ``rdmem serve``, and as which tenant.

    Only the server and ``rdmem keys`` use it; a session never reads a key.
    ``store`` keeps the keys through four hooks, ``_insert_key``, ``_keys``,
    ``_revoke_key`` and ``_key_tenant`` (every built-in store has them).

    >>> from rdmem.store import MemoryStore
    >>> keys = KeyStore(MemoryStore())
    >>> key, secret = keys.create_key("acme", name="ci")
    >>> keys.key_tenant(secret), keys.revoke_key(key.id), keys.key_tenant(secret), keys.has_keys()
    ('acme', True, None, False)
    """

    def __init__(self, store: Any) -> None:
        if not keeps_keys(store):
            raise InvalidType(f"{type(store).__name__} keeps no API keys (it has no {', '.join(_HOOKS)}); "
                              "a server with keys needs a built-in store (memory, sqlite, postgresql)")
        self.store = store

    def create_key(self, tenant: str, *, name: str = "") -> tuple[ApiKey, str]:
        """A new API key for ``tenant``: the listing record and the secret (shown once, stored hashed). Not for
        ``default``, the tenant of a server without keys: a key must not open what anyone could write there."""
        check_tenant(tenant)
        if tenant == KEYLESS_TENANT:
            raise InvalidInput(f"tenant {KEYLESS_TENANT!r} is a server's without keys (anyone who reaches it): "
                               "give the key's tenant another name")
        if not isinstance(name, str) or len(name) > 200:
            raise InvalidInput(f"name must be a string of at most 200 characters, got {name!r}")
        check_name(name, "name")
        secret = _KEY_PREFIX + secrets.token_urlsafe(32)
        key = ApiKey("key_" + secrets.token_hex(6), tenant, name, time.time())
        self.store._insert_key(key, key_hash(secret))
        return key, secret

    def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key (of ``tenant``), oldest first, revoked ones too."""
        if tenant is not None:
            check_tenant(tenant)
        return [k for k in self.store._keys() if tenant is None or k.tenant == tenant]

    def revoke_key(self, key_id: str) -> bool:
        """Revoke a key at once (``False`` if there is no such key, or it was revoked already)."""
        if not isinstance(key_id, str) or not key_id:
            raise InvalidInput(f"key_id must be a non-empty string, got {key_id!r}")
        if "\x00" in key_id:  # no key has one (ids are hex): the same answer from every store
            return False
        return bool(self.store._revoke_key(key_id, time.time()))

    def key_tenant(self, secret: str) -> str | None:
        """The tenant of a valid (not revoked) key, else ``None``."""
        if not isinstance(secret, str) or not secret.startswith(_KEY_PREFIX) or len(secret) > 200:
            return None
        tenant: str | None = self.store._key_tenant(key_hash(secret))
        return tenant

    def valid_digest(self, secret: str) -> str | None:
        """The digest the store keeps of a valid key ``secret``, else ``None`` (the inspector signs a browser in
        with it: :class:`rdmem.server.auth.SignIns`)."""
        return key_hash(secret) if self.key_tenant(secret) is not None else None

    def digest_tenant(self, digest: str) -> str | None:
        """The tenant of the valid key whose digest is ``digest`` (64 hex digits), else ``None``."""
        if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
            return None
        tenant: str | None = self.store._key_tenant(digest)
        return tenant

    def has_keys(self, *, revoked_since: float | None = None) -> bool:
        """Does any valid key exist (then the service asks every caller for one)? With ``revoked_since`` (a
        time), a key revoked since then counts too: a server that started before it has seen keys in use."""
        return any(k.revoked is None or (revoked_since is not None and k.revoked >= revoked_since)
                   for k in self.store._keys())


_HOOKS = ("_insert_key", "_keys", "_revoke_key", "_key_tenant")


def keeps_keys(store: object) -> bool:
    """Whether ``store`` has the hooks a :class:`KeyStore` keeps keys through."""
    return all(callable(getattr(store, h, None)) for h in _HOOKS)
