"""Moved: the MCP server is a front door of its own, :mod:`rdmem.mcp` (beside :mod:`rdmem.server`).

This module re-exports its public names, with a ``DeprecationWarning``, for code written against
rdmem 0.1; import them from ``rdmem.mcp``.
"""

from __future__ import annotations

import warnings

from ..mcp import (  # noqa: F401 - re-exported
    CALLER, SESSIONS_URI, ChatMessage, Decision, Explanation, Forgotten, Hit, HTTPEndpoint, ModelContext, Recalled,
    Remembered, SessionAccess, SessionList, SessionSummary, StoreSessions, create_mcp_server,
)
from ..mcp import __all__  # noqa: F401

warnings.warn("rdmem.integrations.mcp moved to rdmem.mcp; import from there", DeprecationWarning, stacklevel=2)
