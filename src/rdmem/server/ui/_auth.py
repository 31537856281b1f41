"""Who is looking: the inspector's caller is a tenant by the same keys and rules as the API's.

A browser cannot add ``Authorization`` to a link it follows, so the sign-in
page hands the key to the server once (a JSON request) and gets back a
cookie that pages cannot read (``HttpOnly``), sent only to ``/ui`` and only
by pages of this site (``SameSite=Strict``). Browsers do not keep a host's
cookies apart by port, so another server on the same host (another rdmem, a
dev server) sees it: the cookie is therefore named after this server's port
(two servers never overwrite each other's) and holds a sign-in token signed
by this server (:class:`~rdmem.server.auth.SignIns`), which signs in to the
inspector only, for 12 hours at most, and is no API key. Every request looks the
key up again, so a revoked key stops working at once. Requests that change
something (sign-in, sign-out, delete) must be JSON from this origin: no
other site's form or script can make them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Response

from ..auth import RDMEM_KEY_HEADER, SIGN_IN_S, tenant_of
from ..errors import ApiError

__all__ = ["COOKIE", "UiTenant", "cookie_name", "ui_tenant", "same_origin", "set_key", "clear_key"]

COOKIE = "rdmem_ui"


def cookie_name(request: Request) -> str:
    """The sign-in cookie's name on this server: ``rdmem_ui`` and the port the browser reached it on."""
    port = request.url.port
    return f"{COOKIE}_{port}" if port else COOKIE


def ui_tenant(request: Request) -> str:
    """The caller's tenant from ``X-Rdmem-Key``, ``Authorization: Bearer`` or the sign-in cookie (401 without
    a valid key on a server that has keys)."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    secret = request.headers.get(RDMEM_KEY_HEADER) or (credentials.strip() if scheme.lower() == "bearer" else None)
    return tenant_of(request, secret, token=None if secret else request.cookies.get(cookie_name(request)))


UiTenant = Annotated[str, Depends(ui_tenant)]


def same_origin(request: Request) -> None:
    """Refuse a request that changes something unless it is JSON sent by a page of this server."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(415, f"the inspector's actions take application/json, got {kind or 'no content type'!r}")
    origin, host = request.headers.get("origin"), request.headers.get("host", "")
    # An https page of this host is this server's behind a proxy that ends TLS and does not say so (nginx sets no
    # X-Forwarded-Proto unless told to, and uvicorn trusts one from 127.0.0.1 only): the request arrives as http.
    if origin is not None and origin not in (f"{request.url.scheme}://{host}", f"https://{host}"):
        raise ApiError(403, f"a request from another origin ({origin}) may not change anything here")
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        raise ApiError(403, "a request from another site may not change anything here")


def set_key(request: Request, response: Response, secret: str) -> None:
    """Sign the browser in with a valid key ``secret``: the cookie holds its sign-in token, never the key."""
    token = request.app.state.rdmem.sign_ins.token(secret)
    if token is None:  # checked by the caller; revoked in between
        raise ApiError(401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    response.set_cookie(cookie_name(request), token, path=_path(request), httponly=True, samesite="strict",
                        secure=_secure(request), max_age=SIGN_IN_S)


def clear_key(request: Request, response: Response) -> None:
    response.delete_cookie(cookie_name(request), path=_path(request), httponly=True, samesite="strict",
                           secure=_secure(request))


def _secure(request: Request) -> bool:
    """Whether the browser reached this server over https: directly, or through a proxy that ends TLS (the page
    that signs in is https, :func:`same_origin`): its cookie is then ``Secure``, never sent over plain http."""
    return request.url.scheme == "https" or request.headers.get("origin", "").startswith("https://")


def _path(request: Request) -> str:
    return request.scope.get("root_path", "") + "/ui"
