"""Sessions as the service sees them: every session belongs to a tenant, and managers are pooled.

A tenant's session ``s`` is the store's session ``t/<tenant>/<s>`` (tenant
names cannot hold ``/``, so no tenant can name another's session), and every
route reaches a session only through :meth:`SessionPool.manager` or
:func:`store_session`. The pool keeps one :class:`~rdmem.MemoryManager` per
tenant, session, policy and budget (least recently used first out), and
the managers of one session share one view of it (it is read and held
once, whatever the budgets of the requests): the store is the source of
truth, so a pooled manager is as current as a new one, without reading the
whole session again on every request.

Messages are stored without waiting for their vectors (managers with
``embedding="deferred"``): the pool's :class:`~rdmem.EmbeddingWorker` embeds
them in batches off the request path, started and stopped with the app
(:meth:`SessionPool.start`, :meth:`SessionPool.stop`), and woken by every
store. Several processes on one store share the work through the store's
leased claims.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from typing import Annotated, Any
from urllib.parse import quote, unquote

from fastapi import Path
from starlette.convertors import Convertor, register_url_convertor
from starlette.types import ASGIApp, Receive, Scope, Send

from .._embedding import EmbeddingWorker
from ..embed import BatchingEmbedder, CachedEmbedder, Embedder, MiniLMEmbedder
from ..manager import MemoryManager
from ..messages import parse_messages
from ..names import MAX_SESSION_CHARS, SESSION_NAME_PATTERN
from ..reconstruct import MARKER_MODES
from ..sessions import tenant_session_infos, tenant_store_name
from ..store import SessionInfo, Store
from .errors import ApiError
from .ratelimit import RateLimiter
from .settings import ServerSettings

__all__ = ["MEM0_PREFIX", "SessionPool", "SessionName", "SessionPathMiddleware", "store_session", "tenant_sessions",
           "MAX_SESSION_CHARS"]

# The pattern is documented, not enforced here: store_session enforces the rule with a message that says why.
SessionName = Annotated[str, Path(min_length=1, max_length=MAX_SESSION_CHARS,
                                  json_schema_extra={"pattern": SESSION_NAME_PATTERN},
                                  description="the session's name (yours to choose; any text of at most "
                                  f"{MAX_SESSION_CHARS} characters, not only whitespace, without control "
                                  "characters or line separators)")]


# -- a session's name in a URL ---------------------------------------------------------------------------
# A name may hold "/" ("org/alice"), sent as %2F in a path segment; but routing reads the decoded path, where
# it splits the segment: "/v1/sessions/org%2Falice" reached no route, and DELETE ".../a%2Fmessages%2Fm0" (the
# session "a/messages/m0") deleted message m0 of session "a". So under /v1/sessions/ the path is routed with
# %2F (and %25) still escaped, and each "{x:segment}" is decoded once it is matched.
SESSIONS_PATH = "/v1/sessions/"
_KEPT = re.compile(r"(%2[fF]|%25)")


class _Segment(Convertor[str]):
    """One path segment, decoded once matched (:class:`SessionPathMiddleware` left its %2F and %25 escaped)."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("segment", _Segment())


def _routed_path(scope: Scope) -> str:
    """The path to route a request under :data:`SESSIONS_PATH` by: decoded but for %2F and %25 (and any "%"
    the decoding made, escaped again), so that a segment's "/" does not split it."""
    path: str = scope["path"]
    try:
        raw = scope["raw_path"].decode("ascii")
    except (KeyError, AttributeError, UnicodeDecodeError):
        raw = None
    if raw is None or unquote(raw) != path:  # no raw path, or not this one: no "/" can be told apart
        return path.replace("%", "%25")
    pieces = _KEPT.split(raw)
    return "".join(p.upper() if i % 2 else unquote(p).replace("%", "%25") for i, p in enumerate(pieces))


class SessionPathMiddleware:
    """Routes the requests under :data:`SESSIONS_PATH` by :func:`_routed_path` (see the note above)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(scope.get("root_path", "") + SESSIONS_PATH):
            scope = {**scope, "path": _routed_path(scope)}
        await self.app(scope, receive, send)


#: The scope's key for :attr:`SessionPool.deletes` as the request's headers arrived (:class:`DeletesMiddleware`).
DELETES_AT_START = "rdmem.deletes"


class DeletesMiddleware:
    """Notes in each request's scope, as its headers arrive (before its body is read), how many sessions this
    process has deleted (:attr:`SessionPool.deletes`): a proxy request stores nothing in a session deleted after
    it began, also while its body was still coming in."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = getattr(getattr(scope.get("app"), "state", None), "rdmem", None)
        if scope["type"] == "http" and state is not None:
            scope[DELETES_AT_START] = state.pool.deletes
        await self.app(scope, receive, send)


