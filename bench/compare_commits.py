"""Two commits of routefit side by side on the same load: a before/after for a change.

    python bench/compare_commits.py REV_A [REV_B] [--rounds 4] [--seconds 4] [--phases 'long c1']

Each revision is checked out into a temporary git worktree and served by this venv's Python with
that worktree first on ``sys.path`` (the packages' dependencies are the same), one worker each,
against one simulator. The phases (small c1 added p50, small c16 req/s, stream c1 added p50,
stream c16 req/s, a ~28k-token prompt of new text c1 added p50, a 400-message agent session's
next turn c1 added p50, the same of a 16-step session whose tool outputs are 20 KB of JSON
(``tools session c1``); named only: ``new 32k c1``, ``new 120k c1``, bench/new_text.py's prose
with new text everywhere) run A then B in even rounds and
B then A in odd ones: whichever runs second in a round was measured slower by 5-14% on the same
code (HEAD against itself), so a fixed order would credit or blame a change with the position.
The report is each figure's median over the rounds and the B/A ratio, with the server's CPU per
request beside each (steadier than latency on a shared machine) and the range of the rounds' own
CPU ratios, the noise to read the median against; use an even number of rounds.
Both serve run.py's routefit config (bench/proxy_load.py ``routefit_config``).
Default REV_B: the working tree.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import new_text
from procs import Server, Servers, checkouts, serve
from proxy_load import BENCH_KEY, routefit_config, run_phase
from workloads import openai_long, openai_session, openai_small, openai_tool_session

PHASES = [
    ("small c1", False, 1),
    ("small c16", False, 16),
    ("stream c1", True, 1),
    ("stream c16", True, 16),
    ("long c1", False, 1),
    ("session c1", False, 1),
    ("tools session c1", False, 1),
]
#: Run only when named in ``--phases``: a prompt of prose no one has sent, new text first, of
#: this many tokens (bench/new_text.py's cells).
NEW_TEXT = {"new 32k c1": 32_000, "new 120k c1": 120_000}


def measure(
    url: str, sim: Server, server: Server | None, seconds: float, tag: str
) -> dict[str, tuple[float, float]]:
    """Per phase: (added p50 ms at c1 or req/s, server CPU ms per request)."""
    out: dict[str, tuple[float, float]] = {}
    for phase, stream, c in PHASES:
        if phase in NEW_TEXT:
            body = new_text.body("prose", NEW_TEXT[phase], "start")
        elif phase.startswith("long"):
            body = openai_long("gpt-4o")
        elif phase.startswith("session"):
            body = openai_session("gpt-4o")
        elif phase.startswith("tools session"):
            body = openai_tool_session("gpt-4o")
        else:
            body = openai_small("gpt-4o", stream=stream)
        # The load generator numbers its requests from 0 on every run: without a tag per run,
        # round 2 would re-send round 1's "new" prompts (and B A's, to the simulator's cache).
        body = body.replace("@@NONCE@@", f"{tag}{len(out)}-@@NONCE@@")
        measured = {"sim": sim} if server is None else {"sim": sim, "routefit": server}
        headers = {} if server is None else {"Authorization": f"Bearer {BENCH_KEY}"}
        r = run_phase(url, body, headers, c, stream, seconds, 1.0, measured)
        cpu = float(r.get("routefit_cpu_ms_per_request") or 0.0)
        out[phase] = (r["p50_ms"] if c == 1 else r["rps"], cpu)
    return out


def _spread(a: list[float], b: list[float]) -> str:
    """The range of the rounds' own B/A ratios (each round measures both, minutes apart at
    most): the noise a median ratio is read against. A ratio whose range holds 1 is within it."""
    ratios = sorted(y / x for x, y in zip(a, b, strict=True) if x)
    return f", rounds {ratios[0]:.2f}-{ratios[-1]:.2f}" if len(ratios) > 1 else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev_a")
    parser.add_argument("rev_b", nargs="?", default=None)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument(
        "--phases", help="comma-separated phase names to run (default: all), e.g. 'long c1'"
    )
    args = parser.parse_args()
    if args.phases:
        wanted = {p.strip() for p in args.phases.split(",")}
        extra = [(p, False, 1) for p in NEW_TEXT]
        PHASES[:] = [p for p in PHASES + extra if p[0] in wanted]
    with (
        tempfile.TemporaryDirectory() as tmp,
        checkouts(args.rev_a, args.rev_b, Path(tmp)) as (a_src, b_src),
        Servers() as servers,
    ):
        sim = servers.sim()
        config = routefit_config(Path(tmp) / "c.yaml", sim.base_url)
        a = serve(servers, a_src, config, "a")
        b = serve(servers, b_src, config, "b")
        rows: dict[str, list[list[float]]] = {p: [[], [], []] for p, _, _ in PHASES}
        cpus: dict[str, list[list[float]]] = {p: [[], []] for p, _, _ in PHASES}
        for n in range(args.rounds):
            direct = measure(sim.base_url + "/v1/chat/completions", sim, None, args.seconds, n)
            for i in (0, 1) if n % 2 == 0 else (1, 0):
                server = (a, b)[i]
                tag = f"r{n}{'ab'[i]}"
                got = measure(
                    server.base_url + "/v1/chat/completions", sim, server, args.seconds, tag
                )
                for phase, (value, cpu) in got.items():
                    rows[phase][i + 1].append(value)
                    cpus[phase][i].append(cpu)
            for phase, (value, _) in direct.items():
                rows[phase][0].append(value)
    print(f"A = {args.rev_a}, B = {args.rev_b or 'working tree'}; medians of {args.rounds} rounds")
    print(f"{'phase':<12} {'direct':>9} {'A':>9} {'B':>9}   figure{'':<20} CPU ms/request A, B")
    for phase, (d, a_vals, b_vals) in rows.items():
        dm, am, bm = (statistics.median(v) for v in (d, a_vals, b_vals))
        ca, cb = (statistics.median(v) for v in cpus[phase])
        cpu = f"{ca:6.2f} {cb:6.2f} (B/A {cb / ca:.3f}{_spread(*cpus[phase])})" if ca else ""
        if phase.endswith("c1"):
            print(
                f"{phase:<12} {dm:9.2f} {am - dm:+9.2f} {bm - dm:+9.2f}   "
                f"added p50 ms{'':<14} {cpu}"
            )
        else:
            ratio = f"req/s (B/A {bm / am:.3f})"
            print(f"{phase:<12} {dm:9.0f} {am:9.0f} {bm:9.0f}   {ratio:<26} {cpu}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
