"""Which store to open, read from ``routefit_settings``: embedded SQLite, or Redis in one of three
topologies (one server, a Redis Cluster, a Sentinel-managed master).

The parsing lives beside the store rather than in the config loader so that the store's options
are defined once, next to the code that uses them. Errors are ``StoreSettingsError`` (a
``ValueError`` carrying the key path); the config loader turns them into its own error naming the
file, as it does for every parser it delegates to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REDIS_MODES",
    "STORE_KEYS",
    "StoreSettings",
    "StoreSettingsError",
    "parse_store_settings",
]

REDIS_MODES = ("standalone", "cluster", "sentinel")
#: The ``routefit_settings`` keys this module reads.
STORE_KEYS = frozenset(
    {
        "redis_url",
        "redis_mode",
        "redis_sentinels",
        "redis_master_name",
        "redis_failover_seconds",
        "store_path",
    }
)
#: How long an operation keeps retrying through a failover (MOVED / ASK / connection errors)
#: before it reports the store unavailable, when the topology has failovers at all.
DEFAULT_FAILOVER_SECONDS = 2.0


class StoreSettingsError(ValueError):
    """A mistake in the store settings; ``where`` is the key path."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


@dataclass(frozen=True, slots=True)
class StoreSettings:
    #: Standalone: the server; cluster: a seed node; sentinel: optional, for credentials, TLS
    #: (``rediss://``) and the database of the master connections. None = the embedded store.
    redis_url: str | None = None
    redis_mode: str = "standalone"
    #: (host, port) of every sentinel (sentinel mode only).
    redis_sentinels: tuple[tuple[str, int], ...] = ()
    redis_master_name: str | None = None
    #: Seconds an operation retries through a failover; 0 = one attempt (standalone's default).
    redis_failover_seconds: float = 0.0
    #: Embedded store file (SQLite); ":memory:" keeps nothing across restarts.
    store_path: str = "routefit.sqlite3"

    @property
    def uses_redis(self) -> bool:
        return self.redis_mode != "standalone" or self.redis_url is not None


def _host_port(value: Any, where: str) -> tuple[str, int]:
    if isinstance(value, str) and ":" in value:
        host, _, port = value.rpartition(":")
        host = host.strip("[]")
        if host and port.isdigit() and 0 < int(port) < 65536:
            return host, int(port)
    raise StoreSettingsError(where, "must be 'host:port'")


def _sentinels(value: Any, where: str) -> tuple[tuple[str, int], ...]:
    if isinstance(value, str):  # one env var: "h1:26379,h2:26379"
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not value:
        raise StoreSettingsError(where, "must be a non-empty list of 'host:port'")
    return tuple(_host_port(v, f"{where}[{i}]") for i, v in enumerate(value))


def parse_store_settings(
    raw: Mapping[str, Any], where: str, environ: Mapping[str, str] | None = None
) -> StoreSettings:
    """The store keys of an already env-resolved ``routefit_settings`` block (``where`` is its
    key path). ``REDIS_URL`` from ``environ`` stands in for a missing ``redis_url``."""
    environ = environ or {}
    mode = raw.get("redis_mode", "standalone") or "standalone"
    if mode not in REDIS_MODES:
        raise StoreSettingsError(f"{where}.redis_mode", f"must be one of {list(REDIS_MODES)}")
    url = raw.get("redis_url") or environ.get("REDIS_URL") or None
    if url is not None:
        url = str(url)
        # Cluster nodes and sentinel-managed masters are TCP endpoints; only one server may be
        # a unix socket.
        schemes = ("redis://", "rediss://") + (("unix:",) if mode == "standalone" else ())
        if not url.startswith(schemes):
            raise StoreSettingsError(
                f"{where}.redis_url", f"must be a {', '.join(schemes)} URL for mode {mode!r}"
            )
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str | None = None
    if mode == "cluster" and url is None:
        raise StoreSettingsError(f"{where}.redis_url", "required (a seed node) in cluster mode")
    if mode == "sentinel":
        sentinels = _sentinels(raw.get("redis_sentinels"), f"{where}.redis_sentinels")
        master = raw.get("redis_master_name")
        if not isinstance(master, str) or not master:
            raise StoreSettingsError(
                f"{where}.redis_master_name", "required (the sentinels' master name)"
            )
    else:
        for key in ("redis_sentinels", "redis_master_name"):
            if raw.get(key) is not None:
                raise StoreSettingsError(f"{where}.{key}", "only used with redis_mode: sentinel")
    default = 0.0 if mode == "standalone" else DEFAULT_FAILOVER_SECONDS
    failover = raw.get("redis_failover_seconds", default)
    if isinstance(failover, bool) or not isinstance(failover, int | float) or failover < 0:
        raise StoreSettingsError(f"{where}.redis_failover_seconds", "must be a number >= 0")
    path = raw.get("store_path", "routefit.sqlite3")
    if not isinstance(path, str) or not path:
        raise StoreSettingsError(f"{where}.store_path", "must be a file path or ':memory:'")
    return StoreSettings(
        redis_url=url,
        redis_mode=mode,
        redis_sentinels=sentinels,
        redis_master_name=master,
        redis_failover_seconds=float(failover),
        store_path=path,
    )
