"""The memory API under ``/v1``: add, context, search, feedback, explain, list / page / delete.

Thin: every route checks its limits, reaches its session through the pool
(which scopes it to the caller's tenant), calls the library, and returns a
wire type. The functions are plain ``def``: FastAPI runs them in its thread
pool, so compaction (CPU-bound) never blocks the event loop.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel

from ..limits import check_messages as check_limits, check_text
from ..policies import POLICIES, get_policy
from ..result import Compaction
from ..sessions import add_once, policy_for
from .auth import Tenant
from .errors import ApiError
from .limits import LimitedRoute
from .protocol import (
    AddRequest,
    AddResponse,
    ContextRequest,
    ContextResponse,
    ErrorResponse,
    ExplainRequest,
    ExplainResponse,
    FeedbackRequest,
    MessagePage,
    OkResponse,
    SearchHit,
    SearchRequest,
    SearchResponse,
    SessionDetail,
    SessionList,
    SessionSummary,
    message_dict,
)
from .sessions import SessionName, store_session, tenant_sessions

__all__ = ["router", "check_messages", "session_list", "session_detail", "message_page", "session_context",
           "session_search", "remove_session", "remove_message"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in ((400, "invalid request"), (401, "missing or invalid API key"), (404, "no such session"),
                       (409, "a message id the session (or the request) already has"), (413, "request body too large"),
                       (422, "request body does not match the schema"))
}
_LINKS = {"links": {
    "GetContext": {"operationId": "context", "parameters": {"session": "$request.path.session"}},
    "PageMessages": {"operationId": "list_messages", "parameters": {"session": "$request.path.session"}},
}}

router = APIRouter(prefix="/v1", tags=["memory"], responses=_ERRORS, route_class=LimitedRoute)


def _state(request: Request) -> Any:
    return request.app.state.rdmem


def check_messages(messages: list[dict[str, Any]], settings: Any) -> None:
    """The request limits on messages (:mod:`rdmem.limits`), and no id given twice (a rejected batch stores
    nothing)."""
    check_limits(messages, settings)
    seen: set[str] = set()
    for i, m in enumerate(messages):
        if m.get("id") is not None:
            if m["id"] in seen:
                raise ApiError(409, f"message {i}: id {m['id']!r} is given twice in this request; nothing was written")
            seen.add(m["id"])


def _send(answer: BaseModel) -> Response:
    """``answer`` as JSON, serialized once (returned as a model, FastAPI would validate it a second time
    against the route's ``response_model``, which still documents it)."""
    return Response(answer.model_dump_json(), media_type="application/json")


def _existing(request: Request, tenant: str, session: str) -> None:
    _must_exist(_state(request), tenant, session)


def _must_exist(state: Any, tenant: str, session: str) -> None:
    if not state.pool.exists(tenant, session):
        raise ApiError(404, f"no session {session!r}")


@router.post("/sessions/{session:segment}/messages", status_code=201, response_model=AddResponse,
             response_model_exclude_defaults=True, operation_id="add_messages", responses={201: _LINKS})
def add_messages(session: SessionName, body: AddRequest, tenant: Tenant, request: Request) -> AddResponse:
    """Add one message or a list (OpenAI chat messages, tool calls included), in one atomic write. The body is
    ``{"messages": ...}``, or the bare message or list. With ids of the client's own a retry is safe: messages
    stored under those ids already, as given, are answered 200 with ``already_stored`` (an id stored with other
    content is a 409)."""
    state = _state(request)
    given = body.messages if isinstance(body.messages, list) else [body.messages]
    messages = [message_dict(m) for m in given]
    check_messages(messages, state.settings)
    ids, already = add_once(lambda: state.pool.extend(tenant, session, messages),
                            lambda ids: state.pool.manager(tenant, session).originals(ids), messages)
    if already:
        return _send(AddResponse(session=session, ids=ids, already_stored=True))  # 200: nothing was created
    state.metrics.count("rdmem_messages_stored_total", len(ids))
    return AddResponse(session=session, ids=ids)


@router.post("/sessions/{session:segment}/context", response_model=ContextResponse, operation_id="context")
def context(session: SessionName, body: ContextRequest, tenant: Tenant, request: Request) -> ContextResponse:
    """What the model should see now: the working set (and, with a query, the archive's best matches) within
    the budget. The newest user message is always in it."""
    state = _state(request)
    ctx, budget = session_context(state, tenant, session, budget=body.budget, query=body.query,
                                  policy=body.policy, mode=body.mode)
    if ctx.archived_ids or ctx.summarized_ids or ctx.compressed_ids:
        state.metrics.count("rdmem_compactions_total")
    return _send(ContextResponse(messages=ctx.messages, tokens=ctx.tokens, kept_ids=ctx.kept_ids,
                                 report=[d.to_dict(breakdown=body.breakdown) for d in ctx.report],
                                 warnings=ctx.warnings, policy=ctx.policy, budget=budget))


@router.post("/sessions/{session:segment}/search", response_model=SearchResponse, operation_id="search")
def search(session: SessionName, body: SearchRequest, tenant: Tenant, request: Request) -> SearchResponse:
    """The session's messages that best match a query (lexical and dense rankings fused), best first."""
    return SearchResponse(results=session_search(_state(request), tenant, session, body.query, k=body.k))


@router.post("/sessions/{session:segment}/feedback", response_model=OkResponse, operation_id="feedback")
def feedback(session: SessionName, body: FeedbackRequest, tenant: Tenant, request: Request) -> OkResponse:
    """Which messages an answer needed (reward 1) or not (0): tilts this session's value model (rd)."""
    _existing(request, tenant, session)
    _state(request).pool.manager(tenant, session).feedback(body.ids, body.reward)
    return OkResponse()


@router.post("/sessions/{session:segment}/explain", response_model=ExplainResponse, operation_id="explain")
def explain(session: SessionName, body: ExplainRequest, tenant: Tenant, request: Request) -> ExplainResponse:
    """Why each message would be kept, compressed or archived: a context's report, as text and JSON."""
    ctx, _ = session_context(_state(request), tenant, session, budget=body.budget, query=body.query,
                             policy=body.policy)
    return _send(ExplainResponse(text=ctx.explain(), report=[d.to_dict() for d in ctx.report], warnings=ctx.warnings))


_Offset = Annotated[int, Query(ge=0, le=10**9)]
_Limit = Annotated[int, Query(ge=1, le=1000)]


@router.get("/sessions", response_model=SessionList, operation_id="list_sessions")
def list_sessions(tenant: Tenant, request: Request, offset: _Offset = 0, limit: _Limit = 100) -> SessionList:
    """The caller's sessions, by name, a page at a time."""
    return session_list(_state(request), tenant, offset=offset, limit=limit)


@router.get("/sessions/{session:segment}", response_model=SessionDetail, operation_id="get_session")
def get_session(session: SessionName, tenant: Tenant, request: Request) -> SessionDetail:
    """A session's size: messages and tokens, in all and in working memory."""
    return session_detail(_state(request), tenant, session)


@router.get("/sessions/{session:segment}/messages", response_model=MessagePage, operation_id="list_messages")
def list_messages(session: SessionName, tenant: Tenant, request: Request, offset: _Offset = 0,
                  limit: _Limit = 100) -> MessagePage:
    """The session's messages as given (every field, with its id), in order, a page at a time."""
    return message_page(_state(request), tenant, session, offset=offset, limit=limit)


@router.delete("/sessions/{session:segment}", status_code=204, operation_id="delete_session")
def delete_session(session: SessionName, tenant: Tenant, request: Request) -> Response:
    """Delete a session and everything in it, for good."""
    remove_session(_state(request), tenant, session)
    return Response(status_code=204)


@router.delete("/sessions/{session:segment}/messages/{message_id:segment}", status_code=204, operation_id="delete_message")
def delete_message(session: SessionName, message_id: str, tenant: Tenant, request: Request) -> Response:
    """Delete one message for good (a tool call without its results is then left out of every context)."""
    remove_message(_state(request), tenant, session, message_id)
    return Response(status_code=204)


@router.get("/policies", operation_id="list_policies")
def list_policies() -> dict[str, Any]:
    """The policies a context may name."""
    return {"policies": [{"name": n, "description": get_policy(n).description} for n in sorted(POLICIES)]}


# -- what the routes do, apart from HTTP: the web inspector (``server.ui``) calls the same functions ---------
def session_list(state: Any, tenant: str, *, offset: int = 0, limit: int = 100,
                 contains: str | None = None) -> SessionList:
    """A page of ``tenant``'s sessions by name (only those whose name contains ``contains``, if given)."""
    found = tenant_sessions(state.store, tenant)
    if contains:
        found = [(name, i) for name, i in found if contains.casefold() in name.casefold()]
    page = found[offset:offset + limit]
    return SessionList(
        sessions=[SessionSummary(session=name, units=i.units, working=i.working, archived=i.archived,
                                 created=i.created, updated=i.updated) for name, i in page],
        next_offset=offset + limit if offset + limit < len(found) else None,
    )


def session_detail(state: Any, tenant: str, session: str, info: Any = None) -> SessionDetail:
    """A session's size: messages and tokens, in all and in working memory (``info``: its entry in a list
    just read, which saves looking it up)."""
    if info is None:
        _must_exist(state, tenant, session)  # once what the proxy is storing in it is stored
        info = next((i for n, i in tenant_sessions(state.store, tenant, session) if n == session), None)
        if info is None:
            raise ApiError(404, f"no session {session!r}")
    stats = state.pool.manager(tenant, session).stats()
    return SessionDetail(session=session, created=info.created, updated=info.updated,
                         **{k: stats[k] for k in ("units", "working", "archived", "tokens", "working_tokens",
                                                  "working_ids")})


def message_page(state: Any, tenant: str, session: str, *, offset: int = 0, limit: int = 100) -> MessagePage:
    """The session's messages as given, in order, from the ``offset``-th on, at most ``limit``."""
    _must_exist(state, tenant, session)
    page = state.pool.manager(tenant, session).history(offset=offset, limit=limit + 1)
    return MessagePage(messages=page[:limit], next_offset=offset + limit if len(page) > limit else None)


def session_context(state: Any, tenant: str, session: str, *, budget: int | None = None, query: str | None = None,
                    policy: str | None = None, mode: str | None = None) -> tuple[Compaction, int]:
    """The context the session gives now for ``budget`` (default: the server's) and ``query``, and that
    budget; it writes nothing."""
    _must_exist(state, tenant, session)
    check_text(query, "query", state.settings)
    name = policy_for(policy, mode)  # unknown names: a 400 listing the valid ones
    budget = budget or state.settings.budget
    mem = state.pool.manager(tenant, session, policy=name)
    if budget > state.settings.max_budget:
        raise ApiError(400, f"budget must be at most {state.settings.max_budget} tokens, got {budget}")
    return mem.context(query, budget=budget, warn=False), budget  # the warnings are in the answer


def session_search(state: Any, tenant: str, session: str, query: str, *, k: int = 10) -> list[SearchHit]:
    """The session's ``k`` best matches for ``query``, best first."""
    _must_exist(state, tenant, session)
    if k > state.settings.max_page:
        raise ApiError(400, f"k must be at most {state.settings.max_page}, got {k}")
    check_text(query, "query", state.settings)
    return [SearchHit(**h) for h in state.pool.manager(tenant, session).search(query, k=k)]


def remove_session(state: Any, tenant: str, session: str) -> None:
    """Delete a session and everything in it, for good."""
    _must_exist(state, tenant, session)
    state.pool.delete_session(tenant, session)


def remove_message(state: Any, tenant: str, session: str, message_id: str) -> None:
    """Delete one message of a session for good."""
    _must_exist(state, tenant, session)
    if not state.pool.manager(tenant, session).delete([message_id]):
        raise ApiError(404, f"session {session!r} has no message {message_id!r}")
