"""Several ``routefit serve`` replicas on one Redis Cluster, end to end over real HTTP with the
provider simulator: exact budgets under 300 concurrent requests, calibration shared, and a master
killed mid-load (fail-open and fail-closed)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from harness import LocalRedisCluster, Running, gateway_config, run_routefit, sim_route

ADMIN = "sk-admin-" + uuid.uuid4().hex
KEY = "sk-team-" + uuid.uuid4().hex


def config(sim, path: Path, cluster: LocalRedisCluster, team: str, **settings) -> Path:
    return gateway_config(
        path,
        [sim_route("gpt-4o", sim.base_url)],
        admin_key=ADMIN,
        redis_mode="cluster",
        redis_url=cluster.url,
        teams=[{"id": team, "keys": [KEY], "quotas": {"tokens_per_day": settings.pop("quota")}}],
        **settings,
    )


@contextlib.contextmanager
def replicas(path: Path, n: int) -> Iterator[list[Running]]:
    """``n`` replicas of one config, started side by side (each waits for its own /readyz)."""
    managers = [run_routefit(path, timeout=90) for _ in range(n)]
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(m.__enter__) for m in managers]
        for m, f in zip(managers, futures, strict=True):
            with contextlib.suppress(Exception):
                f.result()
                stack.push(m.__exit__)
        yield [f.result() for f in futures]


def usage(gw: Running, team: str) -> int:
    r = httpx.get(
        f"{gw.base_url}/routefit/teams/{team}/usage", headers={"authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 200, r.text
    return int({w["name"]: w for w in r.json()["windows"]}["tokens_per_day"]["used"])


@dataclass
class Outcome:
    start: float
    end: float
    status: int
    code: str | None
    retry_after: str | None
    tokens: int


BODY = {"model": "gpt-4o", "max_tokens": 50, "messages": [{"role": "user", "content": "hello"}]}


async def call(client: httpx.AsyncClient, url: str) -> Outcome:
    start = time.monotonic()
    r = await client.post(
        url + "/chat/completions", json=BODY, headers={"authorization": f"Bearer {KEY}"}
    )
    end = time.monotonic()
    data = r.json()
    used = data.get("usage") if r.status_code == 200 else None
    return Outcome(
        start,
        end,
        r.status_code,
        (data.get("error") or {}).get("code") if r.status_code != 200 else None,
        r.headers.get("retry-after"),
        used["prompt_tokens"] + used["completion_tokens"] if used else 0,
    )


async def burst(urls: list[str], n: int) -> list[Outcome]:
    limits = httpx.Limits(max_connections=n)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        return await asyncio.gather(*(call(client, urls[i % len(urls)]) for i in range(n)))


def settled(gws: list[Running], team: str, expected: int, timeout: float = 10) -> list[int]:
    """Every replica's view of the team's usage, once settlement (after the responses) is in."""
    deadline = time.monotonic() + timeout
    while True:
        seen = [usage(gw, team) for gw in gws]
        if all(u == expected for u in seen) or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


def test_budget_is_exact_with_three_replicas_and_300_concurrent_requests(
    sim, tmp_path, redis_cluster
):
    team = "burst-" + uuid.uuid4().hex[:8]
    quota = 3000  # one request reserves ~60 tokens: ~50 fit
    path = config(sim, tmp_path / "c.yaml", redis_cluster, team, quota=quota)
    with replicas(path, 3) as gws:
        results = asyncio.run(burst([gw.v1 for gw in gws], 300))
        served = sum(o.tokens for o in results)
        views = settled(gws, team, served)
    assert {o.status for o in results} <= {200, 429}
    admitted = [o for o in results if o.status == 200]
    assert 10 <= len(admitted) < 300
    one_request = max(o.tokens for o in admitted)
    assert served <= quota + one_request
    assert views == [served] * 3  # every replica's usage endpoint agrees with what was served


def test_calibration_learnt_on_one_replica_is_used_by_another(sim, tmp_path, redis_cluster):
    alias = f"mystery-{uuid.uuid4().hex[:8]}"
    path = gateway_config(
        tmp_path / "c.yaml",
        [
            sim_route(
                alias,
                sim.base_url,
                "mystery-1",
                model_info={"max_input_tokens": 32768, "max_output_tokens": 4096},
            )
        ],
        redis_mode="cluster",
        redis_url=redis_cluster.url,
        calibration={"refresh_seconds": 0.3},
    )
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "routefit", "ünïcode", "42", "tokens"]
    with replicas(path, 2) as (a, b):
        client = openai.OpenAI(base_url=a.v1, api_key="x", max_retries=0)
        for _ in range(25):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 400)))
            client.chat.completions.create(
                model=alias, messages=[{"role": "user", "content": text}], max_tokens=16
            )
        # A bound on waiting for the store, not a timing check. Both sides converge: a holds its
        # 25 samples at once but refits from them only when a refit is due (its next refresh
        # from the store at the latest), b once its refresh has read them.
        deadline = time.monotonic() + 60
        while True:
            ra = httpx.get(a.base_url + "/routefit/calibration").json()["routes"][alias]
            rb = httpx.get(b.base_url + "/routefit/calibration").json()["routes"][alias]
            agreed = ra["samples"] == rb["samples"] == 25 and ra["factors"] == rb["factors"]
            if agreed or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert ra["samples"] == rb["samples"] == 25  # b served nothing: it read a's samples
    assert rb["factors"] == ra["factors"]
    assert rb["factors"]["text"] > 1.0  # the provider counts more than the tokenizer


def tracebacks(gws: list[Running]) -> str:
    """The tracebacks the replicas logged (an internal error), to say why a request failed."""
    found = []
    for gw in gws:
        lines = gw.log().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("Traceback"):
                end = next((j for j in range(i + 1, len(lines)) if lines[j][:1] not in " \t"), i)
                found.append("\n".join(lines[max(0, i - 1) : end + 1]))
    return "\n".join(found[-3:])


def promoted(cluster: LocalRedisCluster, key: str, victim: int, timeout: float = 60) -> None:
    """Until a surviving node reports a master other than ``victim`` serving ``key``'s slot
    (``CLUSTER NODES``: the victim flagged failed, its replica promoted)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(RuntimeError, subprocess.SubprocessError, OSError):
            if cluster.master_of(key) != victim:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no replica took over {key}'s slot from {victim}")
        time.sleep(0.05)


