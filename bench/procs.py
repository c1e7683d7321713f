"""Servers started by the benchmark: each in its own process group, all stopped at the end.

``Servers`` is a context manager; everything started through it is terminated (SIGTERM to the
process group, then SIGKILL) when it exits, however the run ends. CPU time and RSS are read from
``/proc`` for the server process and its descendants (a ``--workers`` master and its children).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TESTS = ROOT / "tests"
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- /proc ----------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo.extend(_children(p))
    return pids


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its live descendants."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` and its descendants, MiB."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except OSError:
            continue
    return total / (1 << 20)


# -- processes ------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path
    started: float
    ready_seconds: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> float:
        return rss_mib(self.pid)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def _stop(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


#: ``--upstream``'s choices and what each is (``Servers.upstream``).
UPSTREAMS = ("sim", "instant")
UPSTREAM_HELP = (
    "sim: the simulator, which counts every prompt as a provider reads it; instant: an upstream "
    "that answers at once (bench/instant.py: nothing hides a gateway's count)"
)


class Servers:
    """Start servers; stop every one of them on exit."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="routefit-bench-"))
        self.running: list[Server] = []

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        while self.running:
            _stop(self.running.pop().process)

    def stop(self, server: Server) -> None:
        _stop(server.process)
        if server in self.running:
            self.running.remove(server)

    def spawn(
        self,
        name: str,
        cmd: list[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> tuple[subprocess.Popen[bytes], Path, float]:
        log_path = self.dir / f"{name}-{len(self.running)}.log"
        environment = dict(os.environ)
        environment.update(env or {})
        with log_path.open("wb") as log:
            started = time.perf_counter()
            process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                cwd=str(cwd or ROOT),
                start_new_session=True,  # its own process group: killpg stops it and its workers
            )
        return process, log_path, started

    def wait_ready(
        self,
        name: str,
        process: subprocess.Popen[bytes],
        log_path: Path,
        started: float,
        base_url: str,
        ready: Callable[[], bool],
        timeout: float,
    ) -> Server:
        server = Server(name, process, base_url, log_path, started)
        self.running.append(server)
        deadline = started + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited early:\n{server.log()[-3000:]}")
            if ready():
                server.ready_seconds = time.perf_counter() - started
                return server
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{name} not ready after {timeout}s:\n{server.log()[-3000:]}")
            time.sleep(0.02)

    # -- the three kinds of server --------------------------------------------------------

    def sim(self, *model_json: str, name: str = "sim") -> Server:
        cmd = [sys.executable, "-m", "proxy.sim", "--port", "0", "--log-level", "warning"]
        for m in model_json:
            cmd += ["--model-json", m]
        process, log_path, started = self.spawn(name, cmd, {"PYTHONPATH": str(TESTS)})
        url: list[str] = []

        def ready() -> bool:
            for line in log_path.read_text(errors="replace").splitlines():
                if line.startswith("sim listening on "):
                    url.append(line.split(" on ", 1)[1].strip())
                    return True
            return False

        server = self.wait_ready(name, process, log_path, started, "", ready, 30)
        server.base_url = url[0]
        return server

    def upstream(self, kind: str) -> Server:
        """The provider a bench measures against: ``sim`` (the simulator, which reads and
        counts every prompt as a provider does) or ``instant`` (bench/instant.py)."""
        return self.instant() if kind == "instant" else self.sim()

    def instant(self, name: str = "instant") -> Server:
        """An upstream that answers every chat request at once, counting nothing
        (bench/instant.py)."""
        port = free_port()
        cmd = [sys.executable, str(ROOT / "bench" / "instant.py"), str(port)]
        process, log_path, started = self.spawn(name, cmd)
        base = f"http://127.0.0.1:{port}"
        return self.wait_ready(name, process, log_path, started, base, lambda: _listening(port), 30)

    def floor(self, upstream: Server, kind: str = "uvicorn") -> Server:
        """A bare pass-through to ``upstream`` (bench/floor_app.py), on uvicorn as ``routefit
        serve`` runs, or on ``granian`` (a Rust HTTP server): what the stack costs alone."""
        port = free_port()
        if kind == "granian":
            cmd = [sys.executable, "-m", "granian", "--interface", "asgi", "--loop", "uvloop"]
            cmd += ["--port", str(port), "--workers", "1", "--log-level", "warning"]
            cmd += ["floor_app:app"]
        else:
            cmd = [sys.executable, "-m", "uvicorn", "floor_app:app", "--port", str(port)]
            cmd += ["--loop", "uvloop", "--http", "httptools", "--log-level", "warning"]
            cmd += ["--no-access-log", "--lifespan", "on"]
        env = {"FLOOR_UPSTREAM": upstream.base_url.rstrip("/"), "PYTHONPATH": str(HERE)}
        process, log_path, started = self.spawn(f"floor-{kind}", cmd, env, cwd=HERE)
        base = f"http://127.0.0.1:{port}"
        return self.wait_ready(
            f"floor-{kind}", process, log_path, started, base, lambda: _ok(base + "/readyz"), 60
        )

    def routefit(self, config: Path, name: str = "routefit") -> Server:
        port = free_port()
        exe = Path(sys.executable).parent / "routefit"
        cmd = [str(exe), "serve", "--config", str(config), "--port", str(port)]
        cmd += ["--workers", "1", "--log-level", "warning"]
        process, log_path, started = self.spawn(name, cmd, {"ROUTEFIT_REDIS_URL": ""})
        base = f"http://127.0.0.1:{port}"
        return self.wait_ready(
            name, process, log_path, started, base, lambda: _ok(base + "/readyz"), 60
        )

    def litellm(self, venv: Path, config: Path, name: str = "litellm") -> Server:
        port = free_port()
        cmd = [str(venv / "bin" / "litellm"), "--config", str(config), "--port", str(port)]
        cmd += ["--host", "127.0.0.1", "--num_workers", "1"]
        process, log_path, started = self.spawn(name, cmd, LITELLM_ENV)
        base = f"http://127.0.0.1:{port}"
        return self.wait_ready(
            name,
            process,
            log_path,
            started,
            base,
            lambda: _ok(base + "/health/readiness"),
            180,
        )

    def portkey(self, name: str = "portkey") -> Server:
        """Portkey's gateway (Node), headless: the provider and its host come with each
        request (``portkey_headers``)."""
        gateway = portkey_dir()
        port = free_port()
        cmd = ["node", str(gateway / "build" / "start-server.js"), f"--port={port}", "--headless"]
        process, log_path, started = self.spawn(name, cmd)
        base = f"http://127.0.0.1:{port}"
        return self.wait_ready(name, process, log_path, started, base, lambda: _listening(port), 60)


def portkey_dir() -> Path:
    """Portkey's gateway package: ``$ROUTEFIT_PORTKEY_DIR`` or where ``.ci/tools.sh`` puts it."""
    found = os.environ.get("ROUTEFIT_PORTKEY_DIR")
    path = (
        Path(found)
        if found
        else ROOT / ".ci" / "tools" / "node_modules" / "@portkey-ai" / "gateway"
    )
    if not (path / "build" / "start-server.js").is_file():
        raise RuntimeError(f"Portkey's gateway is not at {path}: run `bash .ci/tools.sh`")
    return path


def portkey_headers(provider: str, host: str, key: str) -> dict[str, str]:
    """Headers that route one request through Portkey to ``host`` as ``provider``."""
    return {
        "x-portkey-provider": provider,
        "x-portkey-custom-host": host,
        "Authorization": f"Bearer {key}",
    }


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


#: What the LiteLLM proxy runs with: the local model cost map (no download at start-up) and
#: errors-only logging. Nothing else is switched off.
LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
}


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


