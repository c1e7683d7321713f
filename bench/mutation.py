"""Mutation testing of the core and the shell's decision modules (docs/mutation.md).

    python bench/mutation.py run GROUP [--module PATH] [--dir DIR] [--nice 10] [--budget S]
        [-- MUTANT ...]                                 # only these mutants (e.g. survivors)
    python bench/mutation.py run GROUP --sample N [--seed S] [...]   # N mutants drawn at random
    python bench/mutation.py report [DIR/mutants] [--survivors]

``run`` copies the committed tree (``git archive HEAD``) to DIR (default
``/tmp/routefit-mutation/GROUP``, or ``GROUP-MODULE``), narrows pyproject's ``[tool.mutmut]`` to
the group's modules (or to one ``--module`` of it) and their fast tests, and runs ``mutmut run
--max-children 1`` under ``nice -n 10`` (``--nice``) there: the working tree is never touched,
and mutmut's stats run (every selected test, traced) covers only the group's tests. ``--budget
S`` stops the run after S seconds (a module too large for a shared machine's turn); a stopped
run resumes where it stopped when started again with the same DIR. ``report`` prints the score
per module.

``--sample N --seed S`` (default seed 0) measures a group too large to run whole: it has mutmut
generate the mutants and trace the tests (``mutmut run`` with a name that matches no mutant:
mutmut generates, collects its stats, then stops on the empty filter), draws N names uniformly
at random with the seed from the ``*.py.meta`` files, writes them to ``DIR/sample.json`` and
runs only those not yet judged (started again, it resumes; another seed, or a larger N, is
refused; a smaller N draws that many of the sample with the seed, itself a uniform sample: what
a run that will not finish in time can keep, the verdicts so far included).
``report`` then counts only the sampled mutants, and adds the sample's score over the whole
group with its 95% Wilson interval: an estimate of the group's kill rate. A sample cut short
(``--budget``) is not yet one: mutmut runs the quickest mutants first, so let it finish.
Do not run ``mutmut print-time-estimates`` in DIR: without the generation step it finds no
current functions and saves the stats emptied (every mutant then *no tests*).

The score is killed / (killed + survived) over the mutants a test reached and mutmut judged:
a timeout counts as killed (the mutant made a test hang, which CI would notice), a mutant no
selected test reaches (``no tests``) is listed apart, since it says the fast tests do not run
that code at all rather than that they run it blind. Modules whose run is incomplete (mutants
not yet checked) say so: their score is of what was checked.
"""

from __future__ import annotations

import json
import math
import os
import random
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
        ["tests/wires/test_anthropic_properties.py",
         "tests/wires/test_mutants_anthropic_wire.py",
         "tests/wires/test_mutants_anthropic_wire_2.py",
         "tests/wires/test_mutants_anthropic_wire_3.py"],
    ),
    "gemini": (
        ["proxy/wires/gemini_parse.py", "proxy/wires/gemini_render.py"],
        ["tests/wires/test_gemini_properties.py", "tests/wires/test_gemini_wire.py",
         "tests/wires/test_gemini_native.py", "tests/wires/test_mutants_gemini_wire.py"],
    ),
    "responses": (
        ["proxy/wires/responses_items.py", "proxy/wires/responses_translate.py"],
        ["tests/wires/test_responses_units.py", "tests/wires/test_responses_e2e.py",
         "tests/wires/test_seam_units.py", "tests/wires/test_relayed_text.py",
         "tests/proxy/test_missing_model.py", "tests/wires/test_mutants_responses_wire.py",
         "tests/wires/test_responses_translation.py"],
    ),
}  # fmt: skip


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def _prepare(workdir: Path, modules: list[str], tests: list[str]) -> None:
    """The committed tree in ``workdir``, its ``[tool.mutmut]`` narrowed (once: kept on resume)."""
    if (workdir / "pyproject.toml").exists():
        return
    workdir.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive.stdout, check=True)
    pyproject = workdir / "pyproject.toml"
    text = pyproject.read_text()
    for key, values in (("only_mutate", modules), ("pytest_add_cli_args_test_selection", tests)):
        text = re.sub(rf"(?ms)^{key} = \[.*?^\]", f"{key} = {_toml_list(values)}", text)
    pyproject.write_text(text)


def _mutmut(workdir: Path, niceness: int, budget: float | None, names: list[str]) -> int:
    """``mutmut run`` (of ``names`` only, if any) in ``workdir``, stopped after ``budget`` s."""
    mutmut = Path(sys.executable).with_name("mutmut")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    cmd = ["nice", "-n", str(niceness), str(mutmut), "run", "--max-children", "1", *names]
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: mutmut and its forked workers
        proc.wait()
        print(f"stopped after {budget:.0f} s: unchecked mutants left (rerun to resume)")
        return 124


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
    _prepare(workdir, [module] if module else modules, tests)
    return _mutmut(workdir, niceness, budget, names or [])


#: A mutant name no mutant has: mutmut generates and collects its stats, then stops on it.
GENERATE_ONLY = "routefit-generate-only"


def mutant_names(root: Path) -> list[str]:
    """Every mutant name the ``*.py.meta`` files under ``root`` (a ``mutants`` dir) list."""
    return sorted(name for verdicts in modules(root).values() for name in verdicts)


def draw(names: list[str], n: int, seed: int) -> list[str]:
    """``n`` of ``names`` drawn uniformly at random, without replacement, reproducibly."""
    return sorted(random.Random(seed).sample(sorted(names), min(n, len(names))))


