"""The OpenAI-compatible compacting proxy: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Per request: find the session (``X-Rdmem-Session``, else the request's
``user``; without either, the request is compacted on its own and nothing is
stored, unless ``--derive-sessions``), store the messages it has not seen yet
(a client resends its whole history each time), and, if the request is larger
than the model's window less the reply's reserve, replace its messages by the
session's compacted context (rd, the last user message as the query, the
archive brought back by it). A request that fits as sent goes on as soon as
that is known (at once when its size says so), and is answered, while its new
messages are stored. Forward it with the client's own
``Authorization`` (and an allow-list of the client's headers), relay the
answer (streamed chunk by chunk when ``stream`` is true, as the upstream sent
it), and store the assistant's reply after it has reached the client (with
the request's record for the session's log, in one write).

It fails open, and model access never waits on memory for longer than
``memory_timeout``: if anything of rdmem's fails or is late (the store down or
locked included), the original request goes to the model unchanged (one line
in the log). The upstream's errors reach the client as the upstream sent them.
Headers say what happened: ``X-Rdmem-Session`` (absent: no session),
``X-Rdmem-Memory`` (``session`` or ``none``), ``X-Rdmem-Tokens-Before``,
``X-Rdmem-Tokens-After``, ``X-Rdmem-Compacted`` (``true``, ``false`` or
``failed``), ``X-Rdmem-Skipped`` (messages not stored) and ``X-Rdmem-Warning``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from ..errors import InvalidInput
from ..limits import HasLimits, Limits, escapes_lone_surrogate, lone_surrogate, read_chat_body
from ..messages import Message
from ._proxy_memory import SESSION_HEADER, Prepared, prepare, session_of, store_reply, surely_fits
from ._replies import ReplyCollector, collect, whole_events
from .auth import ProxyTenant
from .errors import ApiError, error_body
from .protocol import ErrorResponse
from .sessions import DELETES_AT_START

__all__ = ["router", "FORWARDED_HEADERS", "PASSED_BACK_HEADERS", "read_request"]

log = logging.getLogger("rdmem.server")
router = APIRouter(prefix="/v1", tags=["proxy"])
#: The client's headers the upstream is sent (any other, Cookie and X-Forwarded-For included, stays here).
FORWARDED_HEADERS = ("authorization", "openai-organization", "openai-project", "openai-beta", "content-type",
                     "accept", "user-agent", "x-request-id", "idempotency-key", "x-stainless-retry-count")
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "the body is not a chat completion request (a JSON object with a "
          "'messages' list, valid Unicode, not too deeply nested)"},
    401: {"model": ErrorResponse, "description": "the rdmem key (X-Rdmem-Key) is missing, invalid or revoked"}}


#: The upstream's headers its answer is relayed with (any other stays here): what a client reads to retry
#: (``Retry-After``, OpenAI's ``retry-after-ms`` and ``x-should-retry``, the rate limits), to follow a redirect,
#: and to report a request to its provider.
PASSED_BACK_HEADERS = ("content-type", "x-request-id", "openai-processing-ms", "openai-version", "openai-organization",
                       "retry-after", "retry-after-ms", "x-should-retry", "location")


def _forward_headers(request: Request) -> list[tuple[bytes, bytes]]:
    """The allowed client headers, as the client sent their bytes (a header is Latin-1 on the wire: a
    ``User-Agent`` with UTF-8 in it goes on as it came)."""
    return [(k, v) for k, v in request.headers.raw
            if (name := k.decode("latin-1").lower()) in FORWARDED_HEADERS or name.startswith("x-stainless-")]


def _passed_back(resp: Any, *, content_type: bool = True) -> dict[str, str]:
    """The upstream answer's headers that reach the client (``PASSED_BACK_HEADERS``, and ``x-ratelimit-*``)."""
    return {k: v for k, v in resp.headers.items()
            if (k.lower() in PASSED_BACK_HEADERS and (content_type or k.lower() != "content-type"))
            or k.lower().startswith("x-ratelimit-")}


