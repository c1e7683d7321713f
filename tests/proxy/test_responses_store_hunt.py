"""Stored responses, hunted: what one team can make routefit keep, and what it reads back.

In process (routefit's app before ``MockTransport``; the provider is the simulator's ASGI app),
on the embedded store and on Redis where the store is the point:

* ``previous_response_id`` is shorthand for sending the conversation again, never a way around
  the body limit: a continuation whose record and body together pass ``max_body_bytes`` is the
  body limit's 413, so no record grows past one body and one answer (each record repeats its
  chain, so without the bound a team's storage and every continuation's read grew without end);
* a continuation is priced and routed at its whole size: usage-based routing does not send a
  conversation of ten thousand tokens to a deployment with room for two thousand because the
  body that named it was small;
* ``input_items``' ``limit`` is OpenAI's 400 for any value it refuses, digits ``int`` cannot
  read included (they were a 500);
* no configured team may take the open gateway's store namespace (``-``), where keyless
  clients' stored responses and request log live.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from billed import Provider
from inprocess import asgi_client

from proxy.config import ConfigError, parse_config

pytestmark = pytest.mark.anyio

KEY_A = "sk-team-a-" + "b" * 32
KEY_B = "sk-team-b-" + "c" * 32
#: The body limit of the chain tests: small, so that a few turns reach it.
LIMIT = 64 * 1024


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def deployment(alias: str, host: str, **params: Any) -> dict[str, Any]:
    return {
        "model_name": alias,
        "litellm_params": {
            "model": "openai/gpt-4o",
            "api_base": f"http://{host}/v1",
            "api_key": "sk-sim-0123456789abcdef",
            **params,
        },
        "model_info": {"id": host, "max_input_tokens": 128_000, "max_output_tokens": 16_384},
    }


class Seen(Provider):
    """The simulator, noting each Responses request's host and body size as it arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.hosts: list[str] = []
        self.sizes: list[int] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/responses"):
            self.hosts.append(request.url.host)
            self.sizes.append(len(request.content))
        return await super().__call__(request)


@asynccontextmanager
async def served(
    models: list[dict[str, Any]],
    store: dict[str, Any],
    strategy: str = "simple-shuffle",
    **settings: Any,
) -> AsyncIterator[tuple[httpx.AsyncClient, Seen]]:
    """routefit over ``models`` and ``store`` before the simulator; teams A and B on every
    route."""
    config = parse_config(
        {
            "model_list": models,
            "router_settings": {"routing_strategy": strategy},
            "routefit_settings": {
                **store,
                **settings,
                "teams": [{"id": "team-a", "keys": [KEY_A]}, {"id": "team-b", "keys": [KEY_B]}],
            },
        },
        environ={},
    )
    provider = Seen()
    async with asgi_client(config, provider) as client:
        yield client, provider


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The store's settings: the embedded one, or a Redis database of the test's own."""
    if request.param == "redis":
        return {"redis_url": request.getfixturevalue("redis_url")}
    return {"store_path": ":memory:"}


def turn(i: int, previous: str | None, words: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt",
        "input": f"turn{i} " * words,
        "max_output_tokens": 20,
    }
    if previous is not None:
        body["previous_response_id"] = previous
    return body


async def test_a_chain_is_held_to_the_body_limit(store: dict[str, Any]) -> None:
    async with served([deployment("gpt", "oa")], store, max_body_bytes=LIMIT) as (client, seen):
        previous: str | None = None
        refused = None
        for i in range(12):  # ~10 KiB a turn: the chain passes the limit within seven
            r = await client.post(
                "/v1/responses", json=turn(i, previous, 1500), headers=auth(KEY_A)
            )
            if r.status_code != 200:
                refused = r
                break
            previous = r.json()["id"]
        assert refused is not None, "a chain grew past the body limit"
        assert refused.status_code == 413, refused.text
        error = refused.json()["error"]
        assert (error["param"], error["code"]) == ("previous_response_id", "request_too_large")
        assert len(seen.sizes) >= 2 and max(seen.sizes) <= LIMIT
        # the conversation is still the team's: readable, and continued by a body that fits
        # (a 413 is the limit, not a lost record)
        assert (await client.get(f"/v1/responses/{previous}", headers=auth(KEY_A))).status_code
        fresh = await client.post("/v1/responses", json=turn(0, None, 10), headers=auth(KEY_A))
        assert fresh.status_code == 200, fresh.text
        again = turn(1, fresh.json()["id"], 10)
        assert (await client.post("/v1/responses", json=again, headers=auth(KEY_A))).is_success


async def test_another_teams_oversized_chain_is_as_absent_as_any() -> None:
    """The bound is checked after the team's own lookup: B learns nothing of A's chain's size."""
    store = {"store_path": ":memory:"}
    async with served([deployment("gpt", "oa")], store, max_body_bytes=LIMIT) as (client, _):
        made = await client.post("/v1/responses", json=turn(0, None, 6000), headers=auth(KEY_A))
        assert made.status_code == 200, made.text
        rid = made.json()["id"]
        nobody = "resp_" + "0" * 48
        big = turn(1, rid, 6000)
        theirs = await client.post("/v1/responses", json=big, headers=auth(KEY_B))
        absent = await client.post(
            "/v1/responses", json={**big, "previous_response_id": nobody}, headers=auth(KEY_B)
        )
        assert theirs.status_code == absent.status_code == 404
        assert theirs.text.replace(rid, "ID") == absent.text.replace(nobody, "ID")
        mine = await client.post("/v1/responses", json=big, headers=auth(KEY_A))
        assert mine.status_code == 413, mine.text


