"""The store: calibration samples, prefix anchors, team budget counters and stored responses.

``RedisStore`` shares them across replicas (one Redis, a Redis Cluster or a Sentinel-managed
master); ``SqliteStore`` is the embedded default for one process (``routefit serve`` on a bare
machine). Both honour one contract (``base.Store``), and one contract test suite runs against
every backend and topology.
"""

from __future__ import annotations

from proxy.store.base import (
    BudgetWindow,
    Reservation,
    Store,
    StoreObserver,
    StoreUnavailable,
    WindowState,
)
from proxy.store.observed import ObservedStore
from proxy.store.settings import StoreSettings, StoreSettingsError, parse_store_settings

__all__ = [
    "BudgetWindow",
    "ObservedStore",
    "Reservation",
    "Store",
    "StoreObserver",
    "StoreSettings",
    "StoreSettingsError",
    "StoreUnavailable",
    "WindowState",
    "connect_store",
    "open_store",
    "parse_store_settings",
]


def open_store(redis_url: str | None, sqlite_path: str) -> Store:
    """Redis (one server) when a URL is configured, else the embedded SQLite store."""
    return connect_store(StoreSettings(redis_url=redis_url or None, store_path=sqlite_path))


def connect_store(settings: StoreSettings, observer: StoreObserver | None = None) -> Store:
    """The store the settings name, in the configured Redis topology; with an ``observer``,
    every operation's latency and errors (and every failover retry) are reported to it."""
    store: Store
    if settings.uses_redis:
        from proxy.store.redis import RedisStore
        from proxy.store.topology import open_client

        timeout, max_connections = 0.5, 64
        store = RedisStore(
            client=open_client(settings, timeout, max_connections),
            timeout=timeout,
            max_connections=max_connections,
            failover_seconds=settings.redis_failover_seconds,
            observer=observer,
            replicas=1 if settings.redis_mode == "sentinel" else 0,
        )
    else:
        from proxy.store.sqlite import SqliteStore

        store = SqliteStore(settings.store_path)
    return store if observer is None else ObservedStore(store, observer)
