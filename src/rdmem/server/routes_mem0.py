"""A mem0-compatible subset: ``/memories`` and ``/search``, scoped by ``user_id`` / ``agent_id`` / ``run_id``.

A mem0 user can point a client at rdmem. The mapping: each scope (the ids
given, as a set) is one rdmem session of the caller's tenant
(``mem0:user_id=alice&agent_id=planner``); each message added is one memory
(mem0 with ``infer=False``: rdmem extracts no facts with an LLM); a query
with fewer ids reads every session whose scope holds them (``user_id=alice``
sees alice's memories of every agent and run), as mem0's filters do. A
memory's id is opaque and names its session. A search's ``score`` is the cosine similarity of the query
and the memory (``threshold`` is on that scale), not rdmem's rank-fusion value. Answers are shaped
``{"results": [...]}`` as mem0's are; errors carry mem0's ``detail`` next to
rdmem's ``error``. What differs is in README ("Run it as a service").
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Annotated, Any
from urllib.parse import parse_qsl, quote, urlencode

import numpy as np
from fastapi import APIRouter, Query, Request

from ..names import MAX_SESSION_CHARS, SESSION_NAME_PATTERN
from ..sessions import add_once, session_name
from .auth import Tenant
from ..limits import check_text
from .errors import ApiError
from .limits import LimitedRoute
from .protocol import (
    ErrorResponse,
    Mem0Add,
    Mem0Item,
    Mem0Results,
    Mem0Search,
    message_dict,
)
from .routes_memory import check_messages
from .sessions import MEM0_PREFIX, store_session, tenant_sessions

__all__ = ["router"]

_SCOPE = ("user_id", "agent_id", "run_id")
router = APIRouter(tags=["mem0"], route_class=LimitedRoute, responses={
    400: {"model": ErrorResponse, "description": "no scope (user_id, agent_id or run_id) or a bad request"},
    401: {"model": ErrorResponse, "description": "missing or invalid API key"},
    404: {"model": ErrorResponse, "description": "no such memory"},
    409: {"model": ErrorResponse, "description": "a message id the scope already has"},
    413: {"model": ErrorResponse, "description": "request body too large"},
})


def _scope(values: dict[str, str | None]) -> dict[str, str]:
    """The ids given (``""`` is absent, as in mem0), each checked by the session-name rule."""
    scope = {k: v for k in _SCOPE if isinstance(v := values.get(k), str) and v != ""}
    if not scope:
        raise ApiError(400, "At least one identifier (user_id, agent_id, run_id) is required.")
    for field, value in scope.items():
        try:
            session_name(value, field)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
    return scope


def _session_of(scope: dict[str, str]) -> str:
    name = MEM0_PREFIX + urlencode([(k, scope[k]) for k in _SCOPE if k in scope], quote_via=quote)
    if len(name) > MAX_SESSION_CHARS:
        raise ApiError(400, f"{', '.join(scope)} name the session {name[:60]!r}... of {len(name)} characters "
                       f"(URL-encoded), over the limit of {MAX_SESSION_CHARS}: use shorter ids")
    return name


def _matching(request: Request, tenant: str, scope: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
    """The tenant's mem0 sessions whose scope holds every id of ``scope``."""
    out = []
    first = _SCOPE[0]  # a scope's name starts with its first id: only those sessions are read
    within = MEM0_PREFIX + (urlencode([(first, scope[first])], quote_via=quote) if first in scope else "")
    for name, _ in tenant_sessions(request.app.state.rdmem.store, tenant, within):
        have = dict(parse_qsl(name[len(MEM0_PREFIX):]))
        if all(have.get(k) == v for k, v in scope.items()):
            out.append((name, have))
    return out


def _memory_id(session: str, uid: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([session, uid]).encode()).decode().rstrip("=")


def _parse_id(memory_id: str) -> tuple[str, str]:
    """``(session, message id)`` of a memory id. An id is never reused (a scope deleted and written again goes
    on from its deleted counter, the stores' rule), so it names one memory for good."""
    try:
        session, uid, *made = json.loads(base64.urlsafe_b64decode(memory_id + "=" * (-len(memory_id) % 4)))
        if isinstance(session, str) and isinstance(uid, str) and session.startswith(MEM0_PREFIX) and len(made) <= 1:
            return session, uid  # a third part: the time an id of 2026-12-05's rdmem carried
    except (ValueError, TypeError, RecursionError):  # RecursionError: JSON nested thousands deep
        pass
    raise ApiError(404, f"Memory with id {memory_id} not found")


