"""routefit in process before the provider simulator, one team with a day's quota to read its
charges from: the frame of the tests that check what a team is charged and what the provider
was sent (tests/proxy/test_billing_hunt.py, tests/wires/test_builtin_tools_hunt.py, and the
tenancy hunts' provider).

``Provider`` is the simulator's ASGI app through ``proxy.transports.mock`` (no socket), unless a
test sets ``script`` to answer in its place; it keeps every request body it was sent.
``billed(models, **settings)`` serves ``models`` (``deployment`` entries to ``sim.local``)
for a team of its own (its counters in a shared Redis are its alone) and yields a ``Billed``:
its client, its provider, ``used()`` (the team's tokens of the day) and ``post``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
from inprocess import asgi_client

from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimState
from proxy.transports.mock import asgi_handler

__all__ = ["ADMIN", "KEY", "Billed", "Provider", "Script", "billed", "deployment"]

ADMIN = "sk-admin-" + "h" * 32
KEY = "sk-team-" + "k" * 32
#: A key in every place a wire reads one (OpenAI's and Anthropic's), and Anthropic's version.
HEADERS = {"authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"}

#: What the provider answers instead of the simulator: ``(request, simulator) -> response``.
Script = Callable[[httpx.Request, Callable[[httpx.Request], Awaitable[httpx.Response]]], Any]


def deployment(
    alias: str, model: str, base: str, window: int = 128_000, output: int = 16_384
) -> dict[str, Any]:
    """A route to the simulator at ``base`` (its fake key), with its window and output limit."""
    return {
        "model_name": alias,
        "litellm_params": {"model": model, "api_base": base, "api_key": "sk-sim-0123456789abcdef"},
        "model_info": {"max_input_tokens": window, "max_output_tokens": output},
    }


#: A route on each of the simulator's provider wires.
MODELS = [
    deployment("gpt", "openai/gpt-4o", "http://sim.local/v1"),
    deployment("claude", "anthropic/claude-sonnet-4-5", "http://sim.local"),
    deployment("gem", "gemini/gemini-sim", "http://sim.local/v1beta"),
]


class Provider:
    """The simulator, unless ``script`` answers (every request while it is set); keeps every
    request body it was sent."""

    def __init__(self) -> None:
        self.sim = asgi_handler(create_sim(SimState()))
        self.script: Script | None = None
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(json.loads(request.content) if request.content else {})
        if self.script is not None:
            answer: httpx.Response = await self.script(request, self.sim)
            return answer
        return await self.sim(request)


class Billed:
    """routefit before a ``Provider``, one team with a day's quota to read charges from."""

    def __init__(self, client: httpx.AsyncClient, provider: Provider, team: str) -> None:
        self.client = client
        self.provider = provider
        self.team = team

    async def used(self) -> int:
        r = await self.client.get(
            f"/routefit/teams/{self.team}/usage", headers={"authorization": f"Bearer {ADMIN}"}
        )
        assert r.status_code == 200, r.text
        return int({w["name"]: w for w in r.json()["windows"]}["tokens_per_day"]["used"])

    async def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return await self.client.post(path, json=body, headers=HEADERS)


@asynccontextmanager
async def billed(
    models: Sequence[dict[str, Any]] = MODELS, **settings: Any
) -> AsyncIterator[Billed]:
    team = "billed-" + uuid.uuid4().hex[:8]  # its own counters in a shared Redis
    config = parse_config(
        {
            "model_list": list(models),
            "routefit_settings": {
                "store_path": ":memory:",
                "admin_key": ADMIN,
                "teams": [{"id": team, "keys": [KEY], "quotas": {"tokens_per_day": 10**12}}],
                **settings,
            },
        },
        environ={},
    )
    provider = Provider()
    async with asgi_client(config, provider) as client:
        yield Billed(client, provider, team)
