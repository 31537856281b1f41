"""The inspector's three actions, as JSON requests from its own pages: sign in, sign out, delete.

A delete calls the memory API's own function (:func:`~rdmem.server.routes_memory.remove_message`,
:func:`~rdmem.server.routes_memory.remove_session`) for the caller's tenant: the same rules as
``DELETE /v1/sessions/...``, and the same answer when it refuses (404 for another tenant's session).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..auth import tenant_of
from ..routes_memory import remove_message, remove_session
from ..sessions import MAX_SESSION_CHARS
from ._auth import UiTenant, clear_key, same_origin, set_key

__all__ = ["router"]

router = APIRouter(prefix="/ui/api", include_in_schema=False, dependencies=[Depends(same_origin)])


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=1000)


class Delete(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session: str = Field(min_length=1, max_length=MAX_SESSION_CHARS)
    id: str | None = Field(None, min_length=1, description="a message's id; none: the whole session")


@router.post("/login")
def sign_in(body: SignIn, request: Request) -> Response:
    """Check a key (401 if it is not valid) and keep it in the inspector's cookie."""
    tenant = tenant_of(request, body.key)
    response = JSONResponse({"tenant": tenant})
    set_key(request, response, body.key)
    return response


@router.post("/logout")
def sign_out(request: Request) -> Response:
    response = Response(status_code=204)
    clear_key(request, response)
    return response


@router.post("/delete")
def delete(body: Delete, tenant: UiTenant, request: Request) -> Response:
    """Delete a message, or a whole session, for good."""
    state = request.app.state.rdmem
    if body.id is None:
        remove_session(state, tenant, body.session)
    else:
        remove_message(state, tenant, body.session, body.id)
    return Response(status_code=204)
