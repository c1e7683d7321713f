"""One contract, two stores: every ``both`` test runs against SqliteStore and RedisStore.

Redis tests use the shared server from the ``redis_url`` fixture with unique (uuid) route and
team names, so parallel runs never collide; the outage tests run a private ``redis-server``.
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import socket
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from harness import free_port, private_redis
from redis.crc import key_slot

from pricing.calibration import Anchor, Sample
from proxy.store import open_store
from proxy.store.base import (
    BudgetWindow,
    Store,
    StoreUnavailable,
    route_tag,
    team_tag,
    window_bucket,
)
from proxy.store.codec import ReservedBucket, decode_token, encode_token
from proxy.store.redis import LUA_CALENDAR, RedisStore
from proxy.store.sqlite import SqliteStore
from proxy.store.topology import Client, cluster_client, sentinel_client

pytestmark = pytest.mark.anyio

MINUTE = BudgetWindow("tpm", "minute", 100)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def topology_client(request: pytest.FixtureRequest, mode: str, timeout: float) -> Client:
    """A client of the session's Redis Cluster or Sentinel setup (started on first use)."""
    if mode == "cluster":
        return cluster_client(request.getfixturevalue("redis_cluster").url, timeout, 64)
    setup = request.getfixturevalue("redis_sentinel")
    sentinels = tuple((h, int(p)) for h, p in (s.split(":") for s in setup.sentinels))
    return sentinel_client(sentinels, setup.master_name, None, timeout)


@pytest.fixture(params=["sqlite", "redis", "cluster", "sentinel"])
async def make(request: pytest.FixtureRequest) -> AsyncIterator[Callable[..., Any]]:
    """A factory of stores of one backend (Redis in three topologies); every store it made is
    closed afterwards."""
    created: list[Store] = []
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""

    def factory(**kwargs: Any) -> Any:
        store: Store
        if request.param == "redis":
            store = RedisStore(url, **kwargs)
        elif request.param in ("cluster", "sentinel"):
            client = topology_client(request, request.param, kwargs.get("timeout", 0.5))
            store = RedisStore(client=client, failover_seconds=2.0, **kwargs)
        else:
            kwargs.pop("timeout", None)
            store = SqliteStore(":memory:", **kwargs)
        created.append(store)
        return store

    yield factory
    for store in created:
        await store.close()


def sample(route: str, i: int) -> Sample:
    return Sample(
        route=route,
        time=1_700_000_000.0 + i,
        text=100 + i,
        framing=7,
        images=0,
        image_count=0,
        message_count=2 + i,
        estimate=110 + i,
        anchored=i % 2 == 0,
        actual=111 + i,
        cached=i,
    )


def anchor(n: int) -> Anchor:
    return Anchor(text=n, framing=3, images=0, actual=n + 5)


async def wait_clear_of_day_boundary() -> None:
    """Budget tests that must stay in one bucket use day windows; avoid the UTC midnight."""
    _, left = window_bucket("day", time.time())
    if left < 5:
        await asyncio.sleep(left + 0.1)


# -- calibration ---------------------------------------------------------------------------


async def test_samples_round_trip_in_order_capped_per_route(make: Callable[..., Any]) -> None:
    store = make(sample_cap=5)
    a, b = uid("route"), uid("route")
    for i in range(12):
        await store.record_sample(sample(a, i))
    for i in range(3):
        await store.record_sample(sample(b, 100 + i))

    assert await store.recent_samples(a, 100) == [sample(a, i) for i in range(7, 12)]
    assert await store.recent_samples(a, 2) == [sample(a, 10), sample(a, 11)]
    assert await store.recent_samples(b, 10) == [sample(b, 100 + i) for i in range(3)]
    assert await store.recent_samples(uid("route"), 10) == []
    assert await store.recent_samples(a, 0) == []


