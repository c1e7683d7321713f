"""Tenant isolation, round two: what routefit's answers show one team of another's traffic.

In process (routefit's app before ``MockTransport``; the provider is the simulator's ASGI app,
or an answer a case writes), two teams A and B on the same routes, each reading only what its
own key is answered:

* a provider's 429 speaks of the account routefit's key belongs to ("Limit 30000, Used 29000"):
  every team of the route shares it, so its figures are the other teams' volume and are
  scrubbed (the kind of limit, the request's own figure and the wait stay);
* under a load-aware routing strategy the deployment a request goes to is a function of every
  team's traffic: a team's answers and its own request log do not name it, and the
  ``x-routefit-*`` headers team B reads are the same whatever team A sent meanwhile;
* stored responses: team B cannot read, list, delete or continue team A's response, and is
  answered exactly as for an id nobody has (no oracle).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from billed import Provider, Script
from inprocess import asgi_client

from proxy.config import parse_config

pytestmark = pytest.mark.anyio

ADMIN = "sk-admin-" + "a" * 32
KEY_A = "sk-team-a-" + "b" * 32
KEY_B = "sk-team-b-" + "c" * 32
#: What OpenAI says when the organization's tokens-per-minute limit is reached.
OPENAI_429 = (
    "Rate limit reached for gpt-4o in organization org-Sh4r3dAcc0unt on tokens per min (TPM): "
    "Limit 30000, Used 29000, Requested 1500. Please try again in 1.2s. Visit "
    "https://platform.openai.com/account/rate-limits to learn more."
)

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def deployment(host: str, alias: str) -> dict[str, Any]:
    return {
        "model_name": alias,
        "litellm_params": {
            "model": "openai/gpt-4o",
            "api_base": f"http://{host}/v1",
            "api_key": f"sk-{host}-0123456789",
        },
        "model_info": {"id": host},
    }


@asynccontextmanager
async def served(
    models: list[dict[str, Any]], strategy: str = "simple-shuffle"
) -> AsyncIterator[tuple[httpx.AsyncClient, Provider]]:
    """routefit over ``models`` before a ``Provider``; teams A and B share every route."""
    config = parse_config(
        {
            "model_list": models,
            "router_settings": {"routing_strategy": strategy},
            "routefit_settings": {
                "store_path": ":memory:",
                "admin_key": ADMIN,
                "teams": [
                    {"id": "team-a", "keys": [KEY_A], "quotas": {"tokens_per_day": 10**10}},
                    {"id": "team-b", "keys": [KEY_B], "quotas": {"tokens_per_day": 10**10}},
                ],
            },
        },
        environ={},
    )
    provider = Provider()
    async with asgi_client(config, provider) as client:
        yield client, provider


def chat(text: str = "Say hello.", stream: bool = False) -> dict[str, Any]:
    return {
        "model": "gpt",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 20,
        "stream": stream,
    }


# -- a provider's 429 -----------------------------------------------------------------------


async def _rate_limited(request: httpx.Request, sim: Handler) -> httpx.Response:
    body = {"error": {"message": OPENAI_429, "type": "tokens", "code": "rate_limit_exceeded"}}
    return httpx.Response(429, json=body, headers={"retry-after": "2"})


async def _rate_limited_stream(request: httpx.Request, sim: Handler) -> httpx.Response:
    error = {"error": {"message": OPENAI_429, "type": "tokens", "code": "rate_limit_exceeded"}}
    event = f"data: {json.dumps(error)}\n\n".encode()
    return httpx.Response(200, content=event, headers={"content-type": "text/event-stream"})


@pytest.mark.parametrize("answer", [_rate_limited, _rate_limited_stream], ids=["status", "event"])
async def test_a_providers_429_does_not_tell_a_team_the_shared_accounts_usage(
    answer: Script,
) -> None:
    """The account's limit and usage (other teams' volume) and its organization id are
    scrubbed from the message; what the team needs to act on stays."""
    async with served([deployment("oa", "gpt")]) as (client, provider):
        provider.script = answer
        r = await client.post(
            "/v1/chat/completions",
            json=chat(stream=answer is _rate_limited_stream),
            headers=auth(KEY_B),
        )
    assert r.status_code == 429, r.text
    message = r.json()["error"]["message"]
    for figure in ("29000", "30000", "org-Sh4r3dAcc0unt"):
        assert figure not in r.text, message
    # still useful: which limit, the request's own size, when to come back
    assert "Rate limit reached" in message and "tokens per min (TPM)" in message
    assert "Requested 1500" in message and "try again in 1.2s" in message
    if answer is _rate_limited:
        assert r.headers["retry-after"] == "2"


# -- what routing shows a team --------------------------------------------------------------

PAIR = [deployment("east", "gpt"), deployment("west", "gpt")]


def routefit_headers(r: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in r.headers.items() if k.startswith("x-routefit-")}


@pytest.mark.parametrize("strategy", ["usage-based-routing-v2", "least-busy"])
async def test_load_aware_routing_shows_no_team_where_anothers_traffic_went(strategy: str) -> None:
    """Team B's answers and records name no deployment, and every ``x-routefit-*`` header B
    reads is the same before and after team A's traffic; the admin still reads the deployment."""
    async with served(PAIR, strategy) as (client, _):
        # B repeats its own prompt: its anchor holds on either deployment (they count alike,
        # so are calibrated as one), and reads "anchored" wherever A's traffic sent it
        await client.post("/v1/chat/completions", json=chat("Say hello."), headers=auth(KEY_B))
        before = await client.post(
            "/v1/chat/completions", json=chat("Say hello."), headers=auth(KEY_B)
        )
        assert before.status_code == 200, before.text
        for _ in range(6):  # team A's traffic: usage and latency on whichever it lands
            big = await client.post(
                "/v1/chat/completions", json=chat("lorem ipsum " * 2000), headers=auth(KEY_A)
            )
            assert big.status_code == 200, big.text
        after = await client.post(
            "/v1/chat/completions", json=chat("Say hello."), headers=auth(KEY_B)
        )
        assert after.status_code == 200, after.text
        assert "x-routefit-deployment" not in after.headers
        assert routefit_headers(after) == routefit_headers(before)

        own = await client.get("/routefit/requests", headers=auth(KEY_B))
        assert own.status_code == 200, own.text
        records = own.json()["data"]
        assert records and all(r["deployment"] is None for r in records)
        for record in records:
            for phase in record["phases"]:
                assert len(phase) < 4 or "deployment" not in phase[3], phase

        admin = await client.get("/routefit/requests?team=team-b", headers=auth(ADMIN))
        assert {r["deployment"] for r in admin.json()["data"]} <= {"east", "west"}
        assert all(r["deployment"] for r in admin.json()["data"])


