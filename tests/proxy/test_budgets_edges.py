"""Budgets' edges that mutation testing found unpinned (docs/mutation.md)."""

from __future__ import annotations

import pytest
from test_budgets import route, team  # noqa: F401  (route is a fixture)

from proxy.budgets import Budgets
from proxy.errors import ProxyError
from proxy.metrics import Metrics
from proxy.store.redis import RedisStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_request_over_two_windows_at_once_names_both(redis_url, route) -> None:  # noqa: F811
    store = RedisStore(redis_url)
    budgets = Budgets(store, Metrics())
    try:
        spender = team(tokens_per_minute=100, tokens_per_day=120)
        assert await budgets.reserve(spender, route, 40, 20) is not None
        with pytest.raises(ProxyError) as refused:
            await budgets.reserve(spender, route, 50, 20)
        assert refused.value.status == 429
        assert "over its quota (tokens_per_minute, tokens_per_day)" in refused.value.message
        # over both windows' whole limits: no wait admits it, the client's 400 names both
        with pytest.raises(ProxyError) as refused:
            await budgets.reserve(team(tokens_per_minute=100, tokens_per_day=120), route, 100, 50)
        assert refused.value.status == 400
        assert "tokens_per_minute limit of 100" in refused.value.message
        assert "tokens_per_day limit of 120" in refused.value.message
    finally:
        await store.close()
