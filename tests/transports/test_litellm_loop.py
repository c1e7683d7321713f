"""litellm's work runs on an event loop of its own (``proxy.transports.litellm``), not routefit's.

A chat client of a route only litellm serves (``gemini/`` through litellm) has its request
translated inside ``litellm.acompletion``, and litellm's Gemini conversion scans the assistant's
tool calls once per tool result: 2,000 calls with their results held routefit's loop 1.3-3 s,
and every other team's request on the worker waited that long. These tests check order and
where the work ran, never a time: another team's small request is answered while the big one
is still being translated, a stream's chunks are read and parsed on litellm's loop, and a client
that leaves cancels litellm's call on its loop.

The Gemini provider is a real HTTP server on loopback (litellm reaches its providers itself, not
through routefit's transport), routefit is in process (``inprocess.asgi_client``); the OpenAI
route is answered by the mock transport.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import anyio
import httpx
import pytest
from inprocess import asgi_client
from loopback import Loopback

from proxy.config import parse_config

pytestmark = pytest.mark.anyio

BIG_KEY = "sk-team-big-" + "b" * 24
SMALL_KEY = "sk-team-small-" + "s" * 24
#: Bounds a wait that the code before the fix never ended (its loop blocked) or a hang.
HANG_GUARD_S = 60
#: Tool calls (each answered) in the big request: on the loop, litellm's Gemini conversion of
#: 1,500 held it ~1 s (quadratic: 2,000 took 1.3-3 s, 8,000 28-51 s).
CALLS = 1500

GEMINI_ANSWER = {
    "candidates": [
        {
            "content": {"role": "model", "parts": [{"text": "ok"}]},
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1, "totalTokenCount": 11},
}
#: Google's stream of the same answer in three words, the finish reason and usage on the last.
STREAM = [
    {"candidates": [{"content": {"role": "model", "parts": [{"text": word}]}, "index": 0}]}
    for word in ("one ", "two ", "three")
]
STREAM[-1]["candidates"][0]["finishReason"] = "STOP"
STREAM[-1]["usageMetadata"] = GEMINI_ANSWER["usageMetadata"]
CHAT_ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Gemini:
    """Google's ``generateContent`` on loopback: a fixed answer, or, when ``hold``, none: it
    waits for the client to close the connection and notes that it did."""

    def __init__(self) -> None:
        self.hold = False
        self.received = threading.Event()
        self.closed_by_client = threading.Event()
        gemini = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                if gemini.hold:
                    gemini.received.set()
                    gemini.wait_for_close(self.connection)
                    return
                if ":streamGenerateContent" in self.path:
                    body = b"".join(
                        b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in STREAM
                    )
                    sse = "text/event-stream"
                else:
                    body, sse = json.dumps(GEMINI_ANSWER).encode(), ""
                self.send_response(200)
                self.send_header("content-type", sse or "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.served = Loopback(Handler)

    def wait_for_close(self, conn: socket.socket) -> None:
        for _ in range(HANG_GUARD_S * 10):
            readable, _, _ = select.select([conn], [], [], 0.1)
            if readable and conn.recv(1, socket.MSG_PEEK) == b"":
                self.closed_by_client.set()
                return

    @property
    def base(self) -> str:
        return self.served.url("/v1beta")

    def close(self) -> None:
        self.served.close()


@pytest.fixture
def gemini() -> Iterator[Gemini]:
    provider = Gemini()
    try:
        yield provider
    finally:
        provider.close()


def _config(gemini: Gemini) -> Any:
    routes = [
        {
            "model_name": "gem",
            "litellm_params": {
                "model": "gemini/gemini-2.0-flash",
                "api_base": gemini.base,
                "api_key": "AIza-litellm-loop-test-key",
            },
            "model_info": {"max_input_tokens": 1_048_576, "max_output_tokens": 4096},
        },
        {
            "model_name": "gpt",
            "litellm_params": {
                "model": "openai/gpt-4o",
                "api_base": "http://oa/v1",
                "api_key": "sk-oa-0123456789abcdef",
            },
        },
    ]
    teams = [{"id": "big", "keys": [BIG_KEY]}, {"id": "small", "keys": [SMALL_KEY]}]
    settings = {"store_path": ":memory:", "teams": teams}
    return parse_config({"model_list": routes, "routefit_settings": settings}, environ={})


async def _chat_provider(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=CHAT_ANSWER)


def _small(model: str) -> dict[str, Any]:
    return {"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


def _many_tool_calls(n: int) -> dict[str, Any]:
    """A chat request whose assistant turn made ``n`` tool calls, each answered."""
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": f"tool_{i % 7}", "arguments": json.dumps({"x": i})},
        }
        for i in range(n)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "do things"},
        {"role": "assistant", "content": None, "tool_calls": calls},
    ]
    messages += [
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"result {i}"} for i in range(n)
    ]
    parameters = {"type": "object", "properties": {"x": {"type": "integer"}}}
    tools = [
        {"type": "function", "function": {"name": f"tool_{k}", "parameters": parameters}}
        for k in range(7)
    ]
    return {"model": "gem", "max_tokens": 10, "messages": messages, "tools": tools}


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _gemini_transformation() -> Any:
    """litellm's Gemini request conversion, loaded by a first call through the route."""
    return sys.modules["litellm.llms.vertex_ai.gemini.transformation"]


