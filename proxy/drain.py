"""Graceful drain: what one worker does between SIGTERM and its exit.

uvicorn, on SIGTERM, stops accepting connections, lets the requests and streams in flight finish
for up to ``timeout_graceful_shutdown`` seconds (``routefit serve --drain-seconds``), then runs
the app's shutdown (``proxy.app.lifespan``: queued calibration samples are flushed, the store
closed). Budgets settle inside each response (``proxy.gateway``), so a request that finished
within the deadline is settled before the worker exits. This module adds the one thing uvicorn
cannot know: ``/readyz`` must say "not ready" from the signal on, on connections that are still
open (a kept-alive probe, a load balancer's health check), so nobody routes new work here.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable
from types import FrameType

__all__ = ["on_terminate"]

log = logging.getLogger("routefit")


def on_terminate(callback: Callable[[], None]) -> None:
    """Run ``callback`` at SIGTERM, then whatever handled SIGTERM before (uvicorn's shutdown).

    Called from the app's startup, inside uvicorn's own signal capture: uvicorn restores its
    predecessor afterwards, so nothing of ours outlives the server. Outside the main thread (an
    in-process test client) there are no signals to chain and nothing is installed."""
    with contextlib.suppress(ValueError):  # not the main thread
        previous = signal.getsignal(signal.SIGTERM)
        if not callable(previous):
            return  # no server to hand the signal on to: leave SIGTERM's default alone

        def handler(sig: int, frame: FrameType | None) -> None:
            callback()
            if callable(previous):
                previous(sig, frame)

        signal.signal(signal.SIGTERM, handler)
