"""Per-module scores of a mutmut run (docs/mutation.md): reads ``mutants/**/*.meta``.

    python bench/mutation_report.py [mutants_dir] [--survivors]

The score is killed / (killed + survived) over the mutants a test reached and mutmut judged:
a timeout counts as killed (the mutant made a test hang, which CI would notice), a mutant no
selected test reaches (``no tests``) is listed apart, since it says the fast tests do not run
that code at all rather than that they run it blind. Modules whose run is incomplete (mutants
not yet checked) say so: their score is of what was checked.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

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


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
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
