"""Settlement is idempotent (``proxy.budgets``): whatever the order and number of settle and
release calls a request's exit paths make, the team is charged what the first one said, once —
against the real embedded store."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.budgets import Budgets
from proxy.config import parse_config
from proxy.metrics import Metrics
from proxy.store.sqlite import SqliteStore
from proxy.usage import Usage

CONFIG = parse_config(
    {
        "model_list": [
            {"model_name": "m", "litellm_params": {"model": "openai/m", "api_base": "http://x"}}
        ],
        "routefit_settings": {
            "teams": [{"id": "t", "keys": ["sk-t-0123456789"], "quotas": {"tokens_per_day": 10**9}}]
        },
    }
)
_CALL = st.one_of(
    st.none(),  # a release
    st.builds(Usage, st.integers(0, 5000), st.integers(0, 5000)),
)


async def _charged(calls: list[Usage | None]) -> tuple[int, int]:
    store = SqliteStore(":memory:")
    budgets = Budgets(store, Metrics())
    team = CONFIG.teams[0]
    held = await budgets.reserve(team, CONFIG.routes["m"], 100, 400)
    assert held is not None
    await asyncio.gather(*(budgets.settle(held, u, released=u is None) for u in calls))
    used = (await budgets.usage(team))[0].used
    await store.close()
    first = calls[0]
    return used, 0 if first is None else first.prompt_tokens + first.completion_tokens


@settings(max_examples=60, deadline=None)
@given(st.lists(_CALL, min_size=1, max_size=5))
def test_only_the_first_settlement_counts(calls: list[Usage | None]):
    used, expected = asyncio.run(_charged(calls))
    assert used == expected
