"""Machine and software versions, recorded with every run."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import subprocess
import sys
from pathlib import Path

import litellm_env

PACKAGES = [
    "routefit",
    "litellm",
    "starlette",
    "uvicorn",
    "uvloop",
    "httptools",
    "httpx",
    "httpcore",
    "orjson",
    "tiktoken",
    "tokenizers",
    "pillow",
    "xxhash",
    "redis",
    "matplotlib",
]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return 0.0


def _version(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "-"


def _git(*args: str) -> str:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
        )
        return out.stdout.rstrip()
    except OSError:
        return ""


def _dirty() -> list[str]:
    """Tracked files outside bench/ with uncommitted changes: what was measured is the working
    tree (routefit is installed editable), not exactly the commit."""
    lines = _git("status", "--porcelain", "--untracked-files=no").splitlines()
    paths = [line[3:] for line in lines if len(line) > 3]
    return [p for p in paths if not p.startswith("bench/")]


def info() -> dict:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(_mem_gib(), 1),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "routefit_commit": _git("rev-parse", "--short", "HEAD").strip() or "unknown",
        "uncommitted": _dirty(),
        "routefit_venv": {name: _version(name) for name in PACKAGES},
        "litellm_proxy_venv": {"litellm": litellm_env.version(), "path": str(litellm_env.VENV)},
    }