async def test_a_continuation_is_routed_at_its_whole_size() -> None:
    """Usage-based routing ranks a deployment without room for the request last: the room a
    continuation needs is its conversation's, not its body's."""
    models = [
        deployment("maker", "maker"),
        deployment("gpt", "small", tpm=2_000),
        deployment("gpt", "big"),
    ]
    store = {"store_path": ":memory:"}
    async with served(models, store, "usage-based-routing-v2") as (client, seen):
        long = {"model": "maker", "input": "word " * 8_000, "max_output_tokens": 20}
        made = await client.post("/v1/responses", json=long, headers=auth(KEY_A))
        assert made.status_code == 200, made.text
        rid = made.json()["id"]
        for _ in range(6):
            go_on = {
                "model": "gpt",
                "input": "Go on.",
                "previous_response_id": rid,
                "max_output_tokens": 20,
                "store": False,
            }
            r = await client.post("/v1/responses", json=go_on, headers=auth(KEY_A))
            assert r.status_code == 200, r.text
        assert seen.hosts[0] == "maker"
        assert seen.hosts[1:] == ["big"] * 6


async def test_a_stored_conversation_counts_against_the_teams_bytes_in_flight() -> None:
    """A continuation holds its conversation in memory as a body would: with one such request
    in flight, a second is the share's 429, however small its own body (it was served: a team
    sending tiny bodies held any number of stored conversations at once)."""
    arrived, release = asyncio.Event(), asyncio.Event()
    calls = 0

    async def hold_first(request: httpx.Request, sim: Any) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            arrived.set()
            await release.wait()
        answer: httpx.Response = await sim(request)
        return answer

    store = {"store_path": ":memory:"}
    settings = {"max_body_bytes": LIMIT, "body_bytes_in_flight_per_team": LIMIT}
    async with served([deployment("gpt", "oa")], store, **settings) as (client, seen):
        made = await client.post("/v1/responses", json=turn(0, None, 6000), headers=auth(KEY_A))
        assert made.status_code == 200, made.text
        go_on = turn(1, made.json()["id"], 3)
        seen.script = hold_first
        first = asyncio.ensure_future(client.post("/v1/responses", json=go_on, headers=auth(KEY_A)))
        try:
            await arrived.wait()
            second = await client.post("/v1/responses", json=go_on, headers=auth(KEY_A))
            assert second.status_code == 429, second.text
            assert second.json()["error"]["code"] == "request_bytes_in_flight"
            other = await client.post("/v1/responses", json=turn(0, None, 3), headers=auth(KEY_B))
            assert other.status_code == 200, other.text  # another team's share is its own
        finally:
            release.set()
            assert (await first).status_code == 200


@pytest.mark.parametrize("limit", ["\u00b2", "9" * 5000, "-1", "1e2", ""])
async def test_input_items_refuses_every_limit_openai_refuses(limit: str) -> None:
    async with served([deployment("gpt", "oa")], {"store_path": ":memory:"}) as (client, _):
        made = await client.post("/v1/responses", json=turn(0, None, 3), headers=auth(KEY_A))
        rid = made.json()["id"]
        r = await client.get(
            f"/v1/responses/{rid}/input_items", params={"limit": limit}, headers=auth(KEY_A)
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "limit"
        ok = await client.get(
            f"/v1/responses/{rid}/input_items", params={"limit": "100"}, headers=auth(KEY_A)
        )
        assert ok.status_code == 200 and len(ok.json()["data"]) == 1


def test_no_team_may_take_the_open_gateways_namespace() -> None:
    """Keyless clients of a gateway that ran open left their stored responses and request log
    under ``-``: a team of that id, configured later over the same store, would read them."""
    with pytest.raises(ConfigError, match="reserved"):
        parse_config(
            {
                "model_list": [deployment("gpt", "oa")],
                "routefit_settings": {"teams": [{"id": "-", "keys": [KEY_A]}]},
            },
            environ={},
        )
