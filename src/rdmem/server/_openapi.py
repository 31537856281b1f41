"""The OpenAPI document says what the server does: its error shape and this server's limits.

FastAPI documents its own 422 body (``HTTPValidationError``) on every route,
but every error here is an ``ErrorResponse``; and the limits a server is
started with (messages per request, message size, budget, page size) and
the policies registered are settings, so they are written into the document when it is first asked for.
Generated clients and schema-driven tests then know what will be refused.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from ..policies import POLICIES
from .settings import ServerSettings

__all__ = ["install_openapi"]

_ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}
_MESSAGE_SCHEMAS = ("PlainMessage", "AssistantMessage", "ToolMessage")


def install_openapi(app: FastAPI, settings: ServerSettings) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            _errors(doc)
            _bare_messages(doc)
            _limits(doc, settings)
            for schema in ("ContextRequest", "ExplainRequest"):  # the policies registered when first asked
                _bound(doc["components"]["schemas"].get(schema, {}).get("properties", {}).get("policy"), "string",
                       enum=sorted(POLICIES))
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _errors(doc: dict[str, Any]) -> None:
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            answer = operation.get("responses", {}).get("422")
            if answer is not None:
                answer["content"] = {"application/json": {"schema": _ERROR_REF}}
                answer["description"] = "the request does not match the schema"
    schemas = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)


def _bare_messages(doc: dict[str, Any]) -> None:
    """``POST .../messages`` also takes the bare message or list (``AddRequest`` takes them as ``messages``)."""
    wrapped = doc.get("components", {}).get("schemas", {}).get("AddRequest", {}).get("properties", {}).get("messages")
    for operations in doc.get("paths", {}).values():
        operation = operations.get("post", {})
        if operation.get("operationId") == "add_messages" and wrapped is not None:
            media = operation["requestBody"]["content"]["application/json"]
            media["schema"] = {"anyOf": [media["schema"], *wrapped.get("anyOf", [wrapped])]}


def _bound(prop: dict[str, Any] | None, kind: str, **limits: Any) -> None:
    """Set ``limits`` on ``prop`` or on its ``anyOf`` branch of JSON type ``kind``."""
    if prop is None:
        return
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") == kind:
            branch.update(limits)


def _limits(doc: dict[str, Any], s: ServerSettings) -> None:
    schemas = doc.get("components", {}).get("schemas", {})

    def prop(schema: str, name: str) -> dict[str, Any] | None:
        return schemas.get(schema, {}).get("properties", {}).get(name)

    for schema in ("AddRequest", "Mem0Add"):
        _bound(prop(schema, "messages"), "array", maxItems=s.max_messages)
    for schema in (*_MESSAGE_SCHEMAS, "TextPart", "ToolCall", "FunctionCall"):  # every string (rdmem.limits)
        for value in schemas.get(schema, {}).get("properties", {}).values():
            _bound(value, "string", maxLength=s.max_message_chars)
    for schema in _MESSAGE_SCHEMAS:  # a message's id holds no NUL, on every store (a tool call's may)
        _bound(prop(schema, "id"), "string", pattern=r"^[^\x00]*$")
    for schema in ("ContextRequest", "ExplainRequest"):
        _bound(prop(schema, "budget"), "integer", maximum=s.max_budget)
    _bound(prop("SearchRequest", "k"), "integer", maximum=s.max_page)
    for name in ("top_k", "limit"):
        _bound(prop("Mem0Search", name), "integer", maximum=s.max_page)
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            for param in operation.get("parameters", []):
                if param.get("in") == "query" and param.get("name") in ("limit", "top_k"):
                    _bound(param.get("schema"), "integer", maximum=min(s.max_page, 1000))
