"""Properties of the provider-side bounds and scrubbing (``proxy.exchange.sse``,
``proxy.transports.provider_errors``): however the network chunks a stream, the bounded
splitter yields exactly the events of the whole, and refuses exactly when an event outgrows the
bound; however deep a provider hides the key in its error, no field the client gets holds it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.exchange.sse import EventTooLarge, split_events, split_stream
from proxy.transports.provider_errors import redact_value, upstream_error

_EVENT = st.builds(
    lambda body, crlf: body + (b"\r\n\r\n" if crlf else b"\n\n"),
    st.binary(min_size=1, max_size=60).map(
        lambda b: b"data: " + b.replace(b"\n", b"x").replace(b"\r", b"y")
    ),
    st.booleans(),
)


async def _chunks(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    at = 0
    for cut in sorted(set(cuts)):
        yield data[at:cut]
        at = cut
    yield data[at:]


def _split(data: bytes, cuts: list[int], bound: int) -> list[bytes]:
    async def run() -> list[bytes]:
        return [event async for event in split_stream(_chunks(data, cuts), bound)]

    return asyncio.run(run())


@settings(max_examples=200, deadline=None)
@given(st.lists(_EVENT, max_size=8), st.lists(st.integers(0, 600), max_size=12))
def test_any_chunking_yields_the_events_of_the_whole(events: list[bytes], cuts: list[int]):
    data = b"".join(events)
    cuts = [c for c in cuts if c <= len(data)]
    expected, rest = split_events(data)
    assert rest == b""
    assert _split(data, cuts, 10**9) == expected == events


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_EVENT, min_size=1, max_size=6),
    st.lists(st.integers(0, 600), max_size=12),
    st.integers(8, 80),
)
def test_an_event_over_the_bound_is_refused_and_none_under_it(
    events: list[bytes], cuts: list[int], bound: int
):
    data = b"".join(events)
    cuts = [c for c in cuts if c <= len(data)]
    if max(len(e) for e in events) <= bound:
        assert _split(data, cuts, bound) == events
    else:
        with pytest.raises(EventTooLarge):
            _split(data, cuts, bound)


def test_an_unterminated_event_is_refused_once_past_the_bound():
    async def endless() -> AsyncIterator[bytes]:
        yield b"data: ok\n\n"
        while True:
            yield b"x" * 1000

    async def run() -> list[bytes]:
        got: list[bytes] = []
        with pytest.raises(EventTooLarge):
            async for event in split_stream(endless(), 10_000):
                got.append(event)
        return got

    assert asyncio.run(run()) == [b"data: ok\n\n"]


SECRET = "sk-live-0123456789abcdefghij"
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def _with_secret(value: object, where: int) -> object:
    """``value`` with the secret planted in a string of it (or wrapping it)."""
    if isinstance(value, str):
        return value[:where] + SECRET + value[where:]
    if isinstance(value, list) and value:
        i = where % len(value)
        return [*value[:i], _with_secret(value[i], where), *value[i + 1 :]]
    if isinstance(value, dict) and value:
        key = sorted(value)[where % len(value)]
        return {**value, key: _with_secret(value[key], where), SECRET: 1}
    return [value, f"Bearer {SECRET}"]


@settings(max_examples=200, deadline=None)
@given(_JSON, st.integers(0, 30), st.sampled_from(["message", "param", "code", "type"]))
def test_no_field_of_a_provider_error_keeps_the_key(value: object, where: int, field: str):
    planted = _with_secret(value, where)
    assert SECRET not in orjson.dumps(redact_value(planted, SECRET)).decode()
    error = {"message": "bad key", field: planted}
    err = upstream_error(401, orjson.dumps({"error": error}), {}, SECRET)
    for got in (err.message, err.code, err.param, err.type):
        assert got is None or SECRET not in got
