"""The bounded httpx transport under litellm counts what the passthrough's SSE splitter counts:
an event (up to and with its blank line) or an unfinished rest over the bound raises, however the
network cut the bytes into chunks; a whole non-SSE answer is bounded as a whole."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from itertools import pairwise

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.exchange.sse import split_events
from proxy.transports.bounded_http import BoundedTransport, TooLarge, Trip, trip

BOUND = 64


def _read(chunks: list[bytes], kind: str) -> tuple[bool, Trip]:
    """Read an answer cut into ``chunks`` through the transport: (whether it raised, trip)."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": kind}, content=body())

    async def main() -> tuple[bool, Trip]:
        mark = Trip()
        token = trip.set(mark)
        transport = BoundedTransport(httpx.MockTransport(answer), BOUND, BOUND)
        async with httpx.AsyncClient(transport=transport) as client:
            try:
                async with client.stream("GET", "http://127.0.0.1:9/") as resp:
                    async for _ in resp.aiter_raw():
                        pass
            except TooLarge:
                return True, mark
            finally:
                trip.reset(token)
        return False, mark

    return asyncio.run(main())


def _over(data: bytes) -> bool:
    events, rest = split_events(data)
    return any(len(e) > BOUND for e in events) or len(rest) > BOUND


def _cut(data: bytes, cuts: list[int], size: int) -> list[bytes]:
    """``data`` cut at ``cuts`` and then every ``size`` bytes (small sizes split terminators)."""
    points = sorted({min(c, len(data)) for c in cuts} | set(range(0, len(data), size)))
    return [data[a:b] for a, b in pairwise([*points, len(data)])]


pieces = st.lists(
    st.sampled_from([b"data: x", b"y" * 30, b"\n", b"\r\n", b"\n\n", b"\r\n\r\n", b"\r"]),
    max_size=14,
)


@settings(max_examples=300, deadline=None)
@given(pieces, st.lists(st.integers(0, 500), max_size=8), st.integers(1, 100))
def test_an_event_raises_exactly_when_the_splitter_would_refuse_it(parts, cuts, size):
    data = b"".join(parts)
    raised, mark = _read(_cut(data, cuts, size), "text/event-stream")
    assert raised == _over(data)
    assert (mark.reason is not None) == raised


@pytest.mark.parametrize(("size", "over"), [(BOUND, False), (BOUND + 1, True)])
def test_a_whole_answer_is_bounded_as_a_whole(size, over):
    chunks = [b"a" * 10] * (size // 10) + [b"a" * (size % 10)]
    raised, mark = _read(chunks, "application/json")
    assert raised is over
    assert mark.reason is None if not over else "an answer over 64 bytes" in mark.reason


def test_a_long_stream_of_small_events_is_never_cut():
    raised, _ = _read([b"data: {}\n\n"] * 100, "text/event-stream")
    assert not raised
