"""Where the real agent CLIs are: Claude Code (``claude``), Codex CLI (``codex``) and Gemini CLI
(``gemini``).

``.ci/run`` installs pinned versions with npm into ``.ci/tools`` and exports
``ROUTEFIT_CLAUDE_BIN`` / ``ROUTEFIT_CODEX_BIN`` / ``ROUTEFIT_GEMINI_BIN``. Elsewhere a test
looks there, then on PATH; a developer without them gets a skip that says how to install them,
while CI (``CI=true``) fails, so a missing install step can never turn into a silently green run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

__all__ = ["agent_cli"]

_ROOT = Path(__file__).resolve().parent.parent
_ENV = {
    "claude": "ROUTEFIT_CLAUDE_BIN",
    "codex": "ROUTEFIT_CODEX_BIN",
    "gemini": "ROUTEFIT_GEMINI_BIN",
}
_PACKAGE = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini": "@google/gemini-cli",
}


def agent_cli(name: str) -> str:
    """The path of the ``claude``, ``codex`` or ``gemini`` executable, or skip (fail in CI)."""
    candidates = [
        os.environ.get(_ENV[name], ""),
        str(_ROOT / ".ci" / "tools" / "node_modules" / ".bin" / name),
        shutil.which(name) or "",
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    message = (
        f"{name} is not installed: `bash .ci/tools.sh` installs it "
        f"(npm {_PACKAGE[name]} into .ci/tools), or set {_ENV[name]}"
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def claude_env(home: Path, base_url: str | None = None, path: str | None = None) -> dict[str, str]:
    """Claude Code's environment for a test: a home of its own, no telemetry nor other traffic,
    and, given ``base_url``, routefit as its Anthropic API with a key routefit accepts openly."""
    env = {
        "PATH": path or os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    if base_url is not None:
        env |= {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "sk-routefit-test"}
    return env
