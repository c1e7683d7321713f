"""The README's examples run as written: its Python block and its curl / ``routefit`` commands
against a real ``routefit serve`` of the example config, and every package its Python imports is
one the README tells the reader to install."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness import run_routefit

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
#: routefit's own packages: installed by the run command's ``pip install -e .``.
OWN = {"pricing", "strategies", "proxy"}


def _blocks(language: str) -> list[tuple[int, str]]:
    """(offset in the README, text) of each fenced block in ``language``."""
    fence = re.compile(rf"^```{language}\n(.*?)^```", re.S | re.M)
    return [(m.start(), m.group(1)) for m in fence.finditer(README)]


def _imports(code: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names)


def _installed_before(offset: int) -> set[str]:
    """Packages a ``pip install`` before ``offset`` in the README names (``-e .``: routefit's)."""
    names: set[str] = set()
    for m in re.finditer(r"pip install ([^`\n&]+)", README[:offset]):
        for word in m.group(1).split():
            if word == "." or word.startswith("-e"):
                names |= OWN
            elif not word.startswith("-"):
                names.add(re.split(r"[\[<>=]", word.strip("'\""))[0])
    return names


def test_every_python_import_in_the_readme_is_installed_by_the_readme() -> None:
    blocks = _blocks("python")
    assert blocks
    for offset, code in blocks:
        missing = _imports(code) - _installed_before(offset)
        assert not missing, f"README imports {sorted(missing)} it never says to install"


@pytest.fixture(scope="module")
def example_gateway(tmp_path_factory: pytest.TempPathFactory):
    # A copy of the example config: its embedded store lands beside the copy, not in examples/.
    config = tmp_path_factory.mktemp("readme") / "routefit.yaml"
    shutil.copy(ROOT / "examples" / "routefit.yaml", config)
    with run_routefit(config) as running:
        yield running


def _on(port_url: str, text: str) -> str:
    return text.replace("http://127.0.0.1:4000", port_url)


def test_the_readme_python_block_runs_as_written(example_gateway, tmp_path: Path) -> None:
    [(_, code)] = _blocks("python")
    script = tmp_path / "readme.py"
    script.write_text(_on(example_gateway.base_url, code))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_the_readme_commands_run_as_written(example_gateway) -> None:
    """The curl and ``routefit`` blocks (not the install-and-run ones: test_readme_run.py runs
    those), from the repository's root as the README assumes."""
    blocks = [code for _, code in _blocks("bash") if "pip install" not in code]
    assert len(blocks) >= 2
    routefit = Path(sys.executable).with_name("routefit")
    for code in blocks:
        command = _on(example_gateway.base_url, code)
        if not (ROOT / ".venv/bin/routefit").exists():  # a test run from another venv
            command = command.replace(".venv/bin/routefit", str(routefit))
        out = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command.replace("curl -s", "curl -sf")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, f"{code}\n{out.stdout}\n{out.stderr}"
        assert out.stdout.strip(), code
