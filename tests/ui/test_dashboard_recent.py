"""The dashboard's copy of the request log stays the store's lists while reading only what is
new (``proxy.ui.recent``), on a real store."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.records import RequestRecord
from proxy.store import Store
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore
from proxy.ui.recent import STEP, RecentRecords

KEEP = 100
_ids = itertools.count()


async def _append(store: Store, team: str, n: int, keep: int = KEEP) -> None:
    for _ in range(n):
        i = next(_ids)
        record = RequestRecord(
            id=f"r{i}",
            time=float(i),
            kind="serve",
            wire="chat",
            status=200,
            latency_ms=1.0,
            team=team,
        )
        await store.record_request(team, orjson.dumps(record.as_dict()), keep)


async def _stored(store: Store, team: str) -> list[str]:
    return [orjson.loads(d)["id"] for d in await store.recent_requests(team, KEEP)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2 * KEEP + 5)),
        min_size=1,
        max_size=8,
    )
)
def test_the_copy_is_the_stores_lists_after_every_refresh(batches) -> None:
    async def run() -> None:
        store = SqliteStore(":memory:")
        recent = RecentRecords(store, KEEP)
        for team, n in batches:
            await _append(store, team, n)
            await recent.refresh(["a", "b"])
            for t in ("a", "b"):
                assert [r.id for r in recent.records([t])] == await _stored(store, t)
            merged = [r.id for r in recent.records(["a", "b"])]
            assert merged == sorted(merged, key=lambda i: -int(i[1:]))  # newest first

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_refresh_keeps_what_it_had_and_decodes_only_the_new_records(
    kind: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    team = f"t-{uuid.uuid4().hex}"  # Redis outlives the test

    async def run() -> None:
        store: Store = RedisStore(url) if url is not None else SqliteStore(":memory:")
        try:
            await check(store)
        finally:
            await store.close()

    async def check(store: Store) -> None:
        recent = RecentRecords(store, KEEP)
        await _append(store, team, 30)
        await recent.refresh([team])
        before = {r.id: r for r in recent.records([team])}
        # more than one step's worth: the copy looks further back until it finds its newest
        await _append(store, team, STEP + 5)
        await recent.refresh([team])
        after = recent.records([team])
        assert [r.id for r in after] == await _stored(store, team)
        kept = [r for r in after if r.id in before]
        assert kept and all(r is before[r.id] for r in kept)  # the same objects: not re-read
        # past what the store keeps: its list no longer holds the newest known one
        await _append(store, team, KEEP + 1)
        await recent.refresh([team])
        assert [r.id for r in recent.records([team])] == await _stored(store, team)
        assert not any(r.id in before for r in recent.records([team]))

    asyncio.run(run())
