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
        with pytest.raises(ProxyError) as refused:
            await budgets.reserve(team(tokens_per_minute=100, tokens_per_day=120), route, 100, 50)
        assert refused.value.status == 429
        assert "over its quota (tokens_per_minute, tokens_per_day)" in refused.value.message
    finally:
        await store.close()