def _sample(workdir: Path, n: int, seed: int) -> list[str]:
    """The sample kept in ``workdir/sample.json``, drawn (and written) the first time."""
    path = workdir / "sample.json"
    if not path.exists():
        names = draw(mutant_names(workdir / "mutants"), n, seed)
        path.write_text(json.dumps({"n": n, "seed": seed, "names": names}, indent=1) + "\n")
        return names
    kept = json.loads(path.read_text())
    if kept["seed"] != seed or n > kept["n"]:
        raise SystemExit(f"{path} holds n={kept['n']} seed={kept['seed']}: use another --dir")
    if n < kept["n"]:  # a random part of a random sample is one: what the time left allows
        names = draw(kept["names"], n, seed)
        shrunk = {"n": n, "seed": seed, "names": names, "drawn_from": kept}
        path.write_text(json.dumps(shrunk, indent=1) + "\n")
    return list(json.loads(path.read_text())["names"])


def run_sample(
    group: str,
    workdir: Path,
    n: int,
    seed: int,
    module: str | None = None,
    niceness: int = 10,
    budget: float | None = None,
) -> int:
    """mutmut over ``n`` of GROUP's mutants drawn at random; resumes the unjudged ones."""
    modules_, tests = GROUPS[group]
    _prepare(workdir, [module] if module else modules_, tests)
    if not mutant_names(workdir / "mutants"):
        _mutmut(workdir, niceness, budget, [GENERATE_ONLY])  # fails on the filter, by design
        if not mutant_names(workdir / "mutants"):
            print("mutmut generated no mutants (its output above says why)")
            return 1
    sample = _sample(workdir, n, seed)
    verdicts = {k: v for m in modules(workdir / "mutants").values() for k, v in m.items()}
    pending = [name for name in sample if verdicts.get(name) == "unchecked"]
    print(f"sample of {len(sample)} (seed {seed}): {len(pending)} to run")
    return _mutmut(workdir, niceness, budget, pending) if pending else 0


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


def wilson(killed: int, judged: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% at z = 1.96) for a kill rate of ``killed`` in ``judged``."""
    if not judged:
        return (0.0, 1.0)
    p = killed / judged
    centre = (p + z * z / (2 * judged)) / (1 + z * z / judged)
    half = z / (1 + z * z / judged) * math.sqrt(p * (1 - p) / judged + z * z / (4 * judged**2))
    return (max(0.0, centre - half), min(1.0, centre + half))


def sampled(rows: dict[str, dict[str, str]], names: list[str]) -> dict[str, dict[str, str]]:
    """``rows`` narrowed to the mutants in ``names`` (modules with none left dropped)."""
    keep = set(names)
    narrowed = {m: {k: v for k, v in vs.items() if k in keep} for m, vs in rows.items()}
    return {m: vs for m, vs in narrowed.items() if vs}


def _row(label: str, verdicts: dict[str, str]) -> str:
    n = Counter(verdicts.values())
    judged = n["killed"] + n["survived"]
    score = f"{100 * n['killed'] / judged:.1f}%" if judged else "–"
    if n["unchecked"]:
        score += " (partial)"
    return (
        f"| {label} | {len(verdicts)} | {n['killed']} | {n['survived']} | "
        f"{n['no tests']} | {n['unchecked']} | {score} |"
    )


def _interval(verdicts: dict[str, str]) -> str:
    n = Counter(verdicts.values())
    low, high = wilson(n["killed"], n["killed"] + n["survived"])
    line = f"95% Wilson interval of the kill rate: {100 * low:.1f}% – {100 * high:.1f}%"
    if n["unchecked"]:
        line += " (sample unfinished: biased to the quick mutants, mutmut runs them first)"
    return line


def report(root: Path, survivors: bool) -> int:
    """The score per module under ``root``; of the sample only, with its interval, if any."""
    rows = modules(root)
    sample = root.parent / "sample.json"
    names = json.loads(sample.read_text())["names"] if sample.exists() else None
    if names is not None:
        rows = sampled(rows, names)
    print("| module | mutants | killed | survived | no tests | unchecked | score |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for module, verdicts in rows.items():
        print(_row(module, verdicts))
    if names is not None:
        every = {k: v for verdicts in rows.values() for k, v in verdicts.items()}
        print(_row(f"**sample of {len(names)}**", every))
        print(f"\n{_interval(every)}")
    if survivors:
        for module, verdicts in rows.items():
            left = sorted(k for k, v in verdicts.items() if v == "survived")
            if left:
                print(f"\n{module}:")
                print("\n".join(f"  {s}" for s in left))
    return 0


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _run(argv: list[str]) -> int:
    group, module = argv[1], _option(argv, "--module")
    default = group + ("-" + Path(module).stem if module else "")
    sample = _option(argv, "--sample")
    default += f"-sample{sample}-seed{_option(argv, '--seed') or 0}" if sample else ""
    workdir = Path(_option(argv, "--dir") or f"/tmp/routefit-mutation/{default}")
    niceness = int(_option(argv, "--nice") or 10)
    budget = float(_option(argv, "--budget") or 0) or None
    if sample:
        seed = int(_option(argv, "--seed") or 0)
        return run_sample(group, workdir, int(sample), seed, module, niceness, budget)
    names = argv[argv.index("--") + 1 :] if "--" in argv else None
    return run(group, workdir, module, niceness, budget, names)


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"] and len(argv) >= 2 and argv[1] in GROUPS:
        return _run(argv)
    if argv[:1] != ["report"]:
        print(__doc__, file=sys.stderr)
        return 2
    args = [a for a in argv[1:] if not a.startswith("--")]
    return report(Path(args[0] if args else "mutants"), "--survivors" in argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
