"""How a server runs: its store, defaults, limits and upstream; one frozen object, passed to every worker."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from ..policies import get_policy
from ..reconstruct import MARKER_MODES
from ..store import check_tenant
from ..tokens import check_budget
from .guards import check_host_name

__all__ = ["ServerSettings", "SETTINGS_ENV", "default_data_dir"]

#: The environment variable that hands the settings to ``uvicorn --workers`` processes (JSON).
SETTINGS_ENV = "RDMEM_SERVE_SETTINGS"


def default_data_dir() -> Path:
    """``$RDMEM_DATA_DIR``, else ``$XDG_DATA_HOME/rdmem``, else ``~/.local/share/rdmem``."""
    env = os.environ.get("RDMEM_DATA_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "rdmem"


@dataclass(frozen=True)
class ServerSettings:
    """Everything ``rdmem serve`` is told.

    Parameters
    ----------
    store:
        A store URL (``sqlite:///...``, ``postgresql://...``); ``None``: an
        SQLite file ``memory.db`` in ``data_dir``.
    budget, policy:
        What a session's working set is compacted to (tokens) and with, unless
        a request says otherwise.
    markers:
        How the contexts show left-out messages: ``"merged"`` (one marker for
        all), ``"runs"`` (one per omitted run) or ``"none"``
        (:func:`rdmem.compact`'s ``markers``).
    upstream:
        The OpenAI-compatible endpoint the proxy forwards to (its base URL,
        ending in ``/v1``); ``None``: no proxy routes.
    context_window:
        The upstream model's window in tokens: a request larger than it less
        the reply's reserve is compacted.
    reply_reserve:
        Tokens kept for the reply when a request gives no ``max_tokens``.
    max_body_bytes, max_messages, max_message_chars, max_budget, max_page:
        Limits (:mod:`rdmem.limits`, at every door: REST, mem0, the proxy, MCP):
        a larger request is refused (413 for the body, 400 for the rest);
        ``max_message_chars`` bounds every string of a message, whatever its field.
    host:
        The address the server listens on: on loopback, only loopback ``Host``
        values are answered (DNS rebinding), and those of ``allowed_hosts``.
    allowed_hosts:
        More ``Host`` names to answer (``--allow-host``; ``"*"``: any). On a
        non-loopback address, given: only these (and loopback names and the
        address itself); not given: any (keys guard that server).
    rate_requests, rate_tokens:
        Per tenant, per minute: requests, and tokens stored (``None``: no
        limit); over it, 429 with ``Retry-After``.
    metrics_tenant:
        The tenant that may read ``/metrics`` (it counts every tenant);
        ``None``: anyone on a server without keys, nobody on one with keys.
    header_timeout:
        Seconds a connection may take to send a request's headers before it
        is closed (half-open and slow clients); its body then gets as long
        again, and a second more for each 500 bytes received.
    derive_sessions:
        The proxy: a request without ``X-Rdmem-Session`` or ``user`` gets a
        session derived from the API key's tenant, its system prompt and its
        first user message (two users who open alike share it). ``False``:
        such a request is compacted on its own and nothing is stored.
    memory_timeout:
        Seconds the proxy waits on memory (key lookup, storing, compacting)
        before it forwards the request unchanged; a reply is stored after
        its stream ends, never before.
    ui:
        Serve the web inspector at ``/ui`` (under the same keys and tenants as the API).
    """

    store: str | None = None
    data_dir: str | None = None
    budget: int = 4000
    policy: str = "rd"
    upstream: str | None = None
    context_window: int = 8192
    reply_reserve: int = 1024
    upstream_timeout: float = 120.0
    max_body_bytes: int = 8 * 1024 * 1024
    max_messages: int = 1000
    max_message_chars: int = 200_000
    max_budget: int = 1_000_000
    max_page: int = 1000
    pool_size: int = 256
    host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()
    rate_requests: int | None = None
    rate_tokens: int | None = None
    metrics_tenant: str | None = None
    header_timeout: float = 10.0
    ui: bool = True
    derive_sessions: bool = False
    memory_timeout: float = 1.0
    markers: str = "merged"

    def __post_init__(self) -> None:
        for name in ("budget", "context_window", "reply_reserve", "max_body_bytes", "max_messages",
                     "max_message_chars", "max_budget", "max_page", "pool_size"):
            check_budget(getattr(self, name), name)
        get_policy(self.policy)
        if self.markers not in MARKER_MODES:
            raise InvalidInput(f"markers must be one of {', '.join(MARKER_MODES)}, got {self.markers!r}")
        if self.upstream is not None and self.context_window > self.max_budget:  # the proxy's memory budget
            raise InvalidInput(f"context_window ({self.context_window}) is above max_budget ({self.max_budget}), the "
                               f"largest budget memory takes: raise max_budget (--max-budget) to at least "
                               f"{self.context_window}")
        if self.reply_reserve >= self.context_window:
            raise InvalidInput(f"reply_reserve ({self.reply_reserve}) must be smaller than context_window "
                             f"({self.context_window})")
        if self.upstream is not None and not self.upstream.startswith(("http://", "https://")):
            raise InvalidInput(f"upstream must be an http(s) URL such as http://127.0.0.1:8000/v1, got {self.upstream!r}")
        for flag in ("ui", "derive_sessions"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidInput(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if not self.upstream_timeout > 0:
            raise InvalidInput(f"upstream_timeout must be > 0 seconds, got {self.upstream_timeout!r}")
        for name, unit in (("rate_requests", "requests per minute"), ("rate_tokens", "tokens per minute")):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise InvalidInput(f"{name} must be a whole number of {unit} > 0 (or None: no limit), got {value!r}")
        if isinstance(self.allowed_hosts, str) or not all(isinstance(h, str) for h in self.allowed_hosts):
            raise InvalidInput(f"allowed_hosts must be a list of host names, got {self.allowed_hosts!r}")
        object.__setattr__(self, "allowed_hosts", tuple(check_host_name(h) for h in self.allowed_hosts))
        if self.metrics_tenant is not None:
            try:
                check_tenant(self.metrics_tenant)
            except ValueError as exc:
                raise InvalidInput(f"metrics_tenant: {exc}") from None
        if isinstance(self.header_timeout, bool) or not isinstance(self.header_timeout, (int, float)) or \
                not self.header_timeout > 0:
            raise InvalidInput(f"header_timeout must be > 0 seconds, got {self.header_timeout!r}")
        if isinstance(self.memory_timeout, bool) or not isinstance(self.memory_timeout, (int, float)) or \
                not self.memory_timeout > 0:
            raise InvalidInput(f"memory_timeout must be > 0 seconds, got {self.memory_timeout!r}")

    def store_url(self) -> str:
        """The store to open (the default SQLite file is created in ``data_dir``)."""
        if self.store is not None:
            return self.store
        data = Path(self.data_dir) if self.data_dir else default_data_dir()
        data.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{data / 'memory.db'}"

    def to_env(self) -> str:
        return json.dumps(asdict(self))  # allowed_hosts travels as a list; __post_init__ makes it a tuple again

    @classmethod
    def from_env(cls) -> ServerSettings:
        raw = os.environ.get(SETTINGS_ENV)
        if not raw:
            return cls()
        data: dict[str, Any] = json.loads(raw)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
