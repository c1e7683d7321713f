"""Running ``routefit serve`` as a real process for end-to-end tests (and bench/).

``gateway_config`` writes a config whose routes point at a running provider simulator;
``run_routefit`` starts the real console script on a free loopback port, waits for /readyz and
stops it afterwards (its stderr is kept for assertions about logs). It is for tests whose point
is the process (flags, workers, signals, TLS, replicas, its memory); the others serve the app
in the test process with ``inprocess.run_inprocess`` (docs/testing.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
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


def chat_only_route(alias: str, sim_url: str, model: str = "gpt-4o") -> dict:
    """A simulator model behind a provider litellm knows to speak chat completions only
    (``deepseek/``): a Responses or Messages request to it is translated, priced as OpenAI's."""
    return {
        "model_name": alias,
        "litellm_params": {
            "model": f"deepseek/{model}",
            "api_base": f"{sim_url}/v1",
            "api_key": "sk-sim",
        },
        "routefit": {"tokenizer": "o200k_base", "framing": "openai"},
    }


def claude_route(alias: str, sim_url: str, model: str = "claude-sim", **info: Any) -> dict:
    """A model_list entry for a simulator model on the Anthropic wire (``info``: its
    ``model_info``, when given)."""
    entry: dict[str, Any] = {
        "model_name": alias,
        "litellm_params": {
            "model": f"anthropic/{model}",
            "api_base": sim_url,
            "api_key": "sk-ant-sim",
        },
    }
    if info:
        entry["model_info"] = info
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
    tls_ca: Path | None = None,
) -> Iterator[Running]:
    """``tls_ca``: routefit serves HTTPS (its config or ``extra_args`` say how) with a
    certificate this CA file verifies; ``base_url`` is then https."""
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
    scheme = "https" if tls_ca is not None else "http"
    running = Running(f"{scheme}://127.0.0.1:{port}", process, log_path)
    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=str(tls_ca)) if tls_ca is not None else True
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"routefit exited early:\n{running.log()}")
            try:
                ready = httpx.get(running.base_url + "/readyz", timeout=1, verify=verify)
                if ready.status_code == 200:
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


# -- Redis Cluster and Sentinel --------------------------------------------------------------


def _redis_cli(*args: str, timeout: float = 30) -> str:
    out = subprocess.run(
        ["redis-cli", *args], capture_output=True, text=True, timeout=timeout, check=True
    )
    return out.stdout


