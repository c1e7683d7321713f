"""Running ``routefit serve`` as a real process for end-to-end tests (and bench/).

``gateway_config`` writes a config whose routes point at a running provider simulator;
``run_routefit`` starts the real console script on a free loopback port, waits for /readyz and
stops it afterwards (its stderr is kept for assertions about logs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class PrivateRedis:
    """A redis-server of our own on a free port, to kill and restart during a test.

    ``persistent=True`` turns on an fsync-always append-only file, so the counters survive a
    kill -9 (the test can then check them across an outage)."""

    def __init__(self, port: int | None = None, persistent: bool = False) -> None:
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("redis-server is required (apt install redis-server)")
        port = port or free_port()
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.workdir = tempfile.mkdtemp(prefix="routefit-redis-")
        self.cmd = [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            self.workdir,
            *(
                ["--appendonly", "yes", "--appendfsync", "always"]
                if persistent
                else ["--appendonly", "no"]
            ),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not redis_answers(self.port):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextmanager
def private_redis(port: int | None = None, persistent: bool = False) -> Iterator[PrivateRedis]:
    r = PrivateRedis(port, persistent)
    r.start()
    try:
        yield r
    finally:
        r.close()


def sim_route(alias: str, sim_url: str, model: str | None = None, **routefit: Any) -> dict:
    """A model_list entry for a simulator model on the OpenAI wire."""
    entry: dict[str, Any] = {
        "model_name": alias,
        "litellm_params": {
            "model": f"openai/{model or alias}",
            "api_base": f"{sim_url}/v1",
            "api_key": "sk-sim",
        },
    }
    info = routefit.pop("model_info", None)
    if info:
        entry["model_info"] = info
    if routefit:
        entry["routefit"] = routefit
    return entry


def gateway_config(path: Path, routes: list[dict], **settings: Any) -> Path:
    data: dict[str, Any] = {"model_list": routes}
    settings.setdefault("store_path", ":memory:")
    data["routefit_settings"] = settings
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass
class Running:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def v1(self) -> str:
        return self.base_url + "/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def routefit_command() -> list[str]:
    """The installed ``routefit`` console script of the running interpreter's environment
    (CI runs ``.venv/bin/python -m pytest`` without activating the venv, so PATH may not have
    it)."""
    beside = Path(sys.executable).with_name("routefit")
    if beside.exists():
        return [str(beside)]
    exe = shutil.which("routefit")
    return [exe] if exe else [sys.executable, "-m", "proxy.cli"]


@contextlib.contextmanager
def run_routefit(
    config: Path,
    *,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    workers: int = 1,
    timeout: float = 30.0,
    extra_args: list[str] | None = None,
) -> Iterator[Running]:
    port = port or free_port()
    logdir = Path(tempfile.mkdtemp(prefix="routefit-log-"))
    log_path = logdir / "routefit.log"
    environment = dict(os.environ)
    # A test's config says which store it wants; CI's REDIS_URL (for the tests' own clients)
    # must not silently turn every routefit process onto one shared Redis.
    environment.pop("ROUTEFIT_REDIS_URL", None)
    environment.pop("REDIS_URL", None)
    environment.update(env or {})
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                *routefit_command(),
                "serve",
                "--config",
                str(config),
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--log-level",
                "info",
                *(extra_args or []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    running = Running(f"http://127.0.0.1:{port}", process, log_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"routefit exited early:\n{running.log()}")
            try:
                if httpx.get(running.base_url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"routefit did not become ready:\n{running.log()}")
            time.sleep(0.05)
        yield running
    finally:
        running.stop()
        shutil.rmtree(logdir, ignore_errors=True)
