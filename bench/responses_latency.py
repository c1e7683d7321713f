"""The client wires' added latency at c1, alone (the wire part of bench/run.py's section 1).

    python bench/responses_latency.py [--against REV] [--seconds 4] [--warmup 1.5]

Starts the simulator and ``routefit serve --workers 1`` with the benchmark's routes (``gpt-4o``
OpenAI, ``claude`` Anthropic) and runs ``proxy_load.measure_wires``: chat, Messages, Responses
(``store: false``, and ``store: true`` beside it), each direct to the simulator's endpoint for
that wire and through routefit, interleaved request by request in one client. Prints each wire's
added p50 and its difference from chat's. ``--against REV`` serves that revision too (checked
out as ``compare_commits`` does) in the same interleaved cycle: a before/after in one run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from procs import ROOT, Server, Servers, checkout, serve
from proxy_load import BENCH_KEY, measure_wires_of, routefit_config


def _print(name: str, wires: dict) -> None:
    chat = wires["chat small c1"]["added_p50_ms"]
    for phase, r in wires.items():
        if not r.get("absent") and not phase.startswith("chat"):
            print(f"{name:<9} {phase:<30} {r['added_p50_ms'] - chat:+.3f} ms vs chat")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", help="a revision to measure beside the working tree")
    parser.add_argument("--seconds", type=float, default=4.0, help="per target")
    parser.add_argument("--warmup", type=float, default=1.5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Servers() as servers:
        source = checkout(args.against, Path(tmp) / "a") if args.against else None
        try:
            sim = servers.sim()
            config = routefit_config(servers.dir / "routefit-wires.yaml", sim.base_url)
            named: dict[str, Server] = {}
            if source is not None:
                named["before"] = serve(servers, source, config, "before")
            named["routefit"] = servers.routefit(config)
            auth = {"Authorization": f"Bearer {BENCH_KEY}"}
            result = measure_wires_of(named, sim, auth, args.seconds, args.warmup)
        finally:
            if source is not None:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(source)],
                    capture_output=True,
                )
    for name, wires in result.items():
        _print(name, wires)


if __name__ == "__main__":
    main()
