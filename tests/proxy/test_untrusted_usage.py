"""Provider usage is a claim (docs/security.md, "Untrusted provider usage"): reading it never
raises, whatever the provider sent; a claim outside the request's possible counts is named; an
absurd sample is refused by the calibrator without losing the batch it would have shared; the
stores refuse amounts no 64-bit counter can hold, with a clear error rather than an overflow."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pricing.calibration import Sample
from pricing.route import Route
from proxy.calibrator import Calibrator
from proxy.metrics import Metrics
from proxy.store import BudgetWindow
from proxy.store.codec import MAX_AMOUNT
from proxy.store.sqlite import SqliteStore
from proxy.usage import Usage, normalize_usage, usage_fault, usage_limit

ROUTE = Route(alias="r", model="gpt-4o", context_window=128_000, max_output_tokens=16_384)
LIMIT = usage_limit(ROUTE, 1, 1000)

counts = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
)
fields = st.sampled_from(
    [
        "prompt_tokens",
        "completion_tokens",
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "prompt_cache_hit_tokens",
        "prompt_cache_miss_tokens",
        "promptTokenCount",
        "candidatesTokenCount",
        "toolUsePromptTokenCount",
    ]
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(fields, counts, max_size=6))
def test_reading_usage_never_raises_and_a_credible_one_is_in_range(raw: dict[str, Any]) -> None:
    usage = normalize_usage(raw)
    if usage is None:
        return
    if usage_fault(usage, LIMIT) is None:
        counts = (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
        for value in (*counts, usage.tool_prompt_tokens):
            assert isinstance(value, int) and 0 <= value <= LIMIT
        assert usage.cached_tokens <= usage.prompt_tokens


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ({"prompt_tokens": -5, "completion_tokens": 3}, "prompt tokens -5"),
        ({"prompt_tokens": 10**12, "completion_tokens": 3}, "outside"),
        ({"prompt_tokens": 12.5, "completion_tokens": 3}, "12.5"),
        ({"prompt_tokens": math.nan, "completion_tokens": 3}, "nan"),
        ({"prompt_tokens": math.inf, "completion_tokens": 3}, "inf"),
        ({"prompt_tokens": "12", "completion_tokens": 3}, "str"),
        ({"input_tokens": True, "output_tokens": 3}, "bool"),
        ({"input_tokens": 10, "output_tokens": 10**19}, "completion tokens"),
        ({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}}, "cached"),
        ({"promptTokenCount": 10, "toolUsePromptTokenCount": 10**12}, "tool prompt tokens"),
        ({"promptTokenCount": 10, "toolUsePromptTokenCount": -3}, "tool prompt tokens -3"),
    ],
)
def test_a_lie_is_named(raw: dict[str, Any], why: str) -> None:
    usage = normalize_usage(raw)
    assert usage is not None
    fault = usage_fault(usage, LIMIT)
    assert fault is not None and why in fault


def test_the_truth_is_credible_up_to_the_window_and_the_output() -> None:
    assert usage_fault(Usage(128_000, 16_384, 0), usage_limit(ROUTE, 1, 1000)) is None
    assert usage_fault(Usage(0, 0, 0), LIMIT) is None
    # two completions may each use the route's output limit
    assert usage_fault(Usage(1000, 2 * 16_384), usage_limit(ROUTE, 2, 1000)) is None
    assert usage_fault(Usage(LIMIT + 1, 0), LIMIT) is not None


def _sample(actual: int, n: int = 0) -> Sample:
    return Sample("r", time.time(), 1000 + n, 40, 0, 0, 3, 1040, False, actual)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_absurd_sample_is_refused_and_its_batch_is_kept(anyio_backend: str) -> None:
    store = SqliteStore(":memory:")
    calibrator = Calibrator(store, Metrics(), refresh_seconds=3600)
    calibrator.start({"r": False})
    try:
        calibrator.submit(_sample(1100), None, None)
        calibrator.submit(_sample(10**30), None, None)
        calibrator.submit(_sample(-4), None, None)
        calibrator.submit(_sample(1200, 1), None, None)
        await asyncio.wait_for(calibrator.queue.join(), 10)
    finally:
        await calibrator.stop()
    assert calibrator.rejected == 2
    assert calibrator.dropped == 0
    assert [s.actual for s in await store.recent_samples("r", 10)] == [1100, 1200]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_store_refuses_an_amount_no_counter_holds(anyio_backend: str) -> None:
    store = SqliteStore(":memory:")
    window = BudgetWindow("tokens_per_day", "day", 10**18)
    held = await store.reserve("t", [(window, 100)])
    assert held.token is not None
    with pytest.raises(ValueError, match="above"):
        await store.settle("t", held.token, [(window, MAX_AMOUNT + 1)])
    await store.settle("t", held.token, [(window, MAX_AMOUNT)])
    [state] = await store.usage("t", [window])
    assert state.used == MAX_AMOUNT
