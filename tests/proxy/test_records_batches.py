"""The request log's store writes in batches (``proxy.record_batches``): a batch goes when it is
full or when its delay has passed, one write at a time in order, never in a response's way (a
bounded queue, ``put`` never awaits), and a clean shutdown writes what was waiting; the stores'
``record_requests`` keeps each team's newest ``cap`` records in order."""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess, sim_provider

from proxy.config.settings import RequestLogSettings
from proxy.record_batches import Batches, Item
from proxy.records import ANONYMOUS, Records, RequestRecord, new_id
from proxy.store.base import Store
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore
from proxy.teams import TeamDirectory

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Sink:
    """A store's ``record_requests`` as the batches see it: what was written, batch by batch;
    ``gate`` (when set) holds every write until it opens."""

    def __init__(self, fail_first: bool = False) -> None:
        self.batches: list[list[Item]] = []
        self.gate: asyncio.Event | None = None
        self.fail_first = fail_first
        self.written = asyncio.Event()

    async def __call__(self, batch: Sequence[Item]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_first:
            self.fail_first = False
            raise RuntimeError("the store broke")
        self.batches.append(list(batch))
        self.written.set()

    @property
    def items(self) -> list[Item]:
        return [item for batch in self.batches for item in batch]


def records(n: int, team: str = "t") -> list[Item]:
    return [(team, f"r{i}".encode()) for i in range(n)]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_full_batch_is_written_at_once_in_one_write() -> None:
    sink = Sink()
    batches = Batches(sink, size=3, delay=3600)  # the timer never fires within the test
    for team, data in records(3):
        batches.put(team, data)
    await settle()
    assert sink.batches == [records(3)]
    assert batches.pending == 0


async def test_fewer_than_a_batch_are_written_once_the_delay_passed() -> None:
    sink = Sink()
    batches = Batches(sink, size=100, delay=0.01)
    for team, data in records(2):
        batches.put(team, data)
    await settle()
    assert sink.batches == []  # waiting for more, or for the delay
    await asyncio.wait_for(sink.written.wait(), 10)
    assert sink.batches == [records(2)]


async def test_put_never_waits_and_the_queue_is_bounded() -> None:
    sink = Sink()
    sink.gate = asyncio.Event()  # the store hangs
    batches = Batches(sink, size=2, delay=0, limit=4)
    for team, data in records(2):
        batches.put(team, data)  # a batch, whose write now hangs
    await settle()
    for team, data in records(7):
        batches.put(team, data)  # returns at once every time
    assert batches.pending == 4 and batches.dropped == 3
    sink.gate.set()
    await batches.flush()
    assert sink.items == records(2) + records(4)


async def test_flush_writes_everything_in_order_behind_a_write_under_way() -> None:
    sink = Sink()
    sink.gate = asyncio.Event()
    batches = Batches(sink, size=2, delay=3600)
    items = records(7)
    for team, data in items[:2]:
        batches.put(team, data)
    await settle()  # the first batch's write is under way, held
    for team, data in items[2:]:
        batches.put(team, data)
    flushing = asyncio.ensure_future(batches.flush())
    await settle()
    assert not flushing.done()
    sink.gate.set()
    await flushing
    assert sink.items == items
    assert all(len(b) <= 2 for b in sink.batches)


async def test_a_failed_write_does_not_stop_the_next() -> None:
    sink = Sink(fail_first=True)
    batches = Batches(sink, size=1, delay=3600)
    batches.put("t", b"lost")
    await settle()
    batches.put("t", b"kept")
    await batches.flush()
    assert sink.items == [("t", b"kept")]


def test_record_ids_are_unique_and_uuid_shaped() -> None:
    ids = [new_id() for _ in range(10_000)]
    assert len(set(ids)) == 10_000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    # random, not counted: a team reading its ids learns nothing of the others' traffic
    steps = {int(b, 16) - int(a, 16) for a, b in itertools.pairwise(ids)}
    assert len(steps) > 9_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_worker_never_repeats_its_parents_ids() -> None:
    new_id()  # the parent holds random bytes not used yet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then out without running the test session's exit
        os.write(write, new_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    theirs = os.read(read, 64).decode()
    os.close(read)
    assert len(theirs) == 32 and theirs != new_id()


# -- the stores' batch write ---------------------------------------------------------------


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    made: Store
    if request.param == "redis":
        made = RedisStore(request.getfixturevalue("redis_url"))
    else:
        made = SqliteStore(":memory:")
    try:
        yield made
    finally:
        await made.close()


async def test_record_requests_keeps_each_teams_newest_in_order(store: Store) -> None:
    team, other = f"team-{uuid.uuid4().hex[:8]}", f"team-{uuid.uuid4().hex[:8]}"
    first = [(team, f"a{i}".encode() + b"\x00\xff") for i in range(3)]
    await store.record_requests(first, 4)
    mixed = [(team if i % 2 else other, f"b{i}".encode()) for i in range(6)]
    await store.record_requests(mixed, 4)
    await store.record_requests([], 4)
    assert await store.recent_requests(team, 100) == [b"b5", b"b3", b"b1", b"a2\x00\xff"]
    assert await store.recent_requests(other, 100) == [b"b4", b"b2", b"b0"]
    for cap in (0, -1, True, 1.5):
        with pytest.raises(ValueError):
            await store.record_requests([(team, b"x")], cap)  # type: ignore[arg-type]


# -- a clean shutdown ----------------------------------------------------------------------


def record(i: int) -> RequestRecord:
    return RequestRecord(
        id=new_id(), time=1.0e9 + i, kind="serve", wire="chat", status=200, latency_ms=1.0
    )


@pytest.mark.parametrize("how", ["close from a thread", "aclose"])
async def test_the_apps_end_writes_every_record_waiting(tmp_path: Path, how: str) -> None:
    """Records emitted just before the app stops are all in the store after it: ``close`` runs
    in a worker thread at the lifespan's end (proxy/app.py), ``aclose`` on the loop."""
    db = str(tmp_path / "routefit.sqlite3")
    store = SqliteStore(db)
    log = Records(RequestLogSettings(), store, TeamDirectory([], None))
    sent = [record(i) for i in range(5)]
    for r in sent:
        await log.emit(r)
    assert log.batches is not None and log.batches.pending == 5  # within the 100 ms delay
    if how == "aclose":
        await log.aclose()
    else:
        await asyncio.to_thread(log.close)
    await store.close()
    reopened = SqliteStore(db)
    try:
        kept = await reopened.recent_requests(ANONYMOUS, 100)
    finally:
        await reopened.close()
    assert [orjson.loads(k)["id"] for k in kept] == [r.id for r in reversed(sent)]


def test_records_reach_the_store_through_the_app(sim: Any, tmp_path: Path) -> None:
    """The gateway's records, batched, are read back at once by the same process, and a clean
    shutdown leaves every one in the store."""
    db = tmp_path / "routefit.sqlite3"
    config = gateway_config(
        tmp_path / "c.yaml", [sim_route("gpt-4o", sim.base_url)], store_path=str(db)
    )
    sent = 12
    with run_inprocess(config, provider=sim_provider(sim)) as gw, httpx.Client() as client:
        for i in range(sent):
            r = client.post(
                gw.v1 + "/chat/completions",
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": f"hi {i}"}]},
                timeout=30,
            )
            assert r.status_code == 200
        read = client.get(gw.base_url + "/routefit/requests", params={"limit": 100})
        assert len(read.json()["data"]) == sent
    kept = asyncio.run(_read(db, ANONYMOUS, sent * 2))
    assert len(kept) == sent


async def _read(db: Path, team: str, limit: int) -> list[bytes]:
    store = SqliteStore(str(db))
    try:
        return await store.recent_requests(team, limit)
    finally:
        await store.close()


def test_records_queued_on_one_loop_are_written_from_the_next() -> None:
    """An app served again on a new event loop (tests, a restarted server) keeps writing: what
    waited when the first loop ended is written by the second."""
    sink: list[Item] = []

    async def write(batch: Sequence[Item]) -> None:
        sink.extend(batch)

    batches = Batches(write, size=100, delay=3600)

    async def first() -> None:
        batches.put("t", b"a")

    async def second() -> None:
        batches.put("t", b"b")
        await batches.flush()

    asyncio.run(first())
    asyncio.run(second())
    assert sink == [("t", b"a"), ("t", b"b")]