def _upstream_failure(exc: Exception, headers: dict[str, str] | None = None) -> JSONResponse:
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return JSONResponse(error_body("upstream_timeout", f"the model did not answer in time ({type(exc).__name__})"),
                            status_code=504, headers=headers)
    return JSONResponse(error_body("bad_upstream", f"cannot reach the model: {type(exc).__name__}: {exc}"),
                        status_code=502, headers=headers)


def read_request(raw: bytes, limits: HasLimits | None = None) -> dict[str, Any]:
    """The request's body, checked as far as the proxy needs it (a 400 otherwise): the one place it is parsed,
    within the limits (:func:`rdmem.limits.read_chat_body`: the messages counted while they are read)."""
    try:
        body = read_chat_body(raw, limits or Limits())
    except InvalidInput as exc:
        raise ApiError(400, str(exc), code="invalid_request") from None
    # The body was decoded strictly: only a JSON escape of a surrogate (\uD800-\uDFFF) that is not half of a
    # pair (an emoji is a pair) can make one; the body is walked for its path only then.
    bad = lone_surrogate(body) if escapes_lone_surrogate(raw) else None
    if bad is not None:
        raise ApiError(400, f"{bad} is not valid Unicode (a lone surrogate)", code="invalid_request")
    return body


def _budget(state: Any, body: dict[str, Any], headers: dict[str, str]) -> int:
    """The model's window less the reply's reserve (``max_completion_tokens``/``max_tokens``, or the default)."""
    reserve = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve <= 0:
        reserve = state.settings.reply_reserve
    budget: int = state.settings.context_window - reserve
    if budget <= 0:
        note = (f"max_tokens {reserve} leaves no room in the {state.settings.context_window}-token window: "
                "not compacted")
        log.warning("rdmem proxy: %s", note)
        headers["X-Rdmem-Warning"] = note
    return budget


#: Where a reply goes: (tenant, session, budget, the request's record or None, ``pool.deletes`` as it began).
_Where = tuple[str, str, int, "dict[str, Any] | None", int]


#: The reply stores under way, by (server, tenant, session): the session's next request starts its memory work
#: only after the last one (a reply is never stored twice, once here and once as a resent message, nor after
#: the next request's messages).
_pending: dict[tuple[int, str, str], asyncio.Future[Any]] = {}


def _store_later(state: Any, where: _Where, message: dict[str, Any] | None,
                 after: asyncio.Future[Any] | None = None, refused: bool = False) -> None:
    """Store the reply in a worker thread, off the relay, once ``after`` (the request's own memory work,
    however it ended) is done: the client's answer never waits on the store. The session's next request waits
    for it (:data:`_pending`); its other readers and writers in this process (REST, mem0, MCP) too, within
    ``memory_timeout`` (:meth:`SessionPool.store_begins`), so the answer's reader finds it."""
    tenant, session = where[0], where[1]
    done = state.pool.store_begins(tenant, session)
    loop = asyncio.get_running_loop()

    async def run() -> None:
        try:
            conv: tuple[Message, ...] = ()
            reply, shared, forget, question = message, False, (), None
            if after is not None:
                await asyncio.wait({after})  # its outcome is the request's to report, not this store's
                if not after.cancelled() and after.exception() is None and isinstance(after.result(), Prepared):
                    prep = after.result()
                    conv, shared, question = prep.conv, prep.shared, prep.question  # what the reply follows, how
                    forget = prep.stored if refused else ()
                else:  # the request's messages were not stored (a limit, a store error): nor is the reply, which
                    reply = None  # would come before its question; the client's next request carries both
            await loop.run_in_executor(None, functools.partial(store_reply, state, *where[:4], reply, conv, shared,
                                                               mark=where[4], refused=forget, question=question))
        finally:
            state.pool.store_done(tenant, session, done)

    key = (id(state), tenant, session)
    task = _pending[key] = asyncio.ensure_future(run())
    task.add_done_callback(lambda t: _pending.pop(key, None) if _pending.get(key) is t else None)


async def drain(state: Any, timeout: float) -> int:
    """Wait (at most ``timeout`` seconds) for the replies this server is still storing (a shutdown must not
    drop an answered turn's reply); the number left unstored, each logged."""
    left = {key: task for key, task in list(_pending.items()) if key[0] == id(state)}
    if left:
        await asyncio.wait(left.values(), timeout=timeout)
    lost = [key for key, task in left.items() if not task.done()]
    for _, tenant, session in lost:
        log.warning("rdmem proxy: shutting down before the last reply of session %r (tenant %r) was stored; "
                    "the client's next request carries it", session, tenant)
    return len(lost)


