"""The simulator is the tests' oracle: it must not share code with what it checks. Every import
in ``proxy/sim`` (top level or inside a function) names the standard library, a third-party
package, or ``proxy.sim`` itself — never ``pricing``, ``strategies`` or the rest of ``proxy``.
Its image rules reproduce the published vectors (docs/images.md) on their own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from proxy.sim.images import image_tokens

SIM = Path(__file__).resolve().parents[1] / "proxy" / "sim"
FORBIDDEN = ("pricing", "strategies", "proxy")


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside proxy.sim
                continue
            found.append((node.lineno, node.module or ""))
    return found


def test_the_scan_sees_function_level_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from pricing.images import x\n    import strategies.fit\n")
    assert [name for _, name in _imports(probe)] == ["pricing.images", "strategies.fit"]


def test_the_simulator_imports_nothing_it_checks() -> None:
    files = sorted(SIM.glob("*.py"))
    assert len(files) > 10
    bad = [
        f"{path.name}:{line}: {name}"
        for path in files
        for line, name in _imports(path)
        if name.split(".")[0] in FORBIDDEN
        and not (name == "proxy.sim" or name.startswith("proxy.sim."))
    ]
    assert bad == []


@pytest.mark.parametrize(
    ("rule", "size", "detail", "tokens"),
    [
        ("openai-tile", (1024, 1024), "high", 765),
        ("openai-tile", (2048, 4096), "high", 1105),
        ("openai-tile", (4000, 3000), "low", 85),
        ("openai-tile", (512, 512), "high", 255),  # current docs: the short side not enlarged
        ("anthropic", (200, 200), "auto", 54),
        ("anthropic", (1000, 1000), "auto", 1334),
        ("anthropic:2576/4784", (2000, 1500), "auto", 4000),
        ("flat:1500", (10, 10), "auto", 1500),
        ("gemini-tile", (384, 384), "auto", 258),  # Gemini image docs: both sides <= 384
        ("gemini-tile", (960, 540), "auto", 1548),  # u = 360: 3 x 2 crops
    ],
)
def test_image_rules_reproduce_the_published_vectors(rule, size, detail, tokens) -> None:
    assert image_tokens(rule, *size, detail) == tokens


def test_anthropic_stays_near_its_token_limit() -> None:
    for size in ((1092, 1092), (1920, 1080)):
        assert abs(image_tokens("anthropic", *size) - 1568) <= 3


def test_an_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="no image rule"):
        image_tokens("gemini-fixed", 100, 100)
