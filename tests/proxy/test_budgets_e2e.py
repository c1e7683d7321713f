"""Team budgets end to end: keys, routes, atomic quotas across two replicas on one Redis,
USD quotas, streaming settlement and release on disconnect."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import openai
import pytest
from harness import gateway_config, run_routefit, sim_route
from inprocess import run_inprocess

ADMIN = "sk-admin-" + uuid.uuid4().hex
ALPHA = "sk-alpha-" + uuid.uuid4().hex
BETA = "sk-beta-" + uuid.uuid4().hex


def teams(alpha: str, beta: str, **alpha_quotas: float) -> list[dict]:
    return [
        {"id": alpha, "keys": [ALPHA], "routes": ["gpt-4o", "small"], "quotas": alpha_quotas},
        {"id": beta, "keys": [BETA], "routes": ["gpt-4o"]},
    ]


def routes(sim) -> list[dict]:
    return [
        sim_route("gpt-4o", sim.base_url),
        sim_route(
            "small",
            sim.base_url,
            "gpt-4o-small",
            model_info={"max_input_tokens": 8192, "max_output_tokens": 1024},
        ),
    ]


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    config = gateway_config(
        tmp_path_factory.mktemp("budgets") / "c.yaml",
        routes(sim),
        admin_key=ADMIN,
        # minute for the rate-limit headers; the tests read the day window, which does not roll
        # over between two reads of a test
        teams=teams("alpha", "beta", tokens_per_minute=10_000_000, tokens_per_day=10**10),
    )
    with run_inprocess(config) as running:
        yield running


def settled_usage(gw, team: str, window: str, expected: int, timeout: float = 5.0) -> int:
    """The window's usage once it reaches ``expected`` (settlement runs after the response is
    sent), or whatever it is when the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        used = usage(gw, team)[window]["used"]
        if used == expected or time.monotonic() > deadline:
            return used
        time.sleep(0.02)


def usage(gw, team: str, key: str = ADMIN) -> dict:
    r = httpx.get(
        f"{gw.base_url}/routefit/teams/{team}/usage", headers={"authorization": f"Bearer {key}"}
    )
    assert r.status_code == 200, r.text
    return {w["name"]: w for w in r.json()["windows"]}


def test_missing_and_wrong_keys_are_401_and_never_echoed(gw):
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(gw.v1 + "/chat/completions", json=body)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    wrong = "sk-wrong-" + uuid.uuid4().hex
    r = httpx.post(
        gw.v1 + "/chat/completions", json=body, headers={"authorization": f"Bearer {wrong}"}
    )
    assert r.status_code == 401
    assert wrong not in r.text
    client = openai.OpenAI(base_url=gw.v1, api_key=wrong, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(**body)
    assert wrong not in gw.log() and ALPHA not in gw.log()
    # the Responses API's stored responses too: every route, before any lookup
    rid = "resp_" + uuid.uuid4().hex
    for method, path in [
        ("POST", "/responses"),
        ("GET", f"/responses/{rid}"),
        ("GET", f"/responses/{rid}/input_items"),
        ("DELETE", f"/responses/{rid}"),
    ]:
        for headers in ({}, {"authorization": f"Bearer {wrong}"}):
            payload = {"model": "gpt-4o", "input": "hi"} if method == "POST" else None
            r = httpx.request(method, gw.v1 + path, json=payload, headers=headers)
            assert r.status_code == 401, (method, path, r.text)
            assert r.json()["error"]["code"] == "invalid_api_key"


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_a_stored_response_is_its_teams_alone(gw):
    alpha = openai.OpenAI(base_url=gw.v1, api_key=ALPHA, max_retries=0)
    beta = openai.OpenAI(base_url=gw.v1, api_key=BETA, max_retries=0)
    first = alpha.responses.create(model="gpt-4o", input="remember the owl")
    assert alpha.responses.retrieve(first.id).id == first.id
    items = httpx.get(f"{gw.v1}/responses/{first.id}/input_items", headers=_auth(ALPHA))
    assert items.status_code == 200 and "remember the owl" in items.text
    follow = alpha.responses.create(model="gpt-4o", previous_response_id=first.id, input="more")
    assert follow.output_text
    # another team's key finds nothing: not the response, its input, its chain, nor to delete
    with pytest.raises(openai.NotFoundError):
        beta.responses.retrieve(first.id)
    theirs = httpx.get(f"{gw.v1}/responses/{first.id}/input_items", headers=_auth(BETA))
    assert theirs.status_code == 404
    with pytest.raises(openai.NotFoundError):
        beta.responses.create(model="gpt-4o", previous_response_id=first.id, input="steal")
    with pytest.raises(openai.NotFoundError):
        beta.responses.delete(first.id)
    alpha.responses.delete(first.id)  # still there for its owner, who may delete it
    with pytest.raises(openai.NotFoundError):
        alpha.responses.retrieve(first.id)


def test_a_team_reaches_only_its_routes_and_its_usage(gw):
    beta = openai.OpenAI(base_url=gw.v1, api_key=BETA, max_retries=0)
    assert beta.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    ).choices
    with pytest.raises(openai.NotFoundError):  # another team's route: as if not there
        beta.chat.completions.create(model="small", messages=[{"role": "user", "content": "x"}])
    assert {m.id for m in beta.models.list()} == {"gpt-4o"}
    r = httpx.get(
        f"{gw.base_url}/routefit/teams/alpha/usage", headers={"authorization": f"Bearer {BETA}"}
    )
    assert r.status_code == 403
    r = httpx.get(
        f"{gw.base_url}/routefit/calibration", headers={"authorization": f"Bearer {BETA}"}
    )
    assert r.status_code == 403
    assert httpx.get(f"{gw.base_url}/routefit/calibration").status_code == 401
    usage(gw, "alpha", ALPHA)  # a team may read its own usage