#: How the mem0 API's sessions begin (``mem0:user_id=alice``): the proxy's ``user`` never names one (an end user
#: called "mem0:user_id=bob" read bob's memories); a name given on purpose does (a header, a REST path, MCP).
MEM0_PREFIX = "mem0:"


def store_session(tenant: str, session: str, field: str = "session") -> str:
    """The store's name for ``tenant``'s session ``session`` (checked: a clear 400 if it is not a name)."""
    try:
        return tenant_store_name(tenant, session, field)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None


def tenant_sessions(store: Store, tenant: str, within: str = "") -> list[tuple[str, SessionInfo]]:
    """``(session name, info)`` of every session of ``tenant`` (whose name starts with ``within``), by name."""
    return tenant_session_infos(store, tenant, within)


#: Sessions whose deletion this process remembers (:meth:`SessionPool.deleted_since`).
DELETES_KEPT = 65_536

#: Tenants whose query vectors a server keeps cached (least recently used dropped), and vectors per tenant.
TENANT_CACHES, TENANT_CACHE_ITEMS = 256, 20_000


class SessionPool:
    """Pooled managers over one store (shared by every request of this process)."""

    def __init__(self, store: Store, settings: ServerSettings, embedder: Embedder | None = None,
                 limiter: RateLimiter | None = None) -> None:
        self.store = store
        self.settings = settings
        self.limiter = limiter or RateLimiter()
        # One model for every session of this process, its calls batched across request threads; the worker
        # embeds stored messages with it directly, and each tenant's queries go through a cache of its own.
        self.embedder: Embedder = BatchingEmbedder(embedder if embedder is not None else MiniLMEmbedder())
        self._caches: OrderedDict[str, CachedEmbedder] = OrderedDict()
        self._caches_lock = threading.Lock()
        self._managers: OrderedDict[tuple[str, str, int], MemoryManager] = OrderedDict()
        self._lock = threading.Lock()
        self._storing: dict[str, list[threading.Event]] = {}  # store session -> what the proxy is storing in it
        self._deletes: OrderedDict[str, int] = OrderedDict()  # store session -> the count of deletes at its last
        self._deleted = 0
        self.worker = EmbeddingWorker(store, self.embedder, on_landed=self._landed)

    def embedder_for(self, tenant: str) -> Embedder:
        """The model through ``tenant``'s own cache of vectors: a cache shared by tenants would let one time
        whether another embedded a text (a cached query answers several times faster). At most
        :data:`TENANT_CACHES` tenants' caches are kept, :data:`TENANT_CACHE_ITEMS` vectors each."""
        with self._caches_lock:
            cache = self._caches.get(tenant)
            if cache is None:
                cache = self._caches[tenant] = CachedEmbedder(self.embedder, max_items=TENANT_CACHE_ITEMS)
            self._caches.move_to_end(tenant)
            while len(self._caches) > TENANT_CACHES:
                self._caches.popitem(last=False)
            return cache

    def start(self) -> None:
        """Start embedding in the background (first what earlier processes left unembedded)."""
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()

    def _landed(self, name: str) -> None:
        """Vectors of store session ``name`` landed: its pooled managers trim their working sets now (in the
        worker's thread, off the request path)."""
        with self._lock:
            managers = [m for k, m in self._managers.items() if k[0] == name]
        for mem in managers:
            mem.maintain()

    def manager(self, tenant: str, session: str, *, policy: str | None = None, budget: int | None = None,
                settled: bool = True) -> MemoryManager:
        """The pooled manager of ``tenant``'s ``session`` for ``policy`` and ``budget`` (the server's by default).

        ``settled``: first wait (``memory_timeout`` at most) for what the proxy is storing in the session off
        its requests' path (:meth:`store_begins`: a request's messages, a reply after its answer), so that
        whoever reads the session after an answer finds them; the proxy passes ``False`` (it orders its
        requests and replies itself, and a store must not wait for itself)."""
        name = store_session(tenant, session)
        if settled:
            self._settle(name)
        policy = policy or self.settings.policy
        budget = budget or self.settings.budget
        if budget > self.settings.max_budget:
            raise ApiError(400, f"budget must be at most {self.settings.max_budget} tokens, got {budget}")
        key = (name, policy, budget)
        with self._lock:
            mem = self._managers.get(key)
            if mem is None:
                mem = MemoryManager(budget=budget, policy=policy, store=self.store, session=name,
                                    embedder=self.embedder_for(tenant), embedding="deferred",
                                    markers=MARKER_MODES[self.settings.markers])
                peer = next((m for k, m in self._managers.items() if k[0] == name), None)
                if peer is not None:  # the session is read and held once, whatever the budgets and policies
                    mem._share_session(peer)
                self._managers[key] = mem
            self._managers.move_to_end(key)
            while len(self._managers) > self.settings.pool_size:
                self._managers.popitem(last=False)  # the store stays open: it is shared
            return mem

    # -- what the proxy stores off its requests' path -----------------------------------------------
    def store_begins(self, tenant: str, session: str) -> threading.Event:
        """The proxy stores something in the session off the request path (a request's messages, answered
        once counted; a reply, after its answer): until the returned event is passed to :meth:`store_done`,
        :meth:`manager` and :meth:`exists` make the session's readers and writers wait for it (bounded)."""
        name, done = store_session(tenant, session), threading.Event()
        with self._lock:
            self._storing.setdefault(name, []).append(done)
        return done

    def store_done(self, tenant: str, session: str, done: threading.Event) -> None:
        name = store_session(tenant, session)
        done.set()
        with self._lock:
            pending = self._storing.get(name, [])
            if done in pending:
                pending.remove(done)
            if not pending:
                self._storing.pop(name, None)

    def _settle(self, name: str) -> None:
        with self._lock:
            pending = list(self._storing.get(name, ()))
        if pending:
            deadline = time.monotonic() + self.settings.memory_timeout
            for done in pending:
                done.wait(max(0.0, deadline - time.monotonic()))

    def extend(self, tenant: str, session: str, messages: list[dict[str, Any]], *,
               budget: int | None = None) -> list[str]:
        """Store ``messages`` in ``tenant``'s session in one write, charged to the tenant's stored-tokens rate
        (the one way every front door stores: REST, mem0, the proxy, MCP)."""
        mem = self.manager(tenant, session, budget=budget)
        # Counted on the parsed messages, so a bad one gets the library's error, not the tokenizer's.
        with self.limiter.storing(tenant, lambda: mem.tokenizer.messages_tokens(
                [m.chat for m in parse_messages(messages, json_extras=True)])):
            ids = mem.extend(messages)
        self.worker.wake()
        return ids

    def exists(self, tenant: str, session: str) -> bool:
        """Whether the session is stored, once what the proxy is storing in it is (:meth:`store_begins`): a
        session a proxy request opens exists from its answer on, for a read or a delete through this process."""
        name = store_session(tenant, session)
        self._settle(name)
        return self.store.version(name) > 0

    def delete_session(self, tenant: str, session: str) -> None:
        """Delete a session for good (every front door's delete): noted first (:meth:`deleted_since`: a proxy
        request under way stores nothing after it), then deleted in the store, its pooled managers dropped."""
        name = store_session(tenant, session)
        with self._lock:
            self._deleted += 1
            self._deletes[name] = self._deleted
            self._deletes.move_to_end(name)
            while len(self._deletes) > DELETES_KEPT:
                self._deletes.popitem(last=False)
        self.store.delete_session(name)
        with self._lock:
            for key in [k for k in self._managers if k[0] == name]:
                del self._managers[key]

    @property
    def deletes(self) -> int:
        """How many sessions this process has deleted: what a proxy request notes as it begins."""
        return self._deleted

    def deleted_since(self, tenant: str, session: str, deletes: int) -> bool:
        """Whether this process deleted the session after :attr:`deletes` was ``deletes``: a proxy request that
        began before a delete stores nothing after it (its history and reply would bring the deleted session
        back). The :data:`DELETES_KEPT` sessions deleted last are remembered."""
        with self._lock:
            return self._deletes.get(store_session(tenant, session), 0) > deletes
