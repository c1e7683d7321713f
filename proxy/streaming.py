"""Relaying a stream to the client as it arrives.

A plain ASGI response rather than Starlette's StreamingResponse, because two things must be
deterministic: a client that disconnects must cancel the upstream request at once (not at the
next chunk, which for a slow model may be seconds away), and the upstream connection must be
closed and the completion hook run exactly once, however the stream ends — a stream the
drain cuts included (``proxy.drain``: it ends with its wire's error event and its reservation is
released; one uvicorn cancels after that is counted with the disconnects, not as a 502).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping

from starlette.responses import Response

from proxy.disconnect import TaskStop, watching
from proxy.errors import ProxyError
from proxy.exchange import EventStream
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
        self._closing: asyncio.Future[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        # The client leaving cancels the relay at once (not at the next chunk).
        left = TaskStop(task)

        def on_cut(_: ProxyError) -> None:
            # The drain deadline is near: drop the provider's stream, so the relay ends with
            # its wire's error event (StreamBroken) instead of being cancelled mid-write.
            if self._closing is None:
                self._closing = asyncio.ensure_future(self.source.aclose())

        disconnected = False
        try:
            with watching(receive, left, on_cut):
                await send(
                    {"type": "http.response.start", "status": 200, "headers": self.sse_headers}
                )
                async for chunk in self.chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # ASGI 2.4: send() raises once the client is gone
            disconnected = True
        except asyncio.CancelledError:
            disconnected = True
            if left.why is None or task.uncancel() > 0:
                raise  # cancelled from outside: the server's drain deadline cut the stream
        except BaseException:
            disconnected = True
            raise
        finally:
            # A stream the drain cut is counted with the ones whose client went away, not as
            # the provider's failure. Shielded: a cancellation now must not skip the hook.
            await asyncio.shield(self._finish(disconnected or self._closing is not None))

    async def _finish(self, disconnected: bool) -> None:
        await self.chunks.aclose()
        await self.source.aclose()
        await self.on_done(disconnected)
