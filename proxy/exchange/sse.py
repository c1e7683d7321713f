"""Server-sent events framing, in one place for every transport and wire.

A provider's event is held in memory until its blank line arrives, so an event is bounded
(``routefit_settings.max_sse_event_bytes``): a provider that never ends one, or sends one bigger
than any real event, breaks its stream (``EventTooLarge``, a ``StreamBroken``: the client gets its
wire's error event) instead of growing the process without bound.

An event ends at a blank line, its lines ended by CRLF, LF or CR as the SSE standard allows (one
stream may mix them): a provider that ends its lines with a bare CR is no stream of one endless
event. A chunk holding many events is split in one pass over it, not a copy of its rest per
event (which made a chunk of ten thousand tiny events cost seconds of the event loop).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import anyio.lowlevel
import orjson

from proxy.exchange import StreamBroken

__all__ = [
    "DONE",
    "MAX_EVENT_BYTES",
    "TURN_BYTES",
    "TURN_EVERY",
    "EventTooLarge",
    "LoopTurns",
    "encode",
    "event_data",
    "event_end",
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


#: A provider stream's events relayed between two turns of the event loop at most
#: (``LoopTurns``): ~0.5 ms of relaying tiny events.
TURN_EVERY = 64
#: ... or its bytes: a few big events cost by their bytes (parsed, translated, written).
TURN_BYTES = 1024 * 1024


class LoopTurns:
    """Gives the event loop a turn after every ``TURN_EVERY`` events or ``TURN_BYTES`` bytes of a
    provider's stream, whatever the network does.

    Reading an event that has already arrived does not suspend (an aiohttp or asyncio buffer
    that holds data answers at once), so a stream whose events came faster than they are
    relayed was relayed without one turn of the loop: 50,000 one-letter chat chunks sent at
    once (8 MB, under ``max_provider_body_bytes``) held it 370-660 ms on every wire, each event
    read, translated, counted and written in one go. A turn costs a few µs."""

    __slots__ = ("_bytes", "_events")

    def __init__(self) -> None:
        self._events = 0
        self._bytes = 0

    async def after(self, size: int) -> None:
        """One event of ``size`` bytes was handed on: a turn of the loop when that is due."""
        self._events += 1
        self._bytes += size
        if self._events >= TURN_EVERY or self._bytes >= TURN_BYTES:
            self._events = self._bytes = 0
            await anyio.lowlevel.checkpoint()


DONE = b"data: [DONE]\n\n"


def is_done(data: bytes | None) -> bool:
    """Whether an event's data is chat's end marker, ``[DONE]``."""
    return data is not None and data.strip() == b"[DONE]"


_LF = 10
_CR = 13


def event_end(buffer: bytes | bytearray, start: int = 0, final: bool = False) -> int:
    """Where the first event whose blank line ends after ``start`` ends (-1: none yet).

    A blank line is two line ends in a row, each CRLF, LF or CR (a CR before an LF is one line
    end, never two); it begins where a line's LF, or a CR no LF follows, meets a CR or an LF:
    at the first ``\n\n``, ``\n\r`` or ``\r\r``. One whose last byte is the buffer's last, a
    CR, may be the first half of a CRLF the next bytes complete: it ends an event only once they
    came (or, ``final``, none will), so an event never begins with the LF of the one before it,
    however the network cut them."""
    at = buffer.find(b"\n\n", start)
    size = len(buffer)
    limit = at if at >= 0 else size
    if buffer.find(b"\r", start, limit) < 0:  # LF line ends only (most providers)
        return at + 2 if at >= 0 else -1
    for pair in (b"\n\r", b"\r\r"):  # an earlier blank line with a CR in it
        found = buffer.find(pair, start, limit + 1)
        if found >= 0:
            limit = found
    if limit >= size:
        return -1
    if buffer[limit + 1] == _LF:
        return limit + 2
    if limit + 2 < size:  # the second line end is a CR: its LF, if one follows, is its own
        return limit + 3 if buffer[limit + 2] == _LF else limit + 2
    return limit + 2 if final else -1


def split_events(buffer: bytes, final: bool = False) -> tuple[list[bytes], bytes]:
    """Complete SSE events (with their terminator) and the incomplete rest (``final``: nothing
    more will come, see ``event_end``)."""
    events, used = _complete(buffer, 0, final)
    return events, buffer[used:]


def _complete(buffer: bytes | bytearray, scan: int, final: bool) -> tuple[list[bytes], int]:
    """The complete events at the start of ``buffer`` (terminators searched from ``scan``: what
    came before it was searched already) and how many bytes they take: each cut by offset, so
    a chunk of many events costs one pass, not a copy of its rest per event."""
    events: list[bytes] = []
    start = 0
    while (end := event_end(buffer, max(start, scan), final)) >= 0:
        events.append(bytes(buffer[start:end]))
        start = end
    return events, start


async def split_stream(
    chunks: AsyncIterator[bytes], max_event: int = MAX_EVENT_BYTES
) -> AsyncGenerator[bytes, None]:
    """Re-chunk a byte stream into complete events (network chunks split them anywhere); an
    event still unfinished past ``max_event`` bytes raises ``EventTooLarge``.

    The unfinished rest is kept in a bytearray and only its new bytes are searched for a
    terminator (the last 3 old ones again: one may straddle the cut), so a long event costs
    linear time, not a copy of itself per network chunk. The loop gets a turn every few events
    however fast they came (``LoopTurns``)."""
    buffer = bytearray()
    turns = LoopTurns()
    async for chunk in chunks:
        scan = max(0, len(buffer) - 3)
        buffer += chunk
        if event_end(buffer, scan) < 0:  # an event still coming (the usual network cut)
            if len(buffer) > max_event:
                raise EventTooLarge(f"the provider sent an SSE event over {max_event:,} bytes")
            continue
        for event in _cut(buffer, scan, max_event, final=False):
            yield event
            await turns.after(len(event))
    # a last blank line that ended on a CR waited for the LF that may follow it: none will
    for event in _cut(buffer, max(0, len(buffer) - 4), max_event, final=True):
        yield event


def _cut(buffer: bytearray, scan: int, max_event: int, final: bool) -> list[bytes]:
    """``_complete``'s events, removed from ``buffer``; ``EventTooLarge`` for one, or an
    unfinished rest, over ``max_event``."""
    events, used = _complete(buffer, scan, final)
    del buffer[:used]
    if len(buffer) > max_event or any(len(event) > max_event for event in events):
        raise EventTooLarge(f"the provider sent an SSE event over {max_event:,} bytes")
    return events


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
