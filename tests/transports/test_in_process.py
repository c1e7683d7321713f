"""The whole gateway in process: routefit's app and the provider simulator's ASGI app joined by
``MockTransport`` (``proxy.transports.mock.asgi_transport``), no socket, no subprocess.

The provider's answers go through the same reading as the passthrough's (error statuses, body
and event bounds, SSE re-cut into events, malformed JSON), so these check what a client gets
for each wire on each kind of route — chat, Messages and Responses clients, whole and streamed,
an OpenAI route and an Anthropic one (chat to it by routefit's own translation) — plus a
provider's error status, its context-length refusals (relayed, or learnt and refitted), and the
bounds. The routes are ``sim://local`` ones: with a transport injected no simulator thread is
started, and the injected one answers them.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
import redis
import yaml

from proxy.app import create_app
from proxy.config import load_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimState
from proxy.transports.mock import MockTransport, asgi_handler, asgi_transport

pytestmark = pytest.mark.anyio

SMALL = {"max_input_tokens": 8192, "max_output_tokens": 2048}
WORDS = (
    "the route counts tokens window provider answer session history plan file change test "
    "result error value line read write build check list item order model"
).split()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _route(alias: str, model: str, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "model_name": alias,
        "litellm_params": {"model": model, "api_base": "sim://local"},
    }
    entry.update(extra)
    return entry


@pytest.fixture
def store_url(redis_url: str) -> str:
    """The session's own Redis database, emptied of what an earlier test learnt."""
    client = redis.Redis.from_url(redis_url)
    try:
        for key in client.scan_iter():
            if not key.startswith(b"routefit-tests:"):
                client.delete(key)
    finally:
        client.close()
    return redis_url


def _config(tmp_path: Path, store_url: str, **settings: Any) -> Path:
    routes = [
        _route("gpt", "openai/gpt-4o"),
        _route("claude", "anthropic/claude-sonnet-4-5"),
        # routefit believes in a window the provider does not have, and counts as it does
        _route("narrow", "openai/gpt-4o-small", model_info={"max_input_tokens": 128_000}),
        # counts half again more than routefit can know before it has learnt the route
        _route("dense", "openai/mystery-dense", model_info=SMALL),
    ]
    none = 0.05  # the priors of a deployment close to routefit's tokenizers (no headroom)
    settings.setdefault(
        "calibration",
        {
            "prior_inexact": 1.1,
            "prior_messages": none,
            "prior_calls": none,
            "prior_requests": none,
        },
    )
    settings.setdefault("redis_url", store_url)
    path = tmp_path / "routefit.yaml"
    path.write_text(yaml.safe_dump({"model_list": routes, "routefit_settings": settings}))
    return path


@asynccontextmanager
async def gateway(config: Path, transport: MockTransport) -> AsyncIterator[httpx.AsyncClient]:
    """routefit's app over ``transport``, started (lifespan) and reached in process."""
    app = create_app(load_config(str(config)), transport=transport)
    assert app.state.routefit.local is None  # the injected transport answers sim:// routes
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://routefit",
            timeout=60,
        ) as client,
    ):
        # serve once started (route tokenizers loaded, the calibration's first refresh done)
        for _ in range(600):
            if (await client.get("/readyz")).status_code == 200:
                break
            await anyio.sleep(0.05)
        yield client


@pytest.fixture
def sim() -> SimState:
    return SimState()


@pytest.fixture
def provider(sim: SimState) -> MockTransport:
    return asgi_transport(create_sim(sim))


def _events(body: bytes) -> list[bytes]:
    return [e for e in body.split(b"\n\n") if e.strip()]


def _data(events: list[bytes]) -> list[Any]:
    out = []
    for event in events:
        for line in event.splitlines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                out.append(orjson.loads(line[6:]))
    return out


CHAT = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 40}


async def test_chat_client_on_an_openai_route(
    tmp_path: Path, store_url: str, provider: MockTransport
) -> None:
    async with gateway(_config(tmp_path, store_url), provider) as client:
        whole = await client.post("/v1/chat/completions", json={"model": "gpt", **CHAT})
        assert whole.status_code == 200, whole.text
        answer = whole.json()
        assert answer["choices"][0]["message"]["content"]
        assert answer["usage"]["prompt_tokens"] > 0
        assert whole.headers["x-routefit-route"] == "gpt"
        sent = provider.sent[-1]
        assert str(sent.url) == "http://sim.local/v1/chat/completions"
        assert sent.headers["authorization"] == "Bearer sk-sim-local"
        assert orjson.loads(sent.content)["model"] == "gpt-4o"

        streamed = await client.post(
            "/v1/chat/completions", json={"model": "gpt", "stream": True, **CHAT}
        )
        assert streamed.status_code == 200
        events = _events(streamed.content)
        assert events[-1] == b"data: [DONE]"
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in _data(events) if c["choices"]
        )
        assert text


