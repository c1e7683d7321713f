"""uvicorn's HTTP protocol with a deadline on the request headers.

uvicorn bounds the silence *between* requests on a kept-alive connection (``timeout_keep_alive``)
but not the wait for a request's headers: a client that opens a connection and sends half a
request line holds that socket for ever (measured: still open after 76 s). This protocol closes
a connection whose request headers are not complete ``header_timeout`` seconds after it started
waiting for them — after the connection was made, or after the previous response when the
client starts another request. The body's own deadline is ``proxy.middleware``'s.

It also bounds their size: httptools puts no limit on the header block (measured: 1.7 GB of
``X-Pad`` headers accepted in 10 s, every one kept in memory), so once more than
``max_header_bytes`` arrived without completing the headers the client gets a 431 and the
connection is closed.

The limits are bound to the class as values (``with_limits``, from ``routefit serve
--header-timeout / --max-header-bytes``): uvicorn takes a ``functools.partial`` of the class as
its ``http`` protocol, and pickles it with its own config into each worker process.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HeaderDeadlineProtocol", "with_limits"]

_TOO_LARGE = b'{"error":{"message":"request headers too large","type":"invalid_request_error","param":null,"code":"headers_too_large"}}'  # noqa: E501
_431 = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: " + str(len(_TOO_LARGE)).encode() + b"\r\n\r\n"
) + _TOO_LARGE


def with_limits(header_timeout: float, max_header_bytes: int) -> type[asyncio.Protocol]:
    """The protocol to give uvicorn as ``http=`` (0: no deadline, no cap). A partial, not a
    subclass made here: a class made at run time cannot be pickled into a spawned worker, a
    partial of a module-level class can. uvicorn only calls what it is given, with keywords
    (``config=``, ``server_state=``, ...), so the partial stands where it types a class."""
    bound = functools.partial(
        HeaderDeadlineProtocol, header_timeout=header_timeout, max_header_bytes=max_header_bytes
    )
    return cast("type[asyncio.Protocol]", bound)


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; a connection waiting too long for headers is closed."""

    def __init__(
        self, *args: Any, header_timeout: float, max_header_bytes: int, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._header_timeout = header_timeout
        self._max_header_bytes = max_header_bytes
        self._header_timer: asyncio.TimerHandle | None = None
        #: Bytes received since the headers being waited for began (chunks that did not end them).
        self._header_bytes = 0

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._header_timer is None and self._header_timeout > 0:
            self._header_timer = self.loop.call_later(self._header_timeout, self._expire)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expire(self) -> None:
        self._header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:
            self._disarm()  # a request's headers are in
            self._header_bytes = 0
        elif self._waiting_for_headers() and not self.transport.is_closing():
            self._arm()  # the first bytes of the next request on a kept-alive connection
            self._header_bytes += len(data)
            if 0 < self._max_header_bytes < self._header_bytes:
                self.transport.write(_431)
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
