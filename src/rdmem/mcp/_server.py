"""The MCP server's tools, resources and sessions (the public names are :mod:`rdmem.mcp`'s)."""

from __future__ import annotations

import contextvars
import json
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field

from ..errors import InvalidInput, InvalidType, MissingDependency, UnknownIdError, WriteOutcomeUnknown

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
    from mcp.types import ToolAnnotations

    from ._arguments import known_arguments
    from starlette.requests import Request
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise MissingDependency(f"rdmem.mcp needs the MCP SDK: pip install 'rdmem[mcp]' ({exc})") from None

from .._wire import STRICT_INT, ChatMessage, JsonPositiveInt, SessionSummary, message_dict
from ._models import Decision, Explanation, Forgotten, Hit, ModelContext, Recalled, Remembered, SessionList
from ..embed import Embedder
from ..limits import Limits, check_messages, check_text, escapes_lone_surrogate, load_json, lone_surrogate, read_body
from ..manager import MemoryManager
from ..sessions import (add_once, as_tenant_sees, embedder_for, policy_for, session_name, tenant_session_infos,
                        tenant_store_name)
from ..store import SessionInfo, Store, StoreError, check_tenant, open_store
from ..tokens import check_budget

__all__ = ["create_mcp_server", "HTTPEndpoint", "CALLER", "SessionAccess", "StoreSessions", "ChatMessage", "Remembered", "Hit", "Recalled",
           "ModelContext", "Forgotten", "Decision", "Explanation", "SessionSummary", "SessionList", "SESSIONS_URI"]

log = logging.getLogger("rdmem.mcp")
SESSIONS_URI = "rdmem://sessions"
#: The key of an HTTP request's ASGI scope that holds who :class:`HTTPEndpoint` found is calling.
CALLER = "rdmem.caller"
#: The HTTP request of the call in progress (``None`` over stdio and in-process), for ``sessions_for``.
_REQUEST: contextvars.ContextVar[Any] = contextvars.ContextVar("rdmem_mcp_request", default=None)


# -- where sessions live --------------------------------------------------------------------------------
class SessionAccess(Protocol):
    """The sessions one caller may reach, by the names the caller uses."""

    def manager(self, session: str) -> MemoryManager: ...

    def extend(self, session: str, messages: list[dict[str, Any]]) -> list[str]: ...

    def sessions(self) -> list[tuple[str, SessionInfo]]: ...

    def delete_session(self, session: str) -> bool: ...


class StoreSessions:
    """Every session of one store, one pooled manager each (``rdmem mcp``, in-process use); with ``tenant``,
    only that tenant's sessions, named as ``rdmem serve`` names them (``rdmem mcp --tenant``: the memory a
    server's callers of that tenant see, and nobody else's)."""

    def __init__(self, store: Store, *, budget: int, policy: str, embedder: Embedder | str | None = None,
                 tenant: str | None = None) -> None:
        self.store = store
        self.budget = budget
        self.policy = policy
        self.tenant = tenant if tenant is None else check_tenant(tenant)
        self._embedder = embedder
        self._managers: dict[str, MemoryManager] = {}
        self._lock = threading.Lock()  # the SDK runs tools in worker threads

    def _name(self, session: str) -> str:
        """The store's name of the caller's ``session`` (checked)."""
        return session_name(session) if self.tenant is None else tenant_store_name(self.tenant, session)

    def manager(self, session: str) -> MemoryManager:
        name = self._name(session)
        with self._lock:
            mem = self._managers.get(name)
            if mem is None:
                if not isinstance(self._embedder, Embedder):  # resolved once: one model for every session
                    self._embedder = embedder_for(self.policy, self._embedder)
                mem = MemoryManager(budget=self.budget, policy=self.policy, store=self.store, session=name,
                                    embedder=self._embedder)
                self._managers[name] = mem
            return mem

    def extend(self, session: str, messages: list[dict[str, Any]]) -> list[str]:
        return self.manager(session).extend(messages)

    def sessions(self) -> list[tuple[str, SessionInfo]]:
        if self.tenant is not None:
            return tenant_session_infos(self.store, self.tenant)
        return [(i.session, i) for i in self.store.sessions()]

    def delete_session(self, session: str) -> bool:
        name = self._name(session)
        if self.store.version(name) == 0:
            return False
        self.store.delete_session(name)
        return True


