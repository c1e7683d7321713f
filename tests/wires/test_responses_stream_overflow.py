"""A streamed Responses overflow, as OpenAI reports it: HTTP 200, ``response.created`` and
``response.in_progress``, then an ``error`` event and ``response.failed`` with code
``context_length_exceeded`` (docs/simulator.md, "Streamed Responses overflows").

Through routefit (in-process) to the simulator, on routes whose provider counts half again more
than routefit can know before it has learnt them (the simulator's ``mystery-dense``, 8k window):
the first long request passes routefit's fit and the provider finds it too long. Before any
output, that is the provider's refusal, answered as one (a 400 in the client's terms, nothing
charged) -- not a 200 stream with no answer -- and on a chat leg, whose refusal states its
count, refitted and served."""

from __future__ import annotations

import json
import random
import re
import time
import uuid

import httpx
import openai
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess

from proxy.transports.mock import MockTransport, asgi_handler

WORDS = (
    "the route counts tokens window provider answer session history plan file change test "
    "result error value line read write build check list item order model"
).split()
ADMIN = "sk-admin-" + uuid.uuid4().hex
KEY = "sk-team-" + uuid.uuid4().hex
TEAM = "overflow-" + uuid.uuid4().hex[:8]
SMALL = {"max_input_tokens": 8192, "max_output_tokens": 2048}
#: What a route is priced by before it has learnt anything: a prior close to the tokenizers
#: routefit ships, so that only the provider can say the request is too long
#: (tests/proxy/test_overflow_refit_e2e.py).
NONE = 0.05
MODEST = {
    "prior_inexact": 1.1,
    "prior_messages": NONE,
    "prior_calls": NONE,
    "prior_requests": NONE,
    "prior_digits": NONE,
}


def _items(seed: int, turns: int = 12, words: int = 230) -> list[dict]:
    """A long conversation as Responses input items, which routefit believes fits 8k."""
    rng = random.Random(seed)

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    items: list[dict] = [{"role": "user", "content": "Task: " + text(60)}]
    for _ in range(turns):
        items.append({"role": "assistant", "content": text(words)})
        items.append({"role": "user", "content": text(words)})
    return items


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    routes = [
        # an OpenAI route: Responses natively, so the provider's overflow comes in the stream
        sim_route("dense", sim.base_url, "mystery-dense", model_info=SMALL),
        # not an OpenAI provider: chat only, so a Responses client's request is translated
        {
            "model_name": "dense-chat",
            "litellm_params": {
                "model": "deepseek/mystery-dense",
                "api_base": f"{sim.base_url}/v1",
                "api_key": "sk-sim",
            },
            "model_info": SMALL,
            "routefit": {"tokenizer": "o200k_base", "framing": "openai"},
        },
    ]
    config = gateway_config(
        tmp_path_factory.mktemp("stream-overflow") / "c.yaml",
        routes,
        calibration=MODEST,
        admin_key=ADMIN,
        teams=[{"id": TEAM, "keys": [KEY], "quotas": {"tokens_per_day": 10**10}}],
    )
    with run_inprocess(config) as running:
        yield running


@pytest.fixture
def client(gw):
    return openai.OpenAI(base_url=gw.v1, api_key=KEY, max_retries=0)


def _since(sim) -> int:
    log = sim.requests(limit=1)
    return log[-1]["id"] if log else -1


def _sent(sim, path: str, since: int) -> list[dict]:
    return [e for e in sim.requests(path=path) if e["id"] > since]


