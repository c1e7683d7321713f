"""Where routefit's CPU goes on the OpenAI passthrough path (not part of run.py).

    python bench/profile_proxy.py [--workload small|long|stream|new|session] [--concurrency 16]
                                  [--seconds 6]

Starts the simulator and an in-process-built routefit app (``proxy.app.create_app`` under
uvicorn, one route ``gpt-4o``), drives the workload (small requests; ``long``: a ~28k-token
prompt of new text, the bounded-fit path; ``stream``: small streamed requests; ``new``: a big
prompt of text never seen anywhere in it, as bench/new_text.py sends it: ``--kind``, ``--size``,
``--placement``; ``session``: a 400-message agent session's next turn) at the given
concurrency with bench/loadgen.py, records the server with ``py-spy record --idle --threads``
and prints the main thread's time by component (installs py-spy into this venv if missing).
aiohttp is the passthrough's HTTP client; the earlier aiohttp-vs-httpx experiment is settled
and gone. ``--as-bench --rev REV`` profiles another
commit the way bench/compare_commits.py serves it (a before/after of a change).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import new_text
from procs import (
    UPSTREAM_HELP,
    UPSTREAMS,
    Server,
    Servers,
    _ok,
    free_port,
    openai_entry,
    serve,
    worktree,
    write_yaml,
)
from proxy_load import BENCH_KEY, routefit_config, run_phase
from workloads import openai_long, openai_session, openai_small

APP = """
import sys, uvicorn
sys.path.insert(0, {root!r})
from proxy.app import create_app
from proxy.config import load_config
app = create_app(load_config(sys.argv[1]))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""

COMPONENTS = [
    ("routefit handler (Gateway.serve)", "Gateway.serve"),
    ("  intake: read, authenticate, parse, route (Intake.admit)", "Intake.admit"),
    ("  estimate: price, fit, anchor (Estimator.estimate)", "Estimator.estimate"),
    ("    bounded fit (pricing.bounds)", "bound_pressure"),
    ("    exact fit (strategies.fit)", "fit (strategies"),
    ("    anchor lookup (Calibrator.find_anchor)", "Calibrator.find_anchor"),
    ("    proof: counting pieces before forwarding (Proof.tighten)", "Proof.tighten"),
    ("    proof: counting the rest (Proof.complete)", "Proof.complete"),
    ("    counting whole texts (Tokenizer.count)", "_Tiktoken.count"),
    ("  upstream call, whole or a stream's opening (Passthrough.send)", "Passthrough.send"),
    ("  relaying a stream (Wire.relay)", ".relay ("),
    ("learning from the usage, after the answer (Estimator.learn)", "Estimator.learn"),
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


def top(path: Path, n: int) -> list[tuple[str, float, float]]:
    """The ``n`` functions with the most main-thread samples under them (idle excluded): (name,
    share with callees, share in the function itself)."""
    under: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    busy = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if "MainThread" not in frames[0] or frames[-1].startswith("Runner.run (asyncio/"):
            continue
        busy += int(count)
        for frame in set(frames[1:]):
            under[frame] += int(count)
        own[frames[-1]] += int(count)
    return [(f, c / max(1, busy), own[f] / max(1, busy)) for f, c in under.most_common(n)]


def serve_minimal(servers: Servers, upstream: str, app_file: Path) -> Server:
    config = write_yaml(
        servers.dir / "profile.yaml",
        {
            "model_list": [openai_entry("gpt-4o", upstream)],
            "routefit_settings": {"store_path": ":memory:"},
        },
    )
    port = free_port()
    cmd = [sys.executable, str(app_file), str(config), str(port)]
    process, log_path, started = servers.spawn("routefit-app", cmd)
    base = f"http://127.0.0.1:{port}"
    server = servers.wait_ready(
        "routefit-app", process, log_path, started, base, lambda: _ok(base + "/readyz"), 60
    )
    server.base_url = base
    return server


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workload", choices=("small", "long", "stream", "new", "session"), default="small"
    )
    parser.add_argument("--kind", default="prose", help="new: the kind of new text (new_text.py)")
    parser.add_argument("--size", type=int, default=30_000, help="new: its size in tokens")
    parser.add_argument("--placement", default="start", help="new: start, middle or end")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--top", type=int, default=0, help="also list the N costliest functions")
    parser.add_argument(
        "--cpu-only",
        action="store_true",
        help="sample only threads on a CPU (no --idle): where CPU goes, not where time waits",
    )
    parser.add_argument("--keep", type=Path, help="copy py-spy's raw profile (stacks) here")
    parser.add_argument(
        "--as-bench",
        action="store_true",
        help="serve with `routefit serve` and run.py's config (team key, two routes), not the "
        "in-process minimal app",
    )
    parser.add_argument("--upstream", choices=UPSTREAMS, default="sim", help=UPSTREAM_HELP)
    parser.add_argument(
        "--rev",
        help="with --as-bench: serve this git revision (a temporary worktree first on "
        "PYTHONPATH, as compare_commits.py does) instead of the working tree",
    )
    return parser.parse_args()