def test_usage_is_settled_to_the_providers_count_with_rate_limit_headers(gw):
    before = usage(gw, "alpha")["tokens_per_day"]["used"]
    client = openai.OpenAI(base_url=gw.v1, api_key=ALPHA, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "count me"}], max_tokens=40
    )
    reply = raw.parse()
    assert int(raw.headers["x-ratelimit-limit-tokens"]) == 10_000_000
    assert int(raw.headers["x-ratelimit-remaining-tokens"]) < 10_000_000
    assert raw.headers["x-ratelimit-reset-tokens"]
    spent = reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert settled_usage(gw, "alpha", "tokens_per_day", before + spent) == before + spent


def test_streams_settle_when_they_end_and_when_cancelled(gw, fresh_sim):
    client = openai.OpenAI(base_url=gw.v1, api_key=ALPHA, max_retries=0)
    before = usage(gw, "alpha")["tokens_per_day"]["used"]
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "stream me"}],
            max_tokens=40,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    spent = chunks[-1].usage.prompt_tokens + chunks[-1].usage.completion_tokens
    assert settled_usage(gw, "alpha", "tokens_per_day", before + spent) == before + spent

    fresh_sim.state.config.chunk_delay = 0.3
    before = usage(gw, "alpha")["tokens_per_day"]["used"]
    body = {
        "model": "gpt-4o",
        "stream": True,
        "max_tokens": 500,
        "messages": [{"role": "user", "content": "a long streamed answer"}],
    }
    with httpx.stream(
        "POST",
        gw.v1 + "/chat/completions",
        json=body,
        timeout=10,
        headers={"authorization": f"Bearer {ALPHA}"},
    ) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # keep the iterator alive: dropping it closes the stream
        next(lines)
        held = usage(gw, "alpha")["tokens_per_day"]["used"]
        assert held - before >= 500  # the reservation covers the output reserve
        prompt = int(r.headers["x-routefit-prompt-tokens"])
    # the output reserve goes back; the prompt the provider read stays charged
    # (tests/proxy/test_charging_e2e.py holds this on every wire)
    deadline = time.monotonic() + 5
    while usage(gw, "alpha")["tokens_per_day"]["used"] == held:
        assert time.monotonic() < deadline, "the cancelled stream's reservation was not settled"
        time.sleep(0.05)
    charged = usage(gw, "alpha")["tokens_per_day"]["used"] - before
    assert prompt <= charged < 500


def test_upstream_failure_releases_the_reservation(gw, fresh_sim):
    client = openai.OpenAI(base_url=gw.v1, api_key=ALPHA, max_retries=0)
    before = usage(gw, "alpha")["tokens_per_day"]["used"]
    fresh_sim.inject("status:500")
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "fail"}]
        )
    assert usage(gw, "alpha")["tokens_per_day"]["used"] == before


def test_usd_quota(sim, tmp_path):
    team = "usd-" + uuid.uuid4().hex[:8]
    config = gateway_config(
        tmp_path / "c.yaml",
        routes(sim),
        admin_key=ADMIN,
        teams=teams(team, "beta", usd_per_month=0.002),
    )
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key=ALPHA, max_retries=0)
        admitted = 0
        with pytest.raises(openai.RateLimitError) as err:
            for _ in range(50):
                client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "spend"}], max_tokens=60
                )
                admitted += 1
        window = usage(gw, team)["usd_per_month"]
    assert admitted >= 2
    assert window["used"] <= window["limit"] == 2000  # micro-USD
    assert err.value.response.headers.get("retry-after")
    assert err.value.code == "rate_limit_exceeded"


async def _burst(urls: list[str], n: int) -> list[tuple[int, dict | None]]:
    body = {
        "model": "gpt-4o",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "concurrent request"}],
    }
    limits = httpx.Limits(max_connections=100)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:

        async def one(i: int) -> tuple[int, dict | None]:
            r = await client.post(
                urls[i % len(urls)] + "/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {ALPHA}"},
            )
            return r.status_code, r.json().get("usage") if r.status_code == 200 else None

        return await asyncio.gather(*(one(i) for i in range(n)))


def test_a_tight_quota_holds_under_concurrency_across_two_replicas(sim, tmp_path, redis_url):
    team = "burst-" + uuid.uuid4().hex[:8]
    # One request reserves its prompt estimate (~10) + 50 output tokens: room for ~40 at once.
    quota = 2500
    config = gateway_config(
        tmp_path / "c.yaml",
        routes(sim),
        admin_key=ADMIN,
        redis_url=redis_url,
        teams=teams(team, "beta", tokens_per_day=quota),
    )
    # Replicas as separate processes: only Redis may share the quota between them.
    with run_routefit(config) as a, run_routefit(config) as b:
        results = asyncio.run(_burst([a.v1, b.v1], 200))
        expected = sum(u["prompt_tokens"] + u["completion_tokens"] for s, u in results if u)
        settled_usage(a, team, "tokens_per_day", expected)
        window = usage(a, team)["tokens_per_day"]
        assert usage(b, team)["tokens_per_day"]["used"] == window["used"]
    statuses = [s for s, _ in results]
    assert set(statuses) <= {200, 429}
    admitted = [u for s, u in results if s == 200]
    assert 10 <= len(admitted) < 200
    settled = sum(u["prompt_tokens"] + u["completion_tokens"] for u in admitted)
    assert window["used"] == settled  # every admitted request settled to its actual usage
    assert settled <= quota  # reservations were all-or-nothing, so the quota held