def _the_memory(request: Request, tenant: str, memory_id: str) -> tuple[str, dict[str, Any]]:
    """The session and the stored message a memory id names, else a 404 (another tenant's, or deleted)."""
    session, uid = _parse_id(memory_id)
    store_session(tenant, session)  # a name of the caller's tenant only
    pool = request.app.state.rdmem.pool
    found = pool.manager(tenant, session).originals([uid]).get(uid) if pool.exists(tenant, session) else None
    if found is None:
        raise ApiError(404, f"Memory with id {memory_id} not found")
    return session, found


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


def _item(session: str, scope: dict[str, str], message: dict[str, Any], score: float | None = None) -> Mem0Item:
    text = _text(message)
    return Mem0Item(id=_memory_id(session, message["id"]), memory=text, hash=hashlib.md5(text.encode()).hexdigest(),
                    metadata=message.get("metadata"), score=score, created_at=message.get("created_at"),
                    updated_at=message.get("created_at"), role=message.get("role"), **scope)


def _with_scope_fields(message: dict[str, Any], now: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """A memory to store: the message with when it was added (its own ``created_at`` kept, if it has one) and
    the request's ``metadata`` under its own (a key of both: the message's value)."""
    own, added = message.get("metadata"), message.get("created_at")
    if own is not None and not isinstance(own, dict):
        raise ApiError(400, f"metadata: a message's own metadata must be an object, got {type(own).__name__}")
    if added is not None and not (isinstance(added, str) and added.strip()):
        raise ApiError(400, f"created_at: a message's own time must be a text (ISO 8601), got {added!r}"[:200])
    merged = {**(metadata or {}), **(own or {})} if metadata or own is not None else None
    return {**message, "created_at": added or now, **({"metadata": merged} if merged is not None else {})}


def _all(request: Request, tenant: str, session: str) -> list[dict[str, Any]]:
    return request.app.state.rdmem.pool.manager(tenant, session).history()


@router.post("/memories", response_model=Mem0Results, operation_id="mem0_add", response_model_exclude_none=True)
def add_memories(body: Mem0Add, tenant: Tenant, request: Request) -> Mem0Results:
    """Store each message as a memory of the scope (``{"results": [{"id", "memory", "event": "ADD"}]}``)."""
    state = request.app.state.rdmem
    scope = _scope(body.model_dump())
    session = _session_of(scope)
    now = datetime.now(timezone.utc).isoformat()
    messages = [_with_scope_fields(message_dict(m), now, body.metadata) for m in body.messages]
    check_messages(messages, state.settings)
    # A retry with ids of the client's own is answered as REST answers it (README): nothing stored again, each
    # memory's event "NONE" (it was a 409: the time this server adds to a memory differs at each try)
    def when_aside(m: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in m.items() if k != "created_at"}

    stored = state.pool.manager(tenant, session).originals
    ids, already = add_once(lambda: state.pool.extend(tenant, session, messages),
                            lambda ids: {i: when_aside(m) for i, m in stored(ids).items()},
                            [when_aside(m) for m in messages])
    if already:
        kept = stored(ids)
        return Mem0Results(results=[_item(session, scope, kept[i]).model_copy(update={"event": "NONE"}) for i in ids])
    state.metrics.count("rdmem_messages_stored_total", len(ids))
    items = [_item(session, scope, {**m, "id": i}) for m, i in zip(messages, ids, strict=True)]
    return Mem0Results(results=[it.model_copy(update={"event": "ADD"}) for it in items])


_Id = Annotated[str | None, Query(json_schema_extra={"pattern": f"^$|{SESSION_NAME_PATTERN}"})]  # "": absent


@router.get("/memories", response_model=Mem0Results, operation_id="mem0_list", response_model_exclude_none=True)
def get_memories(tenant: Tenant, request: Request, user_id: _Id = None, agent_id: _Id = None, run_id: _Id = None,
                 top_k: Annotated[int | None, Query(ge=1, le=1000)] = None,
                 limit: Annotated[int | None, Query(ge=1, le=1000)] = None) -> Mem0Results:
    """Every memory of the scope (and of the scopes that hold it), oldest first."""
    scope = _scope({"user_id": user_id, "agent_id": agent_id, "run_id": run_id})
    items = [_item(s, have, m) for s, have in _matching(request, tenant, scope) for m in _all(request, tenant, s)]
    order = sorted(range(len(items)), key=lambda i: (_when(items[i].created_at), i))  # over every scope held
    return Mem0Results(results=[items[i] for i in order[: top_k or limit or 100]])


def _when(created_at: str | None) -> float:
    """A memory's time for ordering (a time without a zone is UTC; one that is not ISO 8601 comes last)."""
    try:
        moment = datetime.fromisoformat(created_at or "")
    except ValueError:
        return float("inf")
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


@router.get("/memories/{memory_id}", response_model=Mem0Item, operation_id="mem0_get", response_model_exclude_none=True)
def get_memory(memory_id: str, tenant: Tenant, request: Request) -> Mem0Item:
    session, message = _the_memory(request, tenant, memory_id)
    return _item(session, dict(parse_qsl(session[len(MEM0_PREFIX):])), message)


@router.delete("/memories/{memory_id}", operation_id="mem0_delete")
def delete_memory(memory_id: str, tenant: Tenant, request: Request) -> dict[str, str]:
    session, message = _the_memory(request, tenant, memory_id)
    if not request.app.state.rdmem.pool.manager(tenant, session).delete([message["id"]]):
        raise ApiError(404, f"Memory with id {memory_id} not found")
    return {"message": "Memory deleted successfully"}


@router.post("/search", response_model=Mem0Results, operation_id="mem0_search", response_model_exclude_none=True)
def search_memories(body: Mem0Search, tenant: Tenant, request: Request) -> Mem0Results:
    """The memories of the scope that best match the query, best first, each with its ``score``: the cosine
    similarity of the query and the memory (``threshold`` drops those below it)."""
    state = request.app.state.rdmem
    filters = body.filters.model_dump(exclude_none=True) if body.filters else {}
    scope = _scope({**filters, **{k: v for k, v in body.model_dump().items() if k in _SCOPE and v}})
    k = body.top_k or body.limit or 20
    check_text(body.query, "query", state.settings)
    if k > state.settings.max_page:
        raise ApiError(400, f"top_k must be at most {state.settings.max_page}, got {k}")
    found = []  # each scope's best k by rdmem's ranking (lexical and dense, fused), then scored alike
    for session, have in _matching(request, tenant, scope):
        mem = state.pool.manager(tenant, session)
        hits = mem.search(body.query, k=k)
        given = mem.originals([h["id"] for h in hits])  # every field stored (created_at, metadata)
        found += [(session, have, given[h["id"]]) for h in hits if h["id"] in given]
    scores = _similarities(state.pool.embedder_for(tenant), body.query, [_text(m) for _, _, m in found])
    hits = sorted(((s, _item(session, have, m, s)) for (session, have, m), s in zip(found, scores, strict=True)
                   if body.threshold is None or s >= body.threshold), key=lambda h: -h[0])
    return Mem0Results(results=[item for _, item in hits[:k]])


def _similarities(embedder: Any, query: str, texts: list[str]) -> list[float]:
    """The cosine similarity of ``query`` and each text (0 for a text with no vector, such as an empty one)."""
    if not texts:
        return []
    vectors = np.asarray(embedder.embed([query, *texts]), dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1)
    norms[norms == 0] = np.inf
    unit = vectors / norms[:, None]
    return [round(float(s), 6) for s in unit[1:] @ unit[0]]


@router.delete("/memories", operation_id="mem0_delete_all")
def delete_memories(tenant: Tenant, request: Request, user_id: _Id = None, agent_id: _Id = None,
                    run_id: _Id = None) -> dict[str, str]:
    """Delete every memory of the scope (and of the scopes that hold it)."""
    scope = _scope({"user_id": user_id, "agent_id": agent_id, "run_id": run_id})
    state = request.app.state.rdmem
    for session, _ in _matching(request, tenant, scope):
        state.pool.delete_session(tenant, session)
    return {"message": "All relevant memories deleted"}
