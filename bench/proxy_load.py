"""Section 1: proxy overhead and throughput — direct, through routefit, through LiteLLM's proxy.

The same workloads against three targets, one at a time, each with one worker process:

- ``direct``: the simulator itself (the baseline every added latency is measured against);
- ``routefit``: ``routefit serve --workers 1`` with a route to the simulator's model;
- ``litellm``: ``litellm --config --num_workers 1`` (its own venv) with the same model;
- ``portkey``: Portkey's gateway (Node, ``start-server.js --headless``), routed per request by
  ``x-portkey-provider`` / ``x-portkey-custom-host`` headers. Its failures are reported as they
  are (1.15.2 answers streams through a custom host with 500 "TypeError: immutable").

The client wires routefit serves besides chat are measured at c1 on their native passthrough
routes (``WIRE_PHASES``): ``/v1/messages`` to the Anthropic route, ``/v1/responses`` to the
OpenAI route, chat to the OpenAI route; each against the simulator's own endpoint for that wire,
so "vs chat" compares the time routefit adds, not the simulator's cost per wire. They run
interleaved request by request in one client (bench/wire_overhead.py); Responses is measured
with ``store: false`` (like-for-like with chat) and with ``store: true`` (a stored response
written per request) separately.

Two paths: the OpenAI-compatible one (``openai/gpt-4o`` with ``api_base`` = sim ``/v1``; routefit
forwards it without translation) and the translated one (``anthropic/claude-sonnet-4-5`` with
``api_base`` = the sim, an OpenAI chat client: LiteLLM goes through its Anthropic adapter,
routefit through its own chat↔Messages mapping over its aiohttp client, Portkey through its
anthropic provider; "direct" there is the equivalent Anthropic wire request).

Each phase runs the load generator (bench/loadgen.py, its own process) for a fixed time after a
warm-up, and reads the server's and the simulator's CPU time from /proc before and after, so CPU
per request covers warm-up requests too (divided by all requests sent).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from procs import (
    ROOT,
    Server,
    Servers,
    anthropic_entry,
    openai_entry,
    portkey_headers,
    write_yaml,
)
from workloads import anthropic_small, openai_long, openai_small, responses_small

LOADGEN = ROOT / "bench" / "loadgen.py"
WIRE_OVERHEAD = ROOT / "bench" / "wire_overhead.py"
BENCH_KEY = "sk-bench-0123456789abcdef0123456789abcdef"

# (phase, workload, concurrency)
OPENAI_PHASES = [
    ("small c1", "small", 1),
    ("small c16", "small", 16),
    ("stream c1", "stream", 1),
    ("stream c16", "stream", 16),
    ("30k-token prompt c1", "long", 1),
]
TRANSLATED_PHASES = [
    ("small c1", "small", 1),
    ("small c16", "small", 16),
    ("stream c16", "stream", 16),
]
#: routefit's client wires at c1, each on a route that speaks it natively:
#: (phase, path, body kind, routefit alias, simulator model). ``store: false`` is the Responses
#: request like-for-like with chat (nothing kept); ``store: true`` (the API's default) also
#: writes a stored response per request and is reported beside it, not as the wire's cost.
WIRE_PHASES = [
    ("chat small c1", "/v1/chat/completions", "chat", "gpt-4o", "gpt-4o"),
    ("messages small c1", "/v1/messages", "messages", "claude", "claude-sonnet-4-5"),
    ("responses small c1", "/v1/responses", "responses", "gpt-4o", "gpt-4o"),
    ("responses store=true small c1", "/v1/responses", "responses-stored", "gpt-4o", "gpt-4o"),
]
TARGETS = ("routefit", "litellm", "portkey")


def loadgen(spec: dict) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        path = f.name
    timeout = spec["duration"] + spec.get("warmup", 0) + 120
    out = subprocess.run(
        [sys.executable, str(LOADGEN), path],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    Path(path).unlink(missing_ok=True)
    if out.returncode != 0:
        raise RuntimeError(f"loadgen failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def run_phase(
    url: str,
    body: str,
    headers: dict[str, str],
    concurrency: int,
    stream: bool,
    duration: float,
    warmup: float,
    measured: dict[str, Server],
    stream_end: str = "[DONE]",
) -> dict:
    cpu0 = {name: s.cpu() for name, s in measured.items()}
    spec = {
        "url": url,
        "body": body,
        "headers": headers,
        "concurrency": concurrency,
        "duration": duration,
        "warmup": warmup,
        "stream": stream,
        "stream_end": stream_end,
    }
    result = loadgen(spec)
    sent = max(1, result["total_requests"])
    for name, s in measured.items():
        result[f"{name}_cpu_ms_per_request"] = (s.cpu() - cpu0[name]) / sent * 1e3
    return result


def measure_target(
    name: str,
    url: str,
    model: str,
    headers: dict[str, str],
    phases: list[tuple[str, str, int]],
    sim: Server,
    server: Server | None,
    duration: float,
    warmup: float,
    anthropic_wire: bool = False,
    log=print,
) -> dict:
    results = {}
    # prime: first-call costs (lazy imports, tokenizer loading, connection set-up) are start-up,
    # not per-request cost; they are reported by the start-up section
    for workload in sorted({w for _, w, _ in phases}):
        stream = workload == "stream"
        if anthropic_wire:
            body = anthropic_small(model, stream)
        else:
            body = openai_long(model) if workload == "long" else openai_small(model, stream)
        spec = {"url": url, "body": body, "headers": headers, "concurrency": 4, "duration": 1.0}
        loadgen({**spec, "warmup": 0.0, "stream": stream, "max_requests": 40})
    for phase, workload, concurrency in phases:
        stream = workload == "stream"
        if anthropic_wire:
            body = anthropic_small(model, stream)
        elif workload == "long":
            body = openai_long(model)
        else:
            body = openai_small(model, stream)
        measured = {"sim": sim}
        if server is not None:
            measured["server"] = server
        r = run_phase(
            url,
            body,
            headers,
            concurrency,
            stream,
            duration,
            warmup,
            measured,
            stream_end="message_stop" if anthropic_wire and stream else "[DONE]",
        )
        bad = r["requests"] - r["statuses"].get("200", 0) + r["errors"]
        log(
            f"  {name:<9} {phase:<20} {r['rps']:8.1f} req/s  p50 {r['p50_ms']:7.2f} ms  "
            f"p99 {r['p99_ms']:7.2f} ms  server cpu "
            f"{r.get('server_cpu_ms_per_request', 0):6.2f} ms/req"
            + (f"  FAILED {bad}: {r['error_samples'][:1] or r['error_kinds']}" if bad else "")
        )
        results[phase] = r
    return results


def routefit_config(path: Path, upstream: str) -> Path:
    """routefit as the bench runs it: an OpenAI and an Anthropic route to ``upstream``, and one
    team with a key and no quotas (requests are authenticated, as on LiteLLM)."""
    return write_yaml(
        path,
        {
            "model_list": [openai_entry("gpt-4o", upstream), anthropic_entry("claude", upstream)],
            "routefit_settings": {
                "store_path": ":memory:",
                "teams": [{"id": "bench", "keys": [BENCH_KEY]}],
            },
        },
    )


def run(servers: Servers, litellm_venv: Path, quick: bool, log=print) -> dict:
    duration, warmup = (2.5, 0.5) if quick else (8.0, 1.5)
    sim = servers.sim()
    log(f"  simulator at {sim.base_url}")
    rf_config = routefit_config(servers.dir / "routefit-load.yaml", sim.base_url)
    ll_config = write_yaml(
        servers.dir / "litellm-load.yaml",
        {
            "model_list": [
                openai_entry("gpt-4o", sim.base_url),
                anthropic_entry("claude", sim.base_url),
            ],
            "litellm_settings": {"telemetry": False},
            # LiteLLM refuses to start without a master key; without a database it checks
            # requests against this key only (no spend tracking), like routefit's team key.
            "general_settings": {"master_key": BENCH_KEY},
        },
    )
    out: dict = {"duration_s": duration, "warmup_s": warmup, "openai": {}, "translated": {}}
    memory: dict = {}
    auth = {"Authorization": f"Bearer {BENCH_KEY}"}
    anth_headers = {"x-api-key": "sk-ant-sim", "anthropic-version": "2023-06-01"}

    # direct baselines
    out["openai"]["direct"] = measure_target(
        "direct",
        sim.base_url + "/v1/chat/completions",
        "gpt-4o",
        auth,
        OPENAI_PHASES,
        sim,
        None,
        duration,
        warmup,
        log=log,
    )
    out["translated"]["direct"] = measure_target(
        "direct",
        sim.base_url + "/v1/messages",
        "claude-sonnet-4-5",
        anth_headers,
        TRANSLATED_PHASES,
        sim,
        None,
        duration,
        warmup,
        anthropic_wire=True,
        log=log,
    )

    for name in TARGETS:
        try:
            server = _start(servers, name, rf_config, ll_config, litellm_venv)
        except RuntimeError as exc:  # Portkey not installed: the run goes on without it
            log(f"  {name}: not measured ({exc})")
            continue
        time.sleep(1.0)
        memory[name] = {"ready_s": server.ready_seconds, "idle_rss_mib": server.rss()}
        url = server.base_url + "/v1/chat/completions"
        models, headers = ("gpt-4o", "claude"), (auth, auth)
        if name == "portkey":
            models = ("gpt-4o", "claude-sonnet-4-5")
            headers = (
                portkey_headers("openai", sim.base_url + "/v1", "sk-sim"),
                portkey_headers("anthropic", sim.base_url + "/v1", "sk-ant-sim"),
            )
        out["openai"][name] = measure_target(
            name, url, models[0], headers[0], OPENAI_PHASES, sim, server, duration, warmup, log=log
        )
        out["translated"][name] = measure_target(
            name,
            url,
            models[1],
            headers[1],
            TRANSLATED_PHASES,
            sim,
            server,
            duration,
            warmup,
            log=log,
        )
        if name == "routefit":
            out["wires"] = measure_wires(server, sim, auth, duration, warmup, log)
        memory[name]["loaded_rss_mib"] = server.rss()
        servers.stop(server)
    servers.stop(sim)
    out["memory"] = memory
    out["summary"] = summarise(out)
    return out


def _start(
    servers: Servers, name: str, rf_config: Path, ll_config: Path, litellm_venv: Path
) -> Server:
    if name == "routefit":
        return servers.routefit(rf_config)
    if name == "litellm":
        return servers.litellm(litellm_venv, ll_config)
    return servers.portkey()


def _wire_body(kind: str, model: str) -> str:
    if kind == "messages":
        return anthropic_small(model)
    if kind == "responses":
        return responses_small(model, store=False)
    if kind == "responses-stored":
        return responses_small(model, store=True)
    return openai_small(model)


def measure_wires(
    server: Server, sim: Server, auth: dict[str, str], duration: float, warmup: float, log=print
) -> dict:
    """Each client wire routefit answers, on its passthrough route at c1, and the simulator's
    own endpoint for that wire, all interleaved request by request (bench/wire_overhead.py) so
    the machine's drift lands on every wire alike (a wire that is not served — 404 / 405 — is
    reported absent)."""
    return measure_wires_of({"routefit": server}, sim, auth, duration, warmup, log)["routefit"]


def measure_wires_of(
    named: dict[str, Server],
    sim: Server,
    auth: dict[str, str],
    duration: float,
    warmup: float,
    log=print,
) -> dict[str, dict]:
    """``measure_wires`` for several routefit servers at once (a before/after: each wire
    through every server, and direct, in the same interleaved cycle); per server name."""
    import httpx

    anth = {"x-api-key": "sk-ant-sim", "anthropic-version": "2023-06-01"}
    targets: list[dict] = []
    out: dict[str, dict] = {name: {} for name in named}
    for phase, path, kind, alias, model in WIRE_PHASES:
        body = _wire_body(kind, alias)
        served = []
        for name, server in named.items():
            url = server.base_url + path
            probe = httpx.post(
                url, content=body.replace("@@NONCE@@", "0"), headers=auth, timeout=30
            )
            if probe.status_code in (404, 405):
                out[name][phase] = {"absent": True, "status": probe.status_code}
                log(f"  {name:<9} {phase:<30} not served (HTTP {probe.status_code})")
                continue
            served.append({"name": f"{phase}|{name}", "url": url, "body": body, "headers": auth})
        if served:
            direct = {"url": sim.base_url + path, "body": _wire_body(kind, model)}
            direct["headers"] = anth if kind == "messages" else auth
            targets += [{"name": f"{phase}|direct", **direct}, *served]
    # every target gets about as many requests as one phase of its own would
    spec = {"targets": targets, "seconds": duration * len(targets), "warmup": warmup}
    result = wire_overhead(spec)
    for name, phases in out.items():
        for phase, *_ in WIRE_PHASES:
            if phase in phases:
                continue
            r, d = result[f"{phase}|{name}"], result[f"{phase}|direct"]
            r["direct_p50_ms"] = d["p50_ms"]
            r["added_p50_ms"] = r["p50_ms"] - d["p50_ms"]
            phases[phase] = r
            log(
                f"  {name:<9} {phase:<30} p50 {r['p50_ms']:7.3f} ms  "
                f"(direct {d['p50_ms']:.3f}, added {r['added_p50_ms']:+.3f} ms, "
                f"{r['requests']} requests)"
            )
    return out


def wire_overhead(spec: dict) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        path = f.name
    try:
        done = subprocess.run(
            [sys.executable, str(WIRE_OVERHEAD), path],
            capture_output=True,
            text=True,
            timeout=spec["seconds"] + spec["warmup"] + 120,
            check=False,
        )
    finally:
        Path(path).unlink(missing_ok=True)
    if done.returncode != 0:
        raise RuntimeError(f"wire_overhead failed: {done.stderr[-2000:]}")
    result: dict = json.loads(done.stdout)
    return result


def summarise(out: dict) -> dict:
    summary: dict = {}
    for path in ("openai", "translated"):
        direct = out[path]["direct"]
        rows = {}
        for phase in direct:
            row: dict = {
                "direct_rps": direct[phase]["rps"],
                "direct_p50_ms": direct[phase]["p50_ms"],
            }
            for name in TARGETS:
                r = out[path].get(name, {}).get(phase)
                if r is None:
                    continue
                row[f"{name}_rps"] = r["rps"]
                row[f"{name}_added_p50_ms"] = r["p50_ms"] - direct[phase]["p50_ms"]
                row[f"{name}_added_p99_ms"] = r["p99_ms"] - direct[phase]["p99_ms"]
                row[f"{name}_cpu_ms_per_request"] = r.get("server_cpu_ms_per_request")
                row[f"{name}_ok"] = (
                    r["statuses"].get("200", 0) == r["requests"] and r["errors"] == 0
                )
            if "routefit_rps" in row and "litellm_rps" in row and row["litellm_rps"]:
                row["throughput_ratio"] = row["routefit_rps"] / row["litellm_rps"]
                lit = row["litellm_added_p50_ms"]
                row["added_p50_ratio"] = row["routefit_added_p50_ms"] / lit if lit > 0 else None
                lc = row["litellm_cpu_ms_per_request"]
                row["cpu_ratio"] = row["routefit_cpu_ms_per_request"] / lc if lc else None
            if row.get("portkey_ok") and row.get("routefit_rps"):
                row["portkey_throughput_ratio"] = row["routefit_rps"] / row["portkey_rps"]
                row["portkey_added_p50_diff_ms"] = (
                    row["routefit_added_p50_ms"] - row["portkey_added_p50_ms"]
                )
            rows[phase] = row
        summary[path] = rows
    wires = out.get("wires", {})
    chat = wires.get("chat small c1", {})
    summary["wires"] = {
        phase: (
            {"absent": True}
            if r.get("absent")
            else {
                "p50_ms": r["p50_ms"],
                "added_p50_ms": r["added_p50_ms"],
                "vs_chat_ms": r["added_p50_ms"] - chat.get("added_p50_ms", 0.0),
            }
        )
        for phase, r in wires.items()
    }
    return summary