async def test_messages_client_on_an_anthropic_route(
    tmp_path: Path, store_url: str, provider: MockTransport
) -> None:
    body = {"model": "claude", **CHAT}
    async with gateway(_config(tmp_path, store_url), provider) as client:
        whole = await client.post("/v1/messages", json=body)
        assert whole.status_code == 200, whole.text
        assert whole.json()["type"] == "message"
        assert whole.json()["content"][0]["text"]
        sent = provider.sent[-1]
        assert str(sent.url) == "http://sim.local/v1/messages"
        assert sent.headers["x-api-key"] == "sk-sim-local"
        assert sent.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in sent.headers

        streamed = await client.post("/v1/messages", json={**body, "stream": True})
        assert streamed.status_code == 200
        names = [e.split(b"\n", 1)[0] for e in _events(streamed.content)]
        assert names[0] == b"event: message_start"
        assert names[-1] == b"event: message_stop"


async def test_chat_client_on_an_anthropic_route_is_translated_by_routefit(
    tmp_path: Path, store_url: str, provider: MockTransport
) -> None:
    async with gateway(_config(tmp_path, store_url), provider) as client:
        whole = await client.post("/v1/chat/completions", json={"model": "claude", **CHAT})
        assert whole.status_code == 200, whole.text
        assert whole.json()["object"] == "chat.completion"
        assert whole.json()["choices"][0]["message"]["content"]
        # chat → Messages by routefit's own adapter, over the same (injected) transport
        assert str(provider.sent[-1].url) == "http://sim.local/v1/messages"

        streamed = await client.post(
            "/v1/chat/completions", json={"model": "claude", "stream": True, **CHAT}
        )
        events = _events(streamed.content)
        assert events[-1] == b"data: [DONE]"
        assert any(c["choices"][0]["delta"].get("content") for c in _data(events) if c["choices"])


async def test_responses_client_on_an_openai_route(
    tmp_path: Path, store_url: str, provider: MockTransport
) -> None:
    body = {"model": "gpt", "input": "Say hello.", "max_output_tokens": 40}
    async with gateway(_config(tmp_path, store_url), provider) as client:
        whole = await client.post("/v1/responses", json=body)
        assert whole.status_code == 200, whole.text
        assert whole.json()["object"] == "response"
        assert whole.json()["status"] == "completed"
        assert str(provider.sent[-1].url) == "http://sim.local/v1/responses"

        streamed = await client.post("/v1/responses", json={**body, "stream": True})
        assert streamed.status_code == 200
        kinds = [d.get("type") for d in _data(_events(streamed.content))]
        assert kinds[0] == "response.created"
        assert kinds[-1] == "response.completed"


