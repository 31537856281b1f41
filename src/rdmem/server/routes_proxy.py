"""The OpenAI-compatible compacting proxy: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Per request: find the session (``X-Rdmem-Session``, else the request's
``user``, else a hash of its system prompt and first user message), store the
messages it has not seen yet (a client resends its whole history each time),
and, if the request is larger than the model's window less the reply's
reserve, replace its messages by the session's compacted context (rd, the
last user message as the query, the archive brought back by it). Then forward
it with the client's own ``Authorization``, relay the answer (streamed chunk
by chunk when ``stream`` is true), and store the assistant's reply. It fails
open: if anything of rdmem's fails, the original request goes to the model
unchanged (one line in the log). The upstream's errors reach the client as
the upstream sent them. Headers say what happened: ``X-Rdmem-Session``,
``X-Rdmem-Tokens-Before``, ``X-Rdmem-Tokens-After``, ``X-Rdmem-Compacted``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..limits import read_chat_body
from ..messages import chat_fields, parse_messages
from ..tokens import content_text
from ._replies import ReplyCollector
from .auth import RDMEM_KEY_HEADER, ProxyTenant
from .errors import error_body
from .savings import record

__all__ = ["router"]

log = logging.getLogger("rdmem.server")
router = APIRouter(prefix="/v1", tags=["proxy"])
SESSION_HEADER = "X-Rdmem-Session"
# Headers that are the connection's, or ours: never forwarded.
_HOP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
        "accept-encoding", "proxy-authorization", "proxy-connection", SESSION_HEADER.lower(), RDMEM_KEY_HEADER.lower()}


def _forward_headers(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.headers.items() if k.lower() not in _HOP}


def _session_of(request: Request, body: dict[str, Any]) -> str:
    given = request.headers.get(SESSION_HEADER) or body.get("user")
    if isinstance(given, str) and given.strip():
        return given.strip()
    msgs = body.get("messages") or []
    system = [m.get("content") for m in msgs if isinstance(m, dict) and m.get("role") in ("system", "developer")]
    first = next((m.get("content") for m in msgs if isinstance(m, dict) and m.get("role") == "user"), None)
    digest = hashlib.sha256(json.dumps([system, first], sort_keys=True, default=str).encode()).hexdigest()
    return f"chat-{digest[:16]}"


def _upstream_failure(exc: Exception) -> JSONResponse:
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return JSONResponse(error_body("upstream_timeout", f"the model did not answer in time ({type(exc).__name__})"),
                            status_code=504)
    return JSONResponse(error_body("bad_upstream", f"cannot reach the model: {type(exc).__name__}: {exc}"),
                        status_code=502)


def _budget(state: Any, body: dict[str, Any]) -> int:
    """The model's window less the reply's reserve (``max_completion_tokens``/``max_tokens``, or the default)."""
    reserve = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve <= 0:
        reserve = state.settings.reply_reserve
    return state.settings.context_window - reserve


#: A resend that drops at most this many stored messages at the end (a regenerated or retried reply, an edited
#: last question) replaces them; a larger divergence keeps both branches (nothing is deleted but a last turn).
_REPLACEABLE = 4


def _prepare(state: Any, tenant: str, session: str, body: dict[str, Any],
             budget: int) -> tuple[list[dict[str, Any]], int, int, bool]:
    """Store what is new and compact if needed (in a worker thread): the messages to send, the tokens before
    and after, and whether they were compacted.

    The request's leading system messages travel with every request (a client may change them each
    time): they are not stored, they are matched by nothing, and a compacted request is them followed
    by the session's context within what they leave of the budget."""
    messages = body["messages"]
    parsed = parse_messages(messages)  # a bad message fails here (open: the request goes on as it was)
    lead = next((i for i, m in enumerate(parsed) if m.chat["role"] not in ("system", "developer")), len(parsed))
    head, conv = [m.chat for m in parsed[:lead]], parsed[lead:]
    mem = state.pool.manager(tenant, session, budget=max(budget, 1))
    new, dropped = mem.resent([m.chat for m in conv])
    if dropped and len(dropped) <= _REPLACEABLE:
        mem.delete(dropped)  # the client went on from an earlier point: its history is the one kept
    if new:
        state.pool.extend(tenant, session, [{**conv[i].chat, **conv[i].extra} for i in new],
                          budget=max(budget, 1))  # charged to the tenant's stored-tokens rate
        state.metrics.count("rdmem_messages_stored_total", len(new))
    tok = mem.tokenizer
    before = tok.messages_tokens([m.chat for m in parsed])
    if budget <= 0 or before <= budget:
        record(state.store, mem.session, before, before, False)
        return messages, before, before, False
    room = budget - tok.messages_tokens(head)
    if room <= 0:
        raise ValueError(f"the system messages alone take {budget - room} of the {budget} tokens of the window")
    query = next((content_text(m.chat.get("content")) for m in reversed(conv) if m.chat["role"] == "user"), None)
    ctx = mem.context(query or None, budget=room, warn=False)
    state.metrics.count("rdmem_compactions_total")
    state.metrics.count("rdmem_tokens_in_total", before)
    state.metrics.count("rdmem_tokens_out_total", budget - room + ctx.tokens)
    record(state.store, mem.session, before, budget - room + ctx.tokens, True)
    return head + ctx.messages, before, budget - room + ctx.tokens, True


