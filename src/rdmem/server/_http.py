"""uvicorn's HTTP/1.1 protocol with read timeouts: a connection that does not finish sending a request's
headers in time, or then sends its body slower than a minimum rate, is closed.

uvicorn times out idle keep-alive connections, but not a new connection
that sends nothing, nor one that sends its headers a byte at a time
(slowloris), nor one that announces a body and then trickles it or stops
(the same attack on the body): each would hold a socket and a file
descriptor for ever. ``rdmem serve`` names this class as uvicorn's ``http``
protocol; the timeout is :attr:`~rdmem.server.settings.ServerSettings.header_timeout`.
As Apache's ``mod_reqtimeout`` does, a body may take that long again, and
each :data:`BODY_MIN_RATE` bytes received give it one second more: a slow
link is served, a body that stalls or crawls is not. While the server has
stopped reading (its application has not taken the bytes it holds), the
client is not timed.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HeaderTimeoutProtocol", "PROTOCOL", "BODY_MIN_RATE"]

#: What ``uvicorn.Config(http=...)`` takes (an import string, so worker processes can load it too).
PROTOCOL = "rdmem.server._http:HeaderTimeoutProtocol"
#: Bytes a second a request's body must keep up after its first ``header_timeout`` seconds.
BODY_MIN_RATE = 500


@functools.cache
def _from_settings() -> float:
    from .settings import ServerSettings

    return ServerSettings.from_env().header_timeout


class HeaderTimeoutProtocol(H11Protocol):
    """:class:`H11Protocol` that closes a connection whose request headers take over ``header_timeout`` s, or
    whose body then falls behind ``header_timeout`` s plus one second per :data:`BODY_MIN_RATE` bytes."""

    header_timeout: float | None = None  # None: the server's settings say (a subclass may fix it)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timeout = self.header_timeout if self.header_timeout is not None else _from_settings()
        self._timer: asyncio.TimerHandle | None = None
        self._body_of: object = None  # the request (uvicorn's cycle) whose body is being timed
        self._body_start = 0.0
        self._body_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._timer is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first bytes of the next request on a kept-alive connection
        super().data_received(data)
        self._follow(len(data))

    def on_response_complete(self) -> None:
        super().on_response_complete()  # a pipelined request's headers may be read here, not in data_received
        if self.conn.their_state is h11.SEND_BODY:
            self._follow(0)

    def _follow(self, received: int) -> None:
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if self.cycle is not self._body_of:  # a new request's headers are in: its body is timed from here
                self._body_of, self._body_start, self._body_bytes = self.cycle, self.loop.time(), 0
            else:
                self._body_bytes += received
            self._arm_body()
        elif state is not h11.IDLE:
            self._disarm()  # the whole request is in: it runs as long as it needs

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self._timeout, self._header_timed_out)

    def _arm_body(self) -> None:
        self._disarm()
        deadline = self._body_start + self._timeout + self._body_bytes / BODY_MIN_RATE
        self._timer = self.loop.call_at(deadline, self._body_timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _header_timed_out(self) -> None:
        self._timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.debug("closing a connection that sent no complete request headers in %s s",
                              self._timeout)
            self.transport.close()

    def _body_timed_out(self) -> None:
        self._timer = None
        if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
            return
        if self.flow.read_paused:  # the application has not read what came: not the client's delay
            self._body_start = self.loop.time()
            self._arm_body()
            return
        self.logger.debug("closing a connection whose request body fell behind (%d bytes in %.0f s)",
                          self._body_bytes, self.loop.time() - self._body_start)
        self.transport.close()