class _Memory:
    """The request's memory work in a worker thread, bounded by ``memory_timeout`` in all: :meth:`fits` says
    as soon as the request fits the window as sent (it may then go to the model, and be answered, while
    memory stores what is new: :meth:`counted`), :meth:`result` waits for the whole (:func:`prepare`)."""

    def __init__(self, state: Any, args: tuple[Any, ...], after: asyncio.Future[Any] | None) -> None:
        loop = asyncio.get_running_loop()
        self._loop, self._timeout = loop, state.settings.memory_timeout
        self._deadline = loop.time() + self._timeout
        self._go: asyncio.Future[None] = loop.create_future()
        self._fits: asyncio.Future[Prepared] = loop.create_future()

        def signal(future: asyncio.Future[Any], value: Any) -> None:  # from the worker thread
            loop.call_soon_threadsafe(lambda: None if future.done() else future.set_result(value))

        async def run() -> Prepared:
            if after is not None:  # the session's previous reply, stored off the relay, goes first
                await asyncio.wait({after})
            return await loop.run_in_executor(None, functools.partial(
                prepare, *args, go=lambda: signal(self._go, None), fits=lambda sent: signal(self._fits, sent)))

        self.job: asyncio.Future[Prepared] = asyncio.ensure_future(run())

    async def fits(self) -> bool:
        """``True`` once the request is known to fit as sent and the work goes on; ``False`` when it is done
        (or late: :meth:`result` then says so)."""
        either: set[asyncio.Future[Any]] = {self._go, self._fits, self.job}
        await asyncio.wait(either, timeout=self._left(), return_when=asyncio.FIRST_COMPLETED)
        return not self.job.done() and (self._go.done() or self._fits.done())

    async def counted(self) -> Prepared:
        """What a request that fits as sent goes on as (its tokens, its record), once counted; what it adds
        to the session may still be being stored (:attr:`job`)."""
        await asyncio.wait({self._fits, self.job}, timeout=self._left(), return_when=asyncio.FIRST_COMPLETED)
        if not self._fits.done():
            return await self.result()
        self.job.add_done_callback(self._stored)
        return self._fits.result()

    def _stored(self, job: asyncio.Future[Prepared]) -> None:
        """The store of a request answered without waiting for it: a failure is one line in the log (the client
        resends what was not stored with its next request)."""
        exc = None if job.cancelled() else job.exception()
        if exc is not None:
            log.warning("rdmem proxy: could not store the request's new messages (%s: %s); they are stored when "
                        "the client sends them again", type(exc).__name__, exc)

    async def result(self) -> Prepared:
        try:
            return await asyncio.wait_for(asyncio.shield(self.job), self._left())
        except asyncio.TimeoutError:
            raise TimeoutError(f"memory did not answer within {self._timeout} s") from None

    def _left(self) -> float:
        return max(0.0, self._deadline - self._loop.time())


def _applied(done: Prepared, headers: dict[str, str]) -> dict[str, Any] | None:
    """Say in ``headers`` what memory did; the request's record for the session's log."""
    headers.update({"X-Rdmem-Tokens-Before": str(done.before), "X-Rdmem-Tokens-After": str(done.after),
                    "X-Rdmem-Compacted": "true" if done.compacted else "false"})
    if done.skipped:
        headers["X-Rdmem-Skipped"] = str(done.skipped)
    if done.note:
        headers["X-Rdmem-Warning"] = done.note
    return done.saving


def _failed_open(state: Any, session: str | None, exc: Exception, headers: dict[str, str]) -> None:
    log.warning("rdmem proxy: compaction failed for session %r (%s: %s); forwarding the request unchanged",
                session, type(exc).__name__, exc)
    state.metrics.count("rdmem_proxy_fail_open_total")
    headers["X-Rdmem-Compacted"] = "failed"


