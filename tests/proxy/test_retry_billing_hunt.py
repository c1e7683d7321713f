"""What a team is charged when the router tries a request again — in process, on a routed alias.

routefit's app before ``proxy.transports.mock.MockTransport``: an alias of two deployments whose
first attempt fails in one way or another and whose second the provider simulator answers. The
charging table (docs/security.md, "Charging on every exit"; docs/reliability.md's fault table)
holds for every attempt, not only the last: a failed attempt the provider had — it timed out,
answered something routefit could not use, or ended its stream before any event — is charged
its prompt (the provider bills it) besides the answer's usage; one it refused or never got is
released. Before, every failed attempt that was retried was released, so a timed-out or
malformed first attempt cost the team nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
from inprocess import asgi_client

from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimState
from proxy.transports.mock import asgi_handler

pytestmark = pytest.mark.anyio

ADMIN = "sk-admin-" + "r" * 32
KEY = "sk-team-" + "q" * 32
#: A prompt big enough that "charged its prompt" is plainly more than an answer's rounding.
PROMPT = " ".join(f"word{i} of a long prompt" for i in range(200))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _deployment(host: str) -> dict[str, Any]:
    return {
        "model_name": "pair",
        "litellm_params": {
            "model": "openai/gpt-4o",
            "api_base": f"http://{host}/v1",
            "api_key": f"sk-{host}-0123456789",
        },
        "model_info": {"id": host, "max_input_tokens": 128_000, "max_output_tokens": 16_384},
    }


class FirstFails:
    """The simulator, but each request's first provider call fails as ``fault`` says."""

    def __init__(self) -> None:
        self.sim = asgi_handler(create_sim(SimState()))
        self.fault = ""
        self.calls = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls > 1:
            return await self.sim(request)
        if self.fault == "timeout":
            raise httpx.ReadTimeout("the provider is slow")
        if self.fault == "reset":
            raise httpx.ConnectError("connection refused")
        if self.fault == "malformed":
            return httpx.Response(200, content=b"{not json", headers={"content-type": "json"})
        if self.fault == "empty-stream":
            return httpx.Response(200, content=b"", headers={"content-type": "text/event-stream"})
        status = int(self.fault)
        return httpx.Response(status, json={"error": {"message": "no", "type": "server_error"}})


@asynccontextmanager
async def routed() -> AsyncIterator[tuple[httpx.AsyncClient, FirstFails, str]]:
    team = "retried-" + uuid.uuid4().hex[:8]
    config = parse_config(
        {
            "model_list": [_deployment("one"), _deployment("two")],
            "router_settings": {"routing_strategy": "simple-shuffle", "num_retries": 2},
            "routefit_settings": {
                "store_path": ":memory:",
                "admin_key": ADMIN,
                "teams": [{"id": team, "keys": [KEY], "quotas": {"tokens_per_day": 10**9}}],
            },
        },
        "r.yaml",
        environ={},
    )
    provider = FirstFails()
    async with asgi_client(config, provider) as client:
        yield client, provider, team


async def _used(client: httpx.AsyncClient, team: str) -> int:
    r = await client.get(
        f"/routefit/teams/{team}/usage", headers={"authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 200, r.text
    return int({w["name"]: w for w in r.json()["windows"]}["tokens_per_day"]["used"])


async def _charged(client: httpx.AsyncClient, team: str, before: int, expected: int) -> int:
    """The team's charge since ``before`` once it reads ``expected`` (the answer's settlement
    runs after the response went out), or what it is after a while."""
    for _ in range(200):
        if (now := await _used(client, team)) - before == expected:
            return expected
        await client.get("/healthz")
    return now - before


def _usage(reply: httpx.Response, stream: bool) -> int:
    if not stream:
        usage = reply.json()["usage"]
    else:
        chunks = [
            orjson.loads(line[5:])
            for line in reply.text.splitlines()
            if line.startswith("data:") and line[5:].strip() != "[DONE]"
        ]
        usage = next(c["usage"] for c in reversed(chunks) if c.get("usage"))
    return int(usage["prompt_tokens"]) + int(usage["completion_tokens"])


@pytest.mark.parametrize(
    ("fault", "stream", "billed"),
    [
        ("timeout", False, True),
        ("malformed", False, True),
        ("empty-stream", True, True),
        ("500", False, False),
        ("429", True, False),
        ("reset", False, False),
    ],
)
async def test_a_retried_attempt_the_provider_had_is_charged_its_prompt(
    fault: str, stream: bool, billed: bool
) -> None:
    async with routed() as (client, provider, team):
        provider.fault = fault
        body: dict[str, Any] = {
            "model": "pair",
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 50,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        before = await _used(client, team)
        reply = await client.post(
            "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}
        )
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-routefit-attempts"] == "2"
        prompt = int(reply.headers["x-routefit-prompt-tokens"])
        expected = _usage(reply, stream) + (prompt if billed else 0)
        assert await _charged(client, team, before, expected) == expected
