"""uvicorn's HTTP/1.1 protocol with a header-read timeout: a connection that does not finish sending a
request's headers in time is closed.

uvicorn times out idle keep-alive connections, but not a new connection
that sends nothing, nor one that sends its headers a byte at a time
(slowloris): each would hold a socket and a file descriptor for ever.
``rdmem serve`` names this class as uvicorn's ``http`` protocol; the timeout
is :attr:`~rdmem.server.settings.ServerSettings.header_timeout`.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HeaderTimeoutProtocol", "PROTOCOL"]

#: What ``uvicorn.Config(http=...)`` takes (an import string, so worker processes can load it too).
PROTOCOL = "rdmem.server._http:HeaderTimeoutProtocol"


@functools.cache
def _from_settings() -> float:
    from .settings import ServerSettings

    return ServerSettings.from_env().header_timeout


class HeaderTimeoutProtocol(H11Protocol):
    """:class:`H11Protocol` that closes a connection whose request headers take over ``header_timeout`` s."""

    header_timeout: float | None = None  # None: the server's settings say (a subclass may fix it)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timeout = self.header_timeout if self.header_timeout is not None else _from_settings()
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first bytes of the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the headers are in: the request runs as long as it needs

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self._timeout, self._header_timed_out)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.debug("closing a connection that sent no complete request headers in %s s",
                              self._timeout)
            self.transport.close()
