"""What a provider sends back is bounded and scrubbed, through ``routefit serve`` and a loopback
fake provider: an answer over ``max_provider_body_bytes`` is a 502 in the client's wire shape
(its connection dropped, the process not grown by it), an SSE event over
``max_sse_event_bytes`` ends the stream with the wire's error event, and a provider error that
echoes the route's key in any field (param, code, type, message) reaches the client without it.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from harness import Running, gateway_config, run_routefit, sim_route
from wire_shapes import check_wire_error_shape

SECRET = "sk-proj-" + uuid.uuid4().hex + uuid.uuid4().hex
BOUND = 1024 * 1024
#: Far over the bound: a proxy that buffered it would grow by this much.
HUGE = 96 * 1024 * 1024
CHAT = [{"role": "user", "content": "hello"}]


class Fake(BaseHTTPRequestHandler):
    """A provider whose behaviour is its model's name (the request's ``model``)."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        if ":generateContent" in self.path or ":streamGenerateContent" in self.path:
            self._gemini()
            return
        model = body["model"]
        key = self.headers.get("x-api-key") or self.headers.get("authorization", "")
        key = key.removeprefix("Bearer ")
        try:
            if model in ("echo-key", "echo-401"):
                self._echo(key, 401 if model == "echo-401" else 400)
            elif model == "huge-body":
                self._huge_body()
            elif model == "huge-event":
                self._huge_event()
            elif model == "gzip-bomb":
                self._gzip_bomb()
            elif model == "short-body":
                self._short_body()
        except (BrokenPipeError, ConnectionResetError):
            pass  # routefit dropped the connection: what it should do

    def _echo(self, key: str, status: int) -> None:
        """An error echoing the key it was sent in every field, nested too."""
        error = {
            "message": f"Incorrect API key provided: {key}. Header was 'Bearer {key}'.",
            "type": f"invalid_request_error:{key}",
            "param": key,
            "code": {"reason": "invalid_api_key", "key": key, "tried": [key]},
        }
        if self.path.endswith("/messages"):
            payload = {"type": "error", "error": {**error, "type": "authentication_error"}}
        else:
            payload = {"error": error}
        self._send(status, json.dumps(payload).encode())

    def _huge_body(self) -> None:
        """A 200 whose JSON never ends within the bound, no content-length: read to learn."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"id": "x", "choices": [], "pad": "')
        piece = b"a" * (1024 * 1024)
        for _ in range(HUGE // len(piece)):
            self.wfile.write(piece)

    def _gzip_bomb(self) -> None:
        """A 200 whose announced length is small and within the bound, gzipped: it inflates to
        ``HUGE``. Only what it inflates to may be held to the bound."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-encoding", "gzip")
        self.send_header("content-length", str(len(_bomb())))
        self.end_headers()
        self.wfile.write(_bomb())

    def _short_body(self) -> None:
        """A 200 announcing more bytes than it sends before closing the connection."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "4096")
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(b'{"id": "x", "choices": [')
        self.wfile.flush()
        self.close_connection = True

    def _huge_event(self, first: object = None) -> None:
        """A stream whose second event never ends (its first: ``first``, else a chat chunk)."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        first = first or {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "huge-event",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}],
        }
        self.wfile.write(b"data: " + json.dumps(first).encode() + b"\n\n")
        self.wfile.write(b'data: {"pad": "')
        piece = b"b" * (1024 * 1024)
        for _ in range(HUGE // len(piece)):
            self.wfile.write(piece)

    def _gemini(self) -> None:
        """Gemini's generateContent / streamGenerateContent (SSE): the model in the path says
        whether the answer is normal, over the body bound, or an event over the event bound."""
        model = self.path.split("/models/", 1)[1].split(":", 1)[0]
        stream = ":streamGenerateContent" in self.path
        try:
            if model == "huge-body":
                self._huge_body()
            elif model == "huge-event":
                self._huge_event(GEMINI_PARTIAL)
            elif model == "huge-count":  # a count JSON holds but no 64-bit integer does
                usage = {**GEMINI_ANSWER["usageMetadata"], "promptTokenCount": 2**64}
                self._send(200, json.dumps({**GEMINI_ANSWER, "usageMetadata": usage}).encode())
            elif stream:
                self._send(
                    200,
                    b"data: " + json.dumps(GEMINI_ANSWER).encode() + b"\r\n\r\n",
                    "text/event-stream",
                )
            else:
                self._send(200, json.dumps(GEMINI_ANSWER).encode())
        except (BrokenPipeError, ConnectionResetError):
            pass


@functools.cache
def _bomb() -> bytes:
    """``HUGE`` bytes of one JSON answer, gzipped (~100 KB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    parts = [packer.compress(b'{"id": "x", "choices": [], "pad": "')]
    piece = b"a" * (1024 * 1024)
    parts += [packer.compress(piece) for _ in range(HUGE // len(piece))]
    parts.append(packer.compress(b'"}') + packer.flush())
    return b"".join(parts)


GEMINI_ANSWER = {
    "candidates": [
        {
            "content": {"parts": [{"text": "hi"}], "role": "model"},
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
    "modelVersion": "fine",
}
#: A stream's first event, before the one that never ends.
GEMINI_PARTIAL = {
    "candidates": [{"content": {"parts": [{"text": "hi"}], "role": "model"}, "index": 0}],
    "modelVersion": "huge-event",
}


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _route(alias: str, model: str, api_base: str, **routefit: str) -> dict:
    entry: dict = {
        "model_name": alias,
        "litellm_params": {"model": model, "api_base": api_base, "api_key": SECRET},
    }
    if routefit:
        entry["routefit"] = routefit
    return entry


@pytest.fixture(scope="module")
def gw(sim, fake, tmp_path_factory) -> Iterator[Running]:
    routes = [
        sim_route("gpt-4o", sim.base_url),
        _route("echo-key", "openai/echo-key", fake + "/v1"),
        _route("echo-401", "openai/echo-401", fake + "/v1"),
        _route("echo-claude", "anthropic/echo-key", fake),
        _route("huge-body", "openai/huge-body", fake + "/v1"),
        _route("huge-event", "openai/huge-event", fake + "/v1"),
        _route("gzip-bomb", "openai/gzip-bomb", fake + "/v1"),
        _route("short-body", "openai/short-body", fake + "/v1"),
        # routes only litellm serves: it reads the answer itself, over routefit's bounded client
        _route("gemini-huge-body", "gemini/huge-body", fake),
        _route("gemini-huge-event", "gemini/huge-event", fake),
        _route("gemini-fine", "gemini/fine", fake),
        _route("gemini-huge-count", "gemini/huge-count", fake),
        # litellm serves an OpenAI-wire provider through the OpenAI SDK, over routefit's client
        _route("sdk-huge-body", "openai/huge-body", fake + "/v1", transport="litellm"),
        _route("sdk-huge-event", "openai/huge-event", fake + "/v1", transport="litellm"),
    ]
    config = gateway_config(
        tmp_path_factory.mktemp("bounds") / "c.yaml",
        routes,
        max_provider_body_bytes=BOUND,
        max_sse_event_bytes=BOUND,
    )
    # Its peak memory is measured (VmHWM): a process of its own, and litellm's import (~150 MiB,
    # in the background after /readyz: docs/operations.md) done before any test measures, or
    # on a loaded machine it lands inside one test's measurement (seen: 24.9 MiB of "growth").
    with run_routefit(config) as running:
        deadline = time.monotonic() + 120
        while not httpx.get(running.base_url + "/readyz").json()["checks"]["litellm"]:
            assert time.monotonic() < deadline, "litellm never finished loading"
            time.sleep(0.1)
        yield running


def peak_rss(gw: Running) -> int:
    """The routefit process's peak resident memory so far, in bytes (Linux)."""
    for line in Path(f"/proc/{gw.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def healthy(gw: Running) -> None:
    assert httpx.get(gw.base_url + "/healthz").status_code == 200
    r = httpx.post(gw.v1 + "/chat/completions", json={"model": "gpt-4o", "messages": CHAT})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("path", "model", "body"),
    [
        ("/v1/chat/completions", "echo-key", {"messages": CHAT}),
        ("/v1/responses", "echo-key", {"input": "hello"}),
        ("/v1/messages", "echo-claude", {"messages": CHAT, "max_tokens": 10}),
    ],
)
def test_a_provider_error_never_hands_the_key_to_the_client(gw, path, model, body):
    r = httpx.post(
        gw.base_url + path,
        json={"model": model, **body},
        headers={"anthropic-version": "2023-06-01"},
    )
    assert r.status_code == 400, r.text
    assert SECRET not in r.text
    assert SECRET[:20] not in r.text  # not a prefix of it either
    error = r.json()["error"]
    assert error["message"]  # still says what went wrong
    assert "[redacted]" in r.text
    assert SECRET not in gw.log()


def test_a_provider_refusing_routefits_key_is_its_fault_and_never_echoes_the_key(gw):
    """A provider's 401 blames routefit's credentials, not the client's key (issue 29): a 502
    naming the deployment, with nothing of what the provider said about the key."""
    r = httpx.post(gw.v1 + "/chat/completions", json={"model": "echo-401", "messages": CHAT})
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_auth_failed"
    assert r.headers["x-routefit-deployment"] in r.json()["error"]["message"]
    assert SECRET not in r.text and SECRET[:20] not in r.text
    assert SECRET not in gw.log()


def test_an_answer_over_the_bound_is_a_502_and_is_never_buffered(gw):
    before = peak_rss(gw)
    r = httpx.post(
        gw.v1 + "/chat/completions", json={"model": "huge-body", "messages": CHAT}, timeout=60
    )
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "upstream_too_large"
    assert "max_provider_body_bytes" in error["message"]
    # a proxy that read the whole answer would have grown by ~96 MiB
    assert peak_rss(gw) - before < HUGE // 4
    healthy(gw)


def test_a_small_gzipped_answer_inflating_past_the_bound_is_a_502_never_inflated_whole(gw):
    # its announced length is within the bound: only what it inflates to tells
    assert len(_bomb()) < BOUND
    before = peak_rss(gw)
    r = httpx.post(
        gw.v1 + "/chat/completions", json={"model": "gzip-bomb", "messages": CHAT}, timeout=60
    )
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_too_large"
    assert peak_rss(gw) - before < HUGE // 4
    healthy(gw)


def test_an_answer_shorter_than_its_announced_length_is_a_502(gw):
    r = httpx.post(
        gw.v1 + "/chat/completions", json={"model": "short-body", "messages": CHAT}, timeout=60
    )
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "upstream_incomplete"
    healthy(gw)


def test_an_unterminated_event_over_the_bound_ends_the_stream_in_its_wire(gw):
    before = peak_rss(gw)
    body = {"model": "huge-event", "messages": CHAT, "stream": True}
    with httpx.stream("POST", gw.v1 + "/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line.startswith("data:")]
    assert json.loads(lines[0][5:])["choices"][0]["delta"]["content"] == "hi"
    error = json.loads(lines[-1][5:])["error"]
    assert "bytes" in error["message"] and error["code"] == "upstream_error"
    assert peak_rss(gw) - before < HUGE // 4
    healthy(gw)


def warm_litellm(gw: Running) -> None:
    """One normal call first: litellm loads a provider's modules on its first call (~150 MiB),
    which is not what the memory assertions measure."""
    body = {"model": "gemini-fine", "messages": CHAT}
    assert httpx.post(gw.v1 + "/chat/completions", json=body, timeout=60).status_code == 200


#: Routes litellm serves, by the client they go through: a handler handed routefit's client
#: (Gemini), and the OpenAI SDK built around routefit's HTTP client (an OpenAI-wire provider).
THROUGH_LITELLM = {"handler": "gemini", "openai-sdk": "sdk"}


@pytest.mark.parametrize("prefix", THROUGH_LITELLM.values(), ids=list(THROUGH_LITELLM))
def test_an_answer_over_the_bound_is_a_502_through_litellm(gw, prefix):
    warm_litellm(gw)
    before = peak_rss(gw)
    body = {"model": f"{prefix}-huge-body", "messages": CHAT}
    r = httpx.post(gw.v1 + "/chat/completions", json=body, timeout=60)
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "upstream_too_large"
    assert "max_provider_body_bytes" in error["message"]
    assert peak_rss(gw) - before < HUGE // 4
    healthy(gw)


@pytest.mark.parametrize("prefix", THROUGH_LITELLM.values(), ids=list(THROUGH_LITELLM))
def test_an_unterminated_event_over_the_bound_ends_the_stream_through_litellm(gw, prefix):
    warm_litellm(gw)
    before = peak_rss(gw)
    body = {"model": f"{prefix}-huge-event", "messages": CHAT, "stream": True}
    with httpx.stream("POST", gw.v1 + "/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line.startswith("data:")]
    assert json.loads(lines[0][5:])["choices"][0]["delta"]["content"] == "hi"
    error = json.loads(lines[-1][5:])["error"]
    assert "bytes" in error["message"] and error["code"] == "upstream_error"
    assert peak_rss(gw) - before < HUGE // 4
    healthy(gw)


@pytest.mark.parametrize("stream", [False, True])
def test_a_normal_gemini_answer_still_passes_the_bounded_client(gw, stream):
    body = {"model": "gemini-fine", "messages": CHAT, "stream": stream}
    r = httpx.post(gw.v1 + "/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    if stream:
        assert '"hi"' in r.text and "[DONE]" in r.text and "error" not in r.text
    else:
        assert r.json()["choices"][0]["message"]["content"] == "hi"


@pytest.mark.parametrize("path", ["/chat/completions", "/messages"])
def test_a_gemini_answer_litellm_reads_but_json_cannot_hold_is_a_502(gw, path):
    """A count of 2^64 in Gemini's usage: litellm parses it, routefit cannot write it back as
    JSON. The provider's malformed answer, in the client's wire's shape; it was a 500."""
    warm_litellm(gw)
    body = {"model": "gemini-huge-count", "messages": CHAT, "max_tokens": 20}
    r = httpx.post(gw.v1 + path, json=body, timeout=60)
    assert r.status_code == 502, r.text
    check_wire_error_shape("/v1" + path, r.status_code, r.content, path, None, True)
    assert "cannot read" in r.text
    healthy(gw)
