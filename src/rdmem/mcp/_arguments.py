"""A tool call's arguments are its parameters only: an unknown one is an error naming it, never ignored.

The SDK's argument models take any extra key and drop it, so ``remember(session_id="alice")`` (for
``session``) stored into the server's default session, shared by every caller that names none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

__all__ = ["known_arguments"]


def known_arguments(server: MCPServer) -> Any:
    """Server middleware: a ``tools/call`` whose arguments name a parameter the tool does not have is refused
    (JSON-RPC's invalid params, naming it and the tool's parameters) before the tool runs."""
    known: dict[str, tuple[str, ...]] = {}

    async def check(ctx: Any, call_next: Any) -> Any:
        params = ctx.params if ctx.method == "tools/call" else None
        if isinstance(params, Mapping) and isinstance(params.get("arguments"), Mapping):
            if not known:  # the tools' parameters, as listed to clients
                known.update({t.name: tuple((t.input_schema or {}).get("properties", {}))
                              for t in await server.list_tools()})
            name = params.get("name")
            unknown = [k for k in params["arguments"] if name in known and k not in known[name]]
            if unknown:
                raise MCPError(INVALID_PARAMS, f"{name}: no argument {str(unknown[0])[:100]!r} (it takes "
                                               f"{', '.join(known[name])}); nothing was done")
        return await call_next(ctx)

    return check
