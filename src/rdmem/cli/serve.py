"""``rdmem serve`` (the HTTP service) and ``rdmem keys create|list|revoke`` (its API keys)."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from datetime import datetime, timezone
from typing import Any

from ..names import printable
from ._common import CLIError, positive_int, positive_number, require_embeddings, whole_number

__all__ = ["register"]


def _default_store() -> str:
    from ..server.settings import ServerSettings

    return os.environ.get("RDMEM_STORE") or ServerSettings().store_url()


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..server._http import PROTOCOL
        from ..server.app import STARTED_ENV
        from ..server.auth import UI_SECRET_ENV
        from ..server._workers import bind
        from ..server.guards import is_loopback
        from ..server.settings import SETTINGS_ENV, ServerSettings
    except ImportError as exc:
        raise CLIError(f"rdmem serve needs the server extra: pip install 'rdmem[server]' ({exc.name} is missing)") from None
    from ..store import KeyStore, open_store, redact_url

    settings = ServerSettings(
        store=args.store, data_dir=args.data_dir, budget=args.budget, policy=args.policy, upstream=args.upstream,
        context_window=args.context_window, reply_reserve=args.reply_reserve, upstream_timeout=args.upstream_timeout,
        max_body_bytes=args.max_body_bytes, max_messages=args.max_messages, max_message_chars=args.max_message_chars,
        max_budget=args.max_budget, max_page=args.max_page, host=args.host, allowed_hosts=tuple(args.allow_host or ()),
        rate_requests=args.rate_requests, rate_tokens=args.rate_tokens, metrics_tenant=args.metrics_tenant,
        header_timeout=args.header_timeout, ui=not args.no_ui, derive_sessions=args.derive_sessions,
        memory_timeout=args.memory_timeout, markers=args.markers,
    )
    require_embeddings(None, "rdmem serve")
    url = settings.store_url()
    if args.workers > 1 and _in_memory(url):  # each process would hold a store of its own
        raise CLIError("--workers needs a store the processes share (sqlite:///path or postgresql://...): with "
                       "memory://, each worker would hold sessions of its own (ids given twice, deletes half done)")
    shown = redact_url(url)
    where = f"http://{args.host}:{args.port}"
    print(f"rdmem serve: store {shown}" + ("" if args.store else " (the default; --store to choose)"), file=sys.stderr)
    if not is_loopback(args.host) and not args.insecure and not _has_keys(url):
        raise CLIError(f"no API keys in this store: refusing to serve {args.host} without them. Create one "
                       f"(rdmem keys create --tenant NAME --store {shown}) or pass --insecure")
    with open_store(url) as store:  # opened once here: a bad store is one line, before any worker starts
        keyed = KeyStore(store).has_keys()
    if not keyed:
        print("rdmem serve: no API keys: anyone who can reach the server is tenant 'default'"
              + ("" if is_loopback(args.host) else " (--insecure)"), file=sys.stderr)
    try:  # bound before "listening" is said: a port in use is this one line, not a false start
        sockets = bind(args.host, args.port, args.workers)
    except OSError as exc:
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    port = sockets[0].getsockname()[1]  # --port 0: the one the system chose
    where = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{port}"
    if args.upstream:
        print(f"rdmem serve: proxy to {args.upstream} (window {args.context_window} tokens): "
              f"OPENAI_BASE_URL={where}/v1", file=sys.stderr)
    from ..server._workers import share_cores

    print(f"rdmem serve: {share_cores(args.workers)}", file=sys.stderr)
    print(f"rdmem serve: listening on {where} (docs at {where}/docs"
          + ("" if args.no_ui else f", inspector at {where}/ui") + ")", file=sys.stderr, flush=True)
    os.environ[SETTINGS_ENV] = settings.to_env()
    os.environ[STARTED_ENV] = repr(time.time())  # the workers' keys rule counts from the server's start
    # One secret for the inspector's sign-ins across this server's processes (a restart makes a new one).
    if not os.environ.get(UI_SECRET_ENV):  # unset or empty (compose's ${VAR} of an unset variable)
        os.environ[UI_SECRET_ENV] = secrets.token_hex(32)
    config = {"app": "rdmem.server.app:app_from_env", "factory": True, "host": args.host, "port": port,
              "log_level": args.log_level, "access_log": args.log_level == "debug", "http": PROTOCOL}
    try:  # Ctrl-C stops the server gracefully (uvicorn then raises the signal again): a normal end
        if args.workers == 1:
            server = uvicorn.Server(uvicorn.Config(**config))
            server.run(sockets=sockets)
            return 0 if server.started else 1  # uvicorn logged why
        from ..server._workers import run_workers

        run_workers(config, sockets)
    except KeyboardInterrupt:
        pass
    finally:
        for sock in sockets:
            sock.close()
    return 0


def _in_memory(url: str) -> bool:
    """Whether ``url`` names an in-memory store (``memory`` or ``memory://``, as :func:`rdmem.store.open_store`)."""
    return url in ("memory", "memory://")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, 0 to 65535, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number, 0 to 65535, got {value}")
    return value
def _has_keys(url: str) -> bool:
    """Whether the store has a valid API key, found out without creating it (a store not there has none)."""
    from ..store import KeyStore, open_store, sqlite_path

    path = sqlite_path(url)
    if path is not None and not (os.path.isfile(path) and os.path.getsize(path) > 0):
        return False
    with open_store(url, create=False) as store:
        return KeyStore(store).has_keys()


def _when(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cmd_keys(args: argparse.Namespace) -> int:
    from ..store import KeyStore, open_store

    # Only 'create' may create the store; 'list' reads it, 'revoke' changes one that must exist.
    opening = {"create": {}, "list": {"readonly": True}, "revoke": {"create": False}}[args.action]
    url = args.store or _default_store()
    if _in_memory(url):
        raise CLIError("'rdmem keys' needs the store rdmem serve reads (sqlite:///path or postgresql://...): a key "
                       "in memory:// would be gone when this command ends")
    with open_store(url, **opening) as store:
        keys = KeyStore(store)
        if args.action == "create":
            if not args.tenant:
                raise CLIError("'keys create' needs --tenant NAME")
            key, secret = keys.create_key(args.tenant, name=args.name or "")
            print(f"created key {key.id} for tenant {key.tenant!r} (shown once; keep it secret):", file=sys.stderr)
            print(secret)
        elif args.action == "list":
            print(f"{'id':<16}  {'tenant':<20}  {'name':<16}  {'created':<20}  revoked")
            for k in keys.list_keys(args.tenant):
                name = printable(k.name)  # a name with a newline or an escape would forge a line of the table
                print(f"{k.id:<16}  {k.tenant:<20}  {name:<16}  {_when(k.created):<20}  {_when(k.revoked)}")
        else:
            if not args.key_id:
                raise CLIError("'keys revoke' needs the key's id (see 'rdmem keys list')")
            if not keys.revoke_key(args.key_id):
                raise CLIError(f"no key {args.key_id!r}, or it is revoked already")
            print(f"revoked {args.key_id}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the HTTP service: memory API, mem0-compatible subset, compacting proxy",
                       description="rdmem serve [--store URL] [--upstream URL] [--host H --port P --workers N]")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8765, help="port, 0 to 65535 (default 8765; 0: any free one)")
    p.add_argument("--workers", type=whole_number("server processes"), default=1, help="server processes (default 1)")
    p.add_argument("--store", default=os.environ.get("RDMEM_STORE"),
                   help="store URL (default $RDMEM_STORE, else memory.db in the data directory)")
    p.add_argument("--data-dir", default=None, help="where the default store lives (default $RDMEM_DATA_DIR or "
                   "~/.local/share/rdmem)")
    p.add_argument("--budget", type=positive_int, default=4000, help="a session's working-set budget (tokens)")
    p.add_argument("--policy", default="rd", help="the default policy (default rd)")
    p.add_argument("--markers", choices=("merged", "runs", "none"), default="merged",
                   help="how contexts show left-out messages: one marker for all (merged, the default), one per "
                        "omitted run (runs), or none")
    p.add_argument("--upstream", default=None, help="OpenAI-compatible endpoint to proxy to, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--context-window", type=positive_int, default=8192, help="the upstream model's window (tokens)")
    p.add_argument("--reply-reserve", type=positive_int, default=1024,
                   help="tokens kept for the reply when a request has no max_tokens (default 1024)")
    p.add_argument("--upstream-timeout", type=positive_number("seconds"), default=120.0,
                   help="seconds to wait for the upstream (default 120)")
    limits = p.add_argument_group("limits (a larger request is refused: 413 for the body, 400 for the rest)")
    limits.add_argument("--max-body-bytes", type=whole_number("bytes"), default=8 * 1024 * 1024, help="default 8 MiB")
    limits.add_argument("--max-messages", type=whole_number("messages"), default=1000,
                        help="messages per request (default 1000)")
    limits.add_argument("--max-message-chars", type=whole_number("characters"), default=200_000,
                        help="characters of any string in a message, every field counted: content, name, "
                        "tool calls, metadata (default 200000)")
    limits.add_argument("--max-budget", type=positive_int, default=1_000_000, help="tokens a request may ask for")
    limits.add_argument("--max-page", type=positive_int, default=1000,
                        help="messages or search hits one request may ask for (default 1000)")
    limits.add_argument("--rate-requests", type=whole_number("requests per minute"), default=None,
                        help="requests per minute per tenant (default: no limit); over it, 429 with Retry-After")
    limits.add_argument("--rate-tokens", type=whole_number("tokens per minute"), default=None,
                        help="tokens stored per minute per tenant (default: no limit); over it, 429 with Retry-After")
    p.add_argument("--no-ui", action="store_true", help="do not serve the web inspector at /ui")
    p.add_argument("--insecure", action="store_true", help="serve a non-loopback address without API keys")
    p.add_argument("--allow-host", action="append", metavar="NAME", default=None,
                   help="answer this Host name too (repeatable; '*': any). On loopback, only loopback names "
                   "are answered otherwise (DNS rebinding); on another address, any unless this is given")
    p.add_argument("--metrics-tenant", default=None, metavar="TENANT",
                   help="the tenant that may read /metrics (default: anyone on a server without keys, nobody "
                   "on one with keys)")
    p.add_argument("--header-timeout", type=positive_number("seconds"), default=10.0,
                   help="seconds a connection may take to send a request's headers (default 10); its body then gets "
                   "as long again, and a second more for each 500 bytes received")
    proxy = p.add_argument_group("the proxy (with --upstream)")
    proxy.add_argument("--derive-sessions", action="store_true",
                       help="give a request without X-Rdmem-Session or 'user' a session derived from its system "
                       "prompt and first user message (per API key's tenant). Risk: two users who open alike "
                       "share memory. Default: such a request is compacted on its own, nothing stored")
    proxy.add_argument("--memory-timeout", type=positive_number("seconds"), default=1.0,
                       help="seconds the proxy waits on memory before forwarding the request unchanged (default 1)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("keys", help="API keys of the service: create, list, revoke",
                       description="rdmem keys create --tenant NAME | list | revoke KEY_ID  [--store URL]")
    p.add_argument("action", choices=("create", "list", "revoke"))
    p.add_argument("key_id", nargs="?", default=None, help="revoke: the key's id")
    p.add_argument("--tenant", default=None, help="create: the tenant the key belongs to (list: only its keys)")
    p.add_argument("--name", default=None, help="create: a label for the key")
    p.add_argument("--store", default=None, help="store URL (default: the one rdmem serve uses)")
    p.set_defaults(func=_cmd_keys)
