"""A gate that keeps optional work to a share of the process's time, by that work's own cost.

Learning counts (the exact count of a request a bound or a sample let go, after its answer:
``proxy.estimate``) are work no client waits for, yet they run on the same cores as the next
request: counted after every answer, a 120k-token prompt of new text cost ~25 ms of CPU a
request, and with a provider that answers at once each count landed on the next request
(bench/REPORT.md 1z). Paced, the next may begin only once ``cost / share`` has passed since the
last one ended, and one still under way is reckoned at what the last one cost: ``share`` is the
most of one core they take, whatever their size. What is skipped teaches nothing; it is never a
price a request goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Pace"]


class Pace:
    def __init__(self, share: float, clock: Callable[[], float] = time.monotonic) -> None:
        if share <= 0:
            raise ValueError("a pace's share must be positive")
        self.share = share
        self.clock = clock
        self._next = 0.0
        self._last = 0.0

    def take(self) -> bool:
        """Whether a piece of work may begin now. Until it is ``done`` it is reckoned to cost
        what the last one did, so that a burst of requests does not all begin before any has
        said what it costs."""
        now = self.clock()
        if now < self._next:
            return False
        self._next = now + self._last / self.share
        return True

    def done(self, cost: float) -> None:
        """A piece of work taken has ended, having cost ``cost`` seconds."""
        self._last = max(0.0, cost)
        self._next = self.clock() + self._last / self.share
