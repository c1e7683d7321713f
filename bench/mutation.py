"""Mutation testing of the core and the shell's decision modules (docs/mutation.md).

    python bench/mutation.py run GROUP [--module PATH] [--dir DIR] [--nice 10] [--budget S]
        [-- MUTANT ...]                                 # only these mutants (e.g. survivors)
    python bench/mutation.py report [DIR/mutants] [--survivors]

``run`` copies the committed tree (``git archive HEAD``) to DIR (default
``/tmp/routefit-mutation/GROUP``, or ``GROUP-MODULE``), narrows pyproject's ``[tool.mutmut]`` to
the group's modules (or to one ``--module`` of it) and their fast tests, and runs ``mutmut run
--max-children 1`` under ``nice -n 10`` (``--nice``) there: the working tree is never touched,
and mutmut's stats run (every selected test, traced) covers only the group's tests. ``--budget
S`` stops the run after S seconds (a module too large for a shared machine's turn); a stopped
run resumes where it stopped when started again with the same DIR. ``report`` prints the score
per module.

The score is killed / (killed + survived) over the mutants a test reached and mutmut judged:
a timeout counts as killed (the mutant made a test hang, which CI would notice), a mutant no
selected test reaches (``no tests``) is listed apart, since it says the fast tests do not run
that code at all rather than that they run it blind. Modules whose run is incomplete (mutants
not yet checked) say so: their score is of what was checked.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: group → (modules to mutate, the fast tests that reach them in process).
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "pricing": (["pricing/*"], ["tests/pricing"]),
    "strategies": (
        ["strategies/*"],
        ["tests/strategies", "tests/wires/test_anthropic_properties.py",
         "tests/wires/test_responses_units.py"],
    ),
    "shell": (
        ["proxy/budgets.py", "proxy/overflow.py", "proxy/calibrator.py"],
        ["tests/proxy/test_overflow.py", "tests/proxy/test_budgets.py",
         "tests/proxy/test_calibrator.py", "tests/proxy/test_calibrator_edges.py",
         "tests/proxy/test_budgets_edges.py"],
    ),
    "wires": (
        ["proxy/wires/anthropic_parse.py", "proxy/wires/anthropic_render.py"],
        ["tests/wires/test_anthropic_properties.py"],
    ),
}  # fmt: skip


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def run(
    group: str,
    workdir: Path,
    module: str | None = None,
    niceness: int = 10,
    budget: float | None = None,
    names: list[str] | None = None,
) -> int:
    """mutmut over GROUP (or one ``module`` of it) in ``workdir``, at ``niceness``, stopped after
    ``budget`` seconds if given (what was checked is kept; the same command resumes)."""
    modules, tests = GROUPS[group]
    if module is not None:
        modules = [module]
    if not (workdir / "pyproject.toml").exists():
        workdir.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive.stdout, check=True)
        pyproject = workdir / "pyproject.toml"
        text = pyproject.read_text()
        for key, values in (
            ("only_mutate", modules),
            ("pytest_add_cli_args_test_selection", tests),
        ):
            text = re.sub(rf"(?ms)^{key} = \[.*?^\]", f"{key} = {_toml_list(values)}", text)
        pyproject.write_text(text)
    mutmut = Path(sys.executable).with_name("mutmut")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    cmd = ["nice", "-n", str(niceness), str(mutmut), "run", "--max-children", "1", *(names or [])]
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: mutmut and its forked workers
        proc.wait()
        print(f"stopped after {budget:.0f} s: unchecked mutants left (rerun to resume)")
        return 124


#: mutmut 3's exit codes (mutmut.stats.status_by_exit_code), folded into what the score uses.
_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped"}
_TIMEOUT = {36, -24, 24, 152, 255}


def status(code: int | None) -> str:
    if code is None:
        return "unchecked"
    if code in _TIMEOUT:
        return "killed"  # by a timeout
    return _STATUS.get(code, "suspicious")


def modules(root: Path) -> dict[str, dict[str, str]]:
    """module path → {mutant name: status}."""
    found: dict[str, dict[str, str]] = {}
    for meta in sorted(root.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if codes:
            module = str(meta.relative_to(root)).removesuffix(".meta")
            found[module] = {name: status(code) for name, code in codes.items()}
    return found


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"] and len(argv) >= 2 and argv[1] in GROUPS:
        module = _option(argv, "--module")
        default = argv[1] + ("-" + Path(module).stem if module else "")
        return run(
            argv[1],
            Path(_option(argv, "--dir") or f"/tmp/routefit-mutation/{default}"),
            module,
            int(_option(argv, "--nice") or 10),
            float(_option(argv, "--budget") or 0) or None,
            argv[argv.index("--") + 1 :] if "--" in argv else None,
        )
    if argv[:1] != ["report"]:
        print(__doc__, file=sys.stderr)
        return 2
    args = [a for a in argv[1:] if not a.startswith("--")]
    root = Path(args[0] if args else "mutants")
    rows = modules(root)
    print("| module | mutants | killed | survived | no tests | unchecked | score |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for module, verdicts in rows.items():
        n = Counter(verdicts.values())
        judged = n["killed"] + n["survived"]
        score = f"{100 * n['killed'] / judged:.1f}%" if judged else "–"
        if n["unchecked"]:
            score += " (partial)"
        print(
            f"| {module} | {len(verdicts)} | {n['killed']} | {n['survived']} | "
            f"{n['no tests']} | {n['unchecked']} | {score} |"
        )
    if "--survivors" in argv:
        for module, verdicts in rows.items():
            survivors = sorted(k for k, v in verdicts.items() if v == "survived")
            if survivors:
                print(f"\n{module}:")
                print("\n".join(f"  {s}" for s in survivors))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
