"""One error family, mapped to JSON once: ``{"error": {"code", "message"}, "detail": message}``.

Whose fault an error is decides its status (:mod:`rdmem.errors`). Routes
raise :class:`ApiError`; of the library's errors only what the caller can
fix (:class:`~rdmem.errors.InvalidInput`) is a 4xx: 400, or 409 for an id
the session already has and 404 for one it does not. A store that cannot be
used is a 503 and a missing optional part a 501. Anything else is a bug: a
500 with an error id, its traceback logged under that id, and nothing of
its message sent to the client.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import (DuplicateIdError, InvalidInput, MissingDependency, StoreError, UnknownIdError, VersionConflict,
                      WriteOutcomeUnknown)
from ..sessions import as_tenant_sees

__all__ = ["ApiError", "error_body", "install_error_handlers", "ERROR_ID_HEADER"]

#: The header (and ``error.id`` field) of a 500 or 503: the id its log line carries.
ERROR_ID_HEADER = "X-Rdmem-Error-Id"

log = logging.getLogger("rdmem.server")

_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "request_too_large", 415: "unsupported_media_type",
          421: "misdirected_request", 422: "invalid_request", 429: "too_many_requests", 502: "bad_upstream",
          503: "unavailable"}


#: The OpenAI APIs the proxy does not serve (a 404 there says what it serves).
_OPENAI_APIS = tuple(f"/v1/{api}" for api in (
    "responses", "embeddings", "completions", "chat/", "audio/", "images/", "files", "batches", "moderations",
    "assistants", "threads", "fine_tuning", "realtime", "vector_stores", "uploads", "conversations"))


class ApiError(Exception):
    """An error a client caused (or may retry), with its HTTP status and a stable ``code``."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message
        self.headers = headers


def error_body(code: str, message: str, error_id: str | None = None) -> dict[str, Any]:
    error = {"code": code, "message": message} if error_id is None else {"code": code, "message": message, "id": error_id}
    return {"error": error, "detail": message}


def _json(status: int, code: str, message: str, headers: dict[str, str] | None = None,
          error_id: str | None = None) -> JSONResponse:
    if error_id is not None:
        headers = {**(headers or {}), ERROR_ID_HEADER: error_id}
    return JSONResponse(error_body(code, message, error_id), status_code=status, headers=headers)


def store_unavailable(request: Request, exc: StoreError) -> tuple[str, str]:
    """Log a store failure under a new error id; the id and what the client is told (a 503: retry soon, or, for a
    write whose outcome is unknown, read first: a retry of a write that landed stores it twice)."""
    error_id = _new_error_id()
    log.error("store error %s on %s %s: %s", error_id, request.method, request.url.path, exc)
    if isinstance(exc, WriteOutcomeUnknown):
        return error_id, (f"the store went away during the write (error {error_id}; see the server's log): it may "
                          f"have been stored; read before sending it again")
    return error_id, f"the store is unavailable (error {error_id}; see the server's log)"


def _new_error_id() -> str:
    return uuid.uuid4().hex[:16]


class InternalErrorMiddleware:
    """What no handler mapped is a bug: a 500 with an error id, the traceback logged once under that id.

    (Starlette's own handler for ``Exception`` answers too, but then raises
    the error again, so the server logs a second traceback without the id.)
    A failure after the answer started (a stream) is logged the same way;
    the client's connection is then cut, as nothing else can be sent.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            error_id = _new_error_id()
            log.exception("internal error %s on %s %s", error_id, scope.get("method"), scope.get("path"))
            if not started:
                response = _json(500, "internal_error", f"internal error {error_id}; see the server's log",
                                 error_id=error_id)
                await response(scope, receive, send)


_UNION_STEP = re.compile(r"^[\w-]+\[.*\]$")  # pydantic's name for a branch of a union: 'list[...]', 'tagged-union[...]'
_ROLES = {"system", "developer", "user", "assistant", "tool"}  # a message's discriminator: never a field's name
_PARTS = {"text", "image_url", "input_audio", "file", "refusal"}  # a content part's: also fields, so after an index
_BRANCHES = {"str", "int", "float", "bool", "none", "dict"}  # the plain branches of a union (content: str | list)


def _location(loc: tuple[Any, ...]) -> str:
    """``('body', 'messages', 'list[...]', 0, 'user', 'content', 'str')`` -> ``messages[0].content``: the path a
    client wrote, without pydantic's union branches and the discriminator values it adds."""
    out = ""
    after_index = False
    if loc and loc[0] in ("body", "query", "path", "header"):  # where it came from; a field may be named 'query'
        loc = loc[1:]
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            after_index = True
            continue
        if _UNION_STEP.match(str(part)) or part in _ROLES or part in _BRANCHES or (after_index and part in _PARTS):
            after_index = False
            continue
        out += f".{part}" if out else str(part)
        after_index = False
    return out or "body"