async def test_anchors_first_hit_in_key_order(make: Callable[..., Any]) -> None:
    store = make()
    route, other = uid("route"), uid("route")
    longest, middle, shortest = b"\x03" * 8, b"\x02" * 8, b"\x01" * 8
    keys = [longest, middle, shortest]  # callers order them longest prefix first

    assert await store.find_anchor(route, keys) is None
    assert await store.find_anchor(route, []) is None
    await store.put_anchor(route, shortest, anchor(10), ttl=60)
    await store.put_anchor(route, middle, anchor(20), ttl=60)
    assert await store.find_anchor(route, keys) == (1, anchor(20))
    assert await store.find_anchor(route, [shortest]) == (0, anchor(10))
    await store.put_anchor(route, longest, anchor(30), ttl=60)
    assert await store.find_anchor(route, keys) == (0, anchor(30))
    # overwrite replaces; routes are isolated
    await store.put_anchor(route, longest, anchor(31), ttl=60)
    assert await store.find_anchor(route, keys) == (0, anchor(31))
    assert await store.find_anchor(other, keys) is None
    assert await store.find_anchor(route, [b"\x09" * 8, b"\x08" * 8]) is None


async def test_record_batch_writes_samples_and_anchors_together(
    make: Callable[..., Any],
) -> None:
    store = make(sample_cap=4)
    a, b = uid("route"), uid("route")
    samples = [sample(a, i) for i in range(6)] + [sample(b, 50)]
    anchors = [(a, b"\x07" * 8, anchor(7)), (b, b"\x08" * 8, anchor(8))]
    await store.record_batch(samples, anchors, ttl=60)
    await store.record_batch([], [], ttl=60)  # nothing to write is fine
    assert await store.recent_samples(a, 10) == [sample(a, i) for i in range(2, 6)]
    assert await store.recent_samples(b, 10) == [sample(b, 50)]
    assert await store.find_anchor(a, [b"\x07" * 8]) == (0, anchor(7))
    assert await store.find_anchor(b, [b"\x07" * 8, b"\x08" * 8]) == (1, anchor(8))
    assert isinstance(store.shared, bool)
    with pytest.raises(ValueError):
        await store.record_batch([], anchors, ttl=0)


async def test_anchor_expires(make: Callable[..., Any]) -> None:
    store = make()
    route = uid("route")
    await store.put_anchor(route, b"k", anchor(1), ttl=0.3)
    await store.put_anchor(route, b"keep", anchor(2), ttl=60)
    assert await store.find_anchor(route, [b"k"]) == (0, anchor(1))
    await asyncio.sleep(0.45)
    assert await store.find_anchor(route, [b"k"]) is None
    assert await store.find_anchor(route, [b"k", b"keep"]) == (1, anchor(2))
    with pytest.raises(ValueError):
        await store.put_anchor(route, b"k", anchor(1), ttl=0)


# -- budgets -------------------------------------------------------------------------------


async def test_reserve_admits_up_to_the_limit_then_rejects(make: Callable[..., Any]) -> None:
    store = make()
    team = uid("team")
    first = await store.reserve(team, [(MINUTE, 60)])
    assert first.admitted and first.token
    assert first.windows[0].used == 60 and first.windows[0].limit == 100
    assert 0 < first.windows[0].reset_seconds <= 60
    exact = await store.reserve(team, [(MINUTE, 40)])  # used + amount == limit: admitted
    assert exact.admitted and exact.windows[0].used == 100
    over = await store.reserve(team, [(MINUTE, 1)])
    assert not over.admitted and over.token is None
    assert over.windows[0].used == 100
    assert 0 < over.retry_after <= 60
    assert [w.used for w in await store.usage(team, [MINUTE])] == [100]


async def test_reserve_is_all_or_nothing_across_windows(make: Callable[..., Any]) -> None:
    await wait_clear_of_day_boundary()
    store = make()
    team = uid("team")
    wide = BudgetWindow("tpd", "day", 1_000)
    narrow = BudgetWindow("usd", "month", 10)
    assert (await store.reserve(team, [(wide, 5), (narrow, 8)])).admitted
    refused = await store.reserve(team, [(wide, 5), (narrow, 5)])
    assert not refused.admitted
    assert [w.used for w in refused.windows] == [5, 8]
    # the month window is the exhausted one: retry_after is its reset, not the day's
    assert refused.retry_after == pytest.approx(refused.windows[1].reset_seconds, abs=1)
    assert [w.used for w in await store.usage(team, [wide, narrow])] == [5, 8]


async def test_reservation_larger_than_the_limit_is_rejected(make: Callable[..., Any]) -> None:
    store = make()
    team = uid("team")
    assert not (await store.reserve(team, [(MINUTE, 101)])).admitted
    assert not (await store.reserve(team, [(BudgetWindow("none", "minute", 0), 1)])).admitted
    assert [w.used for w in await store.usage(team, [MINUTE])] == [0]


