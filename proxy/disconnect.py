"""A client that goes away is not routefit's error.

Starlette does not cancel a handler whose client disconnected; without a watch, a request
waiting on a slow provider keeps that provider working (and its budget reserved) for an answer
nobody will read. ``until_disconnect`` races a call against the client's ``http.disconnect``: the
client leaving cancels the call (an HTTP request is cancelled by closing its connection) and
raises ``client_closed()`` — status 499, counted apart from routefit's and the provider's
errors, never logged as a traceback. The drain's cut (``proxy.drain``) ends the wait too, with
a 503 the client may retry elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from proxy.drain import cut_event
from proxy.errors import ProxyError
from proxy.types import Receive

__all__ = ["CLIENT_CLOSED", "client_closed", "until_disconnect"]

T = TypeVar("T")

#: The status of a request whose client went away before the answer (nginx's convention).
CLIENT_CLOSED = 499


def client_closed() -> ProxyError:
    return ProxyError(CLIENT_CLOSED, "the client closed the request", code="client_closed")


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def until_disconnect(receive: Receive, call: Awaitable[T]) -> T:
    """``call``'s result, unless the client disconnects first (then ``client_closed()``).

    Only for after the body was read: ``receive`` then yields nothing but the disconnect."""
    task = asyncio.ensure_future(call)
    watch = asyncio.ensure_future(_disconnected(receive))
    cut = asyncio.ensure_future(cut_event().wait())
    try:
        await asyncio.wait((task, watch, cut), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        cut.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        if watch.done() and not watch.cancelled():
            raise client_closed()
        raise ProxyError(
            503,
            "routefit is shutting down and its drain deadline passed; retry the request",
            code="shutting_down",
            headers={"retry-after": "1"},
        )
    return task.result()
