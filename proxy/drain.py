"""Graceful drain: what one worker does between SIGTERM and its exit.

uvicorn, on SIGTERM, stops accepting connections, lets the requests and streams in flight finish
for up to ``timeout_graceful_shutdown`` seconds (``routefit serve --drain-seconds``, the
``ServeSettings.drain_seconds`` that ``proxy.app`` passes to ``cut_after`` too), then runs
the app's shutdown (``proxy.app.lifespan``: queued calibration samples are flushed, the store
closed). Budgets settle inside each response (``proxy.gateway``), so a request that finished
within the deadline is settled before the worker exits. This module adds the one thing uvicorn
cannot know: ``/readyz`` must say "not ready" from the signal on, on connections that are still
open (a kept-alive probe, a load balancer's health check), so nobody routes new work here.

And it ends what would outlive the deadline on routefit's terms rather than uvicorn's: shortly
before the deadline (``cut_after``) the *cut* event fires; streams still relaying close their
upstream and end with their wire's error event, requests still waiting for a provider answer
503 — instead of being cancelled mid-write with a traceback in the log and a stream that just
stops. Their reservations are released like any failed request's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import weakref
from collections.abc import Callable
from types import FrameType

__all__ = ["cut_after", "cut_event", "on_terminate"]

log = logging.getLogger("routefit")

_cuts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = (
    weakref.WeakKeyDictionary()
)


def cut_event() -> asyncio.Event:
    """Set when what is still in flight must end now (one per event loop: a worker has one;
    in-process tests run many, and an asyncio.Event belongs to the loop that first waits)."""
    loop = asyncio.get_running_loop()
    event = _cuts.get(loop)
    if event is None:
        event = _cuts[loop] = asyncio.Event()
    return event


def cut_after(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    """Fire the cut a little before ``deadline`` seconds from now (safe from a signal handler:
    the loop is woken through its self-pipe)."""
    lead = min(1.0, deadline / 2)

    def arm() -> None:
        loop.call_later(max(0.0, deadline - lead), cut_event().set)

    loop.call_soon_threadsafe(arm)


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
