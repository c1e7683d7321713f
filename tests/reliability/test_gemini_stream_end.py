"""A Gemini provider stream has no end marker (no ``[DONE]``, no ``message_stop``): its end is
read from its chunks (``proxy.transports.provider_http``: every candidate's ``finishReason``
and the ``usageMetadata`` with it or after it) and then from a short quiet on the body.

* a native Gemini stream whose body is held open after its last chunk ends the client's stream
  after that chunk, normally and charged as the same answer whose body ended: it was held until
  the read timeout (600 s by default) and then ended with an error chunk after a whole answer;
* a chunk that looks like the last (a finish reason and usage) is not taken for the end while
  the body goes on: a provider that sends more after it (a second candidate, a usage-only
  chunk, a proxy that writes ``STOP`` on every chunk) has all of it relayed.

In process (``MockTransport``, as test_stream_faults.py drives it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest
from test_stream_faults import Answer, gateway

pytestmark = pytest.mark.anyio

#: Bounds a test that, before its fix, waited for a read timeout the mock never has.
HANG_GUARD_S = 60


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _forever() -> None:
    await asyncio.Event().wait()


def _held(
    change: Callable[[bytes], bytes] = lambda body: body,
    after: Callable[[], Awaitable[None]] = _forever,
) -> Answer:
    """The simulator's Gemini stream, its bytes changed by ``change``, then its body held open
    (``after`` awaited before it ends)."""

    async def answer(request: httpx.Request, sim: Any) -> httpx.Response:
        response = await sim(request)
        body = change(await response.aread())

        async def content() -> AsyncIterator[bytes]:
            yield body
            await after()

        return httpx.Response(200, content=content(), headers={"content-type": "text/event-stream"})

    return answer


def _chunks(text: str) -> list[dict[str, Any]]:
    """The relayed SSE stream's data objects, in order."""
    out = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith("data:"):
            out.append(json.loads(line[5:]))
    return out


def _unnamed(chunk: dict[str, Any]) -> dict[str, Any]:
    """A chunk without its response id (the simulator's differs per request)."""
    return {k: v for k, v in chunk.items() if k != "responseId"}


def _text(chunks: list[dict[str, Any]]) -> str:
    return "".join(
        part.get("text", "")
        for chunk in chunks
        for cand in chunk.get("candidates", [])
        for part in cand.get("content", {}).get("parts", [])
    )


async def test_a_gemini_stream_held_open_after_its_last_chunk_ends_after_that_chunk() -> None:
    async with gateway() as gw:
        before = await gw.used()
        whole = await gw.stream("gemini", "gem")
        charged = await gw.used() - before
        gw.provider.faults["gm"] = [_held()]
        with anyio.fail_after(HANG_GUARD_S):
            held = await gw.stream("gemini", "gem")
        assert held.status_code == 200, held.text
        relayed, sent = _chunks(held.text), _chunks(whole.text)
        assert [_unnamed(c) for c in relayed] == [_unnamed(c) for c in sent]
        assert not any("error" in chunk for chunk in relayed)
        assert await gw.used() - before == 2 * charged


def _stop_on_every_chunk(body: bytes) -> bytes:
    """Every chunk says ``finishReason: STOP`` and carries the final usage (as some proxies in
    front of Gemini, and Gemini 1.0 once, write it): only the last is the last."""
    events = [e for e in body.replace(b"\r\n", b"\n").split(b"\n\n") if e.strip()]
    chunks = [json.loads(e[len(b"data: ") :]) for e in events]
    usage = chunks[-1]["usageMetadata"]
    for chunk in chunks:
        chunk["candidates"][0]["finishReason"] = "STOP"
        chunk["usageMetadata"] = usage
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)


def _usage_after_the_finish(body: bytes) -> bytes:
    """The usage moved out of the finishing chunk into one of its own after it."""
    events = [e for e in body.replace(b"\r\n", b"\n").split(b"\n\n") if e.strip()]
    chunks = [json.loads(e[len(b"data: ") :]) for e in events]
    usage = chunks[-1]["usageMetadata"]
    for chunk in chunks:
        chunk.pop("usageMetadata", None)
    chunks.append({"usageMetadata": usage, "modelVersion": chunks[-1].get("modelVersion", "")})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)


def _trickled(change: Callable[[bytes], bytes]) -> Answer:
    """``change``'s stream one chunk per event, each after a pause (a real provider's pace),
    then held open."""

    async def answer(request: httpx.Request, sim: Any) -> httpx.Response:
        response = await sim(request)
        body = change(await response.aread())
        events = [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]

        async def content() -> AsyncIterator[bytes]:
            for event in events:
                yield event
                await asyncio.sleep(0.05)
            await _forever()

        return httpx.Response(200, content=content(), headers={"content-type": "text/event-stream"})

    return answer


@pytest.mark.parametrize("change", [_stop_on_every_chunk, _usage_after_the_finish])
async def test_a_chunk_that_looks_like_the_last_is_not_the_end_while_more_comes(
    change: Callable[[bytes], bytes],
) -> None:
    async with gateway() as gw:
        whole = await gw.stream("gemini", "gem")
        gw.provider.faults["gm"] = [_trickled(change)]
        with anyio.fail_after(HANG_GUARD_S):
            held = await gw.stream("gemini", "gem")
        assert held.status_code == 200, held.text
        relayed = _chunks(held.text)
        assert not any("error" in chunk for chunk in relayed)
        assert _text(relayed) == _text(_chunks(whole.text))
        assert relayed[-1]["usageMetadata"] == _chunks(whole.text)[-1]["usageMetadata"]
