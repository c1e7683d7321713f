"""The plain ``mutmut run`` (pyproject's ``[tool.mutmut]``) covers every group bench/mutation.py
measures, and nothing else: a group added to one and not the other would be measured by one
command and silently skipped by the other (docs/mutation.md promises the plain run is every
group at once)."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _groups() -> dict[str, tuple[list[str], list[str]]]:
    spec = importlib.util.spec_from_file_location("mutation_bench", ROOT / "bench" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    groups: dict[str, tuple[list[str], list[str]]] = module.GROUPS
    return groups


def test_the_plain_run_mutates_and_tests_what_the_groups_do() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    groups = _groups()
    modules = {m for mutated, _ in groups.values() for m in mutated}
    tests = {t for _, selected in groups.values() for t in selected}
    assert set(config["only_mutate"]) == modules
    assert set(config["pytest_add_cli_args_test_selection"]) == tests


def test_every_group_names_files_that_exist() -> None:
    for name, (mutated, selected) in _groups().items():
        for pattern in (*mutated, *selected):
            assert list(ROOT.glob(pattern)), f"group {name}: {pattern} matches nothing"