@contextmanager
def _user_errors() -> Iterator[None]:
    """What the caller can fix (:class:`~rdmem.errors.InvalidInput`), and a missing optional part (what to
    install), become a tool error with its text. Anything else is ours: the tool error says only an error id,
    which the log's line (and traceback) carries (the SDK would answer "Error executing tool" and log it
    without an id)."""
    try:
        yield
    except (InvalidInput, MissingDependency) as exc:
        raise ToolError(as_tenant_sees(str(exc), _caller())) from exc
    except StoreError as exc:
        error_id = uuid.uuid4().hex[:16]
        log.error("rdmem mcp: store error %s: %s", error_id, exc)
        if isinstance(exc, WriteOutcomeUnknown):  # a retry of a write that landed stores it twice
            raise ToolError(f"the store went away during the write (error {error_id}; see the server's log): it "
                            f"may have been stored; recall before remembering it again") from exc
        raise ToolError(f"the store is unavailable (error {error_id}; see the server's log); retry later") from exc
    except Exception as exc:
        error_id = uuid.uuid4().hex[:16]
        log.exception("rdmem mcp: internal error %s", error_id)
        raise ToolError(f"internal error {error_id}; see the server's log") from exc


def _remember(access: SessionAccess, name: str, batch: list[dict[str, Any]]) -> Remembered:
    """Store ``batch`` in session ``name``; a batch stored already under its own ids, as given (a retried write),
    is answered with them, ``already_stored`` (:func:`~rdmem.sessions.add_once`)."""
    ids, already = add_once(lambda: access.extend(name, batch), lambda ids: access.manager(name).originals(ids),
                            batch)
    return Remembered(session=name, ids=ids, already_stored=already)


def _caller() -> str | None:
    """The tenant :class:`HTTPEndpoint` found calling (``None`` over stdio and in-process)."""
    scope = getattr(_REQUEST.get(), "scope", None)
    return scope.get(CALLER) if isinstance(scope, dict) else None


async def _bind_request(ctx: Any, call_next: Any) -> Any:
    """Middleware: the call's HTTP request, where tools and resources (which get no context) can read it."""
    token = _REQUEST.set(getattr(ctx, "request", None))
    try:
        return await call_next(ctx)
    finally:
        _REQUEST.reset(token)


_Session = Annotated[str | None, Field(min_length=1, max_length=256,
                                       description="the session (default: the server's)")]
_Budget = Annotated[JsonPositiveInt | None, Field(description="tokens (default: the server's budget)")]
_Query = Annotated[str | None, Field(description="the next question: archived messages that match it "
                                     "compete for the budget too")]