# -- configs --------------------------------------------------------------------------------


def openai_entry(alias: str, sim_url: str, model: str | None = None, **extra: object) -> dict:
    entry: dict[str, object] = {
        "model_name": alias,
        "litellm_params": {
            "model": f"openai/{model or alias}",
            "api_base": f"{sim_url}/v1",
            "api_key": "sk-sim",
        },
    }
    entry.update(extra)
    return entry


def anthropic_entry(alias: str, sim_url: str, **extra: object) -> dict:
    entry: dict[str, object] = {
        "model_name": alias,
        "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5",
            "api_base": sim_url,
            "api_key": "sk-ant-sim",
        },
    }
    entry.update(extra)
    return entry


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextlib.contextmanager
def timed() -> Iterator[list[float]]:
    box: list[float] = []
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - t0)


# -- a revision of routefit, served from a worktree -----------------------------------------


def checkout(rev: str, into: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), rev],
        check=True,
        capture_output=True,
    )
    return into


@contextlib.contextmanager
def worktree(rev: str, into: Path) -> Iterator[Path]:
    """``rev`` as a temporary worktree at ``into``, removed on the way out."""
    path = checkout(rev, into)
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
            capture_output=True,
        )


@contextlib.contextmanager
def checkouts(rev_a: str, rev_b: str | None, into: Path) -> Iterator[tuple[Path, Path]]:
    """``rev_a`` and ``rev_b`` (else the working tree) as temporary worktrees under ``into``,
    removed on the way out."""
    with contextlib.ExitStack() as trees:
        a = trees.enter_context(worktree(rev_a, into / "a"))
        b = trees.enter_context(worktree(rev_b, into / "b")) if rev_b else ROOT
        yield a, b


def serve(
    servers: Servers, source: Path, config: Path, name: str, log_level: str = "warning"
) -> Server:
    """``routefit serve`` of the tree at ``source``, one worker (``log_level`` "info": with its
    request log, which bench/own_time.py reads)."""
    port = free_port()
    code = "import sys; from proxy.cli import main; sys.exit(main())"
    cmd = [sys.executable, "-c", code, "serve", "--config", str(config), "--port", str(port)]
    cmd += ["--workers", "1", "--log-level", log_level]
    env = {"PYTHONPATH": str(source), "ROUTEFIT_REDIS_URL": ""}
    process, log_path, started = servers.spawn(name, cmd, env, cwd=source)
    base = f"http://127.0.0.1:{port}"
    return servers.wait_ready(
        name, process, log_path, started, base, lambda: _ok(base + "/readyz"), 60
    )
