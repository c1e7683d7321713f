"""Bounded retries around any transport (``routefit_settings.upstream_retries``, default 0).

A failure that happened before any byte reached the client — a connection that could not be
made or was reset before the response headers, or a 429/502/503/504 answer — is tried again, at
most that many times, with exponential backoff and jitter. A ``Retry-After`` of at most
``RetryPolicy.max_retry_after`` seconds replaces the backoff; a longer one is not retried (the
client gets the 429 and decides). A response whose body broke off, a read timeout (the provider
may be working on it) and anything after the first relayed byte are never retried: a stream is
retried only until it is returned.

On a routed alias (several deployments or fallbacks), or one whose router retries it (its
``num_retries`` set in the file), the router's ``num_retries`` are the
retries: it tries the next deployment at once, where these would first have worn out the failing
one (with ``upstream_retries: 2``, two deployments failing with 503 took 9 provider calls for
the router's 3 attempts, and only one failure in three counted towards a cooldown). The gateway
says which with ``Outbound.retry``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass

from proxy.exchange import Completion, EventStream, Outbound, Transient
from proxy.providers import Deployment, Transport

__all__ = ["RetryPolicy", "Retrying"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Attempt ``k`` (0-based) waits ``min(cap, base * 2**k) * (1 - jitter * u)`` for a uniform
    ``u`` in [0, 1): within known bounds, so a test can check the timing."""

    retries: int = 0
    base: float = 0.1
    cap: float = 2.0
    jitter: float = 0.5
    max_retry_after: float = 2.0

    def delay(self, attempt: int, retry_after: float | None, u: float) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``; None: do not retry."""
        if attempt >= self.retries:
            return None
        if retry_after is not None:
            return max(0.0, retry_after) if retry_after <= self.max_retry_after else None
        return min(self.cap, self.base * 2.0**attempt) * (1.0 - self.jitter * u)


class Retrying:
    """A transport that tries its inner transport again on transient failures."""

    def __init__(
        self,
        inner: Transport,
        policy: RetryPolicy,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        self.inner = inner
        self.policy = policy
        #: Called with the reason ("429", "503", "upstream_unreachable", ...) before each retry.
        self.on_retry = on_retry
        self._rng = random.Random()

    async def send(self, target: Deployment, out: Outbound) -> Completion | EventStream:
        if not out.retry:  # a routed alias: its router retries, on another deployment first
            return await self.inner.send(target, out)
        attempt = 0
        while True:
            try:
                return await self.inner.send(target, out)
            except Transient as err:
                wait = self.policy.delay(attempt, err.retry_after, self._rng.random())
                if wait is None:
                    raise
                if self.on_retry is not None:
                    self.on_retry(err.code if err.status == 502 and err.code else str(err.status))
                attempt += 1
                await asyncio.sleep(wait)

    async def aclose(self) -> None:
        await self.inner.aclose()
