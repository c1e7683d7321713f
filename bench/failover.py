"""Failover and balancing beside LiteLLM's proxy (issue 29), measured in one run, as ratios.

    python bench/failover.py [--n 150] [--seconds 3] [--out bench/results/failover.json]

Both peers get the same ``model_list`` and ``router_settings`` and the same upstreams:

* ``direct``: one deployment, the provider simulator (``python -m proxy.sim``).
* ``failover``: two deployments of equal weight, the simulator and a fake provider on loopback
  that answers 500 at once (tests/fake_provider.py, a thread of this process, idle while the
  sequential client waits); ``allowed_fails`` is too high for it ever to cool down, so each
  request whose shuffle ranks it first fails over (``num_retries: 2``).
* ``balanced``: three deployments of the simulator (three keys, three ids).

(a) The added latency of failing over: requests at concurrency 1, each classed by whether the
fake provider received a request while it ran (peer-neutral: no peer's own headers needed);
p50 of the answered requests that failed over minus p50 of ``direct``. (b) Throughput at c16 on
``balanced`` (and ``direct`` beside it) with bench/loadgen.py for ``--seconds``.
Figures are ratios routefit / LiteLLM, from the same run on the same machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
from procs import ROOT, TESTS, Server, Servers, write_yaml
from proxy_load import BENCH_KEY, loadgen

sys.path.insert(0, str(TESTS))
from fake_provider import FakeProvider
from litellm_env import ensure

ROUTER = {"num_retries": 2, "allowed_fails": 100_000, "cooldown_time": 1}
AUTH = {"Authorization": f"Bearer {BENCH_KEY}"}


def _entry(alias: str, base: str, ident: str, key: str = "sk-sim") -> dict:
    return {
        "model_name": alias,
        "litellm_params": {"model": "openai/gpt-4o", "api_base": f"{base}/v1", "api_key": key},
        "model_info": {"id": ident},
    }


def model_list(sim_url: str, failing_url: str) -> list[dict]:
    return [
        _entry("direct", sim_url, "direct-sim"),
        _entry("failover", failing_url, "failover-500"),
        _entry("failover", sim_url, "failover-sim"),
        *(_entry("balanced", sim_url, f"balanced-{i}", f"sk-sim-{i}") for i in (1, 2, 3)),
    ]


def configs(servers: Servers, sim_url: str, failing_url: str) -> tuple[Path, Path]:
    models = model_list(sim_url, failing_url)
    routefit = write_yaml(
        servers.dir / "routefit-failover.yaml",
        {
            "model_list": models,
            "router_settings": ROUTER,
            "routefit_settings": {
                "store_path": ":memory:",
                "teams": [{"id": "bench", "keys": [BENCH_KEY]}],
            },
        },
    )
    litellm = write_yaml(
        servers.dir / "litellm-failover.yaml",
        {
            "model_list": models,
            "router_settings": ROUTER,
            "litellm_settings": {"telemetry": False},
            "general_settings": {"master_key": BENCH_KEY},
        },
    )
    return routefit, litellm


def _body(alias: str) -> dict:
    return {"model": alias, "max_tokens": 16, "messages": [{"role": "user", "content": "Hi."}]}


def sequential(server: Server, alias: str, n: int, failing: FakeProvider) -> dict:
    """``n`` requests one after the other: latencies of those answered, split by whether the
    failing provider was tried during them."""
    direct: list[float] = []
    failed_over: list[float] = []
    errors = 0
    with httpx.Client(base_url=server.base_url, headers=AUTH, timeout=30) as client:
        for _ in range(5):  # warm the connections
            client.post("/v1/chat/completions", json=_body(alias))
        for _ in range(n):
            before = failing.hits
            start = time.perf_counter()
            r = client.post("/v1/chat/completions", json=_body(alias))
            elapsed = (time.perf_counter() - start) * 1e3
            if r.status_code != 200:
                errors += 1
            elif failing.hits > before:
                failed_over.append(elapsed)
            else:
                direct.append(elapsed)
    return {
        "first_try_n": len(direct),
        "first_try_p50_ms": statistics.median(direct) if direct else None,
        "failed_over_n": len(failed_over),
        "failed_over_p50_ms": statistics.median(failed_over) if failed_over else None,
        "errors": errors,
    }


def throughput(server: Server, alias: str, seconds: float) -> dict:
    spec = {
        "url": server.base_url + "/v1/chat/completions",
        "body": json.dumps(_body(alias) | {"user": "@@NONCE@@"}),
        "headers": AUTH,
        "concurrency": 16,
        "duration": seconds,
        "warmup": 0.5,
        "stream": False,
    }
    result = loadgen(spec)
    return {k: result[k] for k in ("rps", "p50_ms", "statuses", "errors")}


def spread(server: Server) -> dict[str, float]:
    """routefit's attempts per balanced deployment (its /metrics)."""
    text = httpx.get(server.base_url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("routefit_deployment_attempts_total{") and "balanced-" in line:
            ident = line.split('deployment="', 1)[1].split('"', 1)[0]
            out[ident] = out.get(ident, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def measure(server: Server, failing: FakeProvider, n: int, seconds: float) -> dict:
    out = {
        "direct": sequential(server, "direct", n, failing),
        "failover": sequential(server, "failover", n, failing),
        "direct_c16": throughput(server, "direct", seconds),
        "balanced_c16": throughput(server, "balanced", seconds),
    }
    direct = out["direct"]["first_try_p50_ms"]
    over = out["failover"]["failed_over_p50_ms"]
    out["added_failover_p50_ms"] = over - direct if over is not None and direct else None
    return out


def summarise(rf: dict, ll: dict) -> dict:
    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    return {
        "added_failover_latency_ratio": ratio(
            rf["added_failover_p50_ms"], ll["added_failover_p50_ms"]
        ),
        "failover_p50_over_direct_p50": {
            name: ratio(peer["failover"]["failed_over_p50_ms"], peer["direct"]["first_try_p50_ms"])
            for name, peer in (("routefit", rf), ("litellm", ll))
        },
        "balanced_c16_throughput_ratio": ratio(
            rf["balanced_c16"]["rps"], ll["balanced_c16"]["rps"]
        ),
        "balanced_over_direct_c16": {
            name: ratio(peer["balanced_c16"]["rps"], peer["direct_c16"]["rps"])
            for name, peer in (("routefit", rf), ("litellm", ll))
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=150, help="sequential requests per alias")
    parser.add_argument("--seconds", type=float, default=3.0, help="each c16 phase")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "failover.json")
    args = parser.parse_args()
    venv = ensure()
    failing = FakeProvider(500)
    failing.start()
    result: dict = {}
    try:
        with Servers() as servers:
            sim = servers.sim()
            rf_config, ll_config = configs(servers, sim.base_url, failing.url)
            for name in ("routefit", "litellm"):
                if name == "routefit":
                    server = servers.routefit(rf_config)
                else:
                    server = servers.litellm(venv, ll_config)
                time.sleep(1.0)
                result[name] = measure(server, failing, args.n, args.seconds)
                if name == "routefit":
                    result[name]["balanced_spread"] = spread(server)
                servers.stop(server)
                print(name, json.dumps(result[name]), flush=True)
    finally:
        failing.close()
    result["summary"] = summarise(result["routefit"], result["litellm"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
