"""Edges of the calibrator that mutation testing found unpinned (docs/mutation.md)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import replace
from typing import Any

import pytest
from harness import free_port

from pricing.calibration import FEATURES, CalibrationPolicy, Correction, Sample, fit_correction
from proxy.calibrator import (
    AGREE,
    REFIT_GAP,
    REFIT_SAMPLES,
    REFIT_SECONDS,
    REFIT_SHARE,
    Calibrator,
    _agrees,
    _Route,
    prefix_keys,
    summarize,
)
from proxy.metrics import Metrics
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_message_with_its_keys_in_another_order_keeps_its_prefix_key() -> None:
    # Clients serialise the same message with its keys in any order (a JSON object is
    # unordered): the prefix key is of the value, so the next turn still finds its anchor.
    ordered = [{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {}}]}]
    shuffled = [{"content": [{"cache_control": {}, "text": "a", "type": "text"}], "role": "user"}]
    tools = [{"name": "t", "input_schema": {"type": "object", "properties": {}}}]
    tools_shuffled = [{"input_schema": {"properties": {}, "type": "object"}, "name": "t"}]
    assert prefix_keys("r", "m", tools, ordered) == prefix_keys("r", "m", tools_shuffled, shuffled)
    assert prefix_keys("r", "m", tools, ordered, "team") != prefix_keys("r", "m", tools, ordered)


# -- when a route is refitted (``Calibrator._due``): the edges, at an explicit clock --------

LEARNT = 2 * CalibrationPolicy().min_samples  # below this many samples a route is learning


def _sample(n: int) -> Sample:
    return Sample(
        route="r",
        time=1.0,
        text=1000 + 37 * n,
        framing=40,
        images=0,
        image_count=0,
        message_count=3,
        estimate=1040 + 37 * n,
        anchored=False,
        actual=1100 + 41 * n,
    )


def _route(samples: int, pending: int, exact: bool = True) -> _Route:
    """A route last fitted at t = 0 (so ``now`` is the time since)."""
    window = deque((_sample(n) for n in range(samples)), maxlen=200)
    return _Route(window, Correction(), exact, pending=pending, fitted_at=0.0)


def _calibrator(policy: CalibrationPolicy | None = None) -> Calibrator:
    return Calibrator(SqliteStore(":memory:"), Metrics(), policy)


def test_a_route_still_learning_is_refitted_on_every_sample_even_within_the_gap() -> None:
    due = _calibrator()._due
    assert due(_route(LEARNT - 1, pending=1), now=0.0)
    assert not due(_route(LEARNT, pending=1), now=0.0)  # learnt: the gap holds from here


def test_a_learnt_route_is_refitted_exactly_at_the_gap_once_enough_samples_wait() -> None:
    due = _calibrator()._due
    assert due(_route(LEARNT, pending=REFIT_SAMPLES), now=REFIT_GAP)
    assert not due(_route(LEARNT, pending=REFIT_SAMPLES), now=REFIT_GAP - 0.01)
    assert not due(_route(LEARNT, pending=REFIT_SAMPLES - 1), now=REFIT_GAP)


def test_a_route_whose_refits_are_dear_waits_in_proportion_to_their_cost() -> None:
    """An unknown tokenizer's every sample asks for a refit, and a refit of its window costs
    tens of ms on the event loop: after one, the next waits long enough that refits keep to
    ``REFIT_SHARE`` of the loop's time, and a cheap one keeps ``REFIT_GAP``."""
    due = _calibrator()._due
    dear = replace(_route(LEARNT, pending=REFIT_SAMPLES), cost=0.03)
    wait = 0.03 / REFIT_SHARE
    assert wait > REFIT_SECONDS > REFIT_GAP
    assert not due(dear, now=REFIT_SECONDS)
    assert not due(dear, now=wait - 0.01)
    assert due(dear, now=wait)
    cheap = replace(_route(LEARNT, pending=REFIT_SAMPLES), cost=REFIT_GAP * REFIT_SHARE / 2)
    assert due(cheap, now=REFIT_GAP)


def test_a_refit_notes_its_own_cost() -> None:
    calibrator = _calibrator()
    state = _route(3 * LEARNT, pending=REFIT_SAMPLES, exact=False)
    calibrator._refit(state, now=5.0)
    assert state.cost > 0 and state.fitted_at == 5.0 and state.pending == 0
    assert state.gap == max(REFIT_GAP, state.cost / REFIT_SHARE)


