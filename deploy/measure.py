"""Sizing numbers for docs/operations.md: routefit's memory and CPU per request, idle and loaded.

    PYTHONPATH=tests python deploy/measure.py [--workers N] [--requests N] [--litellm]

Starts the provider simulator (proxy/sim), a private redis-server on a free loopback port (the
embedded store when redis-server is not installed) and ``routefit serve``, then sends two rounds
of ``--requests`` chat requests, 16 at a time: 60% short chats, 20% streamed, 20% agent
sessions of 10-80 tool turns (up to ~30k tokens) on a route with a 16k window, so they are
fitted. ``--litellm`` adds an Anthropic route (translated by litellm) that takes 15% of the
requests. Prints RSS and PSS per process idle and after each round, routefit's CPU time per
request, and Redis memory. Everything runs on 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

SHORT, STREAM = 0.6, 0.8  # cumulative shares of the mix; the rest are agent sessions


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def kib(pattern: str, path: str) -> int | None:
    try:
        found = re.search(pattern, Path(path).read_text(), re.M)
    except OSError:
        return None
    return int(found[1]) if found else None


def memory(pid: int) -> str:
    parts, total_rss, total_pss = [], 0, 0
    for p in process_tree(pid):
        rss = kib(r"^VmRSS:\s+(\d+)", f"/proc/{p}/status")
        pss = kib(r"^Pss:\s+(\d+)", f"/proc/{p}/smaps_rollup")
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if rss is None or pss is None:
            continue
        role = "worker" if b"multiprocessing" in b" ".join(cmd) else "main"
        if b"resource_tracker" in b" ".join(cmd):
            role = "resource tracker"
        total_rss, total_pss = total_rss + rss, total_pss + pss
        parts.append(f"{role} {rss // 1024} MiB")
    return f"RSS {total_rss // 1024} MiB, PSS {total_pss // 1024} MiB ({', '.join(parts)})"


def cpu_seconds(pid: int) -> float:
    ticks = 0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def agent_session(rnd: random.Random, turns: int) -> list[dict[str, Any]]:
    words = ["alpha", "beta", "gamma", "delta", "x=1", "fn()", "error", "ok", "return", "None"]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find the bug."},
    ]
    for t in range(turns):
        call = {
            "id": f"call_{t}",
            "type": "function",
            "function": {"name": "sh", "arguments": "{}"},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        text = f"step {t}: " + " ".join(rnd.choice(words) for _ in range(300))
        messages.append({"role": "tool", "tool_call_id": f"call_{t}", "content": text})
    return messages


async def load(base: str, n: int, seed: int, litellm: bool) -> str:
    rnd = random.Random(seed)
    sessions = [agent_session(rnd, rnd.randint(10, 80)) for _ in range(20)]
    codes: dict[int, int] = {}
    latencies: list[float] = []
    headers = {"Authorization": "Bearer rf-measure-key"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
        gate = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            r = rnd.random()
            body: dict[str, Any]
            if litellm and r < 0.15:
                content = f"claude {i} " * rnd.randint(1, 200)
                body = {"model": "claude", "messages": [{"role": "user", "content": content}]}
                body["stream"] = rnd.random() < 0.5
            elif r < SHORT:
                content = f"question {i} " * rnd.randint(1, 200)
                model = rnd.choice(["gpt-4o", "gpt-4o-mini"])
                body = {"model": model, "messages": [{"role": "user", "content": content}]}
            elif r < STREAM:
                messages = [{"role": "user", "content": f"stream {i}"}]
                body = {"model": "gpt-4o-mini", "messages": messages, "stream": True}
            else:
                session = rnd.choice(sessions)
                messages = session[: rnd.randrange(2, len(session) + 1, 2)]
                messages = [*messages, {"role": "user", "content": "What did you find?"}]
                body = {"model": "gpt-4o-16k", "messages": messages}
            body["max_tokens"] = 50
            async with gate:
                started = time.perf_counter()
                response = await client.post("/v1/chat/completions", json=body)
                await response.aread()
                latencies.append(time.perf_counter() - started)
                codes[response.status_code] = codes.get(response.status_code, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    return (
        f"{n} requests in {elapsed:.1f} s ({n / elapsed:.0f}/s), p50 {p50 * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, status {codes}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="deploy/measure.py", description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--litellm", action="store_true", help="add a litellm-translated route")
    parser.add_argument("--routefit", default=shutil.which("routefit") or "routefit")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="routefit-measure-"))
    procs: list[subprocess.Popen[Any]] = []
    try:
        sim = subprocess.Popen(
            [sys.executable, "-m", "proxy.sim", "--port", "0"], stdout=subprocess.PIPE, text=True
        )
        procs.append(sim)
        assert sim.stdout is not None
        sim_url = sim.stdout.readline().split()[-1]
        settings: dict[str, Any] = {"store_path": str(work / "routefit.sqlite3")}
        redis_port = None
        if shutil.which("redis-server"):
            redis_port = free_port()
            command = ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1"]
            command += ["--save", "", "--appendonly", "no", "--dir", str(work)]
            procs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))  # noqa: S603
            settings["redis_url"] = f"redis://127.0.0.1:{redis_port}/0"
        settings["teams"] = [
            {"id": "measure", "keys": ["rf-measure-key"], "quotas": {"tokens_per_day": 10**12}}
        ]
        routes: list[dict[str, Any]] = []
        for alias, model, window in [
            ("gpt-4o", "gpt-4o", None),
            ("gpt-4o-mini", "gpt-4o-mini", None),
            ("gpt-4o-16k", "gpt-4o", 16000),
        ]:
            params = {"model": f"openai/{model}", "api_base": f"{sim_url}/v1", "api_key": "sk-sim"}
            entry: dict[str, Any] = {"model_name": alias, "litellm_params": params}
            if window:
                entry["model_info"] = {"max_input_tokens": window}
            routes.append(entry)
        if args.litellm:
            params = {"model": "anthropic/claude-sonnet-4-5", "api_base": sim_url}
            params["api_key"] = "sk-ant-sim"
            routes.append({"model_name": "claude", "litellm_params": params})
        config = work / "routefit.yaml"
        config.write_text(yaml.safe_dump({"model_list": routes, "routefit_settings": settings}))

        port = free_port()
        started = time.time()
        serve = ["serve", "--config", str(config), "--port", str(port), "--log-level", "warning"]
        routefit = subprocess.Popen(  # noqa: S603
            [args.routefit, *serve, "--workers", str(args.workers)],
            stderr=(work / "routefit.log").open("w"),
        )
        procs.append(routefit)
        base = f"http://127.0.0.1:{port}"
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if routefit.poll() is not None or time.time() - started > 120:
                print((work / "routefit.log").read_text(), file=sys.stderr)
                return 1
            time.sleep(0.1)
        store = settings.get("redis_url", "sqlite")
        print(f"workers {args.workers}, litellm route {args.litellm}, store {store}")
        print(f"ready after {time.time() - started:.1f} s")
        time.sleep(5)
        print(f"idle: {memory(routefit.pid)}")
        for round_ in (1, 2):
            before = cpu_seconds(routefit.pid)
            print(f"round {round_}: {asyncio.run(load(base, args.requests, round_, args.litellm))}")
            per_request = (cpu_seconds(routefit.pid) - before) / args.requests * 1000
            time.sleep(2)
            print(f"  routefit CPU {per_request:.2f} ms per request; {memory(routefit.pid)}")
        if redis_port:

            def cli(*words: str) -> str:
                command = ["redis-cli", "-p", str(redis_port), *words]
                done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
                return done.stdout.strip()

            used = re.search(r"used_memory_human:(\S+)", cli("info", "memory"))
            keys = cli("dbsize")
            print(f"redis: used_memory {used[1] if used else '?'}, {keys} keys")
        return 0
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
