"""A provider's odd 200s and its retry hints, in process: nothing a provider says is taken on faith.

routefit's app before ``MockTransport``, whose handler plays the provider: the simulator for a
plain answer, changed or replaced by each case. What is checked is what the client gets (status,
its wire's error shape, never routefit's internal error, ``retry-after``) and what the team is
charged (``/routefit/teams/{id}/usage``):

* a 200 whose body is JSON but not an answer — a list, a string, null, an object without the
  wire's answer in it, a provider's ``{"error": ...}`` sent with status 200 — is a 502
  ``upstream_malformed`` in the client's shape, on a native route and through routefit's own
  chat→Messages translation (there, before: a 500 "routefit internal error", or an empty
  answer made up from nothing);
* an Anthropic usage whose counts, added up for chat, pass 64 bits is a 502, not a 500;
* a usage whose counts are null (or 0) is no count: the team is charged the reservation, not
  nothing; nor are counts that are not numbers read as 0 by the chat→Messages translation;
* a ``retry-after-ms`` alone reaches the client as ``retry-after`` too;
* a stream that ends before its first event is the provider's failure before any byte reached
  the client: another deployment of the alias answers it, or the client gets a 502.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from inprocess import asgi_client
from wire_shapes import check_wire_error_shape

from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimState
from proxy.transports.mock import asgi_handler

pytestmark = pytest.mark.anyio

ADMIN = "sk-admin-" + "a" * 32
KEY = "sk-team-" + "b" * 32
TEAM = "faults"
MAX_TOKENS = 30

Answer = Callable[[httpx.Request, Callable[[httpx.Request], Awaitable[httpx.Response]]], Any]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _deployment(host: str, alias: str, model: str) -> dict[str, Any]:
    base = f"http://{host}/v1" if model.startswith("openai/") else f"http://{host}"
    return {
        "model_name": alias,
        "litellm_params": {"model": model, "api_base": base, "api_key": f"sk-{host}-0123456789"},
        "model_info": {"id": host},
    }


MODELS = [
    _deployment("oa", "gpt", "openai/gpt-4o"),
    _deployment("an", "claude", "anthropic/claude-sonnet-4-5"),
    # an alias of two deployments: "one" first (its weight), "two" after it
    {
        **_deployment("one", "pair", "openai/gpt-4o"),
        "litellm_params": {
            **_deployment("one", "pair", "openai/gpt-4o")["litellm_params"],
            "weight": 1000,
        },
    },
    {
        **_deployment("two", "pair", "openai/gpt-4o"),
        "litellm_params": {
            **_deployment("two", "pair", "openai/gpt-4o")["litellm_params"],
            "weight": 0.001,
        },
    },
]


class Provider:
    """The simulator, unless ``faults[host]`` holds answers of its own (each used once)."""

    def __init__(self) -> None:
        self.sim = asgi_handler(create_sim(SimState()))
        self.faults: dict[str, list[Answer]] = {}
        self.hits: dict[str, int] = {}

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.hits[host] = self.hits.get(host, 0) + 1
        queued = self.faults.get(host)
        if queued:
            answer: httpx.Response = await queued.pop(0)(request, self.sim)
            return answer
        return await self.sim(request)


class Gateway:
    def __init__(self, client: httpx.AsyncClient, provider: Provider) -> None:
        self.client = client
        self.provider = provider

    async def used(self) -> int:
        r = await self.client.get(
            f"/routefit/teams/{TEAM}/usage", headers={"authorization": f"Bearer {ADMIN}"}
        )
        assert r.status_code == 200, r.text
        return int({w["name"]: w for w in r.json()["windows"]}["tokens_per_day"]["used"])

    async def post(self, wire: str, model: str, stream: bool = False) -> httpx.Response:
        text = [{"role": "user", "content": "Say hello."}]
        if wire == "messages":
            path = "/v1/messages"
            headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        else:
            path = "/v1/chat/completions"
            headers = {"authorization": f"Bearer {KEY}"}
        body = {"model": model, "messages": text, "max_tokens": MAX_TOKENS}
        if stream:
            body["stream"] = True
        return await self.client.post(path, json=body, headers=headers)


@asynccontextmanager
async def served(
    models: list[dict[str, Any]],
) -> AsyncIterator[tuple[httpx.AsyncClient, Provider]]:
    """routefit over ``models`` before a ``Provider``, one team with a quota to charge."""
    config = parse_config(
        {
            "model_list": models,
            "router_settings": {"routing_strategy": "simple-shuffle"},
            "routefit_settings": {
                "store_path": ":memory:",
                "admin_key": ADMIN,
                "teams": [
                    {
                        "id": TEAM,
                        "keys": [KEY],
                        "quotas": {"tokens_per_minute": 10**9, "tokens_per_day": 10**10},
                    }
                ],
            },
        },
        environ={},
    )
    provider = Provider()
    async with asgi_client(config, provider) as client:
        yield client, provider


@asynccontextmanager
async def gateway() -> AsyncIterator[Gateway]:
    async with served(MODELS) as (client, provider):
        yield Gateway(client, provider)


def _body(content: bytes) -> Answer:
    async def answer(request: httpx.Request, sim: Any) -> httpx.Response:
        return httpx.Response(200, content=content, headers={"content-type": "application/json"})

    return answer


def _changed(change: Callable[[dict[str, Any]], dict[str, Any]]) -> Answer:
    """The simulator's answer, its JSON changed."""

    async def answer(request: httpx.Request, sim: Any) -> httpx.Response:
        response = await sim(request)
        data = json.loads(await response.aread())
        return httpx.Response(response.status_code, json=change(data))

    return answer


