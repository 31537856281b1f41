"""The app factory: state opened in the lifespan (the store, the session pool, metrics, the upstream client).

``create_app(settings)`` builds the FastAPI app; nothing is opened at import
time. ``app_from_env()`` is the factory ``uvicorn --workers`` imports in each
worker process (the settings travel in :data:`~.settings.SETTINGS_ENV`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from .. import __version__
from ..embed import Embedder
from ..store import Store, open_store
from ._openapi import install_openapi
from .auth import Tenant
from .errors import install_error_handlers
from .metrics import BodyLimitMiddleware, Metrics, MetricsMiddleware
from .sessions import SessionPool
from .settings import ServerSettings

__all__ = ["ServerState", "app_from_env", "create_app"]

log = logging.getLogger("rdmem.server")


@dataclass
class ServerState:
    """What every request of this process shares (``app.state.rdmem``)."""

    settings: ServerSettings
    store: Store
    pool: SessionPool
    metrics: Metrics
    http: Any = None  # the upstream's httpx.AsyncClient (proxy routes only)


def create_app(settings: ServerSettings | None = None, *, store: Store | None = None,
               embedder: Embedder | None = None) -> FastAPI:
    """The rdmem service as an ASGI app.

    ``store`` (a store object) overrides ``settings.store`` (tests pass an
    in-memory one); ``embedder`` replaces the default MiniLM.
    """
    settings = settings or ServerSettings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        opened = store if store is not None else open_store(settings.store_url())
        state = ServerState(settings, opened, SessionPool(opened, settings, embedder), metrics)
        if settings.upstream:
            import httpx

            state.http = httpx.AsyncClient(base_url=settings.upstream.rstrip("/"), timeout=settings.upstream_timeout)
        app.state.rdmem = state
        try:
            yield
        finally:
            if state.http is not None:
                await state.http.aclose()
            if store is None:
                opened.close()

    app = FastAPI(
        title="rdmem",
        version=__version__,
        description="Working memory for LLM agents: a memory API, a mem0-compatible subset, and an "
        "OpenAI-compatible proxy that compacts requests on their way to your model.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    from .routes_mem0 import router as mem0_router
    from .routes_memory import router as memory_router

    app.include_router(memory_router)
    app.include_router(mem0_router)
    if settings.upstream:
        from .routes_proxy import router as proxy_router

        app.include_router(proxy_router)

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, Any]:
        """Liveness: the process answers and its store is reachable."""
        state: ServerState = app.state.rdmem
        state.store.version("t/default/healthz")
        return {"status": "ok", "version": __version__}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["service"], responses={
        401: {"description": "missing or invalid API key",
              "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}})
    def prometheus(tenant: Tenant) -> str:
        """Prometheus text format: requests, latency histograms, compactions, tokens in and out (a keyed
        server asks for a key here too)."""
        return metrics.render()

    install_openapi(app, settings)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    return app


def app_from_env() -> FastAPI:
    """The app of one ``uvicorn --workers`` process (``rdmem serve`` sets the settings' variable)."""
    return create_app(ServerSettings.from_env())