async def test_another_teams_request_is_answered_while_litellm_translates_a_big_one(
    gemini: Gemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with asgi_client(_config(gemini), _chat_provider) as client:
        warm = await client.post("/v1/chat/completions", json=_small("gem"), headers=_auth(BIG_KEY))
        assert warm.status_code == 200, warm.text

        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        translating = asyncio.Event()
        events: list[str] = []
        threads: list[int] = []
        module = _gemini_transformation()
        inner = module.transform_request_body

        def observed(*args: Any, **kwargs: Any) -> Any:
            threads.append(threading.get_ident())
            loop.call_soon_threadsafe(translating.set)
            try:
                return inner(*args, **kwargs)
            finally:
                events.append("big request translated")

        monkeypatch.setattr(module, "transform_request_body", observed)
        big = asyncio.create_task(
            client.post(
                "/v1/chat/completions", json=_many_tool_calls(CALLS), headers=_auth(BIG_KEY)
            )
        )
        with anyio.fail_after(HANG_GUARD_S):
            await translating.wait()
            small = await client.post(
                "/v1/chat/completions", json=_small("gpt"), headers=_auth(SMALL_KEY)
            )
            events.append("small request answered")
            answer = await big
    assert small.status_code == 200, small.text
    assert answer.status_code == 200, answer.text
    assert threads and loop_thread not in threads  # litellm's work ran off routefit's loop
    # routefit's loop served the other team while litellm translated: before, it waited for
    # the whole translation, which ran on the loop
    assert events == ["small request answered", "big request translated"]


async def test_a_client_that_leaves_cancels_litellms_call_on_its_loop(
    gemini: Gemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call runs on litellm's loop, the client's request on routefit's: the client leaving
    must still cancel litellm's call and drop the provider's connection, not leave it waiting
    for an answer nobody reads."""
    async with asgi_client(_config(gemini), _chat_provider) as client:
        warm = await client.post("/v1/chat/completions", json=_small("gem"), headers=_auth(BIG_KEY))
        assert warm.status_code == 200, warm.text

        import litellm

        cancelled = threading.Event()
        inner = litellm.acompletion

        async def observed(**kwargs: Any) -> Any:
            try:
                return await inner(**kwargs)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        monkeypatch.setattr(litellm, "acompletion", observed)
        gemini.hold = True
        request = asyncio.create_task(
            client.post("/v1/chat/completions", json=_small("gem"), headers=_auth(BIG_KEY))
        )
        assert await anyio.to_thread.run_sync(gemini.received.wait, HANG_GUARD_S)
        request.cancel()  # the client leaves
        with pytest.raises(asyncio.CancelledError):
            await request
        assert await anyio.to_thread.run_sync(cancelled.wait, HANG_GUARD_S)
        assert await anyio.to_thread.run_sync(gemini.closed_by_client.wait, HANG_GUARD_S)


async def test_a_litellm_stream_is_read_on_litellms_loop(
    gemini: Gemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    """litellm parses each chunk of a stream as it reads it (pydantic models): on its loop too,
    the client's events on routefit's."""
    async with asgi_client(_config(gemini), _chat_provider) as client:
        warm = await client.post("/v1/chat/completions", json=_small("gem"), headers=_auth(BIG_KEY))
        assert warm.status_code == 200, warm.text

        from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper

        loop_thread = threading.get_ident()
        threads: list[int] = []
        inner = CustomStreamWrapper.__anext__

        async def observed(self: Any) -> Any:
            threads.append(threading.get_ident())
            return await inner(self)

        monkeypatch.setattr(CustomStreamWrapper, "__anext__", observed)
        body = {**_small("gem"), "stream": True}
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers=_auth(BIG_KEY)
        ) as r:
            assert r.status_code == 200
            lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "one two three"
    assert len(threads) >= len(STREAM) and loop_thread not in threads