@router.post("/chat/completions", operation_id="chat_completions", responses=_ERRORS)
async def chat_completions(request: Request, tenant: ProxyTenant) -> Response:
    """An OpenAI chat completion, through rdmem: the history compacted when it does not fit the model."""
    state = request.app.state.rdmem
    mark = request.scope.get(DELETES_AT_START, state.pool.deletes)  # a delete from then on came after it
    raw = await request.body()
    body = read_request(raw, state.settings)  # the limits: a 400 naming limit and field
    session, shared = (None, False) if tenant is None else \
        session_of(request.headers, body, tenant, state.settings.derive_sessions)
    headers = {"X-Rdmem-Compacted": "false", "X-Rdmem-Memory": "session" if session else "none"}
    if session:  # a header's value is Latin-1 and cannot begin or end with a space: percent-encoded then, and
        # whenever it holds a '%' (so that a '%' always means encoded)
        plain = session.isascii() and session.isprintable() and "%" not in session and session == session.strip()
        headers[SESSION_HEADER] = session if plain else quote(session, safe="")
    elif tenant is not None and (user := body.get("user")) is not None and str(user).strip():  # a number too
        headers["X-Rdmem-Warning"] = ("'user' is not a session name (1-256 characters, no control characters, not "
                                      "'mem0:...', mem0's memories): no memory for this request; name one with X-Rdmem-Session")
    budget = _budget(state, body, headers)
    forward, saving, memory = body, None, None
    job: asyncio.Future[Prepared] | None = None
    try:
        if tenant is None:
            raise RuntimeError("the rdmem key could not be checked")
        memory = _Memory(state, (state, tenant, session, shared, body, budget, mark),
                         _pending.get((id(state), tenant, session or "")))
        job = memory.job  # however memory ends for this request (late, failed, storing), its reply goes after it
        if session:  # the session's readers through this process wait for what it stores (answered once counted)
            begun = state.pool.store_begins(tenant, session)
            job.add_done_callback(lambda _: state.pool.store_done(tenant, session, begun))
        # fits as sent (surely, by its size; or once counted): the model is called while memory works
        if not (surely_fits(raw, body["messages"], budget) or await memory.fits()):
            # compacted (or late): the model waits for it, within the bound
            done = await memory.result()
            forward, saving, memory = {**body, "messages": done.messages}, _applied(done, headers), None
    except Exception as exc:  # fail open: the model gets the request as the client sent it
        _failed_open(state, session, exc, headers)
        memory = None
    stream = bool(body.get("stream"))
    # unchanged: the client's own bytes go on (nothing to serialise again); else the compacted request
    payload: dict[str, Any] = {"content": raw} if forward is body else {"json": forward}
    upstream: asyncio.Future[Any]
    try:  # on its way; memory counts and stores meanwhile (it fits as sent)
        upstream = asyncio.ensure_future(state.http.send(state.http.build_request(
            "POST", "/chat/completions", **payload, headers=_forward_headers(request)), stream=stream))
    except Exception as exc:  # a request httpx cannot make: answered below as one it could not send
        upstream = asyncio.get_running_loop().create_future()
        upstream.set_exception(exc)
    if memory is not None:
        try:
            saving = _applied(await memory.counted(), headers)
        except Exception as exc:
            _failed_open(state, session, exc, headers)
    where: _Where | None = (tenant, session, budget, saving, mark) if tenant is not None and session else None
    try:
        resp = await upstream
    except Exception as exc:
        _record_only(state, where, job)
        return _upstream_failure(exc, headers)
    if stream:
        return await _stream(state, resp, headers, where, job, lambda: _keeps(request, body))
    if where is not None and resp.is_success and await _keeps(request, body):
        try:
            reply = resp.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            reply = None
        _store_later(state, where, reply, job)
    elif where is not None:
        _record_only(state, where, job, resp.status_code)
    return Response(resp.content, status_code=resp.status_code, headers={**_passed_back(resp), **headers})


async def _keeps(request: Request, body: dict[str, Any]) -> bool:
    """Whether the session keeps the model's reply: one choice asked for (of ``n``, the client goes on with the
    one it chose, which its next request carries), and a client still there to read it (one that gave up, a
    timeout before the first byte, goes on from a retry or not at all)."""
    n = body.get("n")
    return not (isinstance(n, int) and n > 1) and not await request.is_disconnected()


