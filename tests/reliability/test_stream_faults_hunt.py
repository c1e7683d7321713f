"""A provider's stream framed oddly or ended oddly, in process (``MockTransport``, as
test_stream_faults.py drives it): the client's stream ends when the provider's answer does, in its
wire's terms, and is charged what the provider said.

* an answer whose stream is held open after its end marker (``[DONE]``, ``message_stop``,
  ``response.completed``) ends the client's stream at the marker: it was held until the read
  timeout (600 s by default) and then ended with an error event after a complete answer;
* a stream request answered with JSON (a provider or proxy that ignores ``stream``, or one that
  reports its failure as a JSON 200) is a 502 ``upstream_malformed`` that says so and carries the
  provider's own message: it was "the upstream stream ended before its first event";
* lines ended by a bare CR (the SSE standard's third line end) are events like LF's: such a
  stream was one endless event, a 502;
* a chunk of many events is split in one pass (``split_events`` copies each byte about once):
  it copied its rest once per event, seconds of the event loop for a chunk of tiny events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_stream_faults import Answer, gateway
from wire_shapes import check_wire_error_shape

from proxy.exchange.sse import split_events, split_stream

pytestmark = pytest.mark.anyio

#: (client wire, alias, host): every native leg, and chat over routefit's Messages translation.
LEGS = [
    ("chat", "gpt", "oa"),
    ("messages", "claude", "an"),
    ("responses", "gpt", "oa"),
    ("gemini", "gem", "gm"),
    ("chat", "claude", "an"),
]
LEG_IDS = ["-".join(leg[:2]) for leg in LEGS]
#: The legs whose provider wire has an end marker (Gemini's stream ends with its body).
MARKED = [leg for leg in LEGS if leg[0] != "gemini"]
#: Bounds a test that, before its fix, waited for a read timeout that the mock never has.
HANG_GUARD_S = 60


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sim_stream(
    change: Callable[[bytes], bytes], after: Callable[[], Any] | None = None, cut: int = 0
) -> Answer:
    """The simulator's own stream, its bytes changed by ``change`` and handed over ``cut`` bytes
    at a time (0: at once); then ``after()`` is awaited before the body ends."""

    async def answer(request: httpx.Request, sim: Any) -> httpx.Response:
        response = await sim(request)
        body = change(await response.aread())

        async def content() -> AsyncIterator[bytes]:
            step = cut or len(body)
            for at in range(0, len(body), step):
                yield body[at : at + step]
            if after is not None:
                await after()

        return httpx.Response(200, content=content(), headers={"content-type": "text/event-stream"})

    return answer


def _unchanged(body: bytes) -> bytes:
    return body


def _lf(body: bytes) -> bytes:
    return body.replace(b"\r\n", b"\n")


def _bare_cr(body: bytes) -> bytes:
    return _lf(body).replace(b"\n", b"\r")


def _errors(text: str) -> list[str]:
    """The error events of a relayed stream (each wire's own way of ending one in failure)."""
    found = []
    for block in text.replace("\r\n", "\n").replace("\r", "\n").split("\n\n"):
        for line in block.splitlines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            data = json.loads(line[5:])
            if "error" in data or data.get("type") in ("error", "response.failed"):
                found.append(line)
    return found


def _ends_normally(wire: str, text: str) -> bool:
    """Whether the relayed stream's last event is its wire's own normal end."""
    last = text.replace("\r\n", "\n").replace("\r", "\n").strip().rsplit("\n\n", 1)[-1]
    if wire == "chat":
        return last == "data: [DONE]"
    if wire == "messages":
        return last.startswith("event: message_stop")
    if wire == "responses":
        return last.startswith("event: response.completed")
    return '"finishReason"' in last


async def _forever() -> None:
    await asyncio.Event().wait()


# -- a stream held open after its end marker -----------------------------------------------------


@pytest.mark.parametrize("leg", MARKED, ids=["-".join(leg[:2]) for leg in MARKED])
async def test_a_stream_held_open_after_its_end_marker_ends_at_the_marker(
    leg: tuple[str, str, str],
) -> None:
    wire, alias, host = leg
    async with gateway() as gw:
        before = await gw.used()
        gw.provider.faults[host] = [_sim_stream(_unchanged)]
        whole = await gw.stream(wire, alias)
        charged = await gw.used() - before
        gw.provider.faults[host] = [_sim_stream(_unchanged, after=_forever)]
        with anyio.fail_after(HANG_GUARD_S):
            held = await gw.stream(wire, alias)
        assert held.status_code == 200, held.text
        assert _ends_normally(wire, held.text), held.text[-300:]
        assert _errors(held.text) == []
        # charged as the same answer whose body ended at once
        assert await gw.used() - before == 2 * charged
        assert _ends_normally(wire, whole.text)


# -- a stream request answered with JSON ---------------------------------------------------------


async def _json_failure(request: httpx.Request, sim: Any) -> httpx.Response:
    return httpx.Response(200, json={"error": {"message": "the model is overloaded"}})


@pytest.mark.parametrize("leg", LEGS, ids=LEG_IDS)
async def test_a_stream_request_answered_with_json_says_so_with_the_providers_words(
    leg: tuple[str, str, str],
) -> None:
    wire, alias, host = leg
    async with gateway() as gw:
        gw.provider.faults[host] = [_json_failure]
        r = await gw.stream(wire, alias)
        assert r.status_code == 502, r.text
        check_wire_error_shape(r.request.url.path, 502, r.content, alias, None, True)
        assert "text/event-stream" not in r.headers.get("content-type", "")
        assert "the model is overloaded" in r.text
        assert "JSON" in r.text
        if wire == "chat":
            assert r.json()["error"]["code"] == "upstream_malformed"


# -- line ends: a bare CR, and any cut of the bytes ---------------------------------------------


@pytest.mark.parametrize("leg", LEGS, ids=LEG_IDS)
async def test_a_stream_whose_lines_end_with_a_bare_cr_is_relayed_like_one_ending_with_lf(
    leg: tuple[str, str, str],
) -> None:
    wire, alias, host = leg
    async with gateway() as gw:
        before = await gw.used()
        gw.provider.faults[host] = [_sim_stream(_lf, cut=7)]
        lf = await gw.stream(wire, alias)
        by_lf = await gw.used() - before
        gw.provider.faults[host] = [_sim_stream(_bare_cr, cut=7)]
        cr = await gw.stream(wire, alias)
        by_cr = await gw.used() - before - by_lf
        assert lf.status_code == cr.status_code == 200, cr.text
        assert _ends_normally(wire, lf.text) and _ends_normally(wire, cr.text), cr.text[-300:]
        assert _errors(cr.text) == []
        assert by_cr == by_lf > 0


_LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])
_LINE = st.binary(min_size=1, max_size=20).map(
    lambda b: b"data: " + b.replace(b"\n", b"x").replace(b"\r", b"y")
)


