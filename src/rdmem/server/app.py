"""The app factory: state opened in the lifespan (the store, the session pool, metrics, the upstream client).

``create_app(settings)`` builds the FastAPI app; nothing is opened at import
time. ``app_from_env()`` is the factory ``uvicorn --workers`` imports in each
worker process (the settings travel in :data:`~.settings.SETTINGS_ENV`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse

from .. import __version__
from ..embed import Embedder
from ..errors import InvalidInput
from ..limits import Limits
from ..store import KeyStore, Store, StoreError, open_store
from ._openapi import install_openapi
from .auth import RDMEM_KEY_HEADER, SignIns, Tenant, tenant_of
from .errors import ERROR_ID_HEADER, ApiError, install_error_handlers, store_unavailable
from .guards import HostGuardMiddleware, HostRule, JsonOnlyMiddleware, NoFramingMiddleware
from .metrics import BodyLimitMiddleware, Metrics, MetricsMiddleware
from .ratelimit import RateLimiter
from .protocol import ErrorResponse
from .routes_proxy import drain
from .sessions import DeletesMiddleware, SessionPathMiddleware, SessionPool, store_session, tenant_sessions
from .settings import ServerSettings

__all__ = ["ServerState", "app_from_env", "create_app"]

log = logging.getLogger("rdmem.server")

#: How long a shutdown waits for the replies still being stored (the proxy stores a reply after answering).
SHUTDOWN_DRAIN_S = 10.0


@dataclass
class ServerState:
    """What every request of this process shares (``app.state.rdmem``)."""

    settings: ServerSettings
    store: Store
    pool: SessionPool
    metrics: Metrics
    keys: KeyStore  # the API keys (only the server reads them), in the store's key table
    sign_ins: SignIns = None  # type: ignore[assignment]  # the inspector's sign-ins (None: signed with $RDMEM_UI_SECRET)
    http: Any = None  # the upstream's httpx.AsyncClient (proxy routes only)
    seen_keys: bool = False
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.sign_ins is None:
            self.sign_ins = SignIns(self.keys)

    @property
    def limiter(self) -> RateLimiter:
        return self.pool.limiter

    def keyed(self) -> bool:
        """Whether callers must give a key: once this server has seen a valid key it asks for one until it
        restarts (revoking every key must not open it to anyone as tenant ``default``). A key revoked since the
        server started (``rdmem serve``'s start, :func:`server_started`, not this worker's: a worker started again
        after a crash, all keys revoked, served anyone) counts as seen: another process may have served it."""
        if not self.seen_keys:
            self.seen_keys = self.keys.has_keys(revoked_since=self.started)
        return self.seen_keys


#: When ``rdmem serve`` started (seconds since the epoch), for its workers: :meth:`ServerState.keyed`.
STARTED_ENV = "RDMEM_SERVER_STARTED"


def create_app(settings: ServerSettings | None = None, *, store: Store | None = None,
               embedder: Embedder | None = None, started: float | None = None) -> FastAPI:
    """The rdmem service as an ASGI app.

    ``store`` (a store object) overrides ``settings.store`` (tests pass an
    in-memory one); ``embedder`` replaces the default MiniLM. ``started``: when
    the server this app is a process of started (default: now; a worker of
    ``rdmem serve``, however often started again, gets the server's).
    """
    settings = settings or ServerSettings()
    metrics = Metrics()
    hosts = HostRule.for_server(settings.host, settings.allowed_hosts)
    mcp = _mcp_endpoint(settings, hosts)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        opened = store if store is not None else open_store(settings.store_url())
        limiter = RateLimiter(settings.rate_requests, settings.rate_tokens)
        state = ServerState(settings, opened, SessionPool(opened, settings, embedder, limiter), metrics,
                            KeyStore(opened), started=started if started is not None else time.time())
        if settings.upstream:
            import httpx

            # No cookie jar: a cookie the model's answer to one client sets is never sent with another's request.
            state.http = httpx.AsyncClient(base_url=settings.upstream.rstrip("/"), timeout=settings.upstream_timeout,
                                           cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])))
        app.state.rdmem = state
        state.keyed()  # a server started with keys stays keyed
        state.pool.start()
        try:
            async with AsyncExitStack() as stack:
                if mcp is not None:
                    await stack.enter_async_context(mcp.run())
                yield
        finally:
            await drain(state, SHUTDOWN_DRAIN_S)  # the replies still being stored, before the store closes
            state.pool.stop()
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
        docs_url=None,  # served below from local files: the page works offline
        redoc_url=None,
    )
    install_error_handlers(app)
    _offline_docs(app)
    from .routes_mem0 import router as mem0_router
    from .routes_memory import router as memory_router

    app.include_router(memory_router)
    app.include_router(mem0_router)
    if settings.upstream:
        from .routes_proxy import router as proxy_router

        app.include_router(proxy_router)
    if settings.ui:
        from .ui import install_ui

        install_ui(app)
    if mcp is not None:
        # No GET (405): stateless, nothing to push; the SDK held an empty event stream open for ever
        app.add_route("/mcp", mcp, methods=["POST", "DELETE"], include_in_schema=False)

    @app.get("/healthz", tags=["service"], responses={
        503: {"model": ErrorResponse, "description": "the store does not answer (retry after `Retry-After` seconds)"}})
    def healthz() -> dict[str, Any]:
        """Whether this process and its store answer: 200, or 503 while the store cannot be reached (a
        PostgreSQL store reconnects by itself: the first request after the database is back is served)."""
        state: ServerState = app.state.rdmem
        state.store.version("t/default/healthz")  # a StoreError is the 503, its cause in the log
        return {"status": "ok", "store": "ok", "version": __version__}

    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["service"], responses={
        401: {"description": "missing or invalid API key", "content": error},
        403: {"description": "this tenant may not read the metrics (--metrics-tenant)", "content": error}})
    def prometheus(tenant: Tenant) -> str:
        """Prometheus text format: requests, latency histograms, compactions, tokens in and out, of every
        tenant; readable by ``--metrics-tenant`` only (default: anyone on a server without keys)."""
        state: ServerState = app.state.rdmem
        if settings.metrics_tenant is None:
            if state.keyed():
                raise ApiError(403, "the metrics count every tenant: on a server with keys, only the tenant "
                               "named by --metrics-tenant may read them, and none is named")
        elif tenant != settings.metrics_tenant:
            raise ApiError(403, f"the metrics count every tenant: only tenant {settings.metrics_tenant!r} "
                           "(--metrics-tenant) may read them")
        return metrics.render()

    install_openapi(app, settings)
    _edge(app, settings, metrics, hosts)
    return app


def _edge(app: FastAPI, settings: ServerSettings, metrics: Metrics, hosts: HostRule) -> None:
    """The middleware every request passes, innermost first (the last added is the outermost)."""
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    # A session's "/" (sent as %2F) does not split its path segment; outside the metrics': they see the route.
    app.add_middleware(SessionPathMiddleware)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(DeletesMiddleware)  # before the body is read: when the request began
    app.add_middleware(JsonOnlyMiddleware)  # before the body is read
    app.add_middleware(HostGuardMiddleware, rule=hosts)  # a foreign Host gets nothing else
    app.add_middleware(NoFramingMiddleware)  # outermost: every answer, refusals too, says no frame may show it


def _offline_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from the files of the ``fastapi-offline`` package, not a CDN (FastAPI's
    self-hosting recipe); without the package, no page rather than a blank one."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        return
    from pathlib import Path

    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles
    from starlette.responses import HTMLResponse

    app.mount("/docs-static", StaticFiles(directory=Path(spec.origin).parent / "static"), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - API",
                                   swagger_js_url=f"{root}/docs-static/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}/docs-static/swagger-ui.css",
                                   swagger_favicon_url=f"{root}/docs-static/favicon.png")


class _TenantSessions:
    """What an MCP call may reach: its tenant's sessions, named as the REST routes name them."""

    def __init__(self, pool: SessionPool, tenant: str) -> None:
        self.pool, self.tenant = pool, tenant

    def manager(self, session: str) -> Any:
        with _tool_error():
            return self.pool.manager(self.tenant, session)

    def extend(self, session: str, messages: list[dict[str, Any]]) -> list[str]:
        with _tool_error():
            return self.pool.extend(self.tenant, session, messages)

    def sessions(self) -> list[Any]:
        return tenant_sessions(self.pool.store, self.tenant)

    def delete_session(self, session: str) -> bool:
        with _tool_error():
            if not self.pool.exists(self.tenant, session):
                return False
            self.pool.delete_session(self.tenant, session)
        return True


@contextmanager
def _tool_error() -> Iterator[None]:
    """An answer the REST routes give as an HTTP error (a bad name, a rate limit) is the tool's error text."""
    try:
        yield
    except ApiError as exc:
        raise InvalidInput(exc.message) from None


async def _mcp_tenant(request: Request) -> str:
    """The MCP caller's tenant: the same keys and rules as every route (a 401 without a valid key; a 503 while
    the store is down), refused as a JSON-RPC error that the MCP client shows."""
    from ..mcp import Refused

    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    secret = request.headers.get(RDMEM_KEY_HEADER) or (credentials.strip() if scheme.lower() == "bearer" else None)
    try:
        return await run_in_threadpool(tenant_of, request, secret)
    except ApiError as exc:
        raise Refused(exc.status, exc.message, exc.code, exc.headers) from None
    except StoreError as exc:
        error_id, message = store_unavailable(request, exc)
        raise Refused(503, message, "store_unavailable", {"Retry-After": "1", ERROR_ID_HEADER: error_id}) from None


def _mcp_endpoint(settings: ServerSettings, hosts: HostRule) -> Any:
    """``/mcp``: the MCP server (``rdmem.mcp``), if the SDK is installed (``rdmem[mcp]``), with
    the SDK's DNS-rebinding protection on and told the server's Host rule (off only where the rule admits any
    Host, which the SDK cannot express: a non-loopback server, whose keys guard it)."""
    if importlib.util.find_spec("mcp") is None:
        return None
    from mcp.server.transport_security import TransportSecuritySettings

    from ..mcp import CALLER, HTTPEndpoint, create_mcp_server

    server = create_mcp_server(
        budget=settings.budget, policy=settings.policy, max_budget=settings.max_budget,
        max_messages=settings.max_messages, max_message_chars=settings.max_message_chars,
        sessions_for=lambda request: _TenantSessions(request.app.state.rdmem.pool, request.scope[CALLER]))
    allowed_hosts, allowed_origins = hosts.mcp_patterns()
    security = TransportSecuritySettings(enable_dns_rebinding_protection=not hosts.any_host,
                                         allowed_hosts=allowed_hosts, allowed_origins=allowed_origins)
    return HTTPEndpoint(server, _mcp_tenant, security=security, limits=Limits(
        max_messages=settings.max_messages, max_message_chars=settings.max_message_chars),
        max_body_bytes=settings.max_body_bytes)


def app_from_env() -> FastAPI:
    """The app of one ``uvicorn --workers`` process (``rdmem serve`` sets the settings' variable and
    :data:`STARTED_ENV`)."""
    try:
        started: float | None = float(os.environ[STARTED_ENV])
    except (KeyError, ValueError):
        started = None
    return create_app(ServerSettings.from_env(), started=started)