def _record_only(state: Any, where: _Where | None, after: asyncio.Future[Any] | None, status: int = 0) -> None:
    """No reply to store: the request's record alone, off the relay; the messages it stored deleted again when
    the model refused them (``status`` 400, 413 or 422, :func:`~rdmem.server._proxy_memory.store_reply`)."""
    refused = status in (400, 413, 422)
    if where is not None and (where[3] is not None or refused):
        _store_later(state, where, None, after, refused)


async def _stream(state: Any, resp: Any, headers: dict[str, str], where: _Where | None,
                  after: asyncio.Future[Any] | None, keeps: Callable[[], Awaitable[bool]]) -> Response:
    """Relay the upstream's server-sent events chunk by chunk, as sent (decoded: the upstream may compress
    them, as the proxy's client accepts, and the client is answered without a ``Content-Encoding``); store the
    reply once it is complete, if the session ``keeps()`` it."""
    if not resp.is_success:
        _record_only(state, where, after, resp.status_code)
        content = await resp.aread()
        await resp.aclose()
        return Response(content, status_code=resp.status_code,
                        headers={"content-type": "application/json", **_passed_back(resp), **headers})

    async def relay() -> AsyncIterator[bytes]:
        import httpx

        collector = ReplyCollector() if where is not None else None
        stored, tail = False, b""
        try:
            async for chunk in resp.aiter_bytes():
                if collector is not None:
                    collector = collect(collector, chunk, where)
                    if collector is not None and collector.done:
                        assert where is not None
                        _store_later(state, where, collector.message() if await keeps() else None, after)
                        collector, stored = None, True
                whole, tail = whole_events(tail + chunk)
                if whole:
                    yield whole
            if tail:  # the stream ended without a blank line after its last event: as sent
                yield tail
            if collector is not None and collector.end():  # ended after its finish_reason, without [DONE]
                assert where is not None
                _store_later(state, where, collector.message() if await keeps() else None, after)
                collector, stored = None, True
            elif collector is not None and collector.failed:
                log.warning("rdmem proxy: the model's stream for session %r carried an error; the partial reply "
                            "is not stored", where[1] if where else None)
        except httpx.HTTPError as exc:  # the model's stream broke off: the client is told in the stream, as OpenAI does
            log.warning("rdmem proxy: the model's stream broke off (%s: %s); the partial reply is not stored",
                        type(exc).__name__, exc)
            message = f"the model's stream broke off ({type(exc).__name__}); the partial reply was not stored"
            yield b"data: " + json.dumps(error_body("bad_upstream", message)).encode() + b"\n\n"  # not after half an event
        finally:  # also when the client went away: the upstream is closed with it
            if not stored:
                _record_only(state, where, after)
            await resp.aclose()

    return StreamingResponse(relay(), status_code=resp.status_code,
                             media_type=resp.headers.get("content-type", "text/event-stream"),
                             headers={**_passed_back(resp, content_type=False), **headers})


@router.get("/models", operation_id="models", responses={401: _ERRORS[401]})
async def models(request: Request, tenant: ProxyTenant) -> Response:
    """The upstream's models, passed through."""
    return await _passed_through(request, "/models")


@router.get("/models/{model:path}", operation_id="model", responses={401: _ERRORS[401]})
async def model(request: Request, tenant: ProxyTenant, model: str) -> Response:
    """One of the upstream's models (``client.models.retrieve``), passed through (a model id may hold ``/``)."""
    if any(part in ("", ".", "..") for part in model.split("/")):  # the upstream's other paths are not ours to
        raise ApiError(400, f"not a model id: {model!r}")  # reach ("../admin" resolves against its URL)
    return await _passed_through(request, "/models/" + quote(model, safe="/:@"))


async def _passed_through(request: Request, path: str) -> Response:
    try:
        resp = await request.app.state.rdmem.http.get(path, headers=_forward_headers(request))
    except Exception as exc:
        return _upstream_failure(exc)
    return Response(resp.content, status_code=resp.status_code, headers=_passed_back(resp))
