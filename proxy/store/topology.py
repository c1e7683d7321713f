"""Redis clients for the three topologies routefit runs on: one server, a Redis Cluster, a
Sentinel-managed master and its replicas.

The store code is the same on all three (every multi-key operation stays in one hash slot);
only the client differs. Each client here is bounded the same way — connect and read timeouts of
``timeout`` — and leaves failover retries to ``RedisStore``, which retries within a time bound
rather than a count (a failover lasts seconds, whatever the number of attempts).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from proxy.store.settings import StoreSettings

__all__ = ["Client", "cluster_client", "sentinel_client", "standalone_client"]

#: What ``RedisStore`` talks to, and how to release everything the client holds.
Client = tuple["Redis | RedisCluster", Callable[[], Awaitable[None]]]


def standalone_client(url: str, timeout: float, max_connections: int) -> Client:
    pool: BlockingConnectionPool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        # One immediate retry on a dead pooled connection (Redis restarted); never on a
        # timeout, which would only double the wait.
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    )
    client = Redis.from_pool(pool)  # the client owns (and closes) the pool
    return client, client.aclose


#: The shortest spacing of error-triggered slot-map refreshes (see ``cluster_client``).
_REFRESH_INTERVAL = 0.1


def cluster_client(url: str, timeout: float, max_connections: int) -> Client:
    """``url`` is any node (a seed): the client learns the slot map from it (CLUSTER SLOTS),
    follows MOVED / ASK itself, and refreshes the map after a connection error."""
    client = RedisCluster.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        max_connections=max_connections,  # per node
        # One quick refresh-and-retry of its own; RedisStore retries with backoff after that.
        retry=Retry(NoBackoff(), 1),
        # redis-py spaces the slot-map refreshes that errors trigger by one second by default:
        # a refresh that failed during a failover then left the client on the dead master for
        # up to a second after the cluster was whole again, and every call in that second
        # failed (503s with budget_failure_mode: closed). A tenth of a second still collapses
        # a burst of failing calls into one refresh, and is shorter than our first backoff
        # step plus an attempt, so the retry RedisStore owes a re-learnt topology gets one.
        topology_refresh_min_interval=_REFRESH_INTERVAL,
    )
    return client, client.aclose


def sentinel_client(
    sentinels: tuple[tuple[str, int], ...],
    master_name: str,
    url: str | None,
    timeout: float,
) -> Client:
    """A client of the master the sentinels name. Every new connection asks them again, and a
    connection to a demoted master (READONLY) is dropped, so the client follows a failover.

    The sentinels are asked without retries: redis-py asks them in turn and moves on when one
    does not answer, but its default retry policy (ten backed-off attempts, ~4 s) spent longer
    on a dead first sentinel than a store attempt may take — the attempt was cut before the
    next sentinel was asked, and so was every later one, for as long as that sentinel stayed
    down (a sentinel often runs beside the master it watches, and dies with it)."""
    bounded: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    sentinel_kwargs: dict[str, Any] = {**bounded, "retry": Retry(NoBackoff(), 0)}
    master_kwargs: dict[str, Any] = dict(bounded)
    if url:
        parsed = dict(parse_url(url))
        master_kwargs["ssl"] = url.startswith("rediss://")
        for key in ("username", "password", "db"):
            if parsed.get(key) is not None:
                master_kwargs[key] = parsed[key]
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(sentinels), sentinel_kwargs=sentinel_kwargs, **master_kwargs
    )
    client: Redis = sentinel.master_for(master_name, **master_kwargs)

    async def close() -> None:
        await client.aclose()
        await sentinel.aclose()

    return client, close


def open_client(settings: StoreSettings, timeout: float, max_connections: int) -> Client:
    if settings.redis_mode == "cluster" and settings.redis_url:
        return cluster_client(settings.redis_url, timeout, max_connections)
    if settings.redis_mode == "sentinel" and settings.redis_master_name:
        return sentinel_client(
            settings.redis_sentinels, settings.redis_master_name, settings.redis_url, timeout
        )
    if settings.redis_mode == "standalone" and settings.redis_url:
        return standalone_client(settings.redis_url, timeout, max_connections)
    raise ValueError(f"incomplete redis settings for mode {settings.redis_mode!r}")