def _used(gw) -> int:
    """The team's tokens of the day: charged, plus what is held for requests under way."""
    r = httpx.get(
        f"{gw.base_url}/routefit/teams/{TEAM}/usage", headers={"authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 200, r.text
    return int({w["name"]: w for w in r.json()["windows"]}["tokens_per_day"]["used"])


def _settled_back_to(gw, before: int, timeout: float = 10.0) -> int:
    """The team's usage once it is back to ``before`` (a request released, not charged), or
    whatever it is when ``timeout`` passes first (a request charged: settled after its answer)."""
    deadline = time.monotonic() + timeout
    while (now := _used(gw)) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


def test_the_simulator_streams_an_overflow_as_openai_does(sim):
    """The shape itself, straight from the simulator: 200, the opening, then the failure."""
    body = {"model": "mystery-dense", "input": _items(1), "stream": True, "store": False}
    raw = openai.OpenAI(base_url=sim.url("/v1"), api_key="x", max_retries=0)
    kinds = [(e.type, e) for e in raw.responses.create(**body)]
    assert [k for k, _ in kinds] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    failed = kinds[-1][1]
    assert failed.response.status == "failed" and failed.response.usage is None
    assert failed.response.error.code == "context_length_exceeded"
    # the same request without ``stream`` is the 400 it always was
    with pytest.raises(openai.BadRequestError) as refused:
        raw.responses.create(**{**body, "stream": False})
    assert refused.value.code == "context_length_exceeded"


def test_a_streamed_overflow_before_any_output_is_the_providers_refusal(gw, sim, client):
    since = _since(sim)
    before = _used(gw)
    with pytest.raises(openai.BadRequestError) as refused:
        list(
            client.responses.create(
                model="dense", input=_items(2), stream=True, store=False, max_output_tokens=200
            )
        )
    assert refused.value.code == "context_length_exceeded"
    assert refused.value.status_code == 400
    sent = _sent(sim, "/v1/responses", since)
    # the provider refused it in its stream, once: it states no count, so nothing to refit on
    assert [e["error"] for e in sent] == ["context_length_exceeded"], sent
    assert _settled_back_to(gw, before) == before  # a refusal is not billed


def test_a_streamed_overflow_on_a_chat_leg_is_refitted_and_served(gw, sim, client):
    since = _since(sim)
    events = list(
        client.responses.create(
            model="dense-chat", input=_items(3), stream=True, store=False, max_output_tokens=200
        )
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text
    sent = _sent(sim, "/v1/chat/completions", since)
    assert [e["status"] for e in sent] == [400, 200], sent  # refused with its count, refitted
    metrics = httpx.get(gw.base_url + "/metrics").text
    assert re.search(r'routefit_overflow_refits_total\{route="dense-chat"\} [1-9]', metrics)


class _RefusesInItsStream:
    """An OpenAI-compatible server (vLLM, SGLang) in front of the simulator: it refuses a
    streamed overflow not with a 400 but inside a 200 stream, its one event the error object
    (the simulator's chat refusal, which states the count)."""

    def __init__(self, sim) -> None:
        self.sim = asgi_handler(sim.server.config.app)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        answer = await self.sim(request)
        body = json.loads(request.content)
        if answer.status_code != 400 or not body.get("stream"):
            return answer
        error = json.loads(await answer.aread())
        event = b"data: " + json.dumps(error).encode() + b"\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=event)


@pytest.fixture(scope="module")
def in_stream(sim, tmp_path_factory):
    """routefit whose provider refuses an overflow in its stream, stating its count."""
    routes = [
        {
            "model_name": "dense-vllm",
            "litellm_params": {
                "model": "deepseek/mystery-dense",
                "api_base": f"{sim.base_url}/v1",
                "api_key": "sk-sim",
            },
            "model_info": SMALL,
            "routefit": {"tokenizer": "o200k_base", "framing": "openai"},
        }
    ]
    config = gateway_config(
        tmp_path_factory.mktemp("in-stream") / "c.yaml", routes, calibration=MODEST
    )
    transport = MockTransport(_RefusesInItsStream(sim))
    with run_inprocess(config, provider=lambda _: {"transport": transport}) as running:
        yield running


def test_a_refusal_stated_in_the_stream_is_refitted_on_its_count(in_stream, sim):
    since = _since(sim)
    client = openai.OpenAI(base_url=in_stream.v1, api_key="unused", max_retries=0)
    events = list(
        client.responses.create(
            model="dense-vllm", input=_items(4), stream=True, store=False, max_output_tokens=200
        )
    )
    assert events[-1].type == "response.completed", [e.type for e in events]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta")
    sent = _sent(sim, "/v1/chat/completions", since)
    assert [e["status"] for e in sent] == [400, 200], sent  # refused in the stream, refitted
    metrics = httpx.get(in_stream.base_url + "/metrics").text
    assert re.search(r'routefit_overflow_refits_total\{route="dense-vllm"\} [1-9]', metrics)
