"""Shared fixtures: a real Redis server, example paths.

Tests talk to real services. Redis: ``REDIS_URL`` when set (CI exports it), else 127.0.0.1:6379
when it answers, else a ``redis-server`` started on a free port for the session (the Debian
package ``redis-server`` is the one system prerequisite of the tests).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    if _answers("127.0.0.1", 6379):
        yield "redis://127.0.0.1:6379/0"
        return
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("no Redis reachable and no redis-server binary (apt install redis-server)")
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="routefit-redis-")
    proc = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not _answers("127.0.0.1", port):
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def example_config() -> Path:
    return EXAMPLES / "routefit.yaml"


# The provider simulator (tests/sim): a session-wide server and a per-test reset view of it.
from sim.fixtures import fresh_sim, sim  # noqa: E402, F401
