"""A provider's stream that fails in its own words, in process (``MockTransport``, as
test_provider_answer_faults.py drives it): what the client gets and what the team is charged.

* the provider's own error as a stream's FIRST event (Anthropic's ``event: error``, an OpenAI
  chat ``{"error": ...}`` chunk, a Responses ``error`` or ``response.failed``, a Gemini error
  chunk) is its failure before any byte reached the client, on every native route and through
  the chat→Messages translation: an alias's next deployment answers it, else the client gets the
  provider's status and message (keys scrubbed) in its wire's shape, and nothing is charged;
* a native Responses stream that breaks ends with a ``response.failed`` naming the provider's own
  ``response.created`` id; the provider's ``error`` or ``response.failed`` mid-stream is charged
  like a stream that failed (prompt and the text relayed), not the whole reservation;
* a stream of only ``data: [DONE]`` is no answer: a 502 ``upstream_incomplete`` before any byte
  (charged as a stream with no event is), another deployment's to answer on a routed alias.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import test_provider_answer_faults as faults
from test_provider_answer_faults import (
    KEY,
    MAX_TOKENS,
    Answer,
    _deployment,
    served,
)
from wire_shapes import check_wire_error_shape

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _gemini(host: str, alias: str) -> dict[str, Any]:
    return {
        "model_name": alias,
        "litellm_params": {
            "model": "gemini/gemini-sim",
            "api_base": f"http://{host}/v1beta",
            "api_key": f"AIza-{host}-secret-key",
        },
        "model_info": {"id": host, "max_input_tokens": 1_000_000, "max_output_tokens": 4096},
    }


def _weighted(entry: dict[str, Any], weight: float) -> dict[str, Any]:
    return {**entry, "litellm_params": {**entry["litellm_params"], "weight": weight}}


MODELS = [
    _deployment("oa", "gpt", "openai/gpt-4o"),
    _deployment("an", "claude", "anthropic/claude-sonnet-4-5"),
    _gemini("gm", "gem"),
    # aliases of two deployments: "<x>1" first (its weight), "<x>2" after it
    _weighted(_deployment("oa1", "gpt-pair", "openai/gpt-4o"), 1000),
    _weighted(_deployment("oa2", "gpt-pair", "openai/gpt-4o"), 0.001),
    _weighted(_deployment("an1", "claude-pair", "anthropic/claude-sonnet-4-5"), 1000),
    _weighted(_deployment("an2", "claude-pair", "anthropic/claude-sonnet-4-5"), 0.001),
    _weighted(_gemini("gm1", "gem-pair"), 1000),
    _weighted(_gemini("gm2", "gem-pair"), 0.001),
]


class Gateway(faults.Gateway):
    async def stream(self, wire: str, model: str) -> httpx.Response:
        """A streamed request in ``wire``; the whole SSE body read."""
        text = "Say hello."
        headers = {"authorization": f"Bearer {KEY}"}
        body: dict[str, Any]
        if wire == "messages":
            path = "/v1/messages"
            headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
            body = {"model": model, "messages": [{"role": "user", "content": text}]}
            body |= {"max_tokens": MAX_TOKENS, "stream": True}
        elif wire == "responses":
            path = "/v1/responses"
            body = {"model": model, "input": text, "max_output_tokens": MAX_TOKENS}
            body |= {"stream": True, "store": False}
        elif wire == "gemini":
            path = f"/v1beta/models/{model}:streamGenerateContent?alt=sse"
            headers = {"x-goog-api-key": KEY}
            body = {
                "contents": [{"role": "user", "parts": [{"text": text}]}],
                "generationConfig": {"maxOutputTokens": MAX_TOKENS},
            }
        else:
            path = "/v1/chat/completions"
            body = {"model": model, "messages": [{"role": "user", "content": text}]}
            body |= {"max_tokens": MAX_TOKENS, "stream": True}
        return await self.client.post(path, json=body, headers=headers)


@asynccontextmanager
async def gateway() -> AsyncIterator[Gateway]:
    async with served(MODELS) as (client, provider):
        yield Gateway(client, provider)


def _stream(*events: bytes) -> Answer:
    """A 200 event stream of exactly ``events``."""

    async def answer(request: httpx.Request, sim: Any) -> httpx.Response:
        return httpx.Response(
            200, content=b"".join(events), headers={"content-type": "text/event-stream"}
        )

    return answer


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(data).encode() + b"\n\n"


def _sim_then(*events: bytes, keep: int) -> Answer:
    """The simulator's stream, its first ``keep`` events kept and ``events`` after them (and
    nothing else)."""

    async def answer(request: httpx.Request, sim: Any) -> httpx.Response:
        response = await sim(request)
        body = (await response.aread()).replace(b"\r\n", b"\n")
        kept = [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()][:keep]
        return httpx.Response(
            200, content=b"".join([*kept, *events]), headers={"content-type": "text/event-stream"}
        )

    return answer


def _leaky(host: str) -> str:
    """A provider message that echoes its key (and one that only looks like a key)."""
    return f"Overloaded (key sk-{host}-0123456789, sk-live-abcdef123456)"


#: The provider's own error as a first event, per provider wire (``host`` for its key).
def _anthropic_error(host: str, kind: str = "overloaded_error") -> bytes:
    body = {"type": "error", "error": {"type": kind, "message": _leaky(host)}}
    return _sse(body, "error")


def _chat_error(host: str, kind: str = "server_error") -> bytes:
    return _sse({"error": {"message": _leaky(host), "type": kind, "param": None, "code": None}})


def _responses_error(host: str, kind: str = "server_error") -> bytes:
    body = {"type": "error", "code": kind, "message": _leaky(host), "param": None}
    return _sse({**body, "sequence_number": 0}, "error")


def _responses_failed(host: str, kind: str = "server_error") -> bytes:
    response = {"id": "resp_failed", "object": "response", "status": "failed", "output": []}
    response["error"] = {"code": kind, "message": _leaky(host)}
    body = {"type": "response.failed", "sequence_number": 0, "response": response}
    return _sse(body, "response.failed")


def _gemini_error(host: str, status: str = "UNAVAILABLE", code: int = 503) -> bytes:
    return _sse({"error": {"code": code, "message": _leaky(host), "status": status}})


#: (client wire, the alias's single deployment, the pair, the provider's error event maker,
#: the status a client of the single deployment is answered).
FIRST = [
    ("messages", ("claude", "an"), ("claude-pair", "an1", "an2"), _anthropic_error, 529),
    # overloaded through routefit's chat→Messages mapping: Anthropic's 529 in a chat client's
    # words, as when it is not streamed (it was a 502 "broke off before its first event")
    ("chat", ("claude", "an"), ("claude-pair", "an1", "an2"), _anthropic_error, 503),
    ("chat", ("gpt", "oa"), ("gpt-pair", "oa1", "oa2"), _chat_error, 500),
    ("responses", ("gpt", "oa"), ("gpt-pair", "oa1", "oa2"), _responses_error, 500),
    ("responses", ("gpt", "oa"), ("gpt-pair", "oa1", "oa2"), _responses_failed, 500),
    ("gemini", ("gem", "gm"), ("gem-pair", "gm1", "gm2"), _gemini_error, 503),
]
FIRST_IDS = [
    "messages-native",
    "chat-to-messages",
    "chat-native",
    "responses-error",
    "responses-failed",
    "gemini-native",
]


@pytest.mark.parametrize("case", FIRST, ids=FIRST_IDS)
async def test_a_providers_error_as_the_first_event_goes_to_the_aliases_next_deployment(
    case: tuple[Any, ...],
) -> None:
    wire, _, (pair, first, second), error, _ = case
    async with gateway() as gw:
        gw.provider.faults[first] = [_stream(error(first))]
        r = await gw.stream(wire, pair)
        assert r.status_code == 200, r.text
        assert r.headers["x-routefit-deployment"] == second
        assert r.headers["x-routefit-attempts"] == "2"
        assert gw.provider.hits == {first: 1, second: 1}
        assert "Overloaded" not in r.text  # the failed attempt's event never reached the client


@pytest.mark.parametrize("case", FIRST, ids=FIRST_IDS)
async def test_a_providers_error_as_the_first_event_on_its_only_deployment_is_its_status(
    case: tuple[Any, ...],
) -> None:
    wire, (alias, host), _, error, status = case
    async with gateway() as gw:
        before = await gw.used()
        gw.provider.faults[host] = [_stream(error(host))]
        r = await gw.stream(wire, alias)
        assert r.status_code == status, r.text
        path = r.request.url.path
        check_wire_error_shape(path, status, r.content, alias, None, True)
        assert "text/event-stream" not in r.headers.get("content-type", "")
        assert "Overloaded" in r.text  # the provider's own message
        assert f"sk-{host}-0123456789" not in r.text and "sk-live-abcdef123456" not in r.text
        assert await gw.used() == before  # the provider's refusal is not charged


async def test_a_first_event_error_of_the_request_is_its_status() -> None:
    async with gateway() as gw:
        before = await gw.used()
        gw.provider.faults["an"] = [_stream(_anthropic_error("an", "invalid_request_error"))]
        r = await gw.stream("messages", "claude")
        assert r.status_code == 400, r.text
        assert r.json()["error"]["type"] == "invalid_request_error"
        assert await gw.used() == before


async def test_a_gemini_error_chunk_names_its_status() -> None:
    async with gateway() as gw:
        gw.provider.faults["gm"] = [_stream(_gemini_error("gm", "RESOURCE_EXHAUSTED", 429))]
        r = await gw.stream("gemini", "gem")
        assert r.status_code == 429, r.text


# -- native Responses streams ----------------------------------------------------------------


def _events(text: str) -> list[dict[str, Any]]:
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data:"):
                out.append(json.loads(line[5:]))
    return out


async def test_a_broken_native_responses_stream_fails_the_response_it_announced() -> None:
    async with gateway() as gw:
        gw.provider.faults["oa"] = [_sim_then(keep=3)]  # created, in_progress, an item: cut
        r = await gw.stream("responses", "gpt")
        assert r.status_code == 200, r.text
        events = _events(r.text)
        created = events[0]
        assert created["type"] == "response.created"
        last = events[-1]
        assert last["type"] == "response.failed"
        assert last["response"]["id"] == created["response"]["id"]


@pytest.mark.parametrize("ending", ["error", "response.failed"])
async def test_a_providers_failure_mid_stream_on_native_responses_is_not_charged_in_full(
    ending: str,
) -> None:
    failure = _responses_error("oa") if ending == "error" else _responses_failed("oa")
    async with gateway() as gw:
        before = await gw.used()
        gw.provider.faults["oa"] = [_sim_then(failure, keep=5)]
        r = await gw.stream("responses", "gpt")
        assert r.status_code == 200, r.text
        events = _events(r.text)
        assert events[-1]["type"] == ending  # the provider's own end, nothing added after it
        assert sum(e["type"] == "response.failed" for e in events) == (ending != "error")
        charged = await gw.used() - before
        prompt = int(r.headers["x-routefit-prompt-tokens"])
        # its prompt and the little text relayed, not the output reservation besides
        assert prompt <= charged < prompt + MAX_TOKENS, (charged, prompt)


# -- a stream of only [DONE] -------------------------------------------------------------------

DONE_ONLY = _stream(b"data: [DONE]\n\n")
#: (client wire, alias, host): native chat, chat translated to Messages, native Messages.
DONE_LEGS = [("chat", "gpt", "oa"), ("chat", "claude", "an"), ("messages", "claude", "an")]


@pytest.mark.parametrize("leg", DONE_LEGS, ids=["-".join(leg[:2]) for leg in DONE_LEGS])
async def test_a_stream_of_only_done_is_no_answer(leg: tuple[str, str, str]) -> None:
    wire, alias, host = leg
    async with gateway() as gw:

        async def charge(answer: Answer) -> tuple[httpx.Response, int]:
            before = await gw.used()
            gw.provider.faults[host] = [answer]
            r = await gw.stream(wire, alias)
            return r, await gw.used() - before

        r, charged = await charge(DONE_ONLY)
        assert r.status_code == 502, r.text
        check_wire_error_shape(r.request.url.path, 502, r.content, alias, None, True)
        assert "text/event-stream" not in r.headers.get("content-type", "")
        if wire == "chat":
            assert r.json()["error"]["code"] == "upstream_incomplete", r.text
        # charged as a stream with no event at all is (its prompt: the provider had it)
        _, nothing = await charge(_stream())
        assert charged == nothing > 0


async def test_a_stream_of_only_done_goes_to_the_aliases_next_deployment() -> None:
    async with gateway() as gw:
        gw.provider.faults["oa1"] = [DONE_ONLY]
        r = await gw.stream("chat", "gpt-pair")
        assert r.status_code == 200, r.text
        assert r.headers["x-routefit-deployment"] == "oa2"
        assert '"content"' in r.text and r.text.rstrip().endswith("data: [DONE]")
