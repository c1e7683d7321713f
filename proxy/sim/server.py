"""Running the simulator: in a background thread (tests), in the foreground (``-m proxy.sim``)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from proxy.sim.app import SimApp, create_app
from proxy.sim.faults import FaultRule, parse_faults
from proxy.sim.models import SimModel
from proxy.sim.state import SimConfig, SimState

__all__ = ["SimServer", "build_server", "run_sim"]


@dataclass
class SimServer:
    """A running simulator. ``base_url`` has no path: OpenAI clients want ``url("/v1")``."""

    host: str
    port: int
    state: SimState
    server: uvicorn.Server

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str = "") -> str:
        return self.base_url + (path if not path or path.startswith("/") else "/" + path)

    @property
    def app_state(self) -> SimState:
        return self.state

    @property
    def config(self) -> SimConfig:
        return self.state.config

    # conveniences over the state (the same data the /sim/* endpoints serve) -----------------
    def add_model(self, model: SimModel) -> SimModel:
        self.state.add_model(model)
        return model

    def reset(self) -> None:
        self.state.reset()

    def requests(self, limit: int | None = None, path: str | None = None) -> list[dict[str, Any]]:
        return self.state.requests(limit, path)

    def last_request(self, path: str | None = None) -> dict[str, Any]:
        found = self.state.requests(1, path)
        if not found:
            raise LookupError("the simulator has received no such request")
        return found[-1]

    def stats(self) -> dict[str, Any]:
        return self.state.stats_json()

    def inject(
        self,
        fault: str,
        count: int | None = 1,
        *,
        model: str | None = None,
        path: str | None = None,
    ) -> None:
        """Queue ``fault`` (e.g. ``"status:429"``) for the next ``count`` matching requests."""
        self.state.faults.add([FaultRule(parse_faults(fault), count, model, path)])

    def wait_for(
        self, predicate: Any, timeout: float = 5.0, interval: float = 0.01
    ) -> dict[str, Any]:
        """Poll ``stats()`` until ``predicate(stats)`` holds; return those stats (or raise)."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            if predicate(stats):
                return stats
            if time.monotonic() > deadline:
                raise TimeoutError(f"sim stats never satisfied the condition: {stats}")
            time.sleep(interval)


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    sock.setblocking(False)
    return sock


def build_server(app: SimApp, *, log_level: str = "warning") -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        http="h11",  # the sim's connection faults reach into h11's request cycle
        lifespan="off",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=2,
        timeout_keep_alive=30,
    )
    server = uvicorn.Server(config)
    app.state.connection_counter = lambda: len(server.server_state.connections)
    return server


@contextlib.contextmanager
def run_sim(
    models: Iterable[SimModel] | None = None,
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    config: SimConfig | None = None,
    api_keys: Iterable[str] | None = None,
    chunk_delay: float | None = None,
    log_level: str = "warning",
    startup_timeout: float = 10.0,
) -> Iterator[SimServer]:
    """Start the simulator on ``host:port`` (0 = a free port) in a background thread.

    ``models``: the models served (default: every built-in). ``api_keys``: keys to require
    (default: none required). ``chunk_delay``: seconds between SSE events. Yields a
    :class:`SimServer` once the server answers; stops it on exit.
    """
    config = config or SimConfig()
    if api_keys is not None:
        config.api_keys = frozenset(api_keys)
    if chunk_delay is not None:
        config.chunk_delay = chunk_delay
    state = SimState(models, config)
    app = create_app(state)
    server = build_server(app, log_level=log_level)
    sock = _bind(host, port)
    actual_port = sock.getsockname()[1]
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"sim:{actual_port}", daemon=True
    )
    thread.start()
    sim = SimServer(host, actual_port, state, server)
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if server.started:
                try:
                    if httpx.get(sim.url("/sim/health"), timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the simulator did not start on {host}:{actual_port}")
            time.sleep(0.01)
        yield sim
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def serve_forever(
    models: Iterable[SimModel] | None,
    *,
    host: str,
    port: int,
    config: SimConfig,
    log_level: str = "warning",
    on_ready: Any = None,
) -> None:
    """Run in the foreground until SIGINT/SIGTERM (``python -m proxy.sim``)."""
    state = SimState(models, config)
    app = create_app(state)
    server = build_server(app, log_level=log_level)
    sock = _bind(host, port)
    actual_port = sock.getsockname()[1]

    if on_ready is not None:

        def announce() -> None:
            while not server.started and not server.should_exit:
                time.sleep(0.01)
            if server.started:
                on_ready(host, actual_port)

        threading.Thread(target=announce, daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