def _usage(change: Callable[[dict[str, Any]], None]) -> Answer:
    def apply(data: dict[str, Any]) -> dict[str, Any]:
        change(data["usage"])
        return data

    return _changed(apply)


def _every_count(value: Any) -> Callable[[dict[str, Any]], None]:
    def change(usage: dict[str, Any]) -> None:
        for name, count in list(usage.items()):
            if isinstance(count, int):
                usage[name] = value

    return change


# -- a 200 that is no answer -------------------------------------------------------------------

NOT_ANSWERS = {
    "a list": b"[]",
    "a string": b'"hello"',
    "null": b"null",
    "an object of something else": b'{"foo": 1}',
    "an error with status 200": b'{"error": {"message": "the model crashed", "code": 500}}',
}
#: (client wire, alias, host): native chat, native Messages, chat translated to Messages.
LEGS = [("chat", "gpt", "oa"), ("messages", "claude", "an"), ("chat", "claude", "an")]


@pytest.mark.parametrize("leg", LEGS, ids=["-".join(leg[:2]) for leg in LEGS])
async def test_a_200_that_is_not_an_answer_is_a_502_in_the_clients_shape(
    leg: tuple[str, str, str],
) -> None:
    wire, alias, host = leg
    async with gateway() as gw:
        for what, content in NOT_ANSWERS.items():
            gw.provider.faults[host] = [_body(content)]
            r = await gw.post(wire, alias)
            label = f"{wire} on {alias}: {what}"
            assert r.status_code == 502, (label, r.text)
            check_wire_error_shape(r.request.url.path, 502, r.content, label, None, True)
            assert b"internal error" not in r.content, label
            if wire == "chat":
                assert r.json()["error"]["code"] == "upstream_malformed", label
            if what == "an error with status 200":
                assert "the model crashed" in r.text, label


async def test_an_anthropic_usage_past_64_bits_once_added_is_a_502_not_a_500() -> None:
    def huge(usage: dict[str, Any]) -> None:
        usage["input_tokens"] = usage["cache_read_input_tokens"] = 2**63

    async with gateway() as gw:
        gw.provider.faults["an"] = [_usage(huge)]
        r = await gw.post("chat", "claude")
        assert r.status_code == 502, r.text
        assert r.json()["error"]["code"] == "upstream_malformed"


# -- usage that is no count ----------------------------------------------------------------------


@pytest.mark.parametrize("leg", LEGS, ids=["-".join(leg[:2]) for leg in LEGS])
@pytest.mark.parametrize("value", [None, 0], ids=["null", "zero"])
async def test_a_usage_of_no_tokens_charges_the_reservation_not_nothing(
    leg: tuple[str, str, str], value: int | None
) -> None:
    wire, alias, host = leg
    async with gateway() as gw:
        before = await gw.used()
        gw.provider.faults[host] = [_usage(_every_count(value))]
        r = await gw.post(wire, alias)
        assert r.status_code == 200, r.text
        charged = await gw.used() - before
        assert charged > MAX_TOKENS, charged  # the prompt as estimated and the output reserve


@pytest.mark.parametrize("value", ["12", 12.5, True], ids=["string", "fraction", "boolean"])
async def test_counts_that_are_not_numbers_are_not_read_as_zero_by_the_translation(
    value: Any,
) -> None:
    async with gateway() as gw:
        before = await gw.used()
        gw.provider.faults["an"] = [_usage(_every_count(value))]
        r = await gw.post("chat", "claude")
        assert r.status_code == 200, r.text
        charged = await gw.used() - before
        assert charged > MAX_TOKENS, charged


# -- retry hints, and a stream with no event -------------------------------------------------------


@pytest.mark.parametrize("wire", ["chat", "messages"])
async def test_a_retry_after_in_milliseconds_reaches_the_client_in_seconds(wire: str) -> None:
    async def slow_down(request: httpx.Request, sim: Any) -> httpx.Response:
        body = {"error": {"message": "slow down", "type": "rate_limit_error"}}
        return httpx.Response(429, json=body, headers={"retry-after-ms": "6500"})

    alias, host = ("gpt", "oa") if wire == "chat" else ("claude", "an")
    async with gateway() as gw:
        gw.provider.faults[host] = [slow_down]
        r = await gw.post(wire, alias)
        assert r.status_code == 429, r.text
        assert r.headers["retry-after"] == "7"
        assert r.headers["retry-after-ms"] == "6500"


async def _no_event(request: httpx.Request, sim: Any) -> httpx.Response:
    return httpx.Response(200, content=b"", headers={"content-type": "text/event-stream"})


async def test_a_stream_with_no_event_goes_to_the_aliases_next_deployment() -> None:
    async with gateway() as gw:
        gw.provider.faults["one"] = [_no_event]
        r = await gw.post("chat", "pair", stream=True)
        assert r.status_code == 200, r.text
        assert r.headers["x-routefit-deployment"] == "two"
        assert r.headers["x-routefit-attempts"] == "2"
        assert r.text.rstrip().endswith("data: [DONE]")
        assert gw.provider.hits == {"one": 1, "two": 1}


@pytest.mark.parametrize("leg", LEGS, ids=["-".join(leg[:2]) for leg in LEGS])
async def test_a_stream_with_no_event_on_its_only_deployment_is_a_502(
    leg: tuple[str, str, str],
) -> None:
    wire, alias, host = leg
    async with gateway() as gw:
        gw.provider.faults[host] = [_no_event]
        r = await gw.post(wire, alias, stream=True)
        assert r.status_code == 502, r.text
        check_wire_error_shape(r.request.url.path, 502, r.content, alias, None, True)
        assert "ended before its first event" in r.text
