"""The reference for the proxy's added latency: a bare pass-through (Starlette and httpx, as rdmem serve uses
them, no memory at all) from ``/v1/chat/completions`` to the upstream in ``$PASSTHROUGH_UPSTREAM``.

    PASSTHROUGH_UPSTREAM=http://127.0.0.1:8000/v1 .venv/bin/python -m uvicorn _passthrough:app --app-dir benchmarks
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

_client: dict[str, httpx.AsyncClient] = {}


async def chat(request: Request) -> Response:
    resp = await _client["upstream"].post("/chat/completions", content=await request.body(), headers={
        "content-type": "application/json", "authorization": request.headers.get("authorization", "")})
    return Response(resp.content, status_code=resp.status_code,
                    headers={"content-type": resp.headers.get("content-type", "application/json")})


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    async with httpx.AsyncClient(base_url=os.environ["PASSTHROUGH_UPSTREAM"].rstrip("/")) as client:
        _client["upstream"] = client
        yield


app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])], lifespan=lifespan)
