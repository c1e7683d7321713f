"""``proxy.budgets`` in process, on a real Redis: reserve, settle, release, refusals and the store
away (the end-to-end tests in test_budgets_e2e.py drive the same code through ``routefit
serve``; these reach it where mutation testing, which traces in process, can see it)."""

from __future__ import annotations

import logging
import uuid

import pytest
from harness import free_port, gateway_config, private_redis, sim_route

from proxy.budgets import Budgets, _duration, rate_limit_headers
from proxy.config import load_config
from proxy.config.routes import RouteConfig
from proxy.errors import ProxyError
from proxy.metrics import Metrics
from proxy.store.base import WindowState
from proxy.store.redis import RedisStore
from proxy.teams import Quotas, Team
from proxy.usage import Usage

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def route(tmp_path_factory: pytest.TempPathFactory) -> RouteConfig:
    # $2 and $8 a million tokens, in and out
    info = {"max_input_tokens": 8192, "input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6}
    priced = sim_route("gpt-4o", "http://127.0.0.1:9", model_info=info)
    path = gateway_config(tmp_path_factory.mktemp("budgets") / "c.yaml", [priced])
    return load_config(path).routes["gpt-4o"]


@pytest.fixture(scope="module")
def unpriced(tmp_path_factory: pytest.TempPathFactory) -> RouteConfig:
    info = {"max_input_tokens": 8192}
    plain = sim_route(
        "plain", "http://127.0.0.1:9", "no-such-model-in-any-price-map", model_info=info
    )
    path = gateway_config(tmp_path_factory.mktemp("unpriced") / "c.yaml", [plain])
    return load_config(path).routes["plain"]


def team(**quotas: float) -> Team:
    return Team("t-" + uuid.uuid4().hex[:8], (), None, Quotas(**quotas))  # type: ignore[arg-type]


def failures(metrics: Metrics, mode: str) -> float:
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == "routefit_budget_store_failures_total" and mode in s.labels.values():
                return s.value
    return 0.0


async def test_reserve_then_settle_to_the_usage_and_settle_once(redis_url, route) -> None:
    store = RedisStore(redis_url)
    budgets = Budgets(store, Metrics())
    t = team(tokens_per_day=1000, usd_per_month=1.0)
    try:
        held = await budgets.reserve(t, route, 300, 100)
        assert held is not None
        assert [(w.name, w.used) for w in held.windows] == [
            ("tokens_per_day", 400),
            ("usd_per_month", 1400),
        ]
        # the worst case is held: 400 tokens, and 300 x $2 + 100 x $8 = $0.0014 (micro-USD)
        assert {w.name: w.used for w in await budgets.usage(t)} == {
            "tokens_per_day": 400,
            "usd_per_month": 1400,
        }
        await budgets.settle(held, Usage(250, 50), released=False)
        await budgets.settle(held, Usage(999, 999), released=False)  # once only
        assert {w.name: w.used for w in await budgets.usage(t)} == {
            "tokens_per_day": 300,
            "usd_per_month": 900,
        }
        released = await budgets.reserve(t, route, 500, 100)
        await budgets.settle(released, Usage(500, 100), released=True)  # nothing was served
        assert (await budgets.usage(t))[0].used == 300
        await budgets.settle(None, Usage(1, 1), released=False)  # nothing held: nothing to do
    finally:
        await store.close()


async def test_over_quota_is_a_429_naming_the_window_with_its_headers(redis_url, route) -> None:
    store = RedisStore(redis_url)
    budgets = Budgets(store, Metrics())
    t = team(tokens_per_minute=1000, tokens_per_day=1050)  # the day's room: exactly enough
    try:
        assert await budgets.reserve(t, route, 600, 100) is not None
        with pytest.raises(ProxyError) as refused:
            await budgets.reserve(t, route, 250, 100)
        err = refused.value
        assert err.status == 429 and err.code == "rate_limit_exceeded"
        assert "(tokens_per_minute)" in err.message and "tokens_per_day" not in err.message
        assert "needs about 350 tokens" in err.message
        assert 1 <= int(err.headers["retry-after"]) <= 60
        assert err.headers["x-ratelimit-limit-tokens"] == "1000"
        assert err.headers["x-ratelimit-remaining-tokens"] == "300"
        assert await budgets.reserve(t, route, 200, 100) is not None  # what fits still goes
    finally:
        await store.close()


async def test_nothing_to_enforce_without_a_team_or_quotas(redis_url, route) -> None:
    store = RedisStore(redis_url)
    budgets = Budgets(store, Metrics())
    try:
        assert await budgets.reserve(None, route, 10**9, 1) is None
        assert await budgets.reserve(team(), route, 10**9, 1) is None
    finally:
        await store.close()


@pytest.mark.parametrize("mode", ["open", "closed"])
async def test_a_store_away_admits_unbudgeted_or_refuses_per_the_mode(route, mode) -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout=0.2)
    metrics = Metrics()
    budgets = Budgets(store, metrics, failure_mode=mode)
    t = team(tokens_per_day=1000)
    try:
        for _ in range(2):
            if mode == "open":
                assert await budgets.reserve(t, route, 10, 10) is None
            else:
                with pytest.raises(ProxyError) as refused:
                    await budgets.reserve(t, route, 10, 10)
                assert refused.value.status == 503
                assert refused.value.code == "store_unavailable"
                assert refused.value.headers == {"retry-after": "1"}
                assert "fails closed" in refused.value.message
        assert failures(metrics, mode) == 2
        with pytest.raises(ProxyError) as usage:
            await budgets.usage(t)
        assert usage.value.status == 503 and usage.value.code == "store_unavailable"
        assert usage.value.message == "the budget store is unavailable"
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "250ms"), (0.999, "999ms"), (0.0, "0ms"), (-1.0, "0ms"), (1.0, "1s"), (6.2, "7s"),
     (60, "1m"), (90, "1m30s"), (3600, "1h"), (3661, "1h1m1s"), (86_399.5, "24h")],
)  # fmt: skip
def test_reset_durations_read_as_openai_writes_them(seconds: float, text: str) -> None:
    assert _duration(seconds) == text


