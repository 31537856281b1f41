"""Who is looking: the inspector's caller is a tenant by the same keys and rules as the API's.

A browser cannot add ``Authorization`` to a link it follows, so the sign-in
page hands the key to the server once (a JSON request) and gets it back as a
cookie that only the server can read (``HttpOnly``), sent only to ``/ui``
and only by pages of this server (``SameSite=Strict``). Every request looks
the key up again, so a revoked key stops working at once. Requests that
change something (sign-in, sign-out, delete) must be JSON from this origin:
no other site's form or script can make them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Response

from ..auth import RDMEM_KEY_HEADER, tenant_of
from ..errors import ApiError

__all__ = ["COOKIE", "UiTenant", "ui_tenant", "same_origin", "set_key", "clear_key"]

COOKIE = "rdmem_ui_key"


def ui_tenant(request: Request) -> str:
    """The caller's tenant from ``X-Rdmem-Key``, ``Authorization: Bearer`` or the sign-in cookie (401 without
    a valid key on a server that has keys)."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    secret = (request.headers.get(RDMEM_KEY_HEADER) or (credentials.strip() if scheme.lower() == "bearer" else None)
              or request.cookies.get(COOKIE))
    return tenant_of(request, secret)


UiTenant = Annotated[str, Depends(ui_tenant)]


def same_origin(request: Request) -> None:
    """Refuse a request that changes something unless it is JSON sent by a page of this server."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(415, f"the inspector's actions take application/json, got {kind or 'no content type'!r}")
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.headers.get('host', '')}":
        raise ApiError(403, f"a request from another origin ({origin}) may not change anything here")
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        raise ApiError(403, "a request from another site may not change anything here")


def set_key(request: Request, response: Response, secret: str) -> None:
    response.set_cookie(COOKIE, secret, path=_path(request), httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")


def clear_key(request: Request, response: Response) -> None:
    response.delete_cookie(COOKIE, path=_path(request), httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")


def _path(request: Request) -> str:
    return request.scope.get("root_path", "") + "/ui"
