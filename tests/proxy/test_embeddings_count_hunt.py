"""Bug hunt on ``/v1/embeddings`` and the count endpoints, in process before the simulator.

* a count endpoint (Anthropic's ``count_tokens``, Gemini's ``:countTokens``) answers what the
  fit acts on: once the provider counted a prefix of the team's request, the fit is anchored on
  that count, and so is the count (it answered the route's prior price instead, far above);
* a count is anchored only on the team's own requests (anchors are prompt-derived facts);
* embeddings are held to the team's ``max_prompt_tokens`` like every other wire (they went
  through at any size).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from billed import deployment
from inprocess import asgi_client

from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimState
from proxy.transports.mock import asgi_handler

pytestmark = pytest.mark.anyio

ADMIN = "sk-admin-" + "h" * 32
KEY = "sk-team-" + "k" * 32
OTHER = "sk-other-" + "o" * 32
#: The limit a team's embeddings are held to (``quotas.max_prompt_tokens``).
LIMIT = 64


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _deployment(alias: str, model: str, base: str) -> dict[str, Any]:
    return deployment(alias, model, base, window=32_000, output=4_096)


MODELS = [
    _deployment("embed", "openai/text-embedding-3-small", "http://sim.local/v1"),
    _deployment("claude", "anthropic/claude-sonnet-4-5", "http://sim.local"),
    _deployment("gem", "gemini/gemini-sim", "http://sim.local/v1beta"),
]


class Provider:
    """The simulator, the paths it was asked for kept."""

    def __init__(self) -> None:
        self.sim = asgi_handler(create_sim(SimState()))
        self.paths: list[str] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        answer: httpx.Response = await self.sim(request)
        return answer


@asynccontextmanager
async def gateway(**quotas: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Provider, str]]:
    """routefit before the simulator: a team (its id yielded) with ``quotas``, and another."""
    team = "hunt-" + uuid.uuid4().hex[:8]  # its own counters in a shared Redis
    teams = [
        {"id": team, "keys": [KEY], "quotas": {"tokens_per_day": 10**12, **quotas}},
        {"id": team + "-other", "keys": [OTHER]},
    ]
    settings = {"store_path": ":memory:", "admin_key": ADMIN, "teams": teams}
    config = parse_config({"model_list": MODELS, "routefit_settings": settings}, environ={})
    provider = Provider()
    async with asgi_client(config, provider) as client:
        yield client, provider, team


def _headers(key: str) -> dict[str, str]:
    return {
        "authorization": f"Bearer {key}",
        "x-goog-api-key": key,
        "anthropic-version": "2023-06-01",
    }


#: wire → (serve path, count path, body, the count's field).
SESSION = [{"role": "user", "content": "Tell me about the weather in Lisbon. " * 20}]
REPLY = "It is sunny and mild, with a light breeze from the sea. " * 4
WIRES: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "messages": (
        "/v1/messages",
        "/v1/messages/count_tokens",
        {
            "model": "claude",
            "system": "You are a terse weather assistant. " * 10,
            "messages": [
                *SESSION,
                {"role": "assistant", "content": REPLY},
                {"role": "user", "content": "And tomorrow?"},
            ],
        },
        "input_tokens",
    ),
    "gemini": (
        "/v1beta/models/gem:generateContent",
        "/v1beta/models/gem:countTokens",
        {
            "systemInstruction": {"parts": [{"text": "You are a terse weather assistant. " * 10}]},
            "contents": [
                {"role": "user", "parts": [{"text": SESSION[0]["content"]}]},
                {"role": "model", "parts": [{"text": REPLY}]},
                {"role": "user", "parts": [{"text": "And tomorrow?"}]},
            ],
        },
        "totalTokens",
    ),
}


def _served(wire: str, body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "max_tokens": 200} if wire == "messages" else body


async def _anchored(client: httpx.AsyncClient, wire: str) -> int:
    """The prompt tokens the fit acts on once it is anchored on the provider's count (the
    calibrator writes anchors off the response path: served again until one is found)."""
    path, _, body, _ = WIRES[wire]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = await client.post(path, json=_served(wire, body), headers=_headers(KEY))
        assert r.status_code == 200, r.text
        if r.headers["x-routefit-prompt-tokens-kind"] == "anchored":
            return int(r.headers["x-routefit-prompt-tokens"])
        await anyio.sleep(0.05)
    raise AssertionError(f"{wire}: no anchored estimate after 20 s")


async def _count(client: httpx.AsyncClient, wire: str, key: str = KEY) -> int:
    _, path, body, field = WIRES[wire]
    r = await client.post(path, json=body, headers=_headers(key))
    assert r.status_code == 200, r.text
    assert int(r.headers["x-routefit-prompt-tokens"]) == r.json()[field]
    return int(r.json()[field])


@pytest.mark.parametrize("wire", list(WIRES))
async def test_a_count_answers_the_anchored_estimate_the_fit_acts_on(wire: str) -> None:
    async with gateway() as (client, provider, _):
        acted_on = await _anchored(client, wire)
        served = len(provider.paths)
        assert await _count(client, wire) == acted_on
        assert len(provider.paths) == served  # answered without the provider


@pytest.mark.parametrize("wire", list(WIRES))
async def test_a_count_is_never_anchored_on_another_teams_requests(wire: str) -> None:
    async with gateway() as (client, _, _):
        before = await _count(client, wire, OTHER)
        acted_on = await _anchored(client, wire)
        assert acted_on != before  # the provider's count moved the first team's estimate
        assert await _count(client, wire, OTHER) == before


async def test_embeddings_over_the_teams_max_prompt_tokens_are_refused_unsent() -> None:
    async with gateway(max_prompt_tokens=LIMIT) as (client, provider, team):
        small = {"model": "embed", "input": ["a short text", [1, 2, 3]]}
        r = await client.post("/v1/embeddings", json=small, headers=_headers(KEY))
        assert r.status_code == 200, r.text
        assert int(r.headers["x-routefit-prompt-tokens"]) <= LIMIT
        sent = len(provider.paths)
        used = await _used(client, team)
        for value in (["word " * LIMIT], [list(range(LIMIT + 1))], ["word " * 40] * 2):
            big = {"model": "embed", "input": value}
            r = await client.post("/v1/embeddings", json=big, headers=_headers(KEY))
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["code"] == "context_length_exceeded" and error["param"] == "input"
            assert f"{LIMIT:,} tokens" in error["message"]
        assert len(provider.paths) == sent  # nothing over the limit was forwarded
        assert await _used(client, team) == used


async def _used(client: httpx.AsyncClient, team: str) -> int:
    r = await client.get(
        f"/routefit/teams/{team}/usage", headers={"authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 200, r.text
    return int(r.json()["windows"][0]["used"])