async def test_a_random_pick_is_still_named() -> None:
    """simple-shuffle's pick is no function of other teams' traffic: the header stays."""
    async with served(PAIR) as (client, _):
        r = await client.post("/v1/chat/completions", json=chat(), headers=auth(KEY_B))
        assert r.status_code == 200, r.text
        assert r.headers["x-routefit-deployment"] in {"east", "west"}
        own = await client.get("/routefit/requests", headers=auth(KEY_B))
        assert own.json()["data"][0]["deployment"] == r.headers["x-routefit-deployment"]


# -- stored responses -----------------------------------------------------------------------


def _shape(r: httpx.Response, rid: str) -> tuple[int, str]:
    """What a client can tell of an answer about ``rid``: its status and its body, the id
    written out of it."""
    return r.status_code, r.text.replace(rid, "ID")


async def test_another_teams_stored_response_is_as_absent_as_one_nobody_has() -> None:
    async with served([deployment("oa", "gpt")]) as (client, _):
        made = await client.post(
            "/v1/responses",
            json={"model": "gpt", "input": "My secret is 7781.", "max_output_tokens": 20},
            headers=auth(KEY_A),
        )
        assert made.status_code == 200, made.text
        rid = made.json()["id"]
        nobody = rid[:-4] + ("zzzz" if not rid.endswith("zzzz") else "yyyy")
        assert (await client.get(f"/v1/responses/{rid}", headers=auth(KEY_A))).status_code == 200

        for method, path in [
            ("GET", "/v1/responses/{}"),
            ("GET", "/v1/responses/{}/input_items"),
            ("DELETE", "/v1/responses/{}"),
        ]:
            theirs = await client.request(method, path.format(rid), headers=auth(KEY_B))
            absent = await client.request(method, path.format(nobody), headers=auth(KEY_B))
            assert theirs.status_code == 404, theirs.text
            assert _shape(theirs, rid) == _shape(absent, nobody)
            assert "7781" not in theirs.text

        for key in (KEY_B,):
            theirs = await client.post(
                "/v1/responses",
                json={"model": "gpt", "input": "Go on.", "previous_response_id": rid},
                headers=auth(key),
            )
            absent = await client.post(
                "/v1/responses",
                json={"model": "gpt", "input": "Go on.", "previous_response_id": nobody},
                headers=auth(key),
            )
            assert theirs.status_code == 404, theirs.text
            assert _shape(theirs, rid) == _shape(absent, nobody)
        # and A's response survived B's delete
        assert (await client.get(f"/v1/responses/{rid}", headers=auth(KEY_A))).status_code == 200
