"""Where routefit's CPU goes on the OpenAI passthrough path (not part of run.py).

    python bench/profile_proxy.py [--concurrency 16] [--seconds 6] [--no-experiment]

1. Starts the simulator and an in-process-built routefit app (``proxy.app.create_app`` under
   uvicorn, one route ``gpt-4o``), drives small non-streaming requests at the given concurrency
   with bench/loadgen.py, records the server with ``py-spy record --idle --threads`` and prints
   the main thread's time by component (installs py-spy into this venv if missing).
2. Unless ``--no-experiment``: the same load against the same app with the passthrough's
   ``Upstreams.complete`` replaced by a plain aiohttp POST (same URL, body and headers, the
   usage still parsed) — what the HTTP client alone costs. This patches routefit in the
   benchmark's own process only; nothing outside bench/ is changed.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from procs import Servers, _ok, free_port, openai_entry, write_yaml
from proxy_load import run_phase
from workloads import openai_small

APP = """
import sys, uvicorn
sys.path.insert(0, {root!r})
from proxy.app import create_app
from proxy.config import load_config
if sys.argv[3] == "aiohttp":
    import aiohttp, orjson
    from proxy.upstream import Completion, Upstreams
    from proxy.usage import normalize_usage
    original, holder = Upstreams.complete, {{}}
    async def complete(self, up, body):
        if up.transport == "litellm":
            return await original(self, up, body)
        if "session" not in holder:
            holder["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512))
        payload = dict(body)
        payload["model"] = up.model_name
        headers = {{"content-type": "application/json"}}
        if up.api_key:
            headers["authorization"] = f"Bearer {{up.api_key}}"
        url = f"{{up.api_base}}/chat/completions"
        async with holder["session"].post(url, data=orjson.dumps(payload), headers=headers) as r:
            content = await r.read()
        data = orjson.loads(content)
        return Completion(content, normalize_usage(data.get("usage")))
    Upstreams.complete = complete
app = create_app(load_config(sys.argv[1]))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""

COMPONENTS = [
    ("routefit handler (Gateway.chat)", "Gateway.chat"),
    ("  upstream call (Upstreams.complete)", "Upstreams.complete"),
    ("    httpx AsyncClient.send", "AsyncClient.send"),
    ("    httpcore pool scan (_assign_requests_to_connections)", "_assign_requests_to_connections"),
    ("    reading the response (Response.aread)", "Response.aread"),
    ("  prepare: parse, price, fit, anchor", "Gateway.prepare"),
    ("    fit (strategies.fit)", "fit (strategies"),
    ("    anchor lookup (Calibrator.find_anchor)", "Calibrator.find_anchor"),
    ("  after the answer (Gateway.on_usage)", "Gateway.on_usage"),
    ("sending the response (uvicorn RequestResponseCycle.send)", "RequestResponseCycle.send"),
]


def breakdown(path: Path) -> list[tuple[str, float]]:
    counts: collections.Counter[str] = collections.Counter()
    total = idle = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if "MainThread" not in frames[0]:
            continue
        total += int(n)
        if frames[-1].startswith("Runner.run (asyncio/runners.py"):
            idle += int(n)
        for label, key in COMPONENTS:
            if any(key in f for f in frames):
                counts[label] += int(n)
    rows = [(label, counts[label] / max(1, total)) for label, _ in COMPONENTS]
    return [*rows, ("idle (event loop waiting)", idle / max(1, total))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--no-experiment", action="store_true")
    args = parser.parse_args()
    if (
        importlib.util.find_spec("py_spy") is None
        and not (Path(sys.executable).parent / "py-spy").exists()
    ):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)
    spy_exe = str(Path(sys.executable).parent / "py-spy")
    app_file = Path(tempfile.mkdtemp()) / "app.py"
    app_file.write_text(APP.format(root=str(HERE.parent)))
    modes = ["httpx (as shipped)"] + ([] if args.no_experiment else ["aiohttp (experiment)"])
    with Servers() as servers:
        sim = servers.sim()
        config = write_yaml(
            servers.dir / "profile.yaml",
            {
                "model_list": [openai_entry("gpt-4o", sim.base_url)],
                "routefit_settings": {"store_path": ":memory:"},
            },
        )
        for mode in modes:
            port = free_port()
            flag = "aiohttp" if mode.startswith("aiohttp") else "httpx"
            cmd = [sys.executable, str(app_file), str(config), str(port), flag]
            process, log_path, started = servers.spawn("routefit-app", cmd)
            base = f"http://127.0.0.1:{port}"
            server = servers.wait_ready(
                "routefit-app",
                process,
                log_path,
                started,
                base,
                lambda b=base: _ok(b + "/readyz"),
                60,
            )
            url = base + "/v1/chat/completions"
            body = openai_small("gpt-4o")
            run_phase(url, body, {}, 4, False, 1.0, 0.0, {})  # prime
            profile = servers.dir / f"profile-{flag}.txt"
            spy = None
            if flag == "httpx":
                spy = subprocess.Popen(
                    [
                        spy_exe,
                        "record",
                        "-p",
                        str(server.pid),
                        "-d",
                        str(int(args.seconds)),
                        "-r",
                        "250",
                        "--idle",
                        "--threads",
                        "-f",
                        "raw",
                        "-o",
                        str(profile),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(0.3)
            r = run_phase(
                url, body, {}, args.concurrency, False, args.seconds - 0.5, 0.2, {"server": server}
            )
            ok = r["statuses"].get("200", 0) == r["requests"] and not r["errors"]
            print(
                f"{mode:<22} c{args.concurrency}: {r['rps']:7.1f} req/s  "
                f"p50 {r['p50_ms']:6.2f} ms  "
                f"server CPU {r['server_cpu_ms_per_request']:.2f} ms/request"
                + ("" if ok else f"  FAILED: {r['statuses']} {r['error_kinds']}")
                + ("  (under py-spy)" if spy else "")
            )
            if spy is not None:
                spy.wait()
                if profile.exists():
                    for label, share in breakdown(profile):
                        print(f"    {share:6.1%}  {label}")
            servers.stop(server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
