"""ASGI responses that need the connection itself: SSE with disconnect tracking, dropped
connections, bodies cut mid-way.

The transport comes from uvicorn's request cycle (``receive.__self__.transport``), captured by
the outer ASGI wrapper into ``scope["sim.transport"]``. Closing it is what a provider that drops
a connection looks like to the client: no response at all, or a chunked body that never ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.sim.state import SimState

__all__ = ["CutBody", "DisconnectWatch", "DropConnection", "EventStream"]


class DisconnectWatch:
    """Watches ``receive`` for ``http.disconnect`` once the request body has been read."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.event.set()
                return

    @property
    def disconnected(self) -> bool:
        return self.event.is_set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep; return True early if the client disconnected meanwhile."""
        if seconds <= 0:
            return self.event.is_set()
        try:
            await asyncio.wait_for(self.event.wait(), seconds)
        except TimeoutError:
            return False
        return True

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


def _close(scope: Scope) -> None:
    transport = scope.get("sim.transport")
    if transport is None:
        raise RuntimeError("sim: the server does not expose its transport (uvicorn h11 expected)")
    transport.close()


async def _await_disconnect(scope: Scope) -> None:
    watch: DisconnectWatch | None = scope.get("sim.watch")
    if watch is not None:
        watch.start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watch.event.wait(), 5)


class DropConnection(Response):
    """Close the connection without sending a byte of response."""

    def __init__(self) -> None:
        self.status_code = 599  # never sent
        self.background = None
        self.raw_headers = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        _close(scope)
        await _await_disconnect(scope)


class CutBody(Response):
    """Headers and part of the body (``Content-Length`` promises all of it), then a closed
    connection: the non-stream shape of ``cut-stream``."""

    def __init__(self, body: bytes, media_type: str = "application/json") -> None:
        super().__init__(body, 200, media_type=media_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        await send(
            {
                "type": "http.response.body",
                "body": self.body[: len(self.body) // 2],
                "more_body": True,
            }
        )
        _close(scope)
        await _await_disconnect(scope)


class EventStream(Response):
    """Server-sent events, one ASGI body message (flushed) per event.

    Tracks the stream in the state's counters: started, then exactly one of completed,
    cancelled (the client disconnected first) or cut (``cut_after`` events, then the connection
    is closed without the end of the chunked body).
    """

    def __init__(
        self,
        state: SimState,
        events: Sequence[bytes],
        *,
        delay: float = 0.0,
        cut_after: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        # Not Response.__init__: it would declare a Content-Length for an empty body.
        self.status_code = 200
        self.background = None
        all_headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
        }
        all_headers.update(headers or {})
        self.raw_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in all_headers.items()
        ]
        self.state = state
        self.events = list(events)
        self.delay = delay
        self.cut_after = cut_after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watch: DisconnectWatch = scope.get("sim.watch") or DisconnectWatch(receive)
        watch.start()
        with self.state.lock:
            self.state.stats.streams_started += 1
        outcome = "cancelled"
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            for i, event in enumerate(self.events):
                if self.cut_after is not None and i >= self.cut_after:
                    outcome = "cut"
                    _close(scope)
                    await _await_disconnect(scope)
                    return
                if watch.disconnected:
                    return
                await send({"type": "http.response.body", "body": event, "more_body": True})
                if i + 1 < len(self.events) and await watch.sleep(self.delay):
                    return
            if watch.disconnected:
                return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            outcome = "completed"
        finally:
            with self.state.lock:
                stats = self.state.stats  # not captured earlier: a reset replaces it
                if outcome == "completed":
                    stats.streams_completed += 1
                elif outcome == "cut":
                    stats.streams_cut += 1
                else:
                    stats.streams_cancelled += 1


def sse(data: Any, event: str | None = None) -> bytes:
    """One SSE event (``data`` already JSON text or bytes)."""
    payload = data if isinstance(data, bytes) else str(data).encode()
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + payload + b"\n\n"
