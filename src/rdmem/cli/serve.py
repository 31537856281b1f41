"""``rdmem serve`` (the HTTP service) and ``rdmem keys create|list|revoke`` (its API keys)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from datetime import datetime, timezone
from typing import Any

from ._common import CLIError, positive_int, require_embeddings

__all__ = ["register"]


def _default_store() -> str:
    from ..server.settings import ServerSettings

    return os.environ.get("RDMEM_STORE") or ServerSettings().store_url()


def _loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..server.settings import SETTINGS_ENV, ServerSettings
    except ImportError as exc:
        raise CLIError(f"rdmem serve needs the server extra: pip install 'rdmem[server]' ({exc.name} is missing)") from None
    from ..store import open_store

    settings = ServerSettings(
        store=args.store, data_dir=args.data_dir, budget=args.budget, policy=args.policy, upstream=args.upstream,
        context_window=args.context_window, reply_reserve=args.reply_reserve, upstream_timeout=args.upstream_timeout,
        max_body_bytes=args.max_body_bytes, max_messages=args.max_messages, max_message_chars=args.max_message_chars,
        max_budget=args.max_budget,
    )
    require_embeddings(None, "rdmem serve")
    url = settings.store_url()
    with open_store(url) as store:  # opened once here: a bad store is one line, before any worker starts
        keyed = store.has_keys()
    where = f"http://{args.host}:{args.port}"
    print(f"rdmem serve: store {url}" + ("" if args.store else " (the default; --store to choose)"), file=sys.stderr)
    if not keyed:
        if not _loopback(args.host) and not args.insecure:
            raise CLIError(f"no API keys in this store: refusing to serve {args.host} without them. Create one "
                           f"(rdmem keys create --tenant NAME --store {url}) or pass --insecure")
        print("rdmem serve: no API keys: anyone who can reach the server is tenant 'default'"
              + ("" if _loopback(args.host) else " (--insecure)"), file=sys.stderr)
    if args.upstream:
        print(f"rdmem serve: proxy to {args.upstream} (window {args.context_window} tokens): "
              f"OPENAI_BASE_URL={where}/v1", file=sys.stderr)
    from ..server._workers import share_cores

    print(f"rdmem serve: {share_cores(args.workers)}", file=sys.stderr)
    print(f"rdmem serve: listening on {where} (docs at {where}/docs)", file=sys.stderr, flush=True)
    os.environ[SETTINGS_ENV] = settings.to_env()
    config = {"app": "rdmem.server.app:app_from_env", "factory": True, "host": args.host, "port": args.port,
              "log_level": args.log_level, "access_log": args.log_level == "debug"}
    try:  # Ctrl-C stops the server gracefully (uvicorn then raises the signal again): a normal end
        if args.workers == 1:
            server = uvicorn.Server(uvicorn.Config(**config))
            server.run()
            return 0 if server.started else 1  # uvicorn logged why (a port in use, say)
        from ..server._workers import run_workers

        run_workers(config, args.host, args.port, args.workers)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    return 0


def _when(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cmd_keys(args: argparse.Namespace) -> int:
    from ..store import open_store

    with open_store(args.store or _default_store()) as store:
        if args.action == "create":
            if not args.tenant:
                raise CLIError("'keys create' needs --tenant NAME")
            key, secret = store.create_key(args.tenant, name=args.name or "")
            print(f"created key {key.id} for tenant {key.tenant!r} (shown once; keep it secret):", file=sys.stderr)
            print(secret)
        elif args.action == "list":
            keys = store.list_keys(args.tenant)
            print(f"{'id':<16}  {'tenant':<20}  {'name':<16}  {'created':<20}  revoked")
            for k in keys:
                print(f"{k.id:<16}  {k.tenant:<20}  {k.name:<16}  {_when(k.created):<20}  {_when(k.revoked)}")
        else:
            if not args.key_id:
                raise CLIError("'keys revoke' needs the key's id (see 'rdmem keys list')")
            if not store.revoke_key(args.key_id):
                raise CLIError(f"no key {args.key_id!r}, or it is revoked already")
            print(f"revoked {args.key_id}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the HTTP service: memory API, mem0-compatible subset, compacting proxy",
                       description="rdmem serve [--store URL] [--upstream URL] [--host H --port P --workers N]")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument("--workers", type=positive_int, default=1, help="server processes (default 1)")
    p.add_argument("--store", default=os.environ.get("RDMEM_STORE"),
                   help="store URL (default $RDMEM_STORE, else memory.db in the data directory)")
    p.add_argument("--data-dir", default=None, help="where the default store lives (default $RDMEM_DATA_DIR or "
                   "~/.local/share/rdmem)")
    p.add_argument("--budget", type=positive_int, default=4000, help="a session's working-set budget (tokens)")
    p.add_argument("--policy", default="rd", help="the default policy (default rd)")
    p.add_argument("--upstream", default=None, help="OpenAI-compatible endpoint to proxy to, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--context-window", type=positive_int, default=8192, help="the upstream model's window (tokens)")
    p.add_argument("--reply-reserve", type=positive_int, default=1024,
                   help="tokens kept for the reply when a request has no max_tokens (default 1024)")
    p.add_argument("--upstream-timeout", type=float, default=120.0, help="seconds to wait for the upstream (default 120)")
    limits = p.add_argument_group("limits (a larger request is refused: 413 for the body, 400 for the rest)")
    limits.add_argument("--max-body-bytes", type=positive_int, default=8 * 1024 * 1024, help="default 8 MiB")
    limits.add_argument("--max-messages", type=positive_int, default=1000, help="messages per request (default 1000)")
    limits.add_argument("--max-message-chars", type=positive_int, default=200_000,
                        help="characters of one message's content (default 200000)")
    limits.add_argument("--max-budget", type=positive_int, default=1_000_000, help="tokens a request may ask for")
    p.add_argument("--insecure", action="store_true", help="serve a non-loopback address without API keys")
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
