"""What the proxy saved: for each request of a session, the tokens the client sent and those forwarded.

The proxy writes one record per request into the session's log in the store
(beside the working set's compactions), in the transaction that stores the
request's reply (alone when there is none), so every process of a server and
the inspector at ``/ui`` read the same figures, and they go when the session
is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..store import Store
from .sessions import store_session, tenant_sessions

__all__ = ["Saving", "entry", "session_savings", "tenant_savings"]

#: The key of a proxy request's record in a session's log.
KEY = "proxy"


@dataclass(frozen=True)
class Saving:
    """One proxy request: when (seconds since the epoch), tokens the client sent, tokens forwarded."""

    time: float
    sent: int
    forwarded: int
    compacted: bool


def entry(sent: int, forwarded: int, compacted: bool) -> dict[str, Any]:
    """The log record of one proxy request (written with the request's reply: ``Store.append(log=...)``)."""
    return {KEY: {"sent": sent, "forwarded": forwarded, "compacted": compacted}}


def _savings(store: Store, name: str) -> list[Saving]:
    out = []
    for rec in store.compaction_log(name):
        fig = rec.get(KEY)
        if isinstance(fig, dict):
            out.append(Saving(float(rec["time"]), int(fig["sent"]), int(fig["forwarded"]), bool(fig["compacted"])))
    return out


def session_savings(store: Store, tenant: str, session: str) -> list[Saving]:
    """The proxy requests of ``tenant``'s session ``session``, oldest first."""
    return _savings(store, store_session(tenant, session))


def tenant_savings(store: Store, tenant: str) -> dict[str, list[Saving]]:
    """The proxy requests of each of ``tenant``'s sessions that had any, by session name."""
    found = {name: _savings(store, info.session) for name, info in tenant_sessions(store, tenant)}
    return {name: rows for name, rows in found.items() if rows}