@dataclass
class Failover:
    """When the victim was killed and when the cluster was whole again — both observed:
    ``healthy`` is once a replica was promoted and every surviving node reports
    ``cluster_state:ok`` with every slot served (so every node any client asks for the slot
    map names the new master) and every replica in sync."""

    killed: float
    healthy: float

    def overlaps(self, o: Outcome) -> bool:
        """Whether the request was in flight at some moment of the outage: its reservation
        may have reached the store between the kill and the cluster being whole again."""
        return o.start <= self.healthy and o.end >= self.killed

    def describe(self, outcomes: list[Outcome]) -> str:
        return "; ".join(
            f"{o.status} started {o.start - self.killed:+.3f}s ended {o.end - self.killed:+.3f}s "
            f"after the kill (healthy at +{self.healthy - self.killed:.3f}s)"
            for o in outcomes[:10]
        )


async def load_through_failover(
    urls: list[str], cluster: LocalRedisCluster, victim: int, key: str
) -> tuple[list[Outcome], Failover]:
    """Steady load from 4 workers; after 20 responses the victim is killed, and the load goes on
    until the quota is exhausted after the cluster is healthy again (5 refusals in a row)."""
    outcomes: list[Outcome] = []
    marks: dict[str, float] = {}
    stop, warmed = asyncio.Event(), asyncio.Event()

    def failover() -> None:
        marks["killed"] = time.monotonic()
        cluster.kill(victim)
        promoted(cluster, key, victim)
        cluster.wait_healthy()
        marks["healthy"] = time.monotonic()

    async def worker(client: httpx.AsyncClient, i: int) -> None:
        refused_after_healthy = 0
        while not stop.is_set() and len(outcomes) < 3000:
            o = await call(client, urls[i % len(urls)])
            outcomes.append(o)
            if len(outcomes) >= 20:
                warmed.set()
            healthy = marks.get("healthy")
            if healthy is not None and o.start > healthy:
                refused_after_healthy = refused_after_healthy + 1 if o.status == 429 else 0
                if refused_after_healthy >= 5:
                    stop.set()
            await asyncio.sleep(0.02)

    async with httpx.AsyncClient(timeout=60) as client:
        workers = [asyncio.create_task(worker(client, i)) for i in range(4)]
        await warmed.wait()
        await asyncio.to_thread(failover)
        await asyncio.gather(*workers)
    return outcomes, Failover(marks["killed"], marks["healthy"])


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_a_master_killed_mid_load(sim, tmp_path, redis_cluster, mode):
    team = f"failover-{mode}-" + uuid.uuid4().hex[:8]
    quota = 6_000  # ~100 requests: exhausted only after the failover
    key = "{rf:team:" + team + "}"
    victim = redis_cluster.master_of(key)
    path = config(
        sim,
        tmp_path / "c.yaml",
        redis_cluster,
        team,
        quota=quota,
        budget_failure_mode=mode,
        # closed: give up on the store quickly, so that the failover window shows as 503s
        redis_failover_seconds=0.2 if mode == "closed" else 2.0,
    )
    try:
        with replicas(path, 2) as gws:
            outcomes, window = asyncio.run(
                load_through_failover([gw.v1 for gw in gws], redis_cluster, victim, key)
            )
            metrics = "".join(httpx.get(gw.base_url + "/metrics").text for gw in gws)
            used = usage(gws[0], team)
            errors = tracebacks(gws)
    finally:
        if victim not in redis_cluster.procs:  # killed (not when the replicas failed to start)
            redis_cluster.restart(victim)
        redis_cluster.wait_healthy()

    before = [o for o in outcomes if o.end < window.killed]
    after = [o for o in outcomes if o.start > window.healthy]
    assert after and after[-1].status == 429  # enforcement resumed: the quota ran out
    late = [o for o in after if o.status not in (200, 429)]
    assert not late, f"unavailable after the failover window: {window.describe(late)}"
    budgeted = [o for o in outcomes if not window.overlaps(o)]
    one_request = max(o.tokens for o in outcomes)
    # Every request outside the failover window went through the (surviving) counters.
    assert sum(o.tokens for o in budgeted) <= quota + one_request
    assert used >= sum(o.tokens for o in before)  # counters survived
    assert 'routefit_store_op_seconds_count{op="reserve"}' in metrics
    if mode == "open":
        odd = [o for o in outcomes if o.status not in (200, 429)]  # no 5xx, ever
        assert not odd, f"{window.describe(odd)}\n{errors}"
    else:
        unavailable = [o for o in outcomes if o.status == 503]
        assert unavailable  # the window was visible
        odd = [o for o in outcomes if o.status not in (200, 429, 503)]
        assert not odd, f"neither served, refused nor unavailable: {window.describe(odd)}\n{errors}"
        assert all(o.code == "store_unavailable" and o.retry_after for o in unavailable)
        outside = [o for o in unavailable if not window.overlaps(o)]
        assert not outside, f"unavailable outside the failover window: {window.describe(outside)}"
        assert "routefit_store_op_errors_total" in metrics
