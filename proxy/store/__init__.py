"""The store: calibration samples, prefix anchors and team budget counters.

``RedisStore`` shares them across replicas; ``SqliteStore`` is the embedded default for one
process (``routefit serve`` on a bare machine). Both honour one contract (``base.Store``), and
one contract test suite runs against both.
"""

from __future__ import annotations

from proxy.store.base import BudgetWindow, Reservation, Store, StoreUnavailable, WindowState

__all__ = ["BudgetWindow", "Reservation", "Store", "StoreUnavailable", "WindowState", "open_store"]


def open_store(redis_url: str | None, sqlite_path: str) -> Store:
    """Redis when a URL is configured, else the embedded SQLite store."""
    if redis_url:
        from proxy.store.redis import RedisStore

        return RedisStore(redis_url)
    from proxy.store.sqlite import SqliteStore

    return SqliteStore(sqlite_path)
