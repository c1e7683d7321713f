"""What routefit's server and client stack costs with nothing of routefit in it.

    python bench/stack_floor.py [--rounds 4] [--seconds 4] [--servers uvicorn,granian]

Issue 34 asks a small request at c1 to cost at most 0.4 ms of the server's CPU and to add at most
0.5 ms. A floor says how much of routefit's figure is routefit: a bare pass-through served the way
``routefit serve`` serves (uvicorn on uvloop with httptools, the body read from the ASGI messages
and posted through one kept aiohttp session to the same simulator, its answer sent back with
its status and content type) does only what any proxy on this stack must. It runs beside routefit
in the same rounds, on the same simulator and load generator, alternating the order per round as
``compare_commits.py`` does; the report is each target's median added p50 and CPU per request,
and the floor's share of routefit's CPU. ``granian`` (a Rust HTTP server with an ASGI interface)
serves the same bare app when it is installed, to tell the server's part from the client's.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics

from compare_commits import PHASES, measure
from procs import ROOT, Server, Servers, serve
from proxy_load import routefit_config


def _available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--phases", default="small c1,small c16")
    parser.add_argument("--servers", default="uvicorn,granian")
    args = parser.parse_args()
    wanted = {p.strip() for p in args.phases.split(",")}
    PHASES[:] = [p for p in PHASES if p[0] in wanted]
    kinds = [k for k in args.servers.split(",") if k == "uvicorn" or _available(k)]
    with Servers() as servers:
        sim = servers.sim()
        targets: dict[str, Server] = {f"bare on {k}": servers.floor(sim, k) for k in kinds}
        config = routefit_config(servers.dir / "c.yaml", sim.base_url)
        targets["routefit"] = serve(servers, ROOT, config, "routefit")
        names = list(targets)
        figures: dict[str, dict[str, list[tuple[float, float]]]] = {n: {} for n in names}
        direct: dict[str, list[float]] = {}
        for n in range(args.rounds):
            for phase, (value, _) in measure(
                sim.base_url + "/v1/chat/completions", sim, None, args.seconds, f"d{n}"
            ).items():
                direct.setdefault(phase, []).append(value)
            order = names if n % 2 == 0 else names[::-1]
            for name in order:
                server = targets[name]
                url = server.base_url + "/v1/chat/completions"
                got = measure(url, sim, server, args.seconds, f"{n}{name}")
                for phase, pair in got.items():
                    figures[name].setdefault(phase, []).append(pair)
    print(f"medians of {args.rounds} rounds of {args.seconds:.0f} s; CPU is the server's own")
    for phase, _, c in PHASES:
        d = statistics.median(direct[phase])
        print(f"{phase}: direct {d:.2f} {'ms p50' if c == 1 else 'req/s'}")
        rf_cpu = statistics.median(cpu for _, cpu in figures["routefit"][phase])
        for name in names:
            values = figures[name][phase]
            v = statistics.median(value for value, _ in values)
            cpu = statistics.median(cpu for _, cpu in values)
            figure = f"added {v - d:+.2f} ms" if c == 1 else f"{v:.0f} req/s"
            share = f"  ({cpu / rf_cpu:.2f} of routefit's CPU)" if name != "routefit" else ""
            print(f"  {name:<18} {figure:<18} CPU {cpu:.3f} ms/request{share}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