def free_cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too, both below the kernel's
    ephemeral range: a bus port inside it was taken, now and then, by an outgoing connection of
    the other test worker between this check and the node's start ("cluster node ... did not
    start")."""
    import random

    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32_768
    highest = max(10_001, ephemeral - 10_001)
    for _ in range(1000):
        port = random.randint(10_000, highest)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10_000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class LocalRedisCluster:
    """A real Redis Cluster on loopback: ``masters`` masters with one replica each, every node a
    ``redis-server --cluster-enabled yes`` on a free port in a temp dir. Failure detection is
    fast (``cluster-node-timeout`` ``node_timeout_ms``) so a test can kill a master and watch
    its replica take over within a few seconds."""

    def __init__(self, masters: int = 3, node_timeout_ms: int = 1000) -> None:
        if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
            raise RuntimeError("redis-server and redis-cli are required (apt install redis)")
        self.workdir = tempfile.mkdtemp(prefix="routefit-cluster-")
        self.ports = [free_cluster_port() for _ in range(2 * masters)]
        self.node_timeout_ms = node_timeout_ms
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """A seed node (the first master)."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def _start_node(self, port: int) -> None:
        node_dir = Path(self.workdir) / str(port)
        node_dir.mkdir(exist_ok=True)
        cmd = [
            "redis-server",
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(node_dir),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--save", "",
            "--appendonly", "no",
            "--cluster-replica-validity-factor", "0",
            "--repl-diskless-sync-delay", "0",  # replicas in sync at once, not after 5 s
        ]  # fmt: skip
        self.procs[port] = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not redis_answers(port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster node {port} did not start")
            time.sleep(0.02)

    def start(self) -> None:
        for port in self.ports:
            self._start_node(port)
        _redis_cli(
            "--cluster",
            "create",
            *(f"127.0.0.1:{p}" for p in self.ports),
            "--cluster-replicas",
            "1",
            "--cluster-yes",
        )
        self.wait_healthy()

    def info(self, port: int) -> str:
        return _redis_cli("-p", str(port), "cluster", "info", timeout=5)

    def _replicas_in_sync(self) -> bool:
        for port in self.procs:
            info = _redis_cli("-p", str(port), "info", "replication", timeout=5)
            if "role:slave" in info and "master_link_status:up" not in info:
                return False
        return True

    def wait_healthy(self, timeout: float = 30) -> None:
        """Until every live node reports ``cluster_state:ok``, all slots are served and every
        replica is in sync with its master (a failover loses nothing acknowledged earlier)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                infos = [self.info(p) for p in self.procs]
                ok = all("cluster_state:ok" in i and "cluster_slots_ok:16384" in i for i in infos)
                if ok and self._replicas_in_sync():
                    return
            except (subprocess.SubprocessError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not become healthy")
            time.sleep(0.1)

    def master_of(self, key: str) -> int:
        """The port of the master that serves ``key``'s slot now."""
        slot = int(_redis_cli("-p", str(next(iter(self.procs))), "cluster", "keyslot", key))
        for line in _redis_cli("-p", str(next(iter(self.procs))), "cluster", "nodes").splitlines():
            fields = line.split()
            if "master" not in fields[2] or "fail" in fields[2]:
                continue
            for span in fields[8:]:
                lo, _, hi = span.partition("-")
                if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                    return int(fields[1].split(":")[1].split("@")[0])
        raise RuntimeError(f"no master serves slot {slot}")

    def kill(self, port: int) -> None:
        proc = self.procs.pop(port)
        proc.kill()
        proc.wait()

    def restart(self, port: int) -> None:
        """Bring a killed node back (it rejoins as a replica of whoever took its slots)."""
        self._start_node(port)

    def close(self) -> None:
        for port in list(self.procs):
            self.kill(port)
        shutil.rmtree(self.workdir, ignore_errors=True)


class LocalSentinel:
    """One master, one replica and three sentinels (quorum 2) on loopback, in a temp dir;
    ``down-after-milliseconds`` ``down_after_ms`` so a failover takes a few seconds."""

    def __init__(self, master_name: str = "routefit", down_after_ms: int = 1000) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is required (apt install redis-server)")
        self.workdir = Path(tempfile.mkdtemp(prefix="routefit-sentinel-"))
        self.master_name = master_name
        self.down_after_ms = down_after_ms
        self.master_port, self.replica_port = free_port(), free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def sentinels(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.sentinel_ports]

    def _spawn(self, port: int, cmd: list[str]) -> None:
        self.procs[port] = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not redis_answers(port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis process on {port} did not start")
            time.sleep(0.02)

    def _server(self, port: int, replica_of: int | None) -> None:
        node_dir = self.workdir / str(port)
        node_dir.mkdir(exist_ok=True)
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir)]
        cmd += ["--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"]
        if replica_of is not None:
            cmd += ["--replicaof", "127.0.0.1", str(replica_of)]
        self._spawn(port, cmd)

    def start(self) -> None:
        self._server(self.master_port, None)
        self._server(self.replica_port, self.master_port)
        for port in self.sentinel_ports:
            conf = self.workdir / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.workdir}\n"
                f"sentinel monitor {self.master_name} 127.0.0.1 {self.master_port} 2\n"
                f"sentinel down-after-milliseconds {self.master_name} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.master_name} 5000\n"
            )
            self._spawn(port, ["redis-server", str(conf), "--sentinel"])
        self.wait_replicated()

    def master(self) -> int:
        """The master's port as the first sentinel sees it."""
        out = _redis_cli(
            "-p",
            str(self.sentinel_ports[0]),
            "sentinel",
            "get-master-addr-by-name",
            self.master_name,
            timeout=5,
        )
        return int(out.split()[1])

    def _replica(self) -> int:
        master = self.master()
        return next(p for p in (self.master_port, self.replica_port) if p != master)

    def wait_replicated(self, timeout: float = 30) -> None:
        """Until the master has a connected replica and the sentinels know both."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                info = _redis_cli("-p", str(self.master()), "info", "replication", timeout=5)
                replicas = _redis_cli(
                    "-p",
                    str(self.sentinel_ports[0]),
                    "sentinel",
                    "replicas",
                    self.master_name,
                    timeout=5,
                )
                replica = _redis_cli("-p", str(self._replica()), "info", "replication", timeout=5)
                if (
                    "connected_slaves:1" in info
                    and "master_link_status:up" in replica
                    and "127.0.0.1" in replicas
                ):
                    return
            except (subprocess.SubprocessError, OSError, IndexError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinel setup did not settle")
            time.sleep(0.1)

    def kill(self, port: int) -> None:
        proc = self.procs.pop(port)
        proc.kill()
        proc.wait()

    def restart_as_replica(self, port: int) -> None:
        """Bring a killed server back as a replica of the current master (as the sentinels
        would reconfigure it anyway)."""
        self._server(port, self.master())
        self.wait_replicated()

    def close(self) -> None:
        for port in list(self.procs):
            self.kill(port)
        shutil.rmtree(self.workdir, ignore_errors=True)
