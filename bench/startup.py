"""Section 2: start-up time and memory, routefit vs LiteLLM's proxy.

Each server is started cold several times (a fresh process each time, one worker): the time
from launch to the first 200 on its readiness endpoint (routefit ``/readyz``; LiteLLM
``/health/readiness``), then the time of the first and second proxied request (small, to the
simulator's gpt-4o), and the RSS of the server process tree one second after ready (idle).

routefit is measured with three configs: OpenAI-compatible routes only; plus an
``anthropic/claude-…`` route (a "litellm route" in LiteLLM's config, translated by routefit's own
mapping, so litellm is not imported); plus a ``gemini/…`` route that only litellm translates.
litellm is imported in the background at start-up and ``/readyz`` does not wait for it (OpenAI
routes serve at once), so the idle RSS is read one second after ``/readyz`` also reports
``checks.litellm`` true: read earlier, it would catch the import half done. The RSS after the two
first requests is reported beside it.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import httpx
from procs import Servers, anthropic_entry, openai_entry, write_yaml
from proxy_load import BENCH_KEY
from workloads import openai_small

#: Config names, read by bench/report.py.
ANTHROPIC = "routefit (+ an anthropic/ route)"
LITELLM_ONLY = "routefit (+ a gemini/ route: litellm)"


def _first_requests(base: str) -> list[float]:
    body = openai_small("gpt-4o").replace("@@NONCE@@", "1")
    headers = {"Authorization": f"Bearer {BENCH_KEY}", "Content-Type": "application/json"}
    out = []
    with httpx.Client(timeout=120) as client:
        for _ in range(2):
            t0 = time.perf_counter()
            resp = client.post(base + "/v1/chat/completions", content=body, headers=headers)
            out.append(time.perf_counter() - t0)
            if resp.status_code != 200:
                raise RuntimeError(f"{base}: HTTP {resp.status_code}: {resp.text[:300]}")
    return out


def _settled(base: str, timeout: float = 120.0) -> None:
    """Wait until everything the routes need is loaded (litellm included, when one needs it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resp = httpx.get(base + "/readyz", timeout=5)
        if resp.status_code == 200 and resp.json().get("checks", {}).get("litellm", True):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{base}: litellm still loading after {timeout:.0f} s")


def run(servers: Servers, litellm_venv: Path, quick: bool, log=print) -> dict:
    reps = 1 if quick else 3
    sim = servers.sim()
    teams = {"store_path": ":memory:", "teams": [{"id": "bench", "keys": [BENCH_KEY]}]}
    configs = {
        "routefit (OpenAI routes only)": write_yaml(
            servers.dir / "rf-openai.yaml",
            {"model_list": [openai_entry("gpt-4o", sim.base_url)], "routefit_settings": teams},
        ),
        ANTHROPIC: write_yaml(
            servers.dir / "rf-mixed.yaml",
            {
                "model_list": [
                    openai_entry("gpt-4o", sim.base_url),
                    anthropic_entry("claude", sim.base_url),
                ],
                "routefit_settings": teams,
            },
        ),
        LITELLM_ONLY: write_yaml(
            servers.dir / "rf-gemini.yaml",
            {
                "model_list": [
                    openai_entry("gpt-4o", sim.base_url),
                    anthropic_entry("claude", sim.base_url),
                    {
                        "model_name": "gemini",
                        "litellm_params": {
                            "model": "gemini/gemini-2.0-flash",
                            "api_key": "unused",
                        },
                    },
                ],
                "routefit_settings": teams,
            },
        ),
        "litellm proxy": write_yaml(
            servers.dir / "ll.yaml",
            {
                "model_list": [
                    openai_entry("gpt-4o", sim.base_url),
                    anthropic_entry("claude", sim.base_url),
                ],
                "litellm_settings": {"telemetry": False},
                "general_settings": {"master_key": BENCH_KEY},
            },
        ),
    }
    out: dict = {"repetitions": reps, "servers": {}}
    for name, config in configs.items():
        samples = []
        for _ in range(reps):
            if name.startswith("routefit"):
                server = servers.routefit(config)
                _settled(server.base_url)
            else:
                server = servers.litellm(litellm_venv, config)
            time.sleep(1.0)
            idle = server.rss()
            first, second = _first_requests(server.base_url)
            samples.append(
                {
                    "ready_s": server.ready_seconds,
                    "idle_rss_mib": idle,
                    "after_requests_rss_mib": server.rss(),
                    "first_request_ms": first * 1e3,
                    "second_request_ms": second * 1e3,
                }
            )
            servers.stop(server)
        med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
        out["servers"][name] = {"median": med, "samples": samples}
        log(
            f"  {name:<30} ready {med['ready_s']:6.2f} s  idle RSS {med['idle_rss_mib']:6.0f} MiB"
            f"  first request {med['first_request_ms']:7.1f} ms  second "
            f"{med['second_request_ms']:6.1f} ms"
        )
    servers.stop(sim)
    return out