async def test_zero_amount_passes_and_can_be_settled_up(make: Callable[..., Any]) -> None:
    await wait_clear_of_day_boundary()
    store = make()
    team = uid("team")
    tokens = BudgetWindow("tpd", "day", 1_000)
    cost = BudgetWindow("usd", "day", 10)
    assert (await store.reserve(team, [(cost, 10)])).admitted  # cost window now full
    r = await store.reserve(team, [(tokens, 50), (cost, 0)])  # a free request still passes
    assert r.admitted
    assert [w.used for w in r.windows] == [50, 10]
    await store.settle(team, r.token, [(tokens, 40), (cost, 3)])  # it cost something after all
    assert [w.used for w in await store.usage(team, [tokens, cost])] == [40, 13]


async def test_settle_releases_and_adjusts_both_ways(make: Callable[..., Any]) -> None:
    await wait_clear_of_day_boundary()
    store = make()
    team = uid("team")
    day = BudgetWindow("tpd", "day", 1_000)
    r1 = await store.reserve(team, [(day, 500)])
    await store.settle(team, r1.token, [(day, 200)])  # down
    assert [w.used for w in await store.usage(team, [day])] == [200]
    r2 = await store.reserve(team, [(day, 300)])
    await store.settle(team, r2.token, [(day, 450)])  # up: actual is a fact, even past limit
    assert [w.used for w in await store.usage(team, [day])] == [650]
    r3 = await store.reserve(team, [(day, 100)])
    await store.settle(team, r3.token, [(day, 0)])  # release
    assert [w.used for w in await store.usage(team, [day])] == [650]
    # a token is settled once: retries (e.g. after a timeout) do not apply the delta twice
    await store.settle(team, r1.token, [(day, 0)])
    await store.settle(team, r2.token, [(day, 300)])
    assert [w.used for w in await store.usage(team, [day])] == [650]


async def test_settle_touches_only_the_named_windows(make: Callable[..., Any]) -> None:
    await wait_clear_of_day_boundary()
    store = make()
    team = uid("team")
    a, b = BudgetWindow("a", "day", 100), BudgetWindow("b", "day", 100)
    r = await store.reserve(team, [(a, 30), (b, 30)])
    # ``b`` is not named: it keeps its reservation; an unknown window is ignored
    await store.settle(team, r.token, [(a, 10), (BudgetWindow("c", "day", 100), 99)])
    usage = await store.usage(team, [a, b, BudgetWindow("c", "day", 100)])
    assert [w.used for w in usage] == [10, 30, 0]


async def test_usage_reflects_reservations_and_reset_times(make: Callable[..., Any]) -> None:
    await wait_clear_of_day_boundary()
    store = make()
    team = uid("team")
    windows = [MINUTE, BudgetWindow("tpd", "day", 10_000), BudgetWindow("m", "month", 10**9)]
    assert [w.used for w in await store.usage(team, windows)] == [0, 0, 0]
    r = await store.reserve(team, [(w, 42) for w in windows])
    assert r.admitted
    states = await store.usage(team, windows)
    assert [w.used for w in states] == [42, 42, 42]
    assert [w.name for w in states] == ["tpm", "tpd", "m"]
    assert [w.limit for w in states] == [100, 10_000, 10**9]
    _, month_left = window_bucket("month", time.time())
    assert 0 < states[0].reset_seconds <= 60
    assert 0 < states[1].reset_seconds <= 86_400
    assert states[2].reset_seconds == pytest.approx(month_left, abs=5)
    assert await store.usage(team, []) == []


async def test_settle_after_the_bucket_is_gone_never_goes_negative(
    make: Callable[..., Any],
) -> None:
    """A reservation whose bucket's retention has passed: settle does nothing."""
    store = make()
    team = uid("team")
    now = time.time()
    bucket, _ = window_bucket("minute", now - 600)
    stale = encode_token("t" + uuid.uuid4().hex, [ReservedBucket("tpm", bucket, 50, int(now) - 1)])
    await store.settle(team, stale, [(MINUTE, 0)])
    await store.settle(team, stale, [(MINUTE, 80)])
    assert [w.used for w in await store.usage(team, [MINUTE])] == [0]


