"""The local provider: routes whose ``api_base`` is ``sim://local`` are answered by the packaged
provider simulator, started inside the routefit process.

Why: a newcomer (or a user's own CI) should be able to chat through routefit with no provider
key and no network. The simulator speaks the providers' wires and counts tokens by its own
rules, so everything routefit does — pricing, fitting, calibration, budgets, the dashboard —
runs for real against it; only the answers are synthetic.

How: :func:`attach` runs before the app builds its upstreams. It binds a loopback socket on a
free port and rewrites every ``sim://`` route to ``http://127.0.0.1:PORT/v1`` (an ``openai/``
model: the OpenAI passthrough, chat and Responses) or ``http://127.0.0.1:PORT`` (an
``anthropic/`` model: Messages natively, chat by routefit's own chat→Messages adapter), so
nothing downstream knows the provider is local. Every client wire works on either kind: the
openai SDK (chat, Responses), the anthropic SDK, Claude Code and Codex. A route without a key
gets a placeholder one (the simulator takes any; litellm refuses to call without one). An app
given its own transport (``create_app(config, transport=...)``, ``proxy.transports.mock``)
starts no simulator: its ``sim://`` routes point at ``http://sim.local`` and the injected
transport answers them.

The app's lifespan calls :meth:`LocalProvider.start` / :meth:`LocalProvider.stop`. The simulator
runs on its own thread and event loop, so its work never blocks routefit's loop and its server
never touches routefit's signal handlers. Each worker process gets its own simulator.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from proxy.config import Config, ConfigError, RouteConfig

__all__ = ["SIM_SCHEME", "LocalProvider", "attach", "is_local"]

log = logging.getLogger("routefit.local")

SIM_SCHEME = "sim://"


def is_local(api_base: str | None) -> bool:
    """Whether a route's api_base names the in-process simulator (``sim://local``)."""
    return api_base is not None and api_base.startswith(SIM_SCHEME)


@dataclass
class LocalProvider:
    """The in-process simulator behind the ``sim://`` routes of one worker."""

    sock: socket.socket
    aliases: tuple[str, ...]
    #: ``routefit_settings.simulator.fetch_loopback_images``: off unless the config says so (a
    #: simulator fetching for any client would let every client probe this host's ports).
    fetch_loopback_images: bool = False
    _thread: threading.Thread | None = None
    _server: object | None = None

    @property
    def base_url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self) -> None:
        """Serve on the socket bound by :func:`attach`, on a thread of its own."""
        from proxy.sim.app import create_app
        from proxy.sim.server import build_server
        from proxy.sim.state import SimConfig, SimState

        sim = SimConfig(fetch_loopback_images=self.fetch_loopback_images)
        server = build_server(create_app(SimState(None, sim)))
        self._server = server
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [self.sock]}, name="routefit-sim", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the local provider simulator did not start")
            time.sleep(0.01)
        log.warning(
            "local provider simulator on %s serves route(s) %s: synthetic answers, "
            "no provider key needed",
            self.base_url,
            ", ".join(self.aliases),
        )

    async def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is not None:
            server.should_exit = True  # type: ignore[attr-defined]
        if thread is not None:
            await asyncio.to_thread(thread.join, 10)
        self.sock.close()


def _check_model(alias: str, rc: RouteConfig, path: str) -> None:
    from proxy.sim.models import BUILTIN_MODELS
    from proxy.sim.wire_openai import EMBEDDING_MODELS

    name = rc.upstream.model_name
    known = {n for m in BUILTIN_MODELS.values() for n in (m.name, *m.aliases)}
    known |= set(EMBEDDING_MODELS)  # /v1/embeddings (proxy.embeddings)
    if name not in known:
        raise ConfigError(
            f"{path}: model_list[{alias}].litellm_params.model: {rc.upstream.model!r} is not a "
            f"simulator model (api_base {rc.upstream.api_base}); known: {', '.join(sorted(known))}"
        )
    if rc.upstream.transport not in ("openai", "anthropic") and rc.upstream.provider != "gemini":
        raise ConfigError(
            f"{path}: model_list[{alias}].routefit.transport: a sim:// route speaks the openai "
            "or anthropic transport or Gemini's wire (use an openai/<model>, anthropic/<model> "
            "or gemini/<model> name)"
        )


#: The key of a keyless sim:// route (the simulator does not check keys).
PLACEHOLDER_KEY = "sk-sim-local"


def _local_upstream(rc: RouteConfig, base_url: str) -> RouteConfig:
    up = rc.upstream
    # each provider's base as its deployments read it: Gemini's carries its API version
    version = {"anthropic": "", "gemini": "/v1beta"}.get(up.provider, "/v1")
    api_base = f"{base_url}{version}"
    return replace(
        rc, upstream=replace(up, api_base=api_base, api_key=up.api_key or PLACEHOLDER_KEY)
    )


#: Where ``sim://`` routes point when the app's transport is injected (nothing listens there).
INJECTED_BASE = "http://sim.local"


def attach(
    config: Config,
    host: str = "127.0.0.1",
    serve: bool = True,
    running: LocalProvider | None = None,
) -> tuple[Config, LocalProvider | None]:
    """The config with its ``sim://`` routes pointed at a freshly bound loopback port, and the
    simulator to start there (None when no route is local). ``serve=False`` (an injected
    transport answers): pointed at ``INJECTED_BASE``, no socket, no simulator. ``running``: a
    simulator already serving (a reloaded config, ``proxy.reload``): pointed at it, nothing new
    bound. Every deployment of an alias is attached, not only its first. Raises ConfigError for
    a sim:// route whose model the simulator does not serve."""
    local = [rc for rc in config.every_deployment() if is_local(rc.upstream.api_base)]
    if not local:
        return config, running
    for rc in local:
        _check_model(rc.route.alias, rc, config.path)

    def pointed(base: str) -> Callable[[RouteConfig], RouteConfig]:
        return lambda rc: _local_upstream(rc, base) if is_local(rc.upstream.api_base) else rc

    if not serve or running is not None:
        base = running.base_url if running is not None else INJECTED_BASE
        return config.mapped(pointed(base)), running
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(128)
    sock.setblocking(False)
    fetch = config.settings.access.sim_fetch_loopback_images
    aliases = tuple(dict.fromkeys(rc.route.alias for rc in local))
    provider = LocalProvider(sock, aliases, fetch_loopback_images=fetch)
    return config.mapped(pointed(provider.base_url)), provider
