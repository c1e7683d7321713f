"""A litellm-translated route whose provider holds its stream open after its last event.

routefit's chat stream of a litellm route ends when litellm's stream does
(``proxy.transports.litellm``). A provider that keeps the body open after its last event
(Gemini's chunk with its ``finishReason`` and ``usageMetadata``) must not hold the client's stream
open until the read timeout and then end it with an error after a whole answer.

The provider is a real HTTP server on loopback (litellm reaches its providers itself, not through
routefit's transport), routefit is in process (``inprocess.asgi_client``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import anyio
import pytest
from inprocess import asgi_client
from loopback import Loopback

from proxy.config import parse_config

pytestmark = pytest.mark.anyio

KEY = "team-key-litellm-stream-end"
#: Bounds a test that, before its fix, waited for a read timeout of minutes.
HANG_GUARD_S = 60

WORDS = ["Hello", " there,", " friend."]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _gemini_chunks() -> list[dict[str, Any]]:
    """A Gemini SSE answer as Google streams it: the finish reason and the whole usage on the
    last chunk."""
    out: list[dict[str, Any]] = []
    for i, word in enumerate(WORDS):
        cand: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": word}]}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [cand], "modelVersion": "gemini-2.0-flash"}
        if i == len(WORDS) - 1:
            cand["finishReason"] = "STOP"
            chunk["usageMetadata"] = {
                "promptTokenCount": 5,
                "candidatesTokenCount": 3,
                "totalTokenCount": 8,
            }
        else:
            chunk["usageMetadata"] = {"promptTokenCount": 5, "totalTokenCount": 5}
        out.append(chunk)
    return out


class HeldOpen:
    """A Gemini provider on loopback that sends its whole stream, then holds the body open
    (no length, no chunked end) until ``release``."""

    def __init__(self) -> None:
        self.released = threading.Event()
        held = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection does

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for chunk in _gemini_chunks():
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")
                self.wfile.flush()
                held.released.wait(HANG_GUARD_S * 2)

            def log_message(self, *args: object) -> None:
                pass

        self.served = Loopback(Handler)

    @property
    def base(self) -> str:
        return self.served.url("/v1beta")

    def close(self) -> None:
        self.released.set()
        self.served.close()


@pytest.fixture
def provider() -> Iterator[HeldOpen]:
    held = HeldOpen()
    try:
        yield held
    finally:
        held.close()


async def _unused(request: Any) -> Any:
    raise AssertionError("a litellm route never reaches routefit's own transport")


async def test_a_litellm_stream_held_open_after_its_last_event_ends_with_it(
    provider: HeldOpen,
) -> None:
    config = parse_config(
        {
            "model_list": [
                {
                    "model_name": "gem",
                    "litellm_params": {
                        "model": "gemini/gemini-2.0-flash",
                        "api_base": provider.base,
                        "api_key": "AIza-held-open-test-key",
                    },
                    "model_info": {"max_input_tokens": 1_000_000, "max_output_tokens": 4096},
                }
            ],
            "routefit_settings": {"store_path": ":memory:", "teams": [{"id": "t", "keys": [KEY]}]},
        },
        environ={},
    )
    async with asgi_client(config, _unused) as client:
        body = {
            "model": "gem",
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 64,
            "stream": True,
        }
        with anyio.fail_after(HANG_GUARD_S):
            r = await client.post(
                "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}
            )
    assert r.status_code == 200, r.text
    lines = [ln[5:].strip() for ln in r.text.splitlines() if ln.startswith("data:")]
    assert lines[-1] == "[DONE]", r.text[-400:]
    chunks = [json.loads(ln) for ln in lines[:-1]]
    assert not any("error" in c for c in chunks), r.text[-400:]
    text = "".join(
        choice.get("delta", {}).get("content") or "" for c in chunks for choice in c["choices"]
    )
    assert text == "".join(WORDS)
    assert any(choice.get("finish_reason") == "stop" for c in chunks for choice in c["choices"])
