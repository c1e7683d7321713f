"""What the store adds to a request: the anchor lookup and the budget reservation + settlement.

Against a real Redis (REDIS_URL, else 127.0.0.1:6379) and the embedded SQLite store:
- anchor lookup: one ``find_anchor`` over the 64 newest prefix keys of a request (one MGET),
  half of the lookups hitting; goal <= 0.3 ms at p50 on Redis;
- budget: one ``reserve`` over three windows (tokens/minute, tokens/day, USD/month) plus its
  ``settle``; goal <= 0.5 ms at p50 on Redis;
- stored responses: one ``put_response`` (4 KiB) + one ``get_response``.

``--cluster`` adds the same on a local Redis Cluster (3 masters + 3 replicas, started and torn
down by the bench with tests/harness.py), beside the standalone Redis: what cluster mode costs
per operation (one more hop for nothing: every operation is one slot, so one node).

Run: python bench/bench_store.py [--json] [--n 2000] [--cluster]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pricing.calibration import Anchor
from proxy.calibrator import prefix_keys
from proxy.store import BudgetWindow, Store
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore
from proxy.store.topology import cluster_client


def pct(values: list[float], q: float) -> float:
    return round(sorted(values)[int(q * (len(values) - 1))], 4)


async def measure(store: Store, n: int) -> dict:
    route = f"bench-{uuid.uuid4().hex[:8]}"
    team = f"bench-{uuid.uuid4().hex[:8]}"
    messages = [{"role": "user", "content": f"message {i}"} for i in range(200)]
    keys = prefix_keys(route, "openai/gpt-4o", None, messages)
    anchor = Anchor(text=1000, framing=40, images=0, actual=1050)
    for k in keys[:150:2]:
        await store.put_anchor(route, k, anchor, 600)
    lookups = []
    for i in range(n):
        end = 150 + (i % 50)  # about half of the requests extend an anchored prefix
        candidates = list(reversed(keys[max(0, end - 64) : end]))
        t0 = time.perf_counter()
        await store.find_anchor(route, candidates)
        lookups.append((time.perf_counter() - t0) * 1000)
    windows = [
        BudgetWindow("tokens_per_minute", "minute", 10**12),
        BudgetWindow("tokens_per_day", "day", 10**12),
        BudgetWindow("usd_per_month", "month", 10**12),
    ]
    budget = []
    for _ in range(n):
        t0 = time.perf_counter()
        held = await store.reserve(team, [(w, 1000) for w in windows])
        assert held.token is not None
        await store.settle(team, held.token, [(w, 700) for w in windows])
        budget.append((time.perf_counter() - t0) * 1000)
    responses = []
    body = b"x" * 4096
    for i in range(n):
        t0 = time.perf_counter()
        await store.put_response(team, f"resp_{i}", body, 60)
        assert await store.get_response(team, f"resp_{i}") == body
        responses.append((time.perf_counter() - t0) * 1000)
    await store.close()
    return {
        "anchor_lookup_ms": {"p50": pct(lookups, 0.5), "p99": pct(lookups, 0.99)},
        "reserve_settle_ms": {"p50": pct(budget, 0.5), "p99": pct(budget, 0.99)},
        "put_get_response_ms": {"p50": pct(responses, 0.5), "p99": pct(responses, 0.99)},
        "mean_anchor_ms": round(statistics.fmean(lookups), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--cluster", action="store_true", help="also a local Redis Cluster")
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    result = {"redis": asyncio.run(measure(RedisStore(url), args.n))}
    if args.cluster:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from harness import LocalRedisCluster

        cluster = LocalRedisCluster()
        try:
            cluster.start()
            store = RedisStore(client=cluster_client(cluster.url, 0.5, 64), failover_seconds=2.0)
            result["cluster"] = asyncio.run(measure(store, args.n))
        finally:
            cluster.close()
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SqliteStore(str(Path(tmp) / "bench.sqlite3"))
        result["sqlite"] = asyncio.run(measure(sqlite, args.n))
    result["goals"] = {"anchor_lookup_p50_ms": 0.3, "reserve_settle_p50_ms": 0.5}
    if args.json:
        print(json.dumps(result))
        return
    for name in ("redis", "cluster", "sqlite"):
        r = result.get(name)
        if not isinstance(r, dict):
            continue
        print(
            f"{name:>7}: anchor lookup p50 {r['anchor_lookup_ms']['p50']:.3f} ms "
            f"(p99 {r['anchor_lookup_ms']['p99']:.3f}); reserve+settle p50 "
            f"{r['reserve_settle_ms']['p50']:.3f} ms (p99 {r['reserve_settle_ms']['p99']:.3f}); "
            f"put+get response p50 {r['put_get_response_ms']['p50']:.3f} ms "
            f"(p99 {r['put_get_response_ms']['p99']:.3f})"
        )
    print("goals on Redis: anchor lookup <= 0.3 ms p50, reserve+settle <= 0.5 ms p50")


if __name__ == "__main__":
    main()
