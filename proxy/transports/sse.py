"""Server-sent events framing, in one place for every transport and wire."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

__all__ = ["DONE", "encode", "event_data", "event_name", "split_events", "split_stream"]

DONE = b"data: [DONE]\n\n"


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


async def split_stream(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Re-chunk a byte stream into complete events (network chunks split them anywhere)."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        events, buffer = split_events(buffer)
        for event in events:
            yield event


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
