"""The benchmark: one command → bench/REPORT.md, bench/results/*.json, bench/plots/*.png.

    python bench/run.py            # full run, ~15 minutes on 2 cores
    python bench/run.py --quick    # shorter phases and fewer points, ~4 minutes
    python bench/run.py --only proxy_load,sessions   # some sections (report from those only)

Run it with the routefit venv's python (``.venv/bin/python bench/run.py``). It installs what it
needs on first use: bench/requirements.txt into this venv, and LiteLLM's proxy into its own venv
(``/work/.bench-litellm-venv``, or ``$BENCH_LITELLM_VENV``; created once, then reused).
Everything it starts listens on 127.0.0.1 and is stopped at the end (process groups).

Sections (one module each): proxy_load (overhead and throughput vs LiteLLM's proxy), startup
(start-up time and memory), fit_scaling (pricing cost, cold and warm), accuracy (estimates vs
provider usage), sessions (long agent sessions on an 8k window), others (the bench_*.py scripts
other people own, run as they are and their output included).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

SECTIONS = ("proxy_load", "startup", "fit_scaling", "accuracy", "sessions", "others")


def log(message: str) -> None:
    print(message, flush=True)


def ensure_requirements() -> None:
    needed = ("matplotlib", "mistral_common", "sentencepiece", "dashscope", "ai21_tokenizer")
    if any(importlib.util.find_spec(name) is None for name in needed):
        log("installing bench/requirements.txt into this venv")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "-r", str(BENCH / "requirements.txt")],
            check=True,
        )


def run_others(quick: bool) -> dict:
    """The bench_*.py scripts other people own: run as they are, output kept verbatim."""
    out = {}
    for script in sorted(glob.glob(str(BENCH / "bench_*.py"))):
        name = Path(script).name
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, script],
                capture_output=True,
                text=True,
                timeout=120 if quick else 300,
                cwd=str(ROOT),
                check=False,
            )
            output, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            output, code = f"timed out after {exc.timeout} s", -1
        out[name] = {"returncode": code, "seconds": time.perf_counter() - t0, "output": output}
        log(f"  {name}: exit {code} in {out[name]['seconds']:.1f} s")
    return {"scripts": out}


def report_only() -> int:
    import report

    results_dir = BENCH / "results"
    run_info = json.loads((results_dir / "run.json").read_text())
    results = {
        "note": run_info.get("note"),
        "quick": run_info["quick"],
        "seconds": run_info["seconds"],
        "machine": json.loads((results_dir / "machine.json").read_text()),
        "sections": {
            name: json.loads((results_dir / f"{name}.json").read_text())
            for name in SECTIONS
            if (results_dir / f"{name}.json").is_file()
        },
    }
    path = report.write(results, BENCH, run_info["command"])
    log(f"rebuilt {path.relative_to(ROOT)} from {results_dir.relative_to(ROOT)}/")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~4 minutes instead of ~15")
    parser.add_argument("--only", help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild REPORT.md and the plots from bench/results/*.json without measuring",
    )
    args = parser.parse_args()
    if args.report_only:
        return report_only()
    only = set(args.only.split(",")) if args.only else set(SECTIONS)
    unknown = only - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")

    ensure_requirements()
    import litellm_env
    import machine
    import report
    from procs import Servers

    venv = litellm_env.ensure(log) if only & {"proxy_load", "startup"} else litellm_env.VENV
    results_dir = BENCH / "results"
    results_dir.mkdir(exist_ok=True)
    started = time.perf_counter()
    results: dict = {"quick": args.quick, "machine": machine.info(), "sections": {}}
    log(f"machine: {results['machine']['cpu']}, {results['machine']['cores']} cores")

    def section(name: str, fn) -> None:
        if name not in only:
            return
        log(f"== {name}")
        t0 = time.perf_counter()
        load_before = os.getloadavg()[0]
        data = fn()
        data["section_seconds"] = time.perf_counter() - t0
        # other work on the machine skews absolute figures: keep the 1-minute load average
        data["load_average"] = {"start": load_before, "end": os.getloadavg()[0]}
        results["sections"][name] = data
        (results_dir / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))

    import accuracy
    import fit_scaling
    import proxy_load
    import sessions
    import sessions_fit
    import startup

    with Servers() as servers:
        section("proxy_load", lambda: proxy_load.run(servers, venv, args.quick, log))
        section("startup", lambda: startup.run(servers, venv, args.quick, log))
        fit_config = servers.dir / "fit.yaml"
        fit_config.write_text(
            "model_list:\n  - model_name: gpt-4o\n    litellm_params: {model: openai/gpt-4o}\n"
        )
        section("fit_scaling", lambda: fit_scaling.run(fit_config, args.quick, log))
        section("accuracy", lambda: accuracy.run(servers, args.quick, log))
        section("sessions", lambda: _sessions(servers, args.quick, sessions, sessions_fit))
    section("others", lambda: run_others(args.quick))

    results["seconds"] = time.perf_counter() - started
    command = "python bench/run.py" + (" --quick" if args.quick else "")
    if args.only:
        command += f" --only {args.only}"
    run_info = {"command": command, "quick": args.quick, "seconds": results["seconds"]}
    (results_dir / "machine.json").write_text(json.dumps(results["machine"], indent=1))
    (results_dir / "run.json").write_text(json.dumps(run_info, indent=1))
    path = report.write(results, BENCH, command)
    log(f"wrote {path.relative_to(ROOT)} in {results['seconds']:.0f} s")
    return 0


def _sessions(servers: Any, quick: bool, sessions: Any, sessions_fit: Any) -> dict[str, Any]:
    """Section 5 and, beside it, 5b: what the fit keeps on each client wire (sessions_fit takes
    its tools from sessions, so sessions does not call it back)."""
    out: dict[str, Any] = sessions.run(servers, quick, log)
    log("  what the fit keeps (bench/sessions_fit.py):")
    out["kept"] = sessions_fit.run(servers, quick, ["default", "no-mask"], log=log)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
