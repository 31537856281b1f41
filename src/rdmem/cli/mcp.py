"""``rdmem mcp``: rdmem's MCP server over stdio, for an MCP client (Claude Desktop, an agent SDK) to start."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ._common import CLIError, positive_int, require_embeddings, whole_number

__all__ = ["register"]


def _cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from ..mcp import create_mcp_server
    except ImportError as exc:
        raise CLIError(f"rdmem mcp needs the MCP SDK: pip install 'rdmem[mcp]' ({exc})") from None
    from ..store import open_store, redact_url

    from ..sessions import session_name

    session_name(args.session, "--session")
    if args.tenant is not None:
        from ..store import check_tenant

        try:
            check_tenant(args.tenant)
        except ValueError as exc:
            raise CLIError(f"--tenant: {exc}") from None
    require_embeddings(args.policy, "rdmem mcp")
    url = args.store
    if url is None:
        from .serve import _default_store  # the same file rdmem serve uses (--tenant: the same sessions)

        url = _default_store()
    with open_store(url) as store:  # opened before the client talks to us: a bad store is one line on stderr
        server = create_mcp_server(store=store, session=args.session, budget=args.budget, policy=args.policy,
                                   max_budget=args.max_budget, max_messages=args.max_messages,
                                   max_message_chars=args.max_message_chars, tenant=args.tenant)
        # stdout carries the protocol: everything said to a person goes to stderr.
        whose = f", tenant {args.tenant!r}" if args.tenant is not None else ""
        print(f"rdmem mcp: store {redact_url(url)}{whose}, session {args.session!r}, budget {args.budget}, "
              f"policy {args.policy}", file=sys.stderr, flush=True)
        server.run("stdio")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("mcp", help="run the MCP server over stdio (tools: remember, recall, context, forget, explain)",
                       description="rdmem mcp [--store URL] [--session NAME] [--budget N] [--policy P]: an MCP "
                       "server on stdin/stdout, for an MCP client to start")
    p.add_argument("--store", default=os.environ.get("RDMEM_STORE"),
                   help="store URL (default $RDMEM_STORE, else the file rdmem serve uses)")
    p.add_argument("--session", default="default", help="the session of calls that name none (default 'default')")
    p.add_argument("--tenant", default=None, help="only this tenant's sessions, named as rdmem serve names them: "
                   "'default' shares memory with a server without keys on the same store, a key's tenant with "
                   "that key's callers (default: every session of the store, by its name in the store)")
    p.add_argument("--budget", type=positive_int, default=4000, help="tokens: a session's working set and the "
                   "context tool's default (default 4000)")
    p.add_argument("--policy", default="rd", help="the policy (default rd)")
    limits = p.add_argument_group("limits (as rdmem serve's: a larger call is refused with an error naming the field)")
    limits.add_argument("--max-messages", type=whole_number("messages"), default=1000,
                        help="messages one remember call may carry (default 1000)")
    limits.add_argument("--max-message-chars", type=whole_number("characters"), default=200_000,
                        help="characters of any string in a message, every field counted (default 200000)")
    limits.add_argument("--max-budget", type=positive_int, default=1_000_000,
                        help="tokens a context call may ask for (default 1000000)")
    p.set_defaults(func=_cmd_mcp)