_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
_DELETE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def create_mcp_server(
    *,
    store: str | Store | None = None,
    session: str = "default",
    budget: int = 4000,
    policy: str = "rd",
    embedder: Embedder | str | None = None,
    sessions_for: Callable[[Any], SessionAccess] | None = None,
    max_budget: int | None = 1_000_000,
    max_messages: int = 1000,
    max_message_chars: int = 200_000,
    name: str = "rdmem",
    tenant: str | None = None,
) -> MCPServer:
    """An MCP server (SDK v2 ``MCPServer``) whose tools read and write rdmem sessions.

    Parameters
    ----------
    store:
        A store URL (``"sqlite:///memory.db"``; opened now, for the life of the
        process) or object; ``None``: in memory.
    session:
        The session a call without ``session`` uses.
    budget, policy, embedder:
        What a session's working set is compacted to (tokens) and with; also
        ``context``'s budget when a call gives none.
    sessions_for:
        ``request -> SessionAccess``: the sessions the caller of one call may
        reach (``request`` is the HTTP request, ``None`` over stdio). Default:
        every session of ``store``.
    max_budget:
        The largest budget a call may ask for (tokens; default 1,000,000, as
        ``rdmem serve``); ``None``: no limit.
    max_messages, max_message_chars:
        ``remember``'s limits, as ``rdmem serve``'s (:mod:`rdmem.limits`): at
        most this many messages a call, each of at most this many characters
        (every field counted); also the longest query.
    tenant:
        Without ``sessions_for``: only this tenant's sessions of ``store``,
        named as ``rdmem serve`` names them (a keyless server's tenant is
        ``"default"``); ``None``: every session, by its name in the store.

    >>> import asyncio
    >>> server = create_mcp_server(policy="window")
    >>> sorted(t.name for t in asyncio.run(server.list_tools()))
    ['context', 'explain', 'forget', 'recall', 'remember']
    """
    check_budget(budget)
    policy_for(policy)  # an unknown name: the error lists the valid ones
    if not isinstance(session, str) or not session:
        raise InvalidInput(f"session must be a non-empty string, got {session!r}")
    if max_budget is not None:
        check_budget(max_budget, "max_budget")
    limits = Limits(max_messages=check_budget(max_messages, "max_messages"),
                    max_message_chars=check_budget(max_message_chars, "max_message_chars"))
    if sessions_for is None:
        if store is not None and not isinstance(store, (str, Store)):
            raise InvalidType(f"store must be a URL or a store object, got {type(store).__name__}")
        local = StoreSessions(open_store(store), budget=budget, policy=policy, embedder=embedder, tenant=tenant)
        sessions_for = lambda request: local  # noqa: E731 - one caller: this process's user
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    server = MCPServer(name, instructions=_INSTRUCTIONS, log_level="WARNING", middleware=[_bind_request])
    root.handlers[:], root.level = handlers, level  # the SDK configures the root logger: the host's to decide
    _add_tools(server, sessions_for, session, budget, max_budget, limits)
    server.middleware.append(known_arguments(server))
    return server


_INSTRUCTIONS = (
    "Long-term memory for this conversation. Call `remember` with what the user and you said (or a fact worth "
    "keeping); before answering, call `context` with the user's question to get the history that fits your "
    "budget, the relevant old turns included; `recall` searches everything ever stored; `forget` deletes."
)


