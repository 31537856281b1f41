"""The limits (:mod:`rdmem.limits`) at the HTTP doors: a JSON body parsed within them, before pydantic.

The body's size is refused from ``Content-Length`` or while it is read
(:class:`~rdmem.server.metrics.BodyLimitMiddleware`, 413). The routes of
``/v1`` and of the mem0 subset use :class:`LimitedRoute`: their body is
parsed by :func:`rdmem.limits.load_json`, which stops at the first message
over a limit (a 400 naming the limit and the field), so a body of 500,000
tiny messages is refused after the 1,001st, never built whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from ..errors import InvalidInput
from ..limits import load_json
from .errors import ApiError

__all__ = ["LimitedRoute"]


class _LimitedRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            raw = await self.body()
            try:
                self._json = load_json(raw, self.app.state.rdmem.settings)
            except UnicodeDecodeError as exc:
                raise json.JSONDecodeError("the body is not UTF-8", "", exc.start) from None
            except InvalidInput as exc:  # FastAPI passes an HTTPException on as it is (anything else: a bare 400)
                raise HTTPException(400, str(exc)) from None
        return self._json


class LimitedRoute(APIRoute):
    """A route whose JSON body is parsed within the server's limits, and whose query string holds only the
    parameters it takes: an unknown one (``userId`` for ``user_id``) is a 422 naming it, never ignored (a
    ``DELETE /memories?agent_id=a&userId=alice`` deleted every user's memories of the agent)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        known = sorted(_query_names(self.dependant))

        async def limited(request: Request) -> Response:
            unknown = [k for k in request.query_params if k not in known]
            if unknown:
                takes = f"it takes {', '.join(known)}" if known else "it takes none"
                raise ApiError(422, f"query.{unknown[0]}: not a query parameter of {request.method} "
                                    f"{self.path_format} ({takes})")
            return await handler(_LimitedRequest(request.scope, request.receive))

        return limited


def _query_names(dependant: Any) -> set[str]:
    """The query parameters a route takes, its dependencies' included (FastAPI's ``Dependant`` tree)."""
    names = {p.alias for p in dependant.query_params}
    for inner in dependant.dependencies:
        names |= _query_names(inner)
    return names