async def test_concurrent_reserves_admit_exactly_k(make: Callable[..., Any]) -> None:
    await wait_clear_of_day_boundary()
    # two instances = two pools (two replicas) for Redis; the same for SQLite is one database
    # per instance, so SQLite gets one store hammered by all tasks.
    # 200 calls at once open their connections together: a generous timeout, so that a loaded
    # machine's slow connects are not mistaken for the atomicity this test is about.
    first = make(timeout=3.0)
    second = make(timeout=3.0) if isinstance(first, RedisStore) else first
    team = uid("team")
    k, amount = 37, 7
    window = BudgetWindow("tpd", "day", k * amount + amount - 1)
    results = await asyncio.gather(
        *((first if i % 2 else second).reserve(team, [(window, amount)]) for i in range(200))
    )
    assert sum(r.admitted for r in results) == k
    assert all(r.token is None for r in results if not r.admitted)
    assert [w.used for w in await first.usage(team, [window])] == [k * amount]
    if isinstance(first, RedisStore):
        bucket, _ = window_bucket("day", time.time())
        raw = await first.client.get(f"{team_tag(team)}:w:tpd:{bucket}")
        assert int(raw) == k * amount


async def test_invalid_input_is_a_value_error(make: Callable[..., Any]) -> None:
    store = make()
    team = uid("team")
    with pytest.raises(ValueError):
        await store.reserve(team, [(MINUTE, -1)])
    with pytest.raises(ValueError):
        await store.reserve(team, [(BudgetWindow("x", "week", 10), 1)])
    with pytest.raises(ValueError):
        await store.reserve(team, [(MINUTE, 1), (MINUTE, 1)])
    with pytest.raises(ValueError):
        await store.settle(team, "not a token", [(MINUTE, 1)])
    with pytest.raises(ValueError):
        await store.usage(team, [BudgetWindow("x", "year", 10)])
    assert [w.used for w in await store.usage(team, [MINUTE])] == [0]


# -- stored responses -------------------------------------------------------------------------


async def test_responses_round_trip_per_team(make: Callable[..., Any]) -> None:
    store = make()
    team, other = uid("team"), uid("team")
    rid = "resp_" + uuid.uuid4().hex
    body = b'{"id": "' + rid.encode() + b'", "output": []}\x00\xff'
    assert await store.get_response(team, rid) is None
    await store.put_response(team, rid, body, ttl_seconds=60)
    assert await store.get_response(team, rid) == body
    assert await store.get_response(other, rid) is None  # another team never sees it
    assert await store.delete_response(other, rid) is False
    await store.put_response(team, rid, b"replaced", ttl_seconds=60)
    assert await store.get_response(team, rid) == b"replaced"
    assert await store.delete_response(team, rid) is True
    assert await store.get_response(team, rid) is None
    assert await store.delete_response(team, rid) is False


async def test_responses_expire(make: Callable[..., Any]) -> None:
    store = make()
    team = uid("team")
    await store.put_response(team, "short", b"x", ttl_seconds=1)
    await store.put_response(team, "long", b"y", ttl_seconds=60)
    assert await store.get_response(team, "short") == b"x"
    await asyncio.sleep(1.3)
    assert await store.get_response(team, "short") is None
    assert await store.delete_response(team, "short") is False
    assert await store.get_response(team, "long") == b"y"


async def test_responses_reject_bad_arguments(make: Callable[..., Any]) -> None:
    store = make()
    for ttl in (0, -5, 1.5, True):
        with pytest.raises(ValueError):
            await store.put_response("t", "r", b"x", ttl_seconds=ttl)
    with pytest.raises(ValueError):
        await store.put_response("t", "", b"x", ttl_seconds=5)
    with pytest.raises(ValueError):
        await store.get_response("t", "")


async def test_request_records_newest_first_capped_per_team(make: Callable[..., Any]) -> None:
    store = make()
    team, other = uid("team"), uid("team")
    assert await store.recent_requests(team, 10) == []
    for i in range(9):
        await store.record_request(team, f"r{i}".encode() + b"\x00\xff", 4)
    await store.record_request(other, b"theirs", 4)
    newest = [f"r{i}".encode() + b"\x00\xff" for i in (8, 7, 6, 5)]
    assert await store.recent_requests(team, 100) == newest  # only the newest 4 are kept
    assert await store.recent_requests(team, 2) == newest[:2]
    assert await store.recent_requests(team, 0) == []
    assert await store.recent_requests(other, 100) == [b"theirs"]
    for cap in (0, -1, True, 1.5):
        with pytest.raises(ValueError):
            await store.record_request(team, b"x", cap)