def _add_tools(server: MCPServer, sessions_for: Callable[[Any], SessionAccess], default: str, budget: int,
               max_budget: int | None, limits: Limits) -> None:
    """The five tools and the sessions resource (closures over how a call finds its sessions)."""

    def manager(session: str | None) -> tuple[str, MemoryManager]:
        name = session or default
        return name, sessions_for(_REQUEST.get()).manager(name)

    def budget_of(asked: int | None) -> int:
        if asked is not None and max_budget is not None and asked > max_budget:
            raise InvalidInput(f"budget must be at most {max_budget} tokens, got {asked}")
        return budget if asked is None else check_budget(asked)

    @server.tool(annotations=_WRITE, structured_output=True)
    def remember(content: str | None = None, role: Literal["user", "assistant", "system", "developer"] = "user",
                 messages: list[ChatMessage] | None = None, session: _Session = None,
                 id: Annotated[str | None, Field(min_length=1)] = None) -> Remembered:  # noqa: A002
        """Store what was said, whole and for good: one message (`content`, `role`, and its `id` if you give
        one) or several chat messages (`messages`, tool calls and results included), in order. Returns their
        ids. With ids of your own, a retry is safe: messages stored already under those ids, as given, are
        not stored again (a call that timed out may have been stored)."""
        with _user_errors():
            if (content is None) == (messages is None):
                raise InvalidInput("give content (one message) or messages (a list), not both and not neither")
            if id is not None and messages is not None:
                raise InvalidInput("id names the one message of content; give each of messages its own id")
            batch = [{"role": role, "content": content, **({} if id is None else {"id": id})}] \
                if content is not None else [message_dict(m) for m in messages or ()]
            check_text(content, "content", limits)
            check_messages(batch, limits)
            return _remember(sessions_for(_REQUEST.get()), session or default, batch)

    @server.tool(annotations=_READ, structured_output=True)
    def recall(query: Annotated[str, Field(min_length=1)], k: Annotated[int, Field(ge=1, le=200), STRICT_INT] = 10,
               session: _Session = None) -> Recalled:
        """Search everything the session ever stored (archived messages too) for `query`; best first."""
        with _user_errors():
            check_text(query, "query", limits)
            name, mem = manager(session)
            hits = mem.search(query, k=k)
            return Recalled(session=name, query=query, results=[
                Hit(id=h["id"], score=float(h["score"]), tier=h["tier"], role=h["message"].get("role", ""),
                    content=_text(h["message"].get("content")), message=h["message"]) for h in hits])

    @server.tool(annotations=_READ, structured_output=True)
    def context(query: _Query = None, budget: _Budget = None, session: _Session = None) -> ModelContext:
        """The conversation to send the model now, within `budget` tokens: recent turns, and with a `query`
        (the user's question) the old turns it needs; a valid chat history (tool calls with their results)."""
        with _user_errors():
            check_text(query, "query", limits)
            name, mem = manager(session)
            ctx = mem.context(query, budget=budget_of(budget), warn=False)
            return ModelContext(session=name, messages=ctx.messages, tokens=ctx.tokens, budget=ctx.budget,
                           policy=ctx.policy, kept_ids=ctx.kept_ids, sources=ctx.sources, warnings=ctx.warnings)

    @server.tool(annotations=_DELETE, structured_output=True)
    def forget(ids: list[str] | None = None, whole_session: Annotated[bool, Field(strict=True)] = False,
               session: _Session = None) -> Forgotten:
        """Delete messages for good: those with these `ids`, or with `whole_session` the whole session."""
        with _user_errors():
            if bool(ids) == whole_session:
                raise InvalidInput("give ids (messages to delete) or whole_session=true, not both and not neither")
            name = session or default
            access = sessions_for(_REQUEST.get())
            if whole_session:
                if not access.delete_session(name):
                    raise UnknownIdError(f"no session {name!r}")
                return Forgotten(session=name, deleted=[], session_deleted=True)
            mem = access.manager(name)
            missing = sorted(set(ids or ()) - set(mem.originals(ids or ())))
            if missing:
                more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
                raise UnknownIdError(f"session {name!r} has no message {', '.join(map(repr, missing[:5]))}{more}; "
                                     "nothing was deleted")
            return Forgotten(session=name, deleted=mem.delete(list(ids or ())), session_deleted=False)

    @server.tool(annotations=_READ, structured_output=True)
    def explain(query: _Query = None, budget: _Budget = None, session: _Session = None) -> Explanation:
        """Why each stored message would be kept, compressed, summarized or archived for this budget/query."""
        with _user_errors():
            check_text(query, "query", limits)
            name, mem = manager(session)
            ctx = mem.context(query, budget=budget_of(budget), warn=False)
            return Explanation(session=name, text=ctx.explain(), tokens=ctx.tokens, budget=ctx.budget,
                               policy=ctx.policy, decisions=[Decision(
                                   id=d.id, role=d.role, decision=d.decision, tokens=d.tokens,
                                   sent_tokens=d.sent_tokens, score=float(d.score), reason=d.reason)
                                   for d in ctx.report])

    @server.resource(SESSIONS_URI, name="sessions", mime_type="application/json",
                     description="the sessions this caller may reach, with their sizes")
    def sessions() -> str:
        found = sessions_for(_REQUEST.get()).sessions()
        return SessionList(sessions=[SessionSummary(session=n, units=i.units, working=i.working, archived=i.archived,
                                                  created=i.created, updated=i.updated) for n, i in found]
                           ).model_dump_json()


def _text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict)) or json.dumps(content)


