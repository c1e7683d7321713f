"""Tenant isolation, round three: what an anonymous caller or another team reads of a team's
traffic outside the answers to its own requests (docs/security.md).

In process (routefit's app before ``MockTransport``; the provider is the simulator's ASGI app,
held back by a case that needs requests in flight), teams A and B on the same routes:

* ``/readyz`` (and ``/health/readiness``'s answer when not ready), which every probe reads
  without a key, counted the worker's asyncio tasks: every request in flight holds some, so
  polling it showed team A's concurrent requests to anyone. With ``metrics_key`` set (the
  operator keeping traffic figures to the scraper) the count is left out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from inprocess import asgi_client
from test_billing_hunt import Provider

from proxy.config import parse_config

pytestmark = pytest.mark.anyio

ADMIN = "sk-admin-" + "a" * 32
SCRAPER = "sk-metrics-" + "m" * 32
KEY_A = "sk-team-a-" + "b" * 32
KEY_B = "sk-team-b-" + "c" * 32


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


MODELS = [
    {
        "model_name": "gpt",
        "litellm_params": {
            "model": "openai/gpt-4o",
            "api_base": "http://sim.local/v1",
            "api_key": "sk-sim-0123456789abcdef",
        },
    }
]


@asynccontextmanager
async def served(**settings: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Provider]]:
    """routefit before the simulator; teams A and B share the route."""
    config = parse_config(
        {
            "model_list": MODELS,
            "routefit_settings": {
                "store_path": ":memory:",
                "admin_key": ADMIN,
                "teams": [{"id": "team-a", "keys": [KEY_A]}, {"id": "team-b", "keys": [KEY_B]}],
                **settings,
            },
        },
        environ={},
    )
    provider = Provider()
    async with asgi_client(config, provider) as client:
        yield client, provider


def chat(text: str = "Say hello.") -> dict[str, Any]:
    return {"model": "gpt", "messages": [{"role": "user", "content": text}], "max_tokens": 20}


@asynccontextmanager
async def in_flight(
    client: httpx.AsyncClient, provider: Provider, key: str, n: int
) -> AsyncIterator[None]:
    """``n`` requests of ``key``'s team held at the provider while the body runs."""
    gate = asyncio.Event()
    arrived = 0

    async def held(request: httpx.Request, sim: Any) -> httpx.Response:
        nonlocal arrived
        arrived += 1
        await gate.wait()
        answer: httpx.Response = await sim(request)
        return answer

    provider.script = held
    sent = [
        asyncio.ensure_future(client.post("/v1/chat/completions", json=chat(), headers=auth(key)))
        for _ in range(n)
    ]
    try:
        for _ in range(500):  # until every one is at the provider (bounded, not timed)
            if arrived == n:
                break
            await asyncio.sleep(0.01)
        assert arrived == n
        yield
    finally:
        gate.set()
        answers = await asyncio.gather(*sent)
        provider.script = None
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers]


async def test_readyz_shows_no_one_another_teams_requests_in_flight() -> None:
    """With ``metrics_key`` set, what an anonymous probe (or team B) reads of ``/readyz`` is
    the same whether team A has requests in flight or not."""
    async with served(metrics_key=SCRAPER) as (client, provider):
        await client.post("/v1/chat/completions", json=chat(), headers=auth(KEY_B))
        quiet = await client.get("/readyz")
        assert quiet.status_code == 200, quiet.text
        async with in_flight(client, provider, KEY_A, 4):
            for headers in ({}, auth(KEY_B)):
                busy = await client.get("/readyz", headers=headers)
                assert busy.status_code == 200, busy.text
                assert busy.json() == quiet.json()
        assert "tasks" not in quiet.json()


async def test_readyz_still_counts_tasks_where_metrics_are_open() -> None:
    """Without ``metrics_key`` (``/metrics`` open: a gateway per team, or one tenant) the leak
    check stays: the count rises with requests in flight and falls back after."""
    async with served() as (client, provider):
        quiet = (await client.get("/readyz")).json()["tasks"]
        async with in_flight(client, provider, KEY_A, 4):
            busy = (await client.get("/readyz")).json()["tasks"]
        assert busy >= quiet + 4