def test_a_learnt_route_with_few_new_samples_is_refitted_exactly_after_refit_seconds() -> None:
    due = _calibrator()._due
    assert due(_route(LEARNT, pending=1), now=REFIT_SECONDS)
    assert not due(_route(LEARNT, pending=1), now=REFIT_SECONDS - 0.01)


def test_a_sample_asks_for_a_refit_under_its_count_or_past_a_part_in_agree_and_a_token() -> None:
    def priced_at(tokens: int, actual: int) -> Sample:
        return replace(_sample(0), text=tokens, framing=0, actual=actual)

    neutral = Correction()  # prices a sample without features at its text + framing + images
    for actual in (1000, 4321, 7):
        top = actual + actual // AGREE + 1  # 1006 for 1000: 0.5% and a token over
        assert neutral.price(priced_at(top, actual).vector) == top  # what the edges stand on
        assert _agrees(neutral, priced_at(actual, actual))
        assert _agrees(neutral, priced_at(top, actual))
        assert not _agrees(neutral, priced_at(actual - 1, actual))
        assert not _agrees(neutral, priced_at(top + 1, actual))


def test_a_sample_its_weights_price_under_asks_for_a_refit_though_its_interval_covers_it() -> None:
    """Agreement is judged by the weights, not the estimate: a sample the interval covers but
    the weights price under its count moves the fit, and a route that skipped that refit would
    hold weights a restart (one fit of every sample) does not find."""
    from pricing.calibration import FEATURES

    n = len(FEATURES)
    row = tuple(0.05 if j == 0 else 0.0 for j in range(n))  # 5% of the text's tokens
    doubting = Correction(samples=30, weights=(1.0,) * n, interval=(row,))
    sample = replace(_sample(0), features=tuple(1000 if j == 0 else 0 for j in range(n)))
    assert doubting.price(sample.vector) == 1000
    assert doubting.for_request(sample.vector).price(sample.vector) == 1050
    assert not _agrees(doubting, replace(sample, actual=1030))  # under the weights
    assert _agrees(doubting, replace(sample, actual=1000))
    assert not _agrees(doubting, replace(sample, actual=990))  # 10 over: past AGREE and a token


def test_a_refit_fits_with_the_calibrators_policy_and_the_routes_exactness() -> None:
    policy = CalibrationPolicy(min_samples=2)  # 3 samples fit here, not under the default
    calibrator = _calibrator(policy)
    for exact in (True, False):
        state = _route(3, pending=3, exact=exact)
        calibrator._refit(state, now=7.0)
        assert state.correction == fit_correction(state.samples, policy, exact)
        assert (state.pending, state.fitted_at) == (0, 7.0)
    # (what makes the test sharp: the default policy, or the other exactness, fit otherwise)
    samples = _route(3, 0).samples
    assert fit_correction(samples, policy, True) != fit_correction(samples, None, True)
    one = _route(1, 0).samples
    assert fit_correction(one, policy, True) != fit_correction(one, policy, False)
    for exact in (True, False):  # too few samples: neutral if exact, the prior if not
        lone = _route(1, pending=1, exact=exact)
        calibrator._refit(lone, now=1.0)
        assert lone.correction == fit_correction(one, policy, exact)


# -- what a batch of samples does to the calibrator's state (``Calibrator._write``) -----------


def _metric(metrics: Metrics, name: str, **labels: str) -> float:
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


async def test_a_route_first_seen_in_a_batch_keeps_at_most_its_window() -> None:
    calibrator = _calibrator(CalibrationPolicy(window=4, min_samples=1))
    await calibrator._write([(_sample(n), None, None, ()) for n in range(5)])
    await calibrator._write([(_sample(5), None, None, ())])
    state = calibrator.routes["r"]
    assert [s.text for s in state.samples] == [_sample(n).text for n in range(2, 6)]
    assert calibrator.recorded == 6  # both batches


async def test_samples_written_within_the_gap_are_counted_as_pending() -> None:
    calibrator = _calibrator()
    calibrator.routes["r"] = _route(LEARNT, pending=0)
    calibrator.routes["r"].fitted_at = time.monotonic()  # just refitted: the gap holds
    await calibrator._write([(_sample(n), None, None, ()) for n in range(3)])
    assert calibrator.routes["r"].pending == 3