class Refused(Exception):
    """What an :class:`HTTPEndpoint`'s ``authenticate`` hook raises to refuse a call (no key, a rate limit, the
    store down): answered as a JSON-RPC error with this HTTP ``status`` and ``headers`` (``Retry-After``), which
    the MCP client surfaces with its message (a bare HTTP error reaches its caller as "Server returned an error
    response"). ``code`` names the refusal, as the REST routes' error bodies do."""

    def __init__(self, status: int, message: str, code: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


async def _json_rpc_error(send: Any, status: int, code: int, message: str, data: Any = None,
                          headers: dict[str, str] | None = None) -> None:
    """Answer a call, before the SDK reads it, with a JSON-RPC error (``id`` null: the call was not read)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    answer = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode()),
        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items())]})
    await send({"type": "http.response.body", "body": answer})


class HTTPEndpoint:
    """The server as one ASGI endpoint (streamable HTTP) behind an ``authenticate`` hook.

    Stateless, with JSON answers: every call stands alone, so any process of
    a multi-worker server answers any call (as the REST routes do).
    ``authenticate(request)`` says who calls, or raises (a 401); what it
    returns is put in the request's scope under :data:`CALLER` for
    ``sessions_for`` to read. The caller is read from each call's own
    request, never from an earlier one. ``security`` configures the SDK's
    DNS-rebinding protection (the ``Host`` and ``Origin`` values answered;
    ``None``: the SDK's default for loopback). ``limits``: a call's messages
    are counted while its body is parsed, and a body over them is refused
    before the SDK builds it. Enter :meth:`run` in the app's lifespan.
    """

    def __init__(self, server: MCPServer, authenticate: Callable[[Request], Awaitable[Any]], *,
                 security: TransportSecuritySettings | None = None, limits: Limits | None = None,
                 max_body_bytes: int | None = None) -> None:
        self.server = server
        self.authenticate = authenticate
        self.security = security
        self.limits = limits
        self.max_body_bytes = max_body_bytes  # the SDK's own bound on a body (4 MiB), as the server's
        self._manager: Any = None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        # The SDK's DNS-rebinding protection stays on: ``security`` says which Host and Origin values to
        # answer (None: the SDK's own, loopback names only).
        self.server.streamable_http_app(stateless_http=True, json_response=True, transport_security=self.security,
                                        max_request_body_size=self.max_body_bytes or DEFAULT_MAX_REQUEST_BODY_SIZE)
        manager = self.server.session_manager  # a fresh one for each lifespan: the SDK runs one once
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._manager is None:
            raise RuntimeError("the MCP endpoint is not running: enter HTTPEndpoint.run() in the app's lifespan")
        try:
            caller = await self.authenticate(Request(scope))  # headers only: the body stays for the SDK
        except Refused as exc:  # -32000: the JSON-RPC range for a server's own errors
            await _json_rpc_error(send, exc.status, -32000, exc.message, {"status": exc.status, "code": exc.code},
                                  exc.headers)
            return
        if self.limits is not None and scope.get("method") == "POST":
            receive = await self._within_limits(receive, send)
            if receive is None:
                return
        await self._manager.handle_request({**scope, CALLER: caller}, receive, send)

    async def _within_limits(self, receive: Any, send: Any) -> Any:
        """The body read and checked (a ``tools/call``'s ``messages`` one at a time): over a limit, a JSON-RPC
        error (HTTP 400) before the SDK builds it whole, and ``None``; else a ``receive`` that replays it."""
        body, replay = await read_body(receive)
        try:
            value = load_json(body, self.limits, at=(("params", "arguments", "messages"),))  # type: ignore[arg-type]
        except InvalidInput as exc:
            await _json_rpc_error(send, 400, -32602, str(exc))
            return None
        except (ValueError, UnicodeDecodeError):
            return replay  # not JSON: the SDK answers it
        # A lone surrogate (a JSON escape of half an emoji): the SDK's parser named no field ("unexpected end of
        # hex escape"); the other doors' words, with the field's path.
        bad = lone_surrogate(value) if escapes_lone_surrogate(body) else None
        if bad is not None:
            await _json_rpc_error(send, 400, -32602, f"{bad} is not valid Unicode (a lone surrogate)")
            return None
        return replay