def _event(lines: list[tuple[bytes, bytes]], blank: bytes) -> bytes:
    """Lines and the blank line after them; a blank LF after a CR would make one CRLF of the
    two (the standard reads it so), so that blank line is a CRLF."""
    if lines[-1][1] == b"\r" and blank == b"\n":
        blank = b"\r\n"
    return b"".join(line + end for line, end in lines) + blank


#: One event: its lines and the blank line after them, each line end any of the three.
_EVENT = st.builds(
    _event, st.lists(st.tuples(_LINE, _LINE_ENDS), min_size=1, max_size=3), _LINE_ENDS
)


async def _chunks(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    at = 0
    for cut in sorted({c for c in cuts if c <= len(data)}):
        yield data[at:cut]
        at = cut
    yield data[at:]


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENT, max_size=6), st.lists(st.integers(0, 400), max_size=12))
def test_any_line_ends_and_any_cut_yield_the_events_as_sent(
    events: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(events)

    async def split() -> list[bytes]:
        return [event async for event in split_stream(_chunks(data, cuts), 10**9)]

    assert asyncio.run(split()) == events


# -- many events in one chunk ----------------------------------------------------------------------


class _Copies(bytes):
    """Bytes that count what their slices copy (shared by every slice of them)."""

    copied = 0

    def __getitem__(self, key: Any) -> Any:
        got = super().__getitem__(key)
        if isinstance(key, slice):
            _Copies.copied += len(got)
            return _Copies(got)
        return got


def test_a_chunk_of_many_events_is_split_copying_each_byte_about_once() -> None:
    data = b"data: {}\n\n" * 5000 + b"data: unfinished"
    _Copies.copied = 0
    events, rest = split_events(_Copies(data))
    assert len(events) == 5000 and rest == b"data: unfinished"
    assert _Copies.copied <= 2 * len(data)
