"""The running calibrator's refit schedule, on the embedded store (no HTTP: the schedule is
the calibrator's own, and the gateway tests cover the path that feeds it)."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import replace

import pytest

from pricing.calibration import CalibrationPolicy, Sample
from proxy.calibrator import REFIT_GAP, REFIT_SAMPLES, Calibrator, _Route
from proxy.metrics import Metrics
from proxy.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sample(n: int) -> Sample:
    return Sample(
        route="r",
        time=time.time(),
        text=1000 + 37 * n,
        framing=40,
        images=0,
        image_count=0,
        message_count=3,
        estimate=1040 + 37 * n,
        anchored=False,
        actual=1100 + 41 * n,
    )


async def _fitted_on(calibrator: Calibrator, count: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if calibrator.correction("r").samples == count:
            return True
        await asyncio.sleep(0.02)
    return False


async def test_samples_held_back_by_the_refit_gap_are_fitted_once_traffic_stops() -> None:
    """A learnt route refits at most every REFIT_GAP; the samples that arrive inside the gap
    must still be fitted when no more traffic comes (not wait for the next request, nor for
    the store refresh, which is pushed out of the way here)."""
    policy = CalibrationPolicy()
    calibrator = Calibrator(SqliteStore(":memory:"), Metrics(), policy, refresh_seconds=3600)
    calibrator.start({"r": True})
    try:
        learning = 2 * policy.min_samples
        for n in range(learning):
            calibrator.submit(_sample(n), None, None)
        await calibrator.queue.join()
        assert await _fitted_on(calibrator, learning, time.monotonic() + 20 * REFIT_GAP)

        for n in range(learning, learning + 3):
            calibrator.submit(_sample(n), None, None)
        await calibrator.queue.join()
        assert await _fitted_on(calibrator, learning + 3, time.monotonic() + 20 * REFIT_GAP)
    finally:
        await calibrator.stop()


class _Timed(Calibrator):
    """The real calibrator, noting the clock reading each refit of a route was made at."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.refits: list[tuple[str, float]] = []

    def _refit(self, state: _Route, now: float) -> None:
        route = next(name for name, s in self.routes.items() if s is state)
        self.refits.append((route, now))
        super()._refit(state, now)


async def _refit_of(calibrator: _Timed, route: str, after: int) -> None:
    """Wait (bounded) until ``route`` has been refitted after the first ``after`` refits."""
    deadline = time.monotonic() + 40 * REFIT_GAP
    while time.monotonic() < deadline:
        if any(r == route for r, _ in calibrator.refits[after:]):
            return
        await asyncio.sleep(0.01)


def _sample_of(route: str, n: int) -> Sample:
    return replace(_sample(n), route=route)


async def test_a_learnt_route_is_never_refitted_within_the_gap_of_its_last_refit() -> None:
    """'Never within REFIT_GAP', with two learnt routes whose last refits are apart: the quiet
    spell that is due for one must not refit the other early, and a burst of REFIT_SAMPLES
    right after a refit waits for the gap."""
    policy = CalibrationPolicy()
    calibrator = _Timed(SqliteStore(":memory:"), Metrics(), policy, refresh_seconds=3600)
    calibrator.start({"a": True, "b": True})
    try:
        learning = 2 * policy.min_samples
        for route in ("a", "b"):
            for n in range(learning):
                calibrator.submit(_sample_of(route, n), None, None)
        await calibrator.queue.join()
        await asyncio.sleep(2 * REFIT_GAP)
        learnt = len(calibrator.refits)
        # a refits, then b a little later; then both get a sample inside both gaps
        calibrator.submit(_sample_of("a", learning), None, None)
        await _refit_of(calibrator, "a", learnt)
        await asyncio.sleep(REFIT_GAP / 3)
        calibrator.submit(_sample_of("b", learning), None, None)
        await _refit_of(calibrator, "b", learnt)
        for route in ("a", "b"):
            calibrator.submit(_sample_of(route, learning + 1), None, None)
        # and a burst on a, as many samples as make a refit due, right after its refit
        await _refit_of(calibrator, "a", len(calibrator.refits))
        for n in range(REFIT_SAMPLES):
            calibrator.submit(_sample_of("a", learning + 2 + n), None, None)
        await calibrator.queue.join()
        await asyncio.sleep(3 * REFIT_GAP)
        for route in ("a", "b"):
            times = [t for r, t in calibrator.refits[learnt:] if r == route]
            assert len(times) >= 2, calibrator.refits[learnt:]
            gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
            assert min(gaps) >= REFIT_GAP, (route, gaps)
    finally:
        await calibrator.stop()
