"""Redis memory per team (budget windows) and per million calibration samples, measured on a
private redis-server with INFO memory before and after (docs/operations.md quotes the figures).

Run: python bench/store_memory.py  (about 10 s)
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness import private_redis

from pricing.calibration import Sample
from proxy.store import BudgetWindow
from proxy.store.redis import RedisStore

TEAMS, ROUTES, PER_ROUTE = 2000, 50, 2000


async def used(store: RedisStore) -> int:
    info = await store.client.info("memory")
    return int(info["used_memory"])


async def measure(url: str) -> dict[str, float]:
    store = RedisStore(url, sample_cap=PER_ROUTE)
    windows = [
        BudgetWindow("tokens_per_minute", "minute", 10**9),
        BudgetWindow("tokens_per_day", "day", 10**9),
        BudgetWindow("usd_per_month", "month", 10**9),
    ]
    before = await used(store)
    for i in range(TEAMS):
        r = await store.reserve(f"team-{i:05d}", [(w, 1000) for w in windows])
        assert r.token is not None
        await store.settle(f"team-{i:05d}", r.token, [(w, 700) for w in windows])
    per_team = (await used(store) - before) / TEAMS
    before = await used(store)
    now = time.time()
    for r in range(ROUTES):
        samples = [
            Sample(f"route-{r}", now + i, 1234 + i, 7, 0, 0, 4, 1250, i % 2 == 0, 1260, 0)
            for i in range(PER_ROUTE)
        ]
        await store.record_batch(samples, [], ttl=60)
    per_million = (await used(store) - before) / (ROUTES * PER_ROUTE) * 1e6
    await store.close()
    return {"bytes_per_team": round(per_team), "mib_per_million_samples": per_million / 2**20}


if __name__ == "__main__":
    with private_redis() as server:
        print(asyncio.run(measure(server.url)))
