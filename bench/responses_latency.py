"""Added latency of ``/v1/responses`` (native passthrough) vs ``/v1/chat/completions`` at c=1.

Both go through ``routefit serve`` to the simulator; "added" is the median through routefit
minus the median straight to the simulator, per path. Usage: ``python bench/responses_latency.py``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness import gateway_config, run_routefit, sim_route

from proxy.sim.server import run_sim

N = 400
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello there"}]}
RESP = {"model": "gpt-4o", "input": [{"role": "user", "content": "hello there"}], "store": False}


def median_ms(client: httpx.Client, url: str, body: dict) -> float:
    for _ in range(50):
        client.post(url, json=body)
    times = []
    for _ in range(N):
        t = time.perf_counter()
        r = client.post(url, json=body)
        times.append(time.perf_counter() - t)
        assert r.status_code == 200, r.text
    return statistics.median(times) * 1000


def main() -> None:
    with run_sim() as sim, tempfile.TemporaryDirectory() as tmp:
        config = gateway_config(Path(tmp) / "rf.yaml", [sim_route("gpt-4o", sim.base_url)])
        with run_routefit(config) as gw, httpx.Client(timeout=10) as client:
            out = {}
            for name, path, body in (
                ("chat", "/chat/completions", CHAT),
                ("responses", "/responses", RESP),
            ):
                direct = median_ms(client, sim.url("/v1") + path, body)
                via = median_ms(client, gw.v1 + path, body)
                out[name] = via - direct
                print(
                    f"{name:10s} direct {direct:.3f} ms  via routefit {via:.3f} ms  "
                    f"added {via - direct:.3f} ms"
                )
            print(f"responses - chat added: {out['responses'] - out['chat']:+.3f} ms")


if __name__ == "__main__":
    main()
