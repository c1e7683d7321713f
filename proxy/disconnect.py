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
import inspect
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

from proxy.drain import cut_event
from proxy.errors import ProxyError
from proxy.types import Receive

__all__ = [
    "CLIENT_CLOSED",
    "Stop",
    "TaskStop",
    "client_closed",
    "shutting_down",
    "until_disconnect",
    "watching",
]

T = TypeVar("T")
#: Told why a request is to stop (``client_closed()`` or ``shutting_down()``).
Stop = Callable[[ProxyError], None]

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


class TaskStop:
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
    asyncio.AbstractEventLoop, tuple[set[Stop], asyncio.Task[None]]
] = weakref.WeakKeyDictionary()


def _cut_stops() -> set[Stop]:
    loop = asyncio.get_running_loop()
    found = _waiting.get(loop)
    if found is None:
        stops: set[Stop] = set()
        found = _waiting[loop] = (stops, loop.create_task(_on_cut(cut_event(), stops)))
    return found[0]


async def _on_cut(cut: asyncio.Event, stops: set[Stop]) -> None:
    await cut.wait()
    for stop in list(stops):
        stop(shutting_down())


async def _watch(receive: Receive, stop: Stop) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    stop(client_closed())


@contextlib.contextmanager
def watching(receive: Receive, on_leave: Stop, on_cut: Stop) -> Iterator[None]:
    """While the block runs, the client leaving calls ``on_leave`` and the drain's cut (also one
    that came before) calls ``on_cut``: one task per request, the watch on ``receive`` (only
    for after the body was read, when ``receive`` yields nothing but the disconnect)."""
    stops = _cut_stops()
    stops.add(on_cut)
    watch = asyncio.ensure_future(_watch(receive, on_leave))
    try:
        if cut_event().is_set():
            on_cut(shutting_down())
        yield
    finally:
        stops.discard(on_cut)
        watch.cancel()


async def until_disconnect(receive: Receive, call: Awaitable[T]) -> T:
    """``call``'s result, unless the client disconnects first (then ``client_closed()``) or the
    drain's cut comes first (then ``shutting_down()``).

    Only for after the body was read: ``receive`` then yields nothing but the disconnect. The
    call runs in the caller's task, which the watch cancels: one task per request (the watch)
    instead of one for the call, one for the watch and one for the cut."""
    task = asyncio.current_task()
    assert task is not None
    if cut_event().is_set():
        if inspect.iscoroutine(call):
            call.close()  # never started: nothing to cancel
        raise shutting_down()
    stop = TaskStop(task)
    try:
        with watching(receive, stop, stop):
            return await call
    except asyncio.CancelledError:
        if stop.why is None or task.uncancel() > 0:
            raise  # cancelled from outside (the drain deadline): not ours to answer
        raise stop.why from None
