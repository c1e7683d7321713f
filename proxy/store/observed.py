"""A store that reports every operation's latency and failure to an observer (``/metrics``).

A wrapper rather than code in each backend: the measurement is the same whatever the backend,
and it sees what callers see — the whole call, failover retries included.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from pricing.calibration import Anchor, Sample
from proxy.store.base import (
    AnchorWrite,
    BudgetWindow,
    DeploymentHealth,
    Reservation,
    Store,
    StoreObserver,
    StoreUnavailable,
    WindowState,
)

__all__ = ["ObservedStore"]

T = TypeVar("T")


class ObservedStore:
    """``store``'s contract, each call timed into ``observer.store_op``. A ``StoreUnavailable``
    is reported as the error class of its cause (``ConnectionError``, ``TimeoutError``, ...);
    caller mistakes (``ValueError``) are not store failures and are not reported."""

    def __init__(self, store: Store, observer: StoreObserver) -> None:
        self.inner = store
        self.name = store.name
        self.shared = store.shared
        self._observer = observer

    async def _timed(self, op: str, call: Callable[[], Awaitable[T]]) -> T:
        start = time.perf_counter()
        try:
            result = await call()
        except StoreUnavailable as e:
            cause = e.__cause__
            kind = type(cause).__name__ if cause is not None else "StoreUnavailable"
            self._observer.store_op(op, time.perf_counter() - start, kind)
            raise
        self._observer.store_op(op, time.perf_counter() - start, None)
        return result

    async def record_sample(self, sample: Sample) -> None:
        await self._timed("record_sample", lambda: self.inner.record_sample(sample))

    async def record_batch(
        self, samples: Sequence[Sample], anchors: Sequence[AnchorWrite], ttl: float
    ) -> None:
        await self._timed("record_batch", lambda: self.inner.record_batch(samples, anchors, ttl))

    async def recent_samples(self, route: str, limit: int) -> list[Sample]:
        return await self._timed("recent_samples", lambda: self.inner.recent_samples(route, limit))

    async def put_anchor(self, route: str, key: bytes, anchor: Anchor, ttl: float) -> None:
        await self._timed("put_anchor", lambda: self.inner.put_anchor(route, key, anchor, ttl))

    async def find_anchor(self, route: str, keys: Sequence[bytes]) -> tuple[int, Anchor] | None:
        return await self._timed("find_anchor", lambda: self.inner.find_anchor(route, keys))

    async def reserve(self, team: str, windows: Sequence[tuple[BudgetWindow, int]]) -> Reservation:
        return await self._timed("reserve", lambda: self.inner.reserve(team, windows))

    async def settle(
        self, team: str, token: str, windows: Sequence[tuple[BudgetWindow, int]]
    ) -> None:
        await self._timed("settle", lambda: self.inner.settle(team, token, windows))

    async def usage(self, team: str, windows: Sequence[BudgetWindow]) -> list[WindowState]:
        return await self._timed("usage", lambda: self.inner.usage(team, windows))

    async def put_response(
        self,
        team: str,
        response_id: str,
        data: bytes,
        ttl_seconds: int,
        team_bytes: int | None = None,
    ) -> bool:
        return await self._timed(
            "put_response",
            lambda: self.inner.put_response(team, response_id, data, ttl_seconds, team_bytes),
        )

    async def response_bytes(self, team: str) -> int:
        return await self._timed("response_bytes", lambda: self.inner.response_bytes(team))

    async def get_response(self, team: str, response_id: str) -> bytes | None:
        return await self._timed("get_response", lambda: self.inner.get_response(team, response_id))

    async def delete_response(self, team: str, response_id: str) -> bool:
        return await self._timed(
            "delete_response", lambda: self.inner.delete_response(team, response_id)
        )

    async def record_request(self, team: str, data: bytes, cap: int) -> None:
        await self._timed("record_request", lambda: self.inner.record_request(team, data, cap))

    async def record_requests(self, items: Sequence[tuple[str, bytes]], cap: int) -> None:
        await self._timed("record_requests", lambda: self.inner.record_requests(items, cap))

    async def recent_requests(self, team: str, limit: int) -> list[bytes]:
        return await self._timed("recent_requests", lambda: self.inner.recent_requests(team, limit))

    async def deployment_health(
        self, ids: Sequence[str], now: float
    ) -> dict[str, DeploymentHealth]:
        return await self._timed(
            "deployment_health", lambda: self.inner.deployment_health(ids, now)
        )

    async def deployment_began(self, id: str, tokens: int, now: float) -> None:
        await self._timed("deployment_began", lambda: self.inner.deployment_began(id, tokens, now))

    async def deployment_ended(self, id: str, latency: float | None) -> None:
        await self._timed("deployment_ended", lambda: self.inner.deployment_ended(id, latency))

    async def deployment_failed(
        self, id: str, kind: str, now: float
    ) -> tuple[tuple[float, str], ...]:
        return await self._timed(
            "deployment_failed", lambda: self.inner.deployment_failed(id, kind, now)
        )

    async def deployment_cool(self, id: str, until: float) -> None:
        await self._timed("deployment_cool", lambda: self.inner.deployment_cool(id, until))

    async def ping(self) -> bool:
        return await self.inner.ping()

    async def close(self) -> None:
        await self.inner.close()