def _store_reply(state: Any, tenant: str, session: str, budget: int, message: dict[str, Any] | None) -> None:
    if not message or message.get("role") != "assistant":
        return
    try:
        state.pool.extend(tenant, session, [chat_fields(message)], budget=max(budget, 1))
        state.metrics.count("rdmem_messages_stored_total")
    except Exception as exc:  # the client has its answer; the reply comes again with the next request
        log.warning("rdmem proxy: could not store the reply in session %r: %s", session, exc)


@router.post("/chat/completions", operation_id="chat_completions")
async def chat_completions(request: Request, tenant: ProxyTenant) -> Response:
    """An OpenAI chat completion, through rdmem: the history compacted when it does not fit the model."""
    state = request.app.state.rdmem
    body = read_chat_body(await request.body(), state.settings)  # the limits: a 400 naming limit and field
    session = _session_of(request, body)
    budget = _budget(state, body)
    headers = {SESSION_HEADER: session, "X-Rdmem-Compacted": "false"}
    try:
        sent, before, after, compacted = await run_in_threadpool(_prepare, state, tenant, session, body, budget)
        forward = {**body, "messages": sent}
        headers.update({"X-Rdmem-Tokens-Before": str(before), "X-Rdmem-Tokens-After": str(after),
                        "X-Rdmem-Compacted": "true" if compacted else "false"})
    except Exception as exc:  # fail open: the model gets the request as the client sent it
        log.warning("rdmem proxy: compaction failed for session %r (%s: %s); forwarding the request unchanged",
                    session, type(exc).__name__, exc)
        state.metrics.count("rdmem_proxy_fail_open_total")
        forward, headers["X-Rdmem-Compacted"] = body, "failed"
    if body.get("stream"):
        return await _stream(request, state, forward, headers, (tenant, session, budget))
    try:
        resp = await state.http.post("/chat/completions", json=forward, headers=_forward_headers(request))
    except Exception as exc:
        return _upstream_failure(exc)
    if resp.is_success:
        try:
            reply = resp.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            reply = None
        await run_in_threadpool(_store_reply, state, tenant, session, budget, reply)
    passed = {k: v for k, v in resp.headers.items() if k.lower() in ("content-type", "x-request-id", "openai-processing-ms")}
    return Response(resp.content, status_code=resp.status_code, headers={**passed, **headers})


async def _stream(request: Request, state: Any, forward: dict[str, Any], headers: dict[str, str],
                  where: tuple[str, str, int]) -> Response:
    """Relay the upstream's server-sent events chunk by chunk; store the reply once the stream is complete."""
    upstream = state.http.build_request("POST", "/chat/completions", json=forward, headers=_forward_headers(request))
    try:
        resp = await state.http.send(upstream, stream=True)
    except Exception as exc:
        return _upstream_failure(exc)
    if not resp.is_success:
        content = await resp.aread()
        await resp.aclose()
        return Response(content, status_code=resp.status_code,
                        headers={"content-type": resp.headers.get("content-type", "application/json"), **headers})

    async def relay() -> AsyncIterator[bytes]:
        collector, stored = ReplyCollector(), False
        try:
            async for chunk in resp.aiter_raw():
                collector.feed(chunk)
                if collector.done and not stored:
                    # Stored before the end of the stream reaches the client: once it has the whole answer,
                    # the next request finds the reply in the session.
                    stored = True
                    await run_in_threadpool(_store_reply, state, *where, collector.message())
                yield chunk
        finally:  # also when the client went away: the upstream is closed with it
            await resp.aclose()

    return StreamingResponse(relay(), status_code=resp.status_code,
                             media_type=resp.headers.get("content-type", "text/event-stream"), headers=headers)


@router.get("/models", operation_id="models")
async def models(request: Request, tenant: ProxyTenant) -> Response:
    """The upstream's models, passed through."""
    state = request.app.state.rdmem
    try:
        resp = await state.http.get("/models", headers=_forward_headers(request))
    except Exception as exc:
        return _upstream_failure(exc)
    return Response(resp.content, status_code=resp.status_code,
                    headers={"content-type": resp.headers.get("content-type", "application/json")})