def _most_specific(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """Of the errors a union reports for every branch, the one that got furthest into the input."""
    return max(errors, key=lambda e: len(e.get("loc", ())), default={"loc": (), "msg": "invalid request"})


def _allowed(request: Request) -> list[str]:
    """Every method some route serves at this request's path."""
    from starlette.routing import Match

    methods: set[str] = set()
    for route in request.app.router.routes:
        if route.matches({**request.scope, "method": "GET"})[0] != Match.NONE or \
                route.matches({**request.scope, "method": "POST"})[0] != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _said(request: Request, exc: Exception) -> str:
    """``exc``'s message with the caller's session named as the caller names it (its tenant: ``tenant_of``)."""
    return as_tenant_sees(str(exc), getattr(request.state, "rdmem_tenant", None))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _json(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = _most_specific(list(exc.errors()))
        text = str(first.get("msg", "invalid")).removeprefix("Value error, ")  # a validator's own words
        message = f"{_location(tuple(first.get('loc', ())))}: {text}"
        if first.get("type") == "json_invalid":
            message = "the body is not valid JSON"
        return _json(422, "invalid_request", message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "error"
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # Starlette names only the first route's methods; a path may have several
            headers = {**(headers or {}), "Allow": ", ".join(_allowed(request))}
        if exc.status_code == 404 and message == "Not Found":  # no route: say what is served
            path = request.url.path
            message = f"rdmem serves no {request.method} {path}"
            if path.startswith(_OPENAI_APIS):  # the Responses API (the Agents SDK's default), embeddings, ...
                message += (": its OpenAI-compatible proxy serves POST /v1/chat/completions and GET /v1/models[/id] "
                            "(rdmem serve --upstream); send the model's other APIs to the model itself")
        return _json(exc.status_code, _CODES.get(exc.status_code, "error"), message, headers)

    # Starlette picks the handler of the most specific class in the error's MRO: DuplicateIdError is a
    # StoreError and an InvalidInput, and its own handler wins over both.
    # The store names a tenant's session by its store name (t/<tenant>/<name>): said as the caller names it.
    @app.exception_handler(InvalidInput)
    async def invalid_input(request: Request, exc: InvalidInput) -> JSONResponse:
        return _json(400, "invalid_request", _said(request, exc))

    @app.exception_handler(DuplicateIdError)
    async def duplicate(request: Request, exc: DuplicateIdError) -> JSONResponse:
        return _json(409, "conflict", _said(request, exc))

    @app.exception_handler(UnknownIdError)
    async def unknown_id(request: Request, exc: UnknownIdError) -> JSONResponse:
        return _json(404, "not_found", _said(request, exc))

    @app.exception_handler(VersionConflict)
    async def conflict(request: Request, exc: VersionConflict) -> JSONResponse:
        # The manager retries conflicts itself; one that escapes means the session kept changing: retry later.
        return _json(409, "conflict", _said(request, exc))

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> JSONResponse:
        error_id, message = store_unavailable(request, exc)
        return _json(503, "store_unavailable", message, headers={"Retry-After": "1"}, error_id=error_id)

    @app.exception_handler(WriteOutcomeUnknown)
    async def outcome_unknown(request: Request, exc: WriteOutcomeUnknown) -> JSONResponse:
        error_id, message = store_unavailable(request, exc)  # no Retry-After: read before sending it again
        return _json(503, "write_outcome_unknown", message, error_id=error_id)

    @app.exception_handler(MissingDependency)
    async def missing_dependency(request: Request, exc: MissingDependency) -> JSONResponse:
        # An optional part the request needs is not installed (the embedding model of a policy): say which.
        log.error("missing dependency on %s %s: %s", request.method, request.url.path, exc)
        return _json(501, "missing_dependency", str(exc))

    app.add_middleware(InternalErrorMiddleware)  # the first added is the innermost: metrics count its 500s