async def test_ping_and_name(make: Callable[..., Any]) -> None:
    store = make()
    assert await store.ping() is True
    assert store.name in ("redis", "sqlite")


# -- SQLite specifics ------------------------------------------------------------------------


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


async def test_sqlite_window_rollover() -> None:
    t0 = calendar.timegm((2024, 12, 31, 23, 59, 10, 0, 0, 0))  # minute, day and month roll
    clock = FakeClock(t0)
    store = SqliteStore(":memory:", clock=clock)
    try:
        windows = [MINUTE, BudgetWindow("tpd", "day", 100), BudgetWindow("m", "month", 100)]
        old = await store.reserve("t", [(w, 60) for w in windows])
        assert old.admitted
        assert not (await store.reserve("t", [(MINUTE, 60)])).admitted
        clock.t = t0 + 50  # 2025-01-01 00:00:00: every window is a new bucket
        assert [w.used for w in await store.usage("t", windows)] == [0, 0, 0]
        new = await store.reserve("t", [(w, 100) for w in windows])
        assert new.admitted
        # settling the old reservation adjusts the old buckets only
        await store.settle("t", old.token, [(w, 10) for w in windows])
        assert [w.used for w in await store.usage("t", windows)] == [100, 100, 100]
        clock.t = t0
        assert [w.used for w in await store.usage("t", windows)] == [10, 10, 10]
        # past the minute bucket's end + slack, settle skips it; the day and month still apply
        clock.t = t0 + 50 + 60 + 61
        await store.settle("t", new.token, [(w, 0) for w in windows])
        assert [w.used for w in await store.usage("t", windows)] == [0, 0, 0]
        clock.t = t0 + 50
        assert [w.used for w in await store.usage("t", windows)] == [0, 0, 0]  # minute purged
    finally:
        await store.close()


async def test_sqlite_file_uses_wal_and_persists(tmp_path: Any) -> None:
    path = str(tmp_path / "sub" / "store.db")
    store = SqliteStore(path)
    await store.record_sample(sample("r", 1))
    await store.put_anchor("r", b"k", anchor(5), ttl=60)
    r = await store.reserve("t", [(MINUTE, 30)])
    await store.close()
    assert not await store.ping()
    with pytest.raises(StoreUnavailable):
        await store.recent_samples("r", 1)

    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again = SqliteStore(path)
    try:
        assert await again.recent_samples("r", 5) == [sample("r", 1)]
        assert await again.find_anchor("r", [b"k"]) == (0, anchor(5))
        assert r.token is not None
        await again.settle("t", r.token, [(MINUTE, 0)])
        assert [w.used for w in await again.usage("t", [MINUTE])] == [0]
    finally:
        await again.close()


async def test_sqlite_lists_are_trimmed_in_steps_and_read_exactly(tmp_path: Any) -> None:
    """The embedded store trims a list to its cap once a sixteenth of the cap was written (one
    write at a time, or in batches), not after every write; a read still sees exactly the newest
    ``cap``, in order, and the file never holds more than a step past it."""
    path = str(tmp_path / "store.db")
    store = SqliteStore(path, sample_cap=32)  # a step of 2
    route, team, other = uid("route"), uid("team"), uid("team")
    rows: dict[str, int] = {}
    try:
        for i in range(101):
            await store.record_sample(sample(route, i))
            rows[route] = max(rows.get(route, 0), _rows(path, "samples", "route", route))
        await store.record_batch([sample(route, 200 + i) for i in range(5)], [], ttl=60)
        assert await store.recent_samples(route, 1000) == (
            [sample(route, i) for i in range(74, 101)] + [sample(route, 200 + i) for i in range(5)]
        )
        for i in range(0, 120, 3):  # batches of three to a cap of 64 (a step of 4)
            batch = [(team, f"r{j}".encode()) for j in range(i, i + 3)] + [(other, b"x")]
            await store.record_requests(batch, 64)
            rows[team] = max(rows.get(team, 0), _rows(path, "requests", "team", team))
        await store.record_request(team, b"last", 64)
        newest = [b"last"] + [f"r{j}".encode() for j in range(119, 56, -1)]
        assert await store.recent_requests(team, 1000) == newest
        assert await store.recent_requests(team, 3) == newest[:3]
        assert await store.recent_requests(other, 1000) == [b"x"] * 40
    finally:
        await store.close()
    assert 32 < rows[route] <= 32 + 2  # trimmed, a step at a time
    assert 64 < rows[team] <= 64 + 4 + 3


