"""What a provider sends back through litellm, bounded as the passthrough bounds it.

litellm reads each answer itself, so the bound has to sit under it: an httpx transport that
wraps every response's byte stream in a counter. A ``text/event-stream`` answer is bounded per
event (``max_sse_event_bytes``: the bytes since the last blank line; a stream as a whole may be
long), any other answer as a whole (``max_provider_body_bytes``). Past the bound the stream
raises, which drops the provider's connection before more of it is read, and marks the call's
``Trip`` so routefit's side can tell "too large" from whatever litellm turns the exception into
(it wraps transport errors in its own tree, message and type varying by provider).

The ``Trip`` of a call travels in a context variable set before the call: the transport reads
it when the request is sent (in the caller's context), and the stream keeps it, so a stream
read later, in another task, still marks the right call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass

import httpx

from proxy.exchange.sse import event_end

__all__ = ["BoundedTransport", "TooLarge", "Trip", "trip"]


@dataclass(slots=True)
class Trip:
    """Whether (and why) one call's answer went over its bound; whether it left at all."""

    reason: str | None = None
    #: A request of the call reached this transport: what failed before never left routefit
    #: (litellm could not translate the body), and says nothing of the provider.
    sent: bool = False


#: The current call's trip; a request sent outside any call is bounded but reports to nobody.
trip: ContextVar[Trip | None] = ContextVar("routefit_litellm_trip", default=None)


class TooLarge(httpx.ReadError):
    """A provider's answer (or one of its events) grew past the bound.

    A ``ReadError`` so that whatever reads the body treats it as a broken connection."""


class _Counted(httpx.AsyncByteStream):
    """A response body that raises ``TooLarge`` once it is over its bound."""

    def __init__(self, inner: httpx.AsyncByteStream, bound: int, sse: bool, mark: Trip | None):
        self._inner = inner
        self._bound = bound
        self._sse = sse
        self._mark = mark

    def _fail(self, what: str) -> TooLarge:
        reason = f"the provider sent {what} over {self._bound:,} bytes"
        if self._mark is not None:
            self._mark.reason = reason
        return TooLarge(reason)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0  # the whole body's bytes, or the unfinished event's
        # a terminator may straddle two chunks: the unfinished event's last 3 bytes (never a
        # byte of a terminator already counted, which ``split_events`` would not reuse either);
        # its ends are ``proxy.exchange.sse.event_end``'s, the passthrough splitter's own
        tail = b""
        async for chunk in self._inner:
            if not self._sse:
                seen += len(chunk)
                if seen > self._bound:
                    raise self._fail("an answer")
            else:
                seen, tail = self._event_bytes(seen, tail, chunk)
            yield chunk

    def _event_bytes(self, seen: int, tail: bytes, chunk: bytes) -> tuple[int, bytes]:
        """The unfinished event's size after ``chunk`` and its last bytes; raises if any event
        passed the bound."""
        joined = tail + chunk
        start = 0
        while (end := event_end(joined, start)) >= 0:
            if _new_end(joined, end, len(tail)):
                if seen + end - max(start, len(tail)) > self._bound:
                    raise self._fail("an SSE event")
                seen = 0
            start = end
        seen += len(joined) - max(start, len(tail))
        if seen > self._bound:
            raise self._fail("an SSE event")
        return seen, joined[max(start, len(joined) - 3) :]

    async def aclose(self) -> None:
        await self._inner.aclose()


def _new_end(joined: bytes, end: int, tail: int) -> bool:
    """Whether an event end found in ``joined`` (the last chunk's last ``tail`` bytes, then the
    new one) was not counted with the last chunk: one past the tail, or the one that ended the
    tail on a CR, which ``event_end`` left for the next byte to settle (a CRLF's first half)."""
    return end > tail or (end == tail and joined[end - 1] == ord("\r"))


class BoundedTransport(httpx.AsyncBaseTransport):
    """An httpx transport whose answers are bounded (see the module's docstring)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, max_body: int, max_event: int) -> None:
        self._inner = inner
        self.max_body = max_body
        self.max_event = max_event

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        mark = trip.get()
        if mark is not None:
            mark.sent = True
        resp = await self._inner.handle_async_request(request)
        sse = resp.headers.get("content-type", "").startswith("text/event-stream")
        if isinstance(resp.stream, httpx.AsyncByteStream):
            bound = self.max_event if sse else self.max_body
            resp.stream = _Counted(resp.stream, bound, sse, mark)
        return resp

    async def aclose(self) -> None:
        await self._inner.aclose()
