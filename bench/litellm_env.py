"""The LiteLLM proxy's own virtual environment (created once, then reused).

``pip install 'litellm[proxy]'`` fails on this package index (it pins an absent
``litellm-proxy`` wheel), so the proxy's runtime dependencies are listed by hand: the set below is
what ``litellm --config FILE`` imports on start-up and on the chat path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

VENV = Path(os.environ.get("BENCH_LITELLM_VENV", "/work/.bench-litellm-venv"))
LITELLM_VERSION = "1.110.2"
PACKAGES = [
    f"litellm=={LITELLM_VERSION}",
    "gunicorn",
    "uvicorn",
    "uvloop",
    "httptools",
    "fastapi",
    "backoff",
    "rq",
    "orjson",
    "apscheduler",
    "fastapi-sso",
    "pyjwt",
    "python-multipart",
    "cryptography",
    "pynacl",
    "websockets",
    "azure-identity",
    "azure-storage-blob",
    "mcp",
    "httpx2",
    "redis",
    "semver",
    "Expression",
    "soundfile",
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-exporter-otlp-proto-http",
]
MARKER = VENV / ".bench-ready"


def python() -> Path:
    return VENV / "bin" / "python"


def litellm_exe() -> Path:
    return VENV / "bin" / "litellm"


def ensure(log=print) -> Path:
    """Create the venv and install the proxy's dependencies unless a previous run did."""
    wanted = "\n".join(PACKAGES)
    if MARKER.is_file() and MARKER.read_text() == wanted and litellm_exe().is_file():
        return VENV
    log(f"creating the LiteLLM proxy venv at {VENV} (once; a few minutes)")
    if not python().is_file():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(python()), "-m", "pip", "install", "-q", *PACKAGES],
        check=True,
    )
    MARKER.write_text(wanted)
    return VENV


def version() -> str:
    if not python().is_file():  # not created yet (only proxy_load / startup need it)
        return "not installed"
    out = subprocess.run(
        [str(python()), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "unknown"


if __name__ == "__main__":
    ensure()
    print(version())
