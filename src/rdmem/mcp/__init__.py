"""The MCP front door: an MCP server over rdmem sessions: ``rdmem mcp`` (stdio), and ``/mcp`` inside ``rdmem serve``.

    from mcp import Client
    from rdmem.mcp import create_mcp_server

    server = create_mcp_server(store="sqlite:///memory.db", session="alice", budget=2000)
    async with Client(server) as client:
        await client.call_tool("remember", {"content": "Remember that I'm allergic to peanuts."})
        ctx = await client.call_tool("context", {"query": "What can I eat tonight?"})
        ctx.structured_content["messages"]  # fits the budget; the directive is in it

Tools, each with a pydantic return model (its output schema) and hints
(read-only, destructive): ``remember`` (store messages whole), ``recall``
(search the session, archive included), ``context`` (what fits a budget
for a query, as chat messages), ``forget`` (messages by id, or a whole
session; destructive) and ``explain`` (why each message would be kept or
archived). The resource ``rdmem://sessions`` lists the sessions. Every tool
takes an optional ``session`` (default: the server's). Who may reach which
session is the ``sessions_for`` hook's to say: ``rdmem serve`` answers it
with the calling tenant's sessions only. Needs ``pip install 'rdmem[mcp]'``.

It is a front door beside :mod:`rdmem.server` (which mounts it at
``/mcp``): a session's rules are the session service's
(:mod:`rdmem.sessions`), its limits :mod:`rdmem.limits`'s.
"""

from ._server import (
    CALLER, SESSIONS_URI, ChatMessage, Decision, Explanation, Forgotten, Hit, HTTPEndpoint, ModelContext, Recalled,
    Refused, Remembered, SessionAccess, SessionList, SessionSummary, StoreSessions, create_mcp_server,
)

__all__ = ["create_mcp_server", "HTTPEndpoint", "Refused", "CALLER", "SessionAccess", "StoreSessions", "ChatMessage",
           "Remembered", "Hit", "Recalled", "ModelContext", "Forgotten", "Decision", "Explanation", "SessionSummary",
           "SessionList", "SESSIONS_URI"]
