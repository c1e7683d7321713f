"""The running calibrator's refit schedule, on the embedded store (no HTTP: the schedule is
the calibrator's own, and the gateway tests cover the path that feeds it)."""

from __future__ import annotations

import asyncio
import time

import pytest

from pricing.calibration import CalibrationPolicy, Sample
from proxy.calibrator import REFIT_GAP, Calibrator
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
