"""Who is calling: an API key names a tenant; one dependency answers it for every route.

A key travels as ``Authorization: Bearer <key>``, or (the proxy's routes,
where ``Authorization`` is the client's key for the upstream model) as
``X-Rdmem-Key: <key>``. A store with no valid key serves the tenant
``default`` to everyone (the server then listens on loopback only); once a key
exists, a request without a valid one is answered 401, also after every key was
revoked, until the server restarts. Keys are looked up on every request, so a
revoked key stops working at once.

The proxy never waits on memory for the model: when the store cannot say
whose key it is within ``memory_timeout`` (down, locked), its tenant is
``None`` and the request goes upstream unchanged, without memory (the
upstream still checks the client's own ``Authorization``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from ..store._keys import KEYLESS_TENANT
from .errors import ApiError

__all__ = ["Tenant", "ProxyTenant", "DEFAULT_TENANT", "RDMEM_KEY_HEADER", "tenant_of", "SignIns", "UI_SECRET_ENV",
           "SIGN_IN_S"]

log = logging.getLogger("rdmem.server")

DEFAULT_TENANT = KEYLESS_TENANT
RDMEM_KEY_HEADER = "X-Rdmem-Key"

_bearer = HTTPBearer(auto_error=False, description="an rdmem API key (rdmem keys create)")
_header = APIKeyHeader(name=RDMEM_KEY_HEADER, auto_error=False,
                       description="an rdmem API key, where Authorization carries the upstream model's key")


def tenant_of(request: Request, secret: str | None, *, token: str | None = None) -> str:
    """The caller's tenant (a 401 without a valid key on a keyed server), counted against its request rate.
    ``token``: the inspector's sign-in cookie instead of a key (:class:`SignIns`)."""
    state = request.app.state.rdmem
    tenant = _lookup(state, secret, token=token)
    request.state.rdmem_tenant = tenant  # an error's message names the caller's sessions as it names them
    state.limiter.request(tenant)
    return tenant


def _lookup(state: Any, secret: str | None, how: str = "Authorization: Bearer <key>", *,
            token: str | None = None) -> str:
    if secret or token:
        tenant = state.keys.key_tenant(secret) if secret else state.sign_ins.tenant(token)
        if tenant is None:
            raise ApiError(401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
        state.seen_keys = True  # keyed from now on, even once every key is revoked
        return tenant
    if state.keyed():
        raise ApiError(401, f"an API key is required: {how}", headers={"WWW-Authenticate": "Bearer"})
    return DEFAULT_TENANT


def _tenant(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header: Annotated[str | None, Security(_header)],
) -> str:
    return tenant_of(request, header or (bearer.credentials if bearer is not None else None))


#: The proxy's key lookups run here, not in the event loop's default threads, where a busy server's memory work
#: (storing and compacting long histories) queued them past ``memory_timeout``: a request with an invalid key was
#: then forwarded as if the store could not say whose key it was.
_KEY_LOOKUPS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rdmem-keys")


async def _proxy_tenant(request: Request, header: Annotated[str | None, Security(_header)]) -> str | None:
    """The proxy's caller: the rdmem key in its own header (``Authorization`` goes to the upstream); ``None``
    when the store does not answer within ``memory_timeout`` (the request then goes on without memory)."""
    state = request.app.state.rdmem
    lookup = asyncio.get_running_loop().run_in_executor(  # threads of its own: not queued behind memory's work
        _KEY_LOOKUPS, _lookup, state, header, f"{RDMEM_KEY_HEADER}: <key> (Authorization goes to the model)")
    try:
        tenant = await asyncio.wait_for(lookup, state.settings.memory_timeout)
    except ApiError:
        raise
    except Exception as exc:  # the store is down or locked: the model is reached without memory
        log.warning("rdmem proxy: cannot check the rdmem key (%s: %s); forwarding without memory",
                    type(exc).__name__, str(exc) or f"no answer within {state.settings.memory_timeout} s")
        return None
    state.limiter.request(tenant)
    return tenant


Tenant = Annotated[str, Depends(_tenant)]
ProxyTenant = Annotated[str | None, Depends(_proxy_tenant)]


#: The variable that holds the secret the inspector's sign-ins are signed with (``rdmem serve`` sets one for its
#: processes if it is not set; set it alike on every host behind one name).
UI_SECRET_ENV = "RDMEM_UI_SECRET"
#: How long a sign-in to the inspector lasts, seconds.
SIGN_IN_S = 12 * 3600


_TOKEN = re.compile(r"ui_([0-9a-f]{64})\.([0-9]{1,12})\.([0-9a-f]{64})", re.ASCII)


class SignIns:
    """The inspector's sign-in tokens: ``ui_<the key's digest>.<expiry>.<MAC>``, the MAC (HMAC-SHA256) under this
    server's secret (``$RDMEM_UI_SECRET``; without it, one made for this process). A token is no API key and
    names no key: the digest is what the store keeps, which alone (a backup, a read-only database user) signs in
    nowhere; a token expires after :data:`SIGN_IN_S` and with its key."""

    def __init__(self, keys: Any, secret: str | None = None) -> None:
        self.keys = keys
        given = secret if secret is not None else os.environ.get(UI_SECRET_ENV)
        if not given and keys.has_keys():
            log.warning("rdmem serve: no %s: the inspector's sign-ins hold in this process only (set it alike for "
                        "every process and host of this server)", UI_SECRET_ENV)
        self._secret = given.encode() if given else secrets.token_bytes(32)

    def token(self, key: str, *, now: float | None = None) -> str | None:
        """A sign-in token for the valid key ``key``, else ``None``."""
        digest = self.keys.valid_digest(key)
        if digest is None:
            return None
        body = f"{digest}.{int((time.time() if now is None else now) + SIGN_IN_S)}"
        return f"ui_{body}.{self._mac(body)}"

    def tenant(self, token: str | None) -> str | None:
        """The tenant of a token this server signed, not expired, whose key is still valid; else ``None``."""
        parts = _TOKEN.fullmatch(token) if isinstance(token, str) else None
        if parts is None:
            return None
        digest, expiry, mac = parts.groups()
        if not (int(expiry) > time.time() and hmac.compare_digest(mac, self._mac(f"{digest}.{expiry}"))):
            return None
        tenant: str | None = self.keys.digest_tenant(digest)
        return tenant

    def _mac(self, body: str) -> str:
        return hmac.new(self._secret, body.encode(), hashlib.sha256).hexdigest()
