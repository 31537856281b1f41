"""The web inspector at ``/ui``: what memory kept, and why (``rdmem serve``; ``--no-ui`` turns it off).

Pages (server-rendered HTML, assets shipped in the package): the sessions,
a session's timeline with each message's state in the context for a budget
and query, the budget (the context's tokens by kind and the session's
rate-distortion curve), search, the proxy's savings; deleting a message or
a session. Under the same keys and tenants as the API, reading and deleting
through the API's own functions.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from ._curve import Curves

__all__ = ["install_ui"]

STATIC = Path(__file__).parent / "static"


def install_ui(app: FastAPI) -> None:
    """Serve the inspector's pages, actions and assets under ``/ui`` of ``app``."""
    from ._actions import router as actions
    from ._views import router as views

    app.state.rdmem_curves = Curves()
    app.include_router(actions)
    app.include_router(views)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
