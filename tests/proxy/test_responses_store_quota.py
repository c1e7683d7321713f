"""The per-team bound on stored responses (``routefit_settings.responses_store_bytes_per_team``).

One team with a generous quota must not fill the store every team's budgets and calibration
share: each team's stored bytes are counted atomically in the store (a Lua script on Redis, one
on every replica; one transaction on SQLite), and at the bound the team's oldest records are
evicted. The store tests run on the embedded store, one Redis and a Redis Cluster (the session's
cluster from ``tests/cluster_fixtures.py``: every key of the script in the team's slot); the
gateway tests drive ``/v1/responses`` through routefit in-process against the simulator.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess

from proxy.store.base import Store
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore
from proxy.store.topology import cluster_client

pytestmark = pytest.mark.anyio

TTL = 60


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sqlite", "redis", "cluster"])
async def make(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[], Store]]:
    """A factory of stores of one backend sharing one database (two calls: two replicas);
    every store it made is closed afterwards."""
    created: list[Store] = []
    path = str(request.getfixturevalue("tmp_path") / "store.db")

    def factory() -> Store:
        store: Store
        if request.param == "redis":
            store = RedisStore(request.getfixturevalue("redis_url"))
        elif request.param == "cluster":
            url = request.getfixturevalue("redis_cluster").url
            store = RedisStore(client=cluster_client(url, 0.5, 64), failover_seconds=2.0)
        else:
            store = SqliteStore(path)
        created.append(store)
        return store

    yield factory
    for store in created:
        await store.close()


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def blob(n: int, fill: bytes = b"x") -> bytes:
    return fill * n


async def test_a_team_at_its_bound_evicts_its_oldest(make: Callable[[], Store]) -> None:
    store, team = make(), uid("team")
    for i in range(5):
        assert await store.put_response(team, f"r{i}", blob(100), TTL, team_bytes=300)
        await asyncio.sleep(0.01)  # each record expires after the one before it
    assert await store.response_bytes(team) == 300
    assert [await store.get_response(team, f"r{i}") is not None for i in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]


async def test_one_team_at_its_bound_does_not_touch_another_team(
    make: Callable[[], Store],
) -> None:
    store, greedy, quiet = make(), uid("greedy"), uid("quiet")
    for i in range(3):
        assert await store.put_response(quiet, f"q{i}", blob(200), TTL, team_bytes=1000)
    for i in range(20):  # ten times its bound
        assert await store.put_response(greedy, f"g{i}", blob(500), TTL, team_bytes=1000)
    assert await store.put_response(quiet, "q3", blob(400), TTL, team_bytes=1000)

    assert await store.response_bytes(greedy) == 1000
    assert await store.response_bytes(quiet) == 1000
    for i in range(3):
        assert await store.get_response(quiet, f"q{i}") == blob(200)
    assert await store.get_response(quiet, "q3") == blob(400)


async def test_concurrent_stores_on_two_replicas_keep_the_count(
    make: Callable[[], Store],
) -> None:
    one, two, team = make(), make(), uid("team")
    rng = random.Random(7)
    sizes = {f"r{i}": rng.randrange(50, 400) for i in range(60)}
    bound = 4000  # about a fifth of what is written: most stores evict
    kept = await asyncio.gather(
        *(
            (one if i % 2 else two).put_response(team, rid, blob(n), TTL, team_bytes=bound)
            for i, (rid, n) in enumerate(sizes.items())
        )
    )
    assert all(kept)
    present = {rid: await one.get_response(team, rid) for rid in sizes}
    held = sum(len(v) for v in present.values() if v is not None)
    assert 0 < held <= bound
    assert await one.response_bytes(team) == held
    assert await two.response_bytes(team) == held
    for rid, value in present.items():
        assert value is None or value == blob(sizes[rid])


async def test_concurrent_stores_under_the_bound_count_every_byte(
    make: Callable[[], Store],
) -> None:
    one, two, team = make(), make(), uid("team")
    sizes = [37 * (i + 1) for i in range(40)]
    await asyncio.gather(
        *(
            (one if i % 2 else two).put_response(team, f"r{i}", blob(n), TTL, team_bytes=10**9)
            for i, n in enumerate(sizes)
        )
    )
    assert await one.response_bytes(team) == sum(sizes)


async def test_a_record_larger_than_the_bound_is_not_stored(make: Callable[[], Store]) -> None:
    store, team = make(), uid("team")
    assert await store.put_response(team, "small", blob(100), TTL, team_bytes=150)
    assert not await store.put_response(team, "big", blob(151), TTL, team_bytes=150)
    assert await store.get_response(team, "big") is None
    assert await store.get_response(team, "small") == blob(100)  # nothing evicted for it
    assert await store.response_bytes(team) == 100
    assert not await store.put_response(team, "none", blob(1), TTL, team_bytes=0)
    assert await store.get_response(team, "none") is None


async def test_deleting_and_replacing_release_bytes(make: Callable[[], Store]) -> None:
    store, team = make(), uid("team")
    await store.put_response(team, "a", blob(100), TTL, team_bytes=1000)
    await store.put_response(team, "b", blob(200), TTL, team_bytes=1000)
    await store.put_response(team, "a", blob(50), TTL, team_bytes=1000)  # replaced: counted once
    assert await store.response_bytes(team) == 250
    assert await store.delete_response(team, "b")
    assert await store.response_bytes(team) == 50
    assert not await store.delete_response(team, "b")
    assert await store.response_bytes(team) == 50
    assert await store.delete_response(team, "a")
    assert await store.response_bytes(team) == 0
    # the released bytes are room again: nothing is evicted for a record that fits now
    await store.put_response(team, "c", blob(600), TTL, team_bytes=1000)
    await store.put_response(team, "d", blob(400), TTL, team_bytes=1000)
    assert await store.get_response(team, "c") == blob(600)


async def test_expired_records_release_their_bytes(make: Callable[[], Store]) -> None:
    store, team = make(), uid("team")
    await store.put_response(team, "short", blob(300), 1, team_bytes=1000)
    await store.put_response(team, "long", blob(200), TTL, team_bytes=1000)
    assert await store.response_bytes(team) == 500
    await asyncio.sleep(1.3)
    assert await store.response_bytes(team) == 200
    await store.put_response(team, "next", blob(800), TTL, team_bytes=1000)
    assert await store.get_response(team, "long") == blob(200)  # the expired bytes made room
    assert await store.response_bytes(team) == 1000


class Clock:
    """The embedded store's clock, moved by the test (no sleeping through a TTL)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_sqlite_sweep_of_expired_records_releases_their_teams_bytes() -> None:
    """The embedded store's periodic sweep deletes every team's expired rows: the teams' totals
    must drop with them, or a team's total grows with every record that ever expired."""
    clock = Clock()
    store = SqliteStore(":memory:", clock=clock)
    try:
        await store.put_response("a", "old", blob(700), 10, team_bytes=1000)
        clock.now += 3600  # past the TTL and the sweep's interval
        await store.put_response("b", "other", blob(1), TTL, team_bytes=1000)  # sweeps
        assert await store.response_bytes("a") == 0
        await store.put_response("a", "new", blob(1000), TTL, team_bytes=1000)
        assert await store.response_bytes("a") == 1000
    finally:
        await store.close()


