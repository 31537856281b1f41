"""One error family, mapped to JSON once: ``{"error": {"code", "message"}, "detail": message}``.

Routes raise :class:`ApiError` (or let the library raise its own errors);
the handlers here turn every one into a JSON answer with a 4xx status, and
anything unexpected into a logged 500 that says no more than it must.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..store import DuplicateIdError, StoreError

__all__ = ["ApiError", "install_error_handlers", "error_body"]

log = logging.getLogger("rdmem.server")

_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "request_too_large", 415: "unsupported_media_type",
          422: "invalid_request", 429: "too_many_requests", 502: "bad_upstream", 503: "unavailable"}


class ApiError(Exception):
    """An error a client caused (or may retry), with its HTTP status and a stable ``code``."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message
        self.headers = headers


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}, "detail": message}


def _json(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) if parts else "body"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _json(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        message = f"{_location(tuple(first.get('loc', ())))}: {first.get('msg', 'invalid')}"
        if first.get("type") == "json_invalid":
            message = "the body is not valid JSON"
        return _json(422, "invalid_request", message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "error"
        return _json(exc.status_code, _CODES.get(exc.status_code, "error"), message, getattr(exc, "headers", None))

    @app.exception_handler(DuplicateIdError)
    async def duplicate(request: Request, exc: DuplicateIdError) -> JSONResponse:
        return _json(409, "conflict", str(exc))

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> JSONResponse:
        log.error("store error on %s %s: %s", request.method, request.url.path, exc)
        return _json(503, "store_unavailable", "the store is unavailable; see the server's log")

    @app.exception_handler(ValueError)
    async def bad_value(request: Request, exc: ValueError) -> JSONResponse:
        return _json(400, "invalid_request", str(exc))

    @app.exception_handler(TypeError)
    async def bad_type(request: Request, exc: TypeError) -> JSONResponse:
        return _json(400, "invalid_request", str(exc))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:  # pragma: no cover - a bug
        log.exception("internal error on %s %s", request.method, request.url.path)
        return _json(500, "internal_error", "internal error; see the server's log")