def profile(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    if (
        importlib.util.find_spec("py_spy") is None
        and not (Path(sys.executable).parent / "py-spy").exists()
    ):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)
    spy_exe = str(Path(sys.executable).parent / "py-spy")
    app_file = Path(tempfile.mkdtemp()) / "app.py"
    app_file.write_text(APP.format(root=str(HERE.parent)))
    stream = args.workload == "stream"
    body = openai_long("gpt-4o") if args.workload == "long" else openai_small("gpt-4o", stream)
    if args.workload == "session":
        body = openai_session("gpt-4o")
    if args.workload == "new":
        body = new_text.body(args.kind, args.size, args.placement)
    with Servers() as servers:
        sim = servers.upstream(args.upstream)
        headers: dict[str, str] = {}
        if args.as_bench:
            config = routefit_config(servers.dir / "bench.yaml", sim.base_url)
            if args.rev:
                source = stack.enter_context(worktree(args.rev, servers.dir / "rev"))
                server = serve(servers, source, config, "routefit-rev")
            else:
                server = servers.routefit(config)
            headers = {"Authorization": f"Bearer {BENCH_KEY}"}
        else:
            server = serve_minimal(servers, sim.base_url, app_file)
        url = server.base_url + "/v1/chat/completions"
        # prime; its requests' serials are not the measured ones' (a count cache would hit)
        run_phase(url, body.replace("@@NONCE@@", "p@@NONCE@@"), headers, 4, stream, 1.0, 0.0, {})
        profile = servers.dir / "profile.txt"
        record = [
            "record",
            "-p",
            str(server.pid),
            "-d",
            str(int(args.seconds)),
            "-r",
            "250",
        ]
        idle = [] if args.cpu_only else ["--idle"]
        spy = subprocess.Popen(
            [spy_exe, *record, *idle, "--threads", "-f", "raw", "-o", str(profile)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.3)
        r = run_phase(
            url,
            body,
            headers,
            args.concurrency,
            stream,
            args.seconds - 0.5,
            0.2,
            {"server": server},
        )
        ok = r["statuses"].get("200", 0) == r["requests"] and not r["errors"]
        print(
            f"{args.workload} c{args.concurrency}: {r['rps']:7.1f} req/s  "
            f"p50 {r['p50_ms']:6.2f} ms  "
            f"server CPU {r['server_cpu_ms_per_request']:.2f} ms/request (under py-spy)"
            + ("" if ok else f"  FAILED: {r['statuses']} {r['error_kinds']}")
        )
        spy.wait()
        if profile.exists():
            if args.keep:
                shutil.copyfile(profile, args.keep)
            for label, share in breakdown(profile):
                print(f"    {share:6.1%}  {label}")
            for name, share, own in top(profile, args.top):
                print(f"    {share:6.1%} {own:6.1%} own  {name}")
        servers.stop(server)
    return 0


def main() -> int:
    with contextlib.ExitStack() as stack:  # the revision's worktree goes whatever happened
        return profile(_args(), stack)


if __name__ == "__main__":
    raise SystemExit(main())
