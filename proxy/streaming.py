"""Relaying a stream to the client as it arrives.

A plain ASGI response rather than Starlette's StreamingResponse, because two things must be
deterministic: a client that disconnects must cancel the upstream request at once (not at the
next chunk, which for a slow model may be seconds away), and the upstream connection must be
closed and the completion hook run exactly once, however the stream ends — a stream the
drain cuts included (``proxy.drain``: it ends with its wire's error event and its reservation is
released; one uvicorn cancels after that is counted with the disconnects, not as a 502).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping

import anyio
from starlette.responses import Response

from proxy.drain import cut_event
from proxy.transports import EventStream
from proxy.types import Receive, Scope, Send

__all__ = ["SSEResponse"]

#: Called once when the stream is over, with whether the client disconnected first.
OnDone = Callable[[bool], Awaitable[None]]


class SSEResponse(Response):
    """A Response (so Starlette's routing takes it) whose ``__call__`` relays the stream."""

    def __init__(
        self,
        chunks: AsyncGenerator[bytes, None],
        source: EventStream,
        headers: Mapping[str, str],
        on_done: OnDone,
    ) -> None:
        self.status_code = 200
        self.background = None
        self.chunks = chunks
        self.source = source
        self.sse_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()),
        ]
        self.on_done = on_done

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        disconnected = False

        async def watch(cancel: anyio.CancelScope) -> None:
            nonlocal disconnected
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected = True
                    cancel.cancel()
                    return

        async def cut() -> None:
            # The drain deadline is near: drop the provider's stream, so the relay ends with
            # its wire's error event (StreamBroken) instead of being cancelled mid-write.
            nonlocal disconnected
            await cut_event().wait()
            disconnected = True  # counted with the streams that did not finish, not as a 502
            await self.source.aclose()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch, tg.cancel_scope)
                tg.start_soon(cut)
                try:
                    await send(
                        {"type": "http.response.start", "status": 200, "headers": self.sse_headers}
                    )
                    async for chunk in self.chunks:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except OSError:  # ASGI 2.4: send() raises once the client is gone
                    disconnected = True
                tg.cancel_scope.cancel()
        except BaseException:
            # Cancelled from outside: the server's drain deadline cut the stream. Not the
            # provider's failure; counted with the streams whose client went away.
            disconnected = True
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await self.chunks.aclose()
                await self.source.aclose()
                await self.on_done(disconnected)
