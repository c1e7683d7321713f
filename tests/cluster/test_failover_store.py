"""The store through a real failover: a Redis Cluster master and a Sentinel-managed master are
killed (SIGKILL) while reservations run; calls retry through the failover within their time
bound, the quota holds across it, and the retries reach the metrics. Sentinel: the promoted
master has no replica left (its old master is dead), so every budget write's WAIT times out —
the write must still be acknowledged, never timed out and retried."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis
from harness import LocalRedisCluster, LocalSentinel, PrivateRedis, free_cluster_port, free_port

from proxy.metrics import Metrics
from proxy.store import ObservedStore
from proxy.store.base import BudgetWindow, Reservation, StoreUnavailable, team_tag
from proxy.store.redis import RedisStore
from proxy.store.topology import cluster_client, sentinel_client

pytestmark = pytest.mark.anyio

AMOUNT = 10
ALLOWED = 60  # reservations that fit the quota
KILL_AFTER = 10  # admissions before the master is killed


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def reserve_through(store: ObservedStore, team: str, kill: object) -> tuple[int, int]:
    """Reserve AMOUNT until refused, killing the master (``kill()``, in a thread) after ten
    admissions; returns (admitted, refused-by-the-store)."""
    window = BudgetWindow("tpd", "day", ALLOWED * AMOUNT)
    admitted = unavailable = 0
    killer: asyncio.Task[None] | None = None
    give_up = time.monotonic() + 90  # a store that never recovers fails the test, never hangs it
    for _ in range(10 * ALLOWED):
        if time.monotonic() > give_up:
            break
        if admitted == KILL_AFTER and killer is None:
            killer = asyncio.create_task(asyncio.to_thread(kill))  # type: ignore[arg-type]
        try:
            r = await store.reserve(team, [(window, AMOUNT)])
        except StoreUnavailable:
            unavailable += 1
            continue
        if not r.admitted:
            break
        admitted += 1
        await asyncio.sleep(0.01)  # spread the load over the failover
    assert killer is not None
    await killer
    return admitted, unavailable


def retries(metrics: Metrics, op: str) -> float:
    total = 0.0
    for family in metrics.registry.collect():
        if family.name == "routefit_store_op_retries":
            total += sum(s.value for s in family.samples if s.labels.get("op") == op)
    return total


async def test_cluster_master_killed_mid_reservations(redis_cluster: LocalRedisCluster) -> None:
    team = "failover-" + uuid.uuid4().hex[:8]
    victim = redis_cluster.master_of(team_tag(team))
    metrics = Metrics()
    store = ObservedStore(
        RedisStore(
            client=cluster_client(redis_cluster.url, 0.5, 64),
            failover_seconds=15.0,
            observer=metrics,
        ),
        metrics,
    )
    try:
        admitted, unavailable = await reserve_through(
            store, team, lambda: redis_cluster.kill(victim)
        )
        assert redis_cluster.master_of(team_tag(team)) != victim  # a replica took over
        assert unavailable == 0  # every call waited out the failover
        # A reservation whose reply was lost is retried (charged twice, conservative); never
        # more than the quota is admitted — but for what the dead master had not replicated
        # (replication is asynchronous): at most the KILL_AFTER reservations before the kill
        # and the one in flight (docs/operations.md § Redis topologies).
        assert 10 < admitted <= ALLOWED + KILL_AFTER + 1
        assert retries(metrics, "reserve") >= 1
    finally:
        await store.close()
        redis_cluster.restart(victim)
        redis_cluster.wait_healthy()


async def test_sentinel_master_killed_mid_reservations(redis_sentinel: LocalSentinel) -> None:
    team = "failover-" + uuid.uuid4().hex[:8]
    victim = redis_sentinel.master()
    # The sentinel listed first is down for the whole test, as when it ran beside the master
    # and died with it: the client must ask the next ones rather than spend its attempts on it.
    live = tuple(("127.0.0.1", int(s.split(":")[1])) for s in redis_sentinel.sentinels)
    sentinels = (("127.0.0.1", free_port()), *live)
    metrics = Metrics()
    store = ObservedStore(
        RedisStore(
            client=sentinel_client(sentinels, redis_sentinel.master_name, None, 0.5),
            failover_seconds=20.0,
            observer=metrics,
            replicas=1,  # as connect_store opens it in sentinel mode
        ),
        metrics,
    )
    try:
        admitted, unavailable = await reserve_through(
            store, team, lambda: redis_sentinel.kill(victim)
        )
        assert redis_sentinel.master() != victim
        assert unavailable == 0
        # Sentinel replication is asynchronous: the promoted replica may lack what the dead
        # master had not passed on — at most the KILL_AFTER reservations it admitted before
        # the kill (docs/operations.md § Redis topologies). Never more.
        assert 10 < admitted <= ALLOWED + KILL_AFTER + 1  # and the one in flight
        assert retries(metrics, "reserve") >= 1
    finally:
        await store.close()
        redis_sentinel.restart_as_replica(victim)


async def test_a_cluster_client_failing_outside_redis_errors_is_retried_through() -> None:
    """The cluster client raises exceptions that are not ``RedisError``s while no node it can
    reach serves every slot — ``RedisClusterUnreachableError`` while its only node is down,
    ``RedisClusterException`` once the node is up without slots: as in a failover, the call is
    retried within ``failover_seconds``, not given up at once. Each step waits for the retry of
    the step before (no race with a sleep): the node comes up only once the client has been
    retried through its absence, and gets its slots only once it has been retried through
    their absence. The node's port leaves room for its cluster bus port (+10000): a port drawn
    from the ephemeral range above 55535 made redis-server refuse to start (one run in five)."""
    node = PrivateRedis(free_cluster_port())
    node.cmd += ["--cluster-enabled", "yes", "--cluster-config-file", f"{node.workdir}/n.conf"]
    metrics = Metrics()
    store = ObservedStore(
        RedisStore(
            client=cluster_client(node.url.removesuffix("/0"), 0.5, 8),
            failover_seconds=30.0,
            observer=metrics,
        ),
        metrics,
    )

    async def retried(reserving: asyncio.Task[Reservation], *errors: str) -> None:
        """Until a retry of one of ``errors`` is counted (the reservation failing instead
        fails the test with its error)."""
        give_up = time.monotonic() + 20
        while sum(retried_for(metrics, "reserve", e) for e in errors) < 1:
            if reserving.done():
                await reserving  # raises what gave the call up
                pytest.fail(f"the reservation ended before a retry of {errors}")
            assert time.monotonic() < give_up, f"no retry of {errors} was counted"
            await asyncio.sleep(0.01)

    def add_slots() -> None:
        with redis.Redis(port=node.port) as admin:
            admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)

    window = BudgetWindow("t", "day", 9)
    reserving = asyncio.create_task(store.reserve("late-" + uuid.uuid4().hex[:8], [(window, 1)]))
    try:
        # nothing listens (an older redis-py may say RedisClusterException here too)
        await retried(reserving, "RedisClusterUnreachableError", "RedisClusterException")
        await asyncio.to_thread(node.start)
        await retried(reserving, "RedisClusterException")  # a node, no slot served
        await asyncio.to_thread(add_slots)
        r = await reserving
        assert r.admitted
    finally:
        reserving.cancel()  # a test failing mid-way leaves no call retrying
        await store.close()
        node.close()


def non_redis_retries(metrics: Metrics) -> float:
    """Retries of what the cluster client raises, outside ``RedisError``, when no node it can
    reach serves the slots: ``RedisClusterUnreachableError`` with nothing listening (redis-py
    8), ``RedisClusterException`` (earlier versions, and a node serving no slot)."""
    return sum(
        retried_for(metrics, "reserve", name)
        for name in ("RedisClusterUnreachableError", "RedisClusterException")
    )


def retried_for(metrics: Metrics, op: str, error: str) -> float:
    for family in metrics.registry.collect():
        if family.name == "routefit_store_op_retries":
            return sum(
                s.value
                for s in family.samples
                if s.name.endswith("_total")
                and s.labels.get("op") == op
                and s.labels.get("error") == error
            )
    return 0.0


@pytest.mark.parametrize(("failover", "retried"), [(0.0, 0), (0.01, 1)])
async def test_a_failover_window_shorter_than_an_attempt_still_retries_once(
    failover: float, retried: int
) -> None:
    """'Retried at least once, however long its first attempt took' (with failover_seconds > 0),
    and never with failover_seconds = 0: against a node that never comes up, the call gives up
    as StoreUnavailable after exactly that many retries."""
    metrics = Metrics()
    store = ObservedStore(
        RedisStore(
            client=cluster_client(f"redis://127.0.0.1:{free_port()}", 0.2, 4),
            failover_seconds=failover,
            observer=metrics,
        ),
        metrics,
    )
    try:
        with pytest.raises(StoreUnavailable):
            await store.reserve("down", [(BudgetWindow("t", "day", 9), 1)])
        assert non_redis_retries(metrics) == retried
    finally:
        await store.close()