async def test_a_key_without_an_anchor_is_not_written_as_one() -> None:
    calibrator = _calibrator()
    await calibrator._write([(_sample(1), b"k" * 16, None, ())])
    assert calibrator.recorded == 1 and calibrator.store_up


async def test_a_batch_the_store_refuses_is_dropped_and_counted_and_the_store_marked_down() -> None:
    metrics = Metrics()
    away = RedisStore(f"redis://127.0.0.1:{free_port()}", timeout=0.2)  # nothing listens
    calibrator = Calibrator(away, metrics)
    try:
        await calibrator._write([(_sample(n), None, None, ()) for n in range(2)])
        await calibrator._write([(_sample(2), None, None, ())])
    finally:
        await away.close()
    assert (calibrator.dropped, calibrator.recorded) == (3, 0)  # both batches
    assert _metric(metrics, "routefit_calibration_samples_total", outcome="dropped") == 3
    assert not calibrator.store_up
    assert _metric(metrics, "routefit_store_up") == 0
    assert calibrator.report()["samples_dropped"] == 3


# -- start, stop, and what the report shows ----------------------------------------------------


async def test_routes_start_from_their_meters_prior_and_keep_their_exactness() -> None:
    policy = CalibrationPolicy(prior_inexact=2.0)
    calibrator = _calibrator(policy)
    calibrator.start({"exact": True, "inexact": False})
    try:
        exact, inexact = calibrator.routes["exact"], calibrator.routes["inexact"]
        assert (exact.exact, inexact.exact) == (True, False)
        assert exact.correction == fit_correction((), policy, True)
        assert inexact.correction == fit_correction((), policy, False)
        assert fit_correction((), policy, False) != fit_correction((), None, False)
        assert exact.samples.maxlen == inexact.samples.maxlen == policy.window
    finally:
        await calibrator.stop()


async def test_stop_gives_up_waiting_for_a_queue_no_writer_drains() -> None:
    calibrator = _calibrator()  # never started: nothing takes from the queue
    calibrator.queue.put_nowait((_sample(1), None, None, ()))
    await calibrator.stop()  # returns after its wait, never raises
    assert calibrator.queue.qsize() == 1


def test_the_report_names_every_figure_and_rounds_errors_to_five_places() -> None:
    samples = [_sample(n) for n in range(5)] + [replace(_sample(9), estimate=3, actual=1)]
    errors = sorted((s.estimate - s.actual) / s.actual for s in samples)
    summary = summarize(samples, Correction(text=1.5, samples=5))
    assert summary["fitted_on"] == 5
    assert set(summary["weights"]) == set(FEATURES)
    assert summary["samples"] == 6
    assert (
        summary["relative_error"]["max"] == round(errors[-1], 5) == 2.0
    )  # the sample with actual 1
    assert summary["relative_error"]["p50"] == round(errors[3], 5) != round(errors[3], 6)
    calibrator = _calibrator()
    calibrator.rejected = 2
    report = calibrator.report()
    assert report["samples_rejected"] == 2
    assert abs(report["time"] - time.time()) < 60


async def test_a_batch_the_writer_fails_on_is_dropped_and_counted_and_the_writer_goes_on() -> None:
    # "a bug here must not kill the writer": an item the writer cannot take (its sample is not
    # a Sample) stands for the bug; the batch is dropped and counted, the next one recorded.
    metrics = Metrics()
    calibrator = Calibrator(SqliteStore(":memory:"), metrics)
    calibrator.start({})
    broken: Any = ("not a sample", None, None, ())
    try:
        for expected in (1, 2):  # two bad batches, one at a time
            calibrator.queue.put_nowait(broken)
            await _until(lambda n=expected: calibrator.dropped == n)
        calibrator.queue.put_nowait((_sample(2), None, None, ()))
        await _until(lambda: calibrator.recorded == 1)
    finally:
        await calibrator.stop()
    assert (calibrator.dropped, calibrator.recorded) == (2, 1)
    assert _metric(metrics, "routefit_calibration_samples_total", outcome="dropped") == 2


async def _until(condition: Any, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not reached"
        await asyncio.sleep(0.01)
