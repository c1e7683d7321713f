"""The routing shell (``proxy.routing``) without HTTP: the deployments' shared health in each
store, the weighted shuffle as ``Routing.start`` draws it, and a store that fails."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy import router
from proxy.config import parse_config
from proxy.errors import ProxyError
from proxy.metrics import Metrics
from proxy.routing import Routing, failure_kind
from proxy.store import Store
from proxy.store.base import FAILURE_WINDOW, StoreUnavailable
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    made: Store
    if request.param == "redis":
        made = RedisStore(request.getfixturevalue("redis_url"))
    else:
        made = SqliteStore(":memory:")
    yield made
    await made.close()


async def test_deployment_health_round_trips_in_every_store(store: Store) -> None:
    a, b, never = (f"d-{uuid.uuid4().hex[:8]}" for _ in range(3))
    now = time.time()
    await store.deployment_began(a, 100, now)
    await store.deployment_began(a, 50, now)
    await store.deployment_began(b, 7, now)
    await store.deployment_ended(a, 0.25)
    await store.deployment_ended(b, None)
    await store.deployment_ended(b, None)  # never below zero
    old = await store.deployment_failed(a, "server", now - FAILURE_WINDOW - 1)
    seen = await store.deployment_failed(a, "rate_limit", now)
    assert old == ((now - FAILURE_WINDOW - 1, "server"),)
    assert seen == ((now, "rate_limit"),)  # the failure older than a minute is gone
    await store.deployment_cool(a, now + 30)
    await store.deployment_cool(a, now + 5)  # a sooner end does not shorten a cooldown
    health = await store.deployment_health([a, b, never], now)
    h = health[a]
    assert (h.in_flight, h.latency, h.requests, h.tokens) == (1, 0.25, 2, 150)
    assert h.minute == int(now // 60) and h.failures == ((now, "rate_limit"),)
    assert h.cooldown_until == pytest.approx(now + 30)
    assert (health[b].in_flight, health[b].requests, health[b].tokens) == (0, 1, 7)
    assert never not in health or health[never].requests == 0
    # the next minute's usage starts from nothing
    later = await store.deployment_health([a], now + 60)
    assert (later[a].requests, later[a].tokens) == (0, 0)


def _config(weights: tuple[float, ...]) -> Any:
    models = [
        {
            "model_name": "chat",
            "litellm_params": {"model": "openai/gpt-4o", "api_key": "k", "weight": w},
            "model_info": {"id": f"d{i}"},
        }
        for i, w in enumerate(weights)
    ]
    return parse_config({"model_list": models}, "r.yaml", environ={})


async def test_the_weighted_shuffle_converges_to_its_weights() -> None:
    """5,000 first attempts over weights 1:2:5, seed 7: each deployment's share within 2
    points of its weight's share (the binomial's standard deviation is under 0.7 points)."""
    config = _config((1, 2, 5))
    routing = Routing(config, SqliteStore(":memory:"), Metrics(), rng=random.Random(7))
    firsts: Counter[str] = Counter()
    for _ in range(5000):
        attempts = await routing.start(config.route("chat"), None, 10)
        firsts[attempts.deployment] += 1
    for ident, weight in (("d0", 1), ("d1", 2), ("d2", 5)):
        assert abs(firsts[ident] / 5000 - weight / 8) < 0.02, firsts


class _Down:
    """A store whose every health operation fails, as Redis does when it is unreachable."""

    name = "down"
    shared = True

    def __getattr__(self, name: str) -> Any:
        async def fail(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailable("redis: ConnectionError: refused")

        return fail


async def test_a_store_that_fails_never_fails_the_request() -> None:
    config = _config((1, 1))
    routing = Routing(config, _Down(), Metrics(), rng=random.Random(1))  # type: ignore[arg-type]
    attempts = await routing.start(config.route("chat"), None, 10)
    first = attempts.deployment
    attempts.began(10)
    err = ProxyError(503, "unavailable")
    err.origin = "upstream"
    assert await attempts.failed(err)  # recorded nowhere, but the next attempt is made
    assert attempts.deployment != first and attempts.plan.current.number == 2


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (ProxyError(502, "x", code="upstream_unreachable"), "connection"),
        (ProxyError(504, "x", code="upstream_timeout"), "timeout"),
        (ProxyError(529, "Overloaded"), "server"),
        (ProxyError(400, "Overloaded", type="overloaded_error"), "server"),
        (ProxyError(429, "slow down"), "rate_limit"),
        (ProxyError(500, "boom"), "server"),
        (ProxyError(401, "bad key"), "auth"),
        (ProxyError(400, "bad request"), "bad_request"),
    ],
)
def test_a_provider_failure_is_classified(err: ProxyError, kind: str) -> None:
    assert failure_kind(err) == kind
    assert (kind in router.RETRYABLE) == (kind not in ("auth", "bad_request"))


async def test_least_busy_sees_another_replica_s_requests_in_flight(store: Store) -> None:
    """Two replicas (two ``Routing`` on one store): what one has in flight, the other avoids;
    once it is answered, the count is back (least-busy reads the shared count, no other)."""
    ids = uuid.uuid4().hex[:6]
    models = [
        {
            "model_name": "chat",
            "litellm_params": {"model": "openai/gpt-4o", "api_key": "k"},
            "model_info": {"id": f"{name}-{ids}"},
        }
        for name in ("x", "y")
    ]
    data = {"model_list": models, "router_settings": {"routing_strategy": "least-busy"}}
    config = parse_config(data, "r.yaml", environ={})
    one = Routing(config, store, Metrics(), rng=random.Random(3))
    two = Routing(config, store, Metrics(), rng=random.Random(4))
    rc = config.route("chat")
    for _ in range(6):
        busy = await one.start(rc, None, 10)
        busy.began(10)
        await asyncio.gather(*one._tasks)
        other = await two.start(rc, None, 10)
        assert other.deployment != busy.deployment
        busy.answered()
        await asyncio.gather(*one._tasks)
    found = await store.deployment_health([f"x-{ids}", f"y-{ids}"], time.time())
    assert [h.in_flight for h in found.values()] == [0, 0]