def _rows(path: str, table: str, column: str, key: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        found = db.execute(f"SELECT count(*) FROM {table} WHERE {column} = ?", (key,))
        return int(found.fetchone()[0])


async def test_sqlite_unusable_path_is_unavailable(tmp_path: Any) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = SqliteStore(str(blocker / "store.db"))
    try:
        assert not await store.ping()
        with pytest.raises(StoreUnavailable):
            await store.reserve("t", [(MINUTE, 1)])
    finally:
        await store.close()


# -- Redis specifics -------------------------------------------------------------------------


async def test_redis_keys_are_hash_tagged_and_expire(redis_url: str) -> None:
    store = RedisStore(redis_url, sample_cap=3)
    try:
        team, route = uid("team"), uid("route")
        r = await store.reserve(team, [(MINUTE, 10), (BudgetWindow("m", "month", 100), 1)])
        await store.record_sample(sample(route, 1))
        await store.put_anchor(route, b"\xab\xcd", anchor(1), ttl=30)
        client = store.client
        team_keys = sorted([k.decode() async for k in client.scan_iter(match=f"*{team}*")])
        route_keys = sorted([k.decode() async for k in client.scan_iter(match=f"*{route}*")])
        assert r.token is not None
        (token_id, buckets) = decode_token(r.token)
        charged = [f"{team_tag(team)}:w:{b.name}:{b.bucket}" for b in buckets]
        assert team_keys == sorted([*charged, f"{team_tag(team)}:reserved:{token_id}"])
        assert route_keys == [f"{route_tag(route)}:anchor:abcd", f"{route_tag(route)}:samples"]
        slots = {key_slot(k.encode()) for k in team_keys}
        assert len(slots) == 1
        assert len({key_slot(k.encode()) for k in route_keys}) == 1
        # The minute bucket lives until its window's end + 60 s of slack, whatever second of the
        # minute this runs at: the key's TTL is that instant seen from the server's clock.
        minute_pttl = await client.pttl(f"{team_tag(team)}:w:tpm:{buckets[0].bucket}")
        now_s, now_us = await client.time()
        assert buckets[0].expires_at == (buckets[0].bucket + 1) * 60 + 60
        left = buckets[0].expires_at - (now_s + now_us / 1e6)
        assert 60 - 2 < minute_pttl / 1000 <= 120 and abs(minute_pttl / 1000 - left) < 2
        assert 0 < await client.pttl(f"{route_tag(route)}:anchor:abcd") <= 30_000
        assert await client.ttl(f"{route_tag(route)}:samples") > 0
        # the minute bucket comes from the server's clock
        server_s, _ = await client.time()
        assert buckets[0].bucket in {(server_s - 1) // 60, server_s // 60}
        await store.settle(team, r.token, [(MINUTE, 0)])
        marker = [k async for k in client.scan_iter(match=f"{team_tag(team)}:settled:*")]
        assert len(marker) == 1 and await client.ttl(marker[0]) > 0
        for _ in range(50):
            await store.record_sample(sample(route, 2))
        assert len(await store.recent_samples(route, 1_000)) == 3  # cap exact as observed
        await store.record_request(team, b"{}", 10)
        requests = f"{team_tag(team)}:requests"
        assert key_slot(requests.encode()) in slots and await client.ttl(requests) > 0
    finally:
        await store.close()


async def test_redis_settle_after_bucket_expired_does_not_recreate_it(redis_url: str) -> None:
    store = RedisStore(redis_url)
    try:
        team = uid("team")
        client = store.client
        r = await store.reserve(team, [(MINUTE, 50)])
        assert r.token is not None
        key = f"{team_tag(team)}:w:tpm:{decode_token(r.token)[1][0].bucket}"
        await client.delete(key)  # the bucket expired / was evicted
        await store.settle(team, r.token, [(MINUTE, 0)])
        assert await client.exists(key) == 0
        # a counter lower than the reserved amount clamps at 0 and keeps its expiry
        r2 = await store.reserve(team, [(MINUTE, 50)])
        assert r2.token is not None
        key2 = f"{team_tag(team)}:w:tpm:{decode_token(r2.token)[1][0].bucket}"
        await client.set(key2, 10, keepttl=True)
        await store.settle(team, r2.token, [(MINUTE, 0)])
        assert int(await client.get(key2)) == 0
        assert await client.ttl(key2) > 0
    finally:
        await store.close()


async def test_redis_lua_calendar_matches_python(redis_url: str) -> None:
    store = RedisStore(redis_url)
    harness = LUA_CALENDAR + "local b, e = bucket_of(ARGV[1], tonumber(ARGV[2])) return {b, e}"
    points: list[tuple[str, int]] = []
    for year in (1970, 1999, 2000, 2023, 2024, 2025, 2038, 2099, 2100, 2104, 2400):
        for month in range(1, 13):
            start = calendar.timegm((year, month, 1, 0, 0, 0, 0, 0, 0))
            for t in (start - 1, start, start + 1, start + 86_399, start + 86_400 * 15 + 7):
                if t >= 0:
                    points += [("month", t), ("day", t), ("minute", t)]
    try:
        async with store.client.pipeline(transaction=False) as pipe:
            for kind, t in points:
                pipe.eval(harness, 0, kind, t)
            results = await pipe.execute()
    finally:
        await store.close()
    for (kind, t), (bucket, end) in zip(points, results, strict=True):
        want_bucket, left = window_bucket(kind, t)
        assert (bucket, end) == (want_bucket, round(t + left)), (kind, t)


async def test_redis_unreachable_is_unavailable_quickly() -> None:
    port = free_port()
    store = RedisStore(f"redis://127.0.0.1:{port}/0", timeout=0.2)
    try:
        start = time.monotonic()
        assert await store.ping() is False
        for call in (
            store.record_sample(sample("r", 1)),
            store.recent_samples("r", 5),
            store.put_anchor("r", b"k", anchor(1), ttl=5),
            store.find_anchor("r", [b"k"]),
            store.reserve("t", [(MINUTE, 1)]),
            store.usage("t", [MINUTE]),
        ):
            with pytest.raises(StoreUnavailable):
                await call
        assert time.monotonic() - start < 5
    finally:
        await store.close()


async def test_redis_hung_server_times_out() -> None:
    """A server that accepts connections but never answers: bounded by the timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = listener.getsockname()[1]
        store = RedisStore(f"redis://127.0.0.1:{port}/0", timeout=0.2)
        try:
            start = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await store.reserve("t", [(MINUTE, 1)])
            assert await store.ping() is False
            assert time.monotonic() - start < 5
        finally:
            await store.close()


async def test_redis_recovers_after_a_restart() -> None:
    with private_redis() as server:
        store = RedisStore(server.url, timeout=0.3)
        try:
            team = uid("team")
            assert (await store.reserve(team, [(MINUTE, 10)])).admitted
            await store.record_sample(sample("r", 1))

            server.kill()
            with pytest.raises(StoreUnavailable):
                await store.reserve(team, [(MINUTE, 10)])
            with pytest.raises(StoreUnavailable):
                await store.recent_samples("r", 5)
            assert await store.ping() is False

            server.start()  # same port, empty server (no persistence), no script cache
            assert await store.ping() is True
            r = await store.reserve(team, [(MINUTE, 10)])  # the script is loaded again
            assert r.admitted and r.windows[0].used == 10
            await store.record_sample(sample("r", 2))
            assert await store.recent_samples("r", 5) == [sample("r", 2)]
        finally:
            await store.close()


# -- open_store ----------------------------------------------------------------------------


async def test_open_store_picks_the_backend(redis_url: str) -> None:
    embedded = open_store(None, ":memory:")
    shared = open_store(redis_url, ":memory:")
    try:
        assert isinstance(embedded, SqliteStore) and embedded.name == "sqlite"
        assert isinstance(shared, RedisStore) and shared.name == "redis"
        assert await embedded.ping() and await shared.ping()
    finally:
        await embedded.close()
        await shared.close()
