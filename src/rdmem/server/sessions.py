"""Sessions as the service sees them: every session belongs to a tenant, and managers are pooled.

A tenant's session ``s`` is the store's session ``t/<tenant>/<s>`` (tenant
names cannot hold ``/``, so no tenant can name another's session), and every
route reaches a session only through :meth:`SessionPool.manager` or
:func:`store_session`. The pool keeps one :class:`~rdmem.MemoryManager` per
tenant, session, policy and budget (least recently used first out): the
store is the source of truth, so a pooled manager is as current as a new
one, without reading the whole session again on every request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Annotated

from fastapi import Path

from ..embed import BatchingEmbedder, CachedEmbedder, Embedder, MiniLMEmbedder
from ..manager import MemoryManager
from ..store import SessionInfo, Store, check_tenant
from .errors import ApiError
from .settings import ServerSettings

__all__ = ["SessionPool", "SessionName", "store_session", "tenant_sessions", "MAX_SESSION_CHARS"]

MAX_SESSION_CHARS = 256
_PREFIX = "t/"

SessionName = Annotated[str, Path(min_length=1, max_length=MAX_SESSION_CHARS, pattern=r"^[^\x00-\x1f]+$",
                                  description="the session's name (yours to choose; any text without control "
                                  f"characters, at most {MAX_SESSION_CHARS} characters)")]


def store_session(tenant: str, session: str) -> str:
    """The store's name for ``tenant``'s session ``session`` (checked: a clear 400 if it is not a name)."""
    check_tenant(tenant)
    if not isinstance(session, str) or not session or len(session) > MAX_SESSION_CHARS:
        raise ApiError(400, f"a session name is 1 to {MAX_SESSION_CHARS} characters, got {len(session or '')}")
    if any(ord(c) < 32 for c in session):
        raise ApiError(400, "a session name may not contain control characters")
    return f"{_PREFIX}{tenant}/{session}"


def tenant_sessions(store: Store, tenant: str) -> list[tuple[str, SessionInfo]]:
    """``(session name, info)`` of every session of ``tenant``, by name."""
    prefix = f"{_PREFIX}{check_tenant(tenant)}/"
    return [(i.session[len(prefix):], i) for i in store.sessions() if i.session.startswith(prefix)]


class SessionPool:
    """Pooled managers over one store (shared by every request of this process)."""

    def __init__(self, store: Store, settings: ServerSettings, embedder: Embedder | None = None) -> None:
        self.store = store
        self.settings = settings
        # One model for every session of this process, its calls batched across request threads.
        self.embedder: Embedder = BatchingEmbedder(embedder) if embedder is not None else \
            CachedEmbedder(BatchingEmbedder(MiniLMEmbedder()))
        self._managers: OrderedDict[tuple[str, str, int], MemoryManager] = OrderedDict()
        self._lock = threading.Lock()

    def manager(self, tenant: str, session: str, *, policy: str | None = None, budget: int | None = None) -> MemoryManager:
        name = store_session(tenant, session)
        policy = policy or self.settings.policy
        budget = budget or self.settings.budget
        if budget > self.settings.max_budget:
            raise ApiError(400, f"budget must be at most {self.settings.max_budget} tokens, got {budget}")
        key = (name, policy, budget)
        with self._lock:
            mem = self._managers.get(key)
            if mem is None:
                mem = MemoryManager(budget=budget, policy=policy, store=self.store, session=name,
                                    embedder=self.embedder)
                self._managers[key] = mem
            self._managers.move_to_end(key)
            while len(self._managers) > self.settings.pool_size:
                self._managers.popitem(last=False)  # the store stays open: it is shared
            return mem

    def exists(self, tenant: str, session: str) -> bool:
        return self.store.version(store_session(tenant, session)) > 0

    def forget(self, tenant: str, session: str) -> None:
        """Drop the pooled managers of a session (it was deleted)."""
        name = store_session(tenant, session)
        with self._lock:
            for key in [k for k in self._managers if k[0] == name]:
                del self._managers[key]
