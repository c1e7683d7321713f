"""What routing adds to one request, per route shape, measured in one run (ratios, not timings).

    python bench/routing_overhead.py [--n 20000]

For a single-deployment alias (not routed: no store call) and a routed one (two deployments: one
pipelined health read, background writes) on the embedded store, the mean time of the routing
shell's work for one answered request — ``Routing.start`` (plan), ``Attempts.began``,
``Attempts.answered`` and ``Attempts.headers`` — beside a reference that every request pays
anyway: one ``Metrics.requests`` counter increment and one JSON dump of a chat body.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import orjson

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from proxy.config import parse_config
from proxy.metrics import Metrics
from proxy.routing import Routing
from proxy.store.sqlite import SqliteStore


def _config() -> Any:
    def entry(alias: str, host: str) -> dict[str, Any]:
        params = {"model": "openai/gpt-4o", "api_key": "k", "api_base": f"http://{host}/v1"}
        return {"model_name": alias, "litellm_params": params, "model_info": {"id": host}}

    models = [entry("alone", "alone"), entry("pair", "one"), entry("pair", "two")]
    return parse_config({"model_list": models}, "bench.yaml", environ={})


async def _per_request(routing: Routing, alias: str, n: int) -> float:
    rc = routing.config.route(alias)
    start = time.perf_counter()
    for _ in range(n):
        attempts = await routing.start(rc, None, 100)
        attempts.began(100)
        attempts.answered()
        attempts.headers()
    elapsed = (time.perf_counter() - start) / n
    await asyncio.sleep(0.2)  # let the background writes land
    return elapsed


def _reference(metrics: Metrics, n: int) -> float:
    body = {"model": "x", "messages": [{"role": "user", "content": "hello " * 50}]}
    start = time.perf_counter()
    for _ in range(n):
        metrics.requests.labels("alone", "200").inc()
        orjson.dumps(body)
    return (time.perf_counter() - start) / n


async def main(n: int, rounds: int) -> None:
    config = _config()
    store = SqliteStore(":memory:")
    metrics = Metrics()
    routing = Routing(config, store, metrics)
    single, routed, ref = [], [], []
    for _ in range(rounds):
        single.append(await _per_request(routing, "alone", n))
        routed.append(await _per_request(routing, "pair", max(1, n // 10)))
        ref.append(_reference(metrics, n))
    s, r, f = (statistics.median(x) * 1e6 for x in (single, routed, ref))
    print(f"single-deployment alias: {s:.1f} us per request (x{s / f:.2f} the reference)")
    print(f"routed alias (2 deployments, embedded store): {r:.1f} us per request")
    print(f"reference (a counter increment and a small JSON dump): {f:.1f} us")
    await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.rounds))