async def test_sqlite_replica_opening_a_new_file_another_holds_waits_its_turn(
    tmp_path: Path,
) -> None:
    """Switching a new file to WAL needs the file to itself and SQLite does not wait for that:
    a replica whose first call came while another had the file (``--workers N`` opening a new
    file together; seen in CI as two stores' first writes) failed at once, "database is
    locked". It now waits its turn, as every other call waits for the file's lock."""
    path = tmp_path / "new.db"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another replica writing the file (not yet WAL)
    other.execute("CREATE TABLE elsewhere (x)")
    store = SqliteStore(str(path))
    try:
        first = asyncio.ensure_future(store.put_response("t", "r", blob(10), TTL))
        await asyncio.sleep(0.2)  # its first call is made while the other holds the file
        other.execute("COMMIT")
        assert await first
        assert await store.get_response("t", "r") == blob(10)
    finally:
        other.close()
        await store.close()


async def test_sqlite_file_without_totals_is_counted_from_its_rows(tmp_path: Path) -> None:
    """A file written before the bound existed has records and no totals: the first call sums
    the team's rows once, so its old records count against the bound."""
    path = str(tmp_path / "old.db")
    store = SqliteStore(path)
    await store.put_response("t", "a", blob(300), TTL)
    await store.put_response("t", "b", blob(400), TTL)
    await store.close()
    db = sqlite3.connect(path)
    with db:
        db.execute("DELETE FROM response_bytes")
    db.close()
    store = SqliteStore(path)
    try:
        assert await store.response_bytes("t") == 700
        await store.put_response("t", "c", blob(500), TTL, team_bytes=1000)
        assert await store.get_response("t", "a") is None  # the oldest made room
        assert await store.response_bytes("t") == 900
    finally:
        await store.close()


# -- through the gateway ---------------------------------------------------------------------

WORDS = 4000  # each input ~20 KB: a record is more than half the bound below, less than all


def _text(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(WORDS))


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="x", max_retries=0)


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_gateway_evicts_a_teams_oldest_response_at_its_bound(
    sim: Any, redis_url: str, tmp_path: Path, backend: str
) -> None:
    where: dict[str, Any] = (
        {"redis_url": redis_url} if backend == "redis" else {"store_path": str(tmp_path / "s.db")}
    )
    routes = [sim_route("gpt-4o", sim.base_url)]
    config = gateway_config(
        tmp_path / "routefit.yaml", routes, responses_store_bytes_per_team=40_000, **where
    )
    with run_inprocess(config) as gw:
        client = _client(gw.v1)
        first = client.responses.create(model="gpt-4o", input=_text(1))
        assert client.responses.retrieve(first.id).id == first.id
        second = client.responses.create(model="gpt-4o", input=_text(2))
        assert second.output_text  # the answer is whole either way
        assert client.responses.retrieve(second.id).id == second.id
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)


def test_gateway_with_a_bound_of_zero_stores_nothing(sim: Any, tmp_path: Path) -> None:
    routes = [sim_route("gpt-4o", sim.base_url)]
    config = gateway_config(tmp_path / "routefit.yaml", routes, responses_store_bytes_per_team=0)
    with run_inprocess(config) as gw:
        client = _client(gw.v1)
        answer = client.responses.create(model="gpt-4o", input="hello")
        assert answer.output_text
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(answer.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model="gpt-4o", previous_response_id=answer.id, input="more")