def test_the_rate_limit_headers_come_from_the_first_token_window() -> None:
    windows = [
        WindowState("usd_per_month", 5, 9, 100.0),
        WindowState("tokens_per_minute", 1000, 1200, 0.5),
        WindowState("tokens_per_day", 5000, 10, 9.0),
    ]
    assert rate_limit_headers(windows) == {
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "0",  # never negative
        "x-ratelimit-reset-tokens": "500ms",
    }
    assert rate_limit_headers(windows[:1]) == {}
    assert rate_limit_headers(windows[2:])["x-ratelimit-limit-tokens"] == "5000"


async def test_a_route_without_prices_costs_nothing(redis_url, unpriced) -> None:
    store = RedisStore(redis_url)
    budgets = Budgets(store, Metrics())
    t = team(usd_per_month=1.0)
    try:
        held = await budgets.reserve(t, unpriced, 300, 100)
        assert held is not None and held.windows[0].used == 0
    finally:
        await store.close()


async def test_an_outage_is_logged_once_and_its_end_too_and_a_lost_settle_counted(
    route, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="routefit.budgets")
    metrics = Metrics()
    t = team(tokens_per_day=1000)
    with private_redis() as redis_server:
        store = RedisStore(redis_server.url, timeout=0.2)
        budgets = Budgets(store, metrics)
        try:
            held = await budgets.reserve(t, route, 10, 10)
            redis_server.kill()
            await budgets.settle(held, Usage(5, 5), released=False)
            assert failures(metrics, "settle") == 1  # charged until its window ends
            for _ in range(3):
                assert await budgets.reserve(t, route, 10, 10) is None
            redis_server.start()
            assert await budgets.reserve(t, route, 10, 10) is not None
            assert await budgets.reserve(t, route, 10, 10) is not None
        finally:
            await store.close()
    assert [r.getMessage() for r in caplog.records] == [
        "budget store unavailable: admitting unbudgeted requests (budget_failure_mode=open)",
        "budget store is back; budgets enforced again",
    ]