async def _fault(sim: SimState, fault: str, count: int = 1) -> None:
    """Queue a fault through the simulator's own control endpoint."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_sim(sim)), base_url="http://sim"
    ) as control:
        r = await control.post("/sim/faults", json={"faults": [{"fault": fault, "count": count}]})
        assert r.status_code == 200, r.text


async def test_a_provider_error_status_reaches_each_client_in_its_shape(
    tmp_path: Path, store_url: str, sim: SimState, provider: MockTransport
) -> None:
    async with gateway(_config(tmp_path, store_url), provider) as client:
        await _fault(sim, "status:503")
        chat = await client.post("/v1/chat/completions", json={"model": "gpt", **CHAT})
        assert chat.status_code == 503
        assert chat.json()["error"]["message"]
        await _fault(sim, "status:529")
        messages = await client.post("/v1/messages", json={"model": "claude", **CHAT})
        assert messages.status_code == 529
        assert messages.json()["type"] == "error"
        # the fault was one request's: the next is served
        again = await client.post("/v1/chat/completions", json={"model": "gpt", **CHAT})
        assert again.status_code == 200


async def test_a_transient_status_is_retried_when_the_config_says_so(
    tmp_path: Path, store_url: str, sim: SimState, provider: MockTransport
) -> None:
    async with gateway(_config(tmp_path, store_url, upstream_retries=1), provider) as client:
        await _fault(sim, "status:503")
        served = await client.post("/v1/chat/completions", json={"model": "gpt", **CHAT})
        assert served.status_code == 200, served.text
        assert len(provider.sent) == 2


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _session(seed: int, turns: int = 12, words: int = 230) -> list[dict[str, str]]:
    """A long session routefit believes fits an 8k window (the dense provider does not)."""
    rng = random.Random(seed)
    messages = [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "Task: " + _text(rng, 60)},
    ]
    for _ in range(turns):
        messages.append({"role": "assistant", "content": _text(rng, words)})
        messages.append({"role": "user", "content": _text(rng, words)})
    return messages


async def test_a_providers_overflow_refusal_is_relayed(
    tmp_path: Path, store_url: str, sim: SimState, provider: MockTransport
) -> None:
    body = {"model": "narrow", "messages": _session(4, turns=30), "max_tokens": 200}
    async with gateway(_config(tmp_path, store_url), provider) as client:
        refused = await client.post("/v1/chat/completions", json=body)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "maximum context length is 8192 tokens" in error["message"]
    assert len(provider.sent) == 1  # not an under-estimate of routefit's: sent once


async def test_a_providers_overflow_refusal_is_learnt_refitted_and_served(
    tmp_path: Path, store_url: str, sim: SimState
) -> None:
    serve = asgi_handler(create_sim(sim))
    refused: list[int] = []

    async def refuses_once(request: httpx.Request) -> httpx.Response:
        # a provider whose tokenizer counts far more than routefit could know: the first
        # attempt is refused with the provider's count, in OpenAI's words
        if not refused:
            refused.append(len(orjson.loads(request.content)["messages"]))
            message = (
                "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9500 tokens. Please reduce the length of the messages."
            )
            error = {"message": message, "code": "context_length_exceeded", "param": "messages"}
            return httpx.Response(400, json={"error": error})
        return await serve(request)

    transport = MockTransport(refuses_once)
    body = {"model": "dense", "messages": _session(1, turns=10), "max_tokens": 200}
    async with gateway(_config(tmp_path, store_url), transport) as client:
        dry = await client.post("/routefit/fit", json=body)
        assert dry.json()["report"]["transparent"], dry.text  # routefit believes it fits
        served = await client.post("/v1/chat/completions", json=body)
        metrics = (await client.get("/metrics")).text
    assert served.status_code == 200, served.text
    assert len(transport.sent) == 2
    assert 'routefit_overflow_refits_total{route="dense"} 1.0' in metrics
    assert "elided_messages=" in served.headers["x-routefit-actions"]
    resent = len(orjson.loads(transport.sent[1].content)["messages"])
    assert resent < refused[0]


async def test_a_malformed_answer_is_the_providers_failure(
    tmp_path: Path, store_url: str, sim: SimState, provider: MockTransport
) -> None:
    async with gateway(_config(tmp_path, store_url), provider) as client:
        await _fault(sim, "malformed")
        bad = await client.post("/v1/chat/completions", json={"model": "gpt", **CHAT})
    assert bad.status_code == 502
    assert bad.json()["error"]["code"] == "upstream_malformed"


class _BreaksOff(httpx.AsyncByteStream):
    """A body that sends ``head`` and then loses its connection."""

    def __init__(self, head: bytes) -> None:
        self.head = head

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.head
        raise httpx.ReadError("connection reset")


async def test_a_stream_that_breaks_off_ends_with_the_wires_error_event(
    tmp_path: Path, store_url: str, sim: SimState
) -> None:
    serve = asgi_handler(create_sim(sim))

    async def cut(request: httpx.Request) -> httpx.Response:
        answer = await serve(request)
        body = await answer.aread()
        head = b"".join(e + b"\n\n" for e in body.split(b"\n\n")[:2])  # two whole events
        return httpx.Response(200, headers=answer.headers, stream=_BreaksOff(head))

    body = {"model": "claude", "stream": True, **CHAT}
    async with gateway(_config(tmp_path, store_url), MockTransport(cut)) as client:
        broken = await client.post("/v1/messages", json=body)
    names = [e.split(b"\n", 1)[0] for e in _events(broken.content)]
    assert names[0] == b"event: message_start"
    assert b"event: message_stop" not in names
    assert names[-1] == b"event: error"


async def test_an_answer_over_the_bound_is_refused(
    tmp_path: Path, store_url: str, sim: SimState
) -> None:
    serve = asgi_handler(create_sim(sim))

    async def padded(request: httpx.Request) -> httpx.Response:
        answer = await serve(request)
        await answer.aread()
        data = answer.json()
        data["padding"] = "x" * 4096
        return httpx.Response(answer.status_code, json=data)

    config = _config(tmp_path, store_url, max_provider_body_bytes=2048)
    async with gateway(config, MockTransport(padded)) as client:
        refused = await client.post("/v1/chat/completions", json={"model": "gpt", **CHAT})
    assert refused.status_code == 502
    assert refused.json()["error"]["code"] == "upstream_too_large"
