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
import inspect
import weakref
from collections.abc import Awaitable
from typing import TypeVar

from proxy.drain import cut_event
from proxy.errors import ProxyError
from proxy.types import Receive

__all__ = ["CLIENT_CLOSED", "client_closed", "shutting_down", "until_disconnect"]

T = TypeVar("T")

#: The status of a request whose client went away before the answer (nginx's convention).
CLIENT_CLOSED = 499


def client_closed() -> ProxyError:
    return ProxyError(CLIENT_CLOSED, "the client closed the request", code="client_closed")


def shutting_down() -> ProxyError:
    return ProxyError(
        503,
        "routefit is shutting down and its drain deadline passed; retry the request",
        code="shutting_down",
        headers={"retry-after": "1"},
    )


class _Stop:
    """Why a request's call was stopped (None: it was not), and the task to stop."""

    __slots__ = ("task", "why")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.why: ProxyError | None = None

    def __call__(self, why: ProxyError) -> None:
        if self.why is None:
            self.why = why
            self.task.cancel()


#: Per event loop: the calls the drain's cut stops, and the one task that waits for the cut.
_waiting: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[set[_Stop], asyncio.Task[None]]
] = weakref.WeakKeyDictionary()


def _cut_stops() -> set[_Stop]:
    loop = asyncio.get_running_loop()
    found = _waiting.get(loop)
    if found is None:
        stops: set[_Stop] = set()
        found = _waiting[loop] = (stops, loop.create_task(_on_cut(cut_event(), stops)))
    return found[0]


async def _on_cut(cut: asyncio.Event, stops: set[_Stop]) -> None:
    await cut.wait()
    for stop in list(stops):
        stop(shutting_down())


async def _watch(receive: Receive, stop: _Stop) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    stop(client_closed())


async def until_disconnect(receive: Receive, call: Awaitable[T]) -> T:
    """``call``'s result, unless the client disconnects first (then ``client_closed()``) or the
    drain's cut comes first (then ``shutting_down()``).

    Only for after the body was read: ``receive`` then yields nothing but the disconnect. The
    call runs in the caller's task, which the watch cancels: one task per request (the watch)
    instead of one for the call, one for the watch and one for the cut."""
    task = asyncio.current_task()
    assert task is not None
    stops = _cut_stops()
    if cut_event().is_set():
        if inspect.iscoroutine(call):
            call.close()  # never started: nothing to cancel
        raise shutting_down()
    stop = _Stop(task)
    stops.add(stop)
    watch = asyncio.ensure_future(_watch(receive, stop))
    try:
        return await call
    except asyncio.CancelledError:
        if stop.why is None or task.uncancel() > 0:
            raise  # cancelled from outside (the drain deadline): not ours to answer
        raise stop.why from None
    finally:
        stops.discard(stop)
        watch.cancel()
