"""Two layers of retries, one at a time: on a routed alias the router's attempts are the retries
(the next deployment at once), and ``upstream_retries`` serves an alias of one deployment.

Both at once, a routed alias of two deployments failing with 503 took 9 provider calls for the
router's 3 attempts (each attempt first wore out its deployment with the transport's retries),
and only one failure in three counted towards a cooldown. In process: routefit's app before
``MockTransport``, whose handler answers every call with 503 and counts them per deployment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from inprocess import asgi_client
from test_provider_answer_faults import _deployment

from proxy.config import parse_config

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Overloaded:
    """Every provider call answered 503, counted by deployment (its host)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls[request.url.host] = self.calls.get(request.url.host, 0) + 1
        return httpx.Response(503, json={"error": {"message": "overloaded", "type": "server"}})


@asynccontextmanager
async def gateway(provider: Overloaded) -> AsyncIterator[httpx.AsyncClient]:
    gpt = "openai/gpt-4o"
    models = [
        _deployment(h, a, gpt) for h, a in (("one", "pair"), ("two", "pair"), ("solo", "solo"))
    ]
    config = parse_config(
        {
            "model_list": models,
            "router_settings": {"routing_strategy": "simple-shuffle", "retry_after": 0},
            "routefit_settings": {"store_path": ":memory:", "upstream_retries": 2},
        },
        "r.yaml",
        environ={},
    )
    async with asgi_client(config, provider) as client:
        yield client


async def _ask(client: httpx.AsyncClient, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    return await client.post("/v1/chat/completions", json=body, timeout=60)


async def test_a_routed_alias_is_retried_by_its_router_alone() -> None:
    provider = Overloaded()
    async with gateway(provider) as client:
        reply = await _ask(client, "pair")
    assert reply.status_code == 503, reply.text
    attempts = int(reply.headers["x-routefit-attempts"])
    assert attempts >= 2  # the router tried the other deployment
    assert sum(provider.calls.values()) == attempts, provider.calls
    assert set(provider.calls) == {"one", "two"}


async def test_an_alias_of_one_deployment_keeps_the_transports_retries() -> None:
    provider = Overloaded()
    async with gateway(provider) as client:
        reply = await _ask(client, "solo")
    assert reply.status_code == 503, reply.text
    assert provider.calls == {"solo": 3}  # the call and upstream_retries' two


async def test_an_alias_of_one_deployment_retried_by_its_router_is_not_retried_twice() -> None:
    """``num_retries`` set in the file retries an alias of one deployment too: its router's
    attempts are then its retries, not each worn out first by ``upstream_retries`` (with
    both at 2, one deployment failing with 503 took 9 provider calls for 3 attempts)."""
    provider = Overloaded()
    config = parse_config(
        {
            "model_list": [_deployment("solo", "solo", "openai/gpt-4o")],
            "router_settings": {"num_retries": 2, "retry_after": 0},
            "routefit_settings": {"store_path": ":memory:", "upstream_retries": 2},
        },
        "r.yaml",
        environ={},
    )
    async with asgi_client(config, provider) as client:
        reply = await _ask(client, "solo")
    assert reply.status_code == 503, reply.text
    assert reply.headers["x-routefit-attempts"] == "3"
    assert provider.calls == {"solo": 3}, provider.calls
