"""``rdmem serve``: the memory API, a mem0-compatible subset, and an OpenAI-compatible compacting proxy.

Needs the ``server`` extra (``pip install 'rdmem[server]'``: FastAPI, uvicorn,
httpx). :func:`create_app` builds the ASGI app; the command line runs it.
"""

from .app import create_app
from .settings import ServerSettings

__all__ = ["create_app", "ServerSettings"]
