"""A per-client brake on admin-key guesses: a few free failures, then exponential lock-outs.

Measured before it existed: 146 (issue 30) to 767 (loopback) admin-key guesses per second
from one client against ``POST /routefit/ui/session``. One throttle per process guards every
admin door: the dashboard's login and data endpoint, ``/routefit/calibration``, a team's
usage.

Each client (its address as ``routefit serve`` resolves it: the peer, or the
``X-Forwarded-For`` of a trusted proxy) gets ``free`` failures; each further failure locks it
out for ``base * 2**k`` seconds (at most ``cap``), during which every attempt is answered 429
with ``Retry-After`` *without looking at the key*, so guessing during a lock-out learns
nothing. A success clears the client's record.

The record is per process: N replicas behind a balancer let a client make N times the
attempts, still a handful per lock-out window (a key of 128 bits is out of reach either way;
the brake is for weak operator-chosen keys and noisy scanners). It holds at most
``max_clients`` entries, least recently failed dropped first, so a flood of addresses cannot
grow it without bound.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from proxy.errors import ProxyError

__all__ = ["LoginThrottle"]


@dataclass(slots=True)
class _Record:
    failures: int
    locked_until: float
    last: float


class LoginThrottle:
    def __init__(
        self,
        free: int = 5,
        base: float = 1.0,
        cap: float = 900.0,
        forget_after: float = 3600.0,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free = free
        self.base = base
        self.cap = cap
        self.forget_after = forget_after
        self.max_clients = max_clients
        self.clock = clock
        self._clients: OrderedDict[str, _Record] = OrderedDict()

    def __len__(self) -> int:
        """Clients on record (at most ``max_clients``)."""
        return len(self._clients)

    def check(self, client: str) -> None:
        """Raise 429 (with Retry-After) while ``client`` is locked out."""
        record = self._clients.get(client)
        if record is None:
            return
        now = self.clock()
        if now - record.last > self.forget_after:
            del self._clients[client]
            return
        wait = record.locked_until - now
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            raise ProxyError(
                429,
                f"too many failed admin-key attempts from this client; retry in {seconds} s",
                code="too_many_attempts",
                headers={"retry-after": str(seconds)},
            )

    def failed(self, client: str) -> None:
        now = self.clock()
        record = self._clients.pop(client, None) or _Record(0, 0.0, now)
        record.failures += 1
        record.last = now
        over = record.failures - self.free
        if over > 0:
            record.locked_until = now + min(self.cap, self.base * 2 ** min(over - 1, 32))
        self._clients[client] = record  # most recent last
        while len(self._clients) > self.max_clients:
            self._clients.popitem(last=False)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)
