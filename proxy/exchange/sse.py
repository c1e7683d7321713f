"""Server-sent events framing, in one place for every transport and wire.

A provider's event is held in memory until its blank line arrives, so an event is bounded
(``routefit_settings.max_sse_event_bytes``): a provider that never ends one, or sends one bigger
than any real event, breaks its stream (``EventTooLarge``, a ``StreamBroken``: the client gets its
wire's error event) instead of growing the process without bound.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from proxy.exchange import StreamBroken

__all__ = [
    "DONE",
    "MAX_EVENT_BYTES",
    "EventTooLarge",
    "encode",
    "event_data",
    "event_name",
    "is_done",
    "split_events",
    "split_stream",
]

#: The default bound of one SSE event (a provider's biggest real events, a tool call's whole
#: arguments or a Responses ``response.completed`` echo, stay far below it).
MAX_EVENT_BYTES = 16 * 1024 * 1024


class EventTooLarge(StreamBroken):
    """A provider's SSE event grew past the bound before it ended."""


DONE = b"data: [DONE]\n\n"


def is_done(data: bytes | None) -> bool:
    """Whether an event's data is chat's end marker, ``[DONE]``."""
    return data is not None and data.strip() == b"[DONE]"


def split_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events (with their terminator) and the incomplete rest."""
    events: list[bytes] = []
    while True:
        a = buffer.find(b"\n\n")
        b = buffer.find(b"\r\n\r\n")
        if a < 0 and b < 0:
            return events, buffer
        end = b + 4 if b >= 0 and (a < 0 or b < a) else a + 2
        events.append(buffer[:end])
        buffer = buffer[end:]


async def split_stream(
    chunks: AsyncIterator[bytes], max_event: int = MAX_EVENT_BYTES
) -> AsyncIterator[bytes]:
    """Re-chunk a byte stream into complete events (network chunks split them anywhere); an
    event still unfinished past ``max_event`` bytes raises ``EventTooLarge``.

    The unfinished rest is kept in a bytearray and only its new bytes are searched for a
    terminator, so a long event costs linear time, not a copy of itself per network chunk."""
    buffer = bytearray()
    async for chunk in chunks:
        # a terminator may straddle the old and new bytes: look back 3 bytes
        start = max(0, len(buffer) - 3)
        buffer += chunk
        if buffer.find(b"\n\n", start) < 0 and buffer.find(b"\r\n\r\n", start) < 0:
            if len(buffer) > max_event:
                raise EventTooLarge(f"the provider sent an SSE event over {max_event:,} bytes")
            continue
        events, rest = split_events(bytes(buffer))
        buffer = bytearray(rest)
        for event in events:
            if len(event) > max_event:
                raise EventTooLarge(f"the provider sent an SSE event over {max_event:,} bytes")
            yield event
        if len(buffer) > max_event:
            raise EventTooLarge(f"the provider sent an SSE event over {max_event:,} bytes")


def event_data(event: bytes) -> bytes | None:
    """The ``data:`` payload of one event (multi-line data joined), or None."""
    lines = [line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def event_name(event: bytes) -> bytes | None:
    """The ``event:`` field of one event, or None."""
    for line in event.splitlines():
        if line.startswith(b"event:"):
            return line[6:].strip()
    return None


def encode(data: object, event: str | None = None) -> bytes:
    """One event carrying ``data`` as JSON (with an ``event:`` line when named)."""
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"
