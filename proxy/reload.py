"""Live configuration: the config file reloaded while routefit serves (SIGHUP, or
``POST /routefit/reload``), with nothing in flight disturbed.

What a config decides lives in one immutable value, a ``Generation``: the parsed config, the
provider table built from its routes, the provider keys, the gateway (teams and their keys and
quotas, the intake, the estimator, the request log's sinks), the dashboard over them and the
OpenAPI document. What outlives a reload is not in it: the metrics, the store, the calibrator
(what it learnt stays; new aliases are tracked), the team budgets' counters (in the store), the
image sizer, the in-process simulator of ``sim://`` routes.

A reload builds the next generation beside the running one and swaps one reference
(``Live.current``); the old generation is never changed. Every request is pinned to the
generation current when it arrived (``Pin``, the app's outermost middleware, puts it in the
ASGI scope; handlers read it with ``pinned``), so a request or stream in flight finishes on the
config it started with, and a new one sees the new config as a whole, never a mix. A retired
generation's provider connections and trace exporter are closed once its last request ends.

A new config is refused, and the running one stays, when it does not load (the loader's message,
logged at ERROR and answered by the endpoint), when a route's tokenizer cannot be loaded, or when
it would turn a gateway that requires keys into an open one (no team, admin or master key left:
almost always a file cut short, and an open gateway admits anyone). Settings that shape
long-lived resources — the store, calibration, the budget failure mode, TLS, trusted proxies,
the simulator's image fetching — are read at start-up only: a change to them is logged as a
warning ("restart to apply") and the rest of the file applies.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from pricing.tokenizers import get_tokenizer
from proxy import modelmap
from proxy.budgets import Budgets
from proxy.calibrator import Calibrator
from proxy.config import Config, ConfigError, load_config
from proxy.exchange import Completion, EventStream, Outbound
from proxy.fetch import ImageSizer
from proxy.gateway import Gateway
from proxy.local_provider import attach
from proxy.metrics import Metrics
from proxy.openapi import build_openapi
from proxy.provider_keys import ProviderKeys
from proxy.providers import Deployment, ProviderTable, Transport
from proxy.teams import TeamDirectory
from proxy.transports import Bounds, RetryPolicy, provider_table
from proxy.transports import start as start_providers
from proxy.ui import Dashboard

if TYPE_CHECKING:
    from proxy.state import AppState

__all__ = [
    "Generation",
    "Live",
    "Pin",
    "Shared",
    "build_generation",
    "checked",
    "dispatched",
    "pinned",
    "refused",
    "reload",
    "retire",
]

log = logging.getLogger("routefit")

#: The ASGI scope key of a request's generation.
SCOPE_KEY = "routefit.generation"


@dataclass(frozen=True, slots=True)
class Generation:
    """Everything one config decides, built once and never changed (see the module doc)."""

    #: 1 for the config routefit started with, then one more per applied reload.
    number: int
    config: Config
    providers: ProviderTable
    keys: ProviderKeys
    gateway: Gateway
    dashboard: Dashboard
    openapi: bytes

    @property
    def teams(self) -> TeamDirectory:
        return self.gateway.teams


@dataclass(frozen=True, slots=True)
class Shared:
    """What every generation of one app uses and no reload replaces."""

    metrics: Metrics
    calibrator: Calibrator
    budgets: Budgets
    sizer: ImageSizer
    #: The transport injected in place of the network (``create_app(transport=...)``): each
    #: generation borrows it; the app closes it once, at shutdown.
    transport: Transport | None = None


class _Borrowed:
    """An injected transport lent to one generation: retiring the generation must not close
    what the next one still sends through."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner

    async def send(self, target: Deployment, out: Outbound) -> Completion | EventStream:
        return await self.inner.send(target, out)

    async def aclose(self) -> None:
        return None


def build_generation(
    number: int, config: Config, shared: Shared, previous: Generation | None = None
) -> Generation:
    """The generation of ``config`` (its ``sim://`` routes already attached). The dashboard's
    recent fits and history carry over from ``previous``: they describe traffic, not config."""
    metrics, settings = shared.metrics, config.settings
    providers = provider_table(
        {rc.deployment_id: rc.upstream for rc in config.every_deployment()},
        RetryPolicy(settings.upstream_retries),
        on_retry=lambda reason: metrics.upstream_retries.labels(reason).inc(),
        bounds=Bounds(settings.limits.max_provider_body_bytes, settings.limits.max_sse_event_bytes),
        http=_Borrowed(shared.transport) if shared.transport is not None else None,
    )
    keys = ProviderKeys.from_file(config, teams_open=config.open)
    gateway = Gateway(
        config, metrics, providers, shared.calibrator, shared.budgets, shared.sizer, keys
    )
    dashboard = Dashboard(config, metrics, shared.calibrator, shared.budgets, gateway.teams)
    if previous is not None:
        dashboard.data.fits = previous.dashboard.data.fits
        dashboard.data.history = previous.dashboard.data.history
    gateway.on_fit = dashboard.record
    openapi = orjson.dumps(build_openapi(config))
    return Generation(number, config, providers, keys, gateway, dashboard, openapi)


class Live:
    """The generation new requests get, and the retired ones that requests still hold.

    Touched only on the app's event loop (pin, unpin and swap never await), so no lock."""

    def __init__(self, first: Generation) -> None:
        self.current = first
        self._flights: Counter[int] = Counter()
        self._retired: dict[int, Generation] = {}

    def pin(self) -> Generation:
        g = self.current
        self._flights[g.number] += 1
        return g

    def unpin(self, g: Generation) -> Generation | None:
        """The request on ``g`` ended: ``g`` when it was retired and this was its last."""
        self._flights[g.number] -= 1
        if self._flights[g.number] > 0:
            return None
        del self._flights[g.number]
        return self._retired.pop(g.number, None)

    def swap(self, new: Generation) -> Generation | None:
        """``new`` serves from now on: the old one when nothing holds it (close it now)."""
        old, self.current = self.current, new
        if self._flights[old.number] > 0:
            self._retired[old.number] = old
            return None
        self._flights.pop(old.number, None)
        return old

    def every(self) -> list[Generation]:
        """The current generation and the retired ones still held (the app's shutdown)."""
        return [self.current, *self._retired.values()]


async def retire(g: Generation) -> None:
    """Close what a generation alone holds: its provider connections, its trace exporter."""
    with anyio.CancelScope(shield=True):
        try:
            await g.providers.aclose()
            await asyncio.to_thread(g.gateway.records.close)
        except Exception:
            log.exception("closing config generation %d failed", g.number)


class Pin:
    """ASGI middleware: each HTTP request holds the generation current when it arrived, until
    its response (a stream: its last event, and the work after it) is done."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        live: Live = scope["app"].state.routefit.live
        g = live.pin()
        scope[SCOPE_KEY] = g
        try:
            await self.app(scope, receive, send)
        finally:
            done = live.unpin(g)
            if done is not None:
                await retire(done)


def pinned(request: Request) -> Generation:
    """The request's generation (the current one where no ``Pin`` runs: an app a test built
    from ``ROUTES`` alone)."""
    g = request.scope.get(SCOPE_KEY)
    if isinstance(g, Generation):
        return g
    state: AppState = request.app.state.routefit
    return state.live.current


def dispatched(routes: Iterable[BaseRoute]) -> list[BaseRoute]:
    """The dashboard's routes, each calling the same-named method of the request's own
    generation's dashboard (its teams and admin keys are the config's)."""
    out: list[BaseRoute] = []
    for route in routes:
        assert isinstance(route, Route)
        name = route.endpoint.__name__

        async def endpoint(request: Request, name: str = name) -> Response:
            handler = getattr(pinned(request).dashboard, name)
            response: Response = await handler(request)
            return response

        out.append(Route(route.path, endpoint, methods=list(route.methods or ())))
    return out


# -- reloading -------------------------------------------------------------------------------


def _prepare(path: str) -> Config:
    """The config at ``path``, checked as far as a running server needs (in a thread: a YAML
    file, the model map, tokenizer files)."""
    config = load_config(path)
    for rc in config.every_deployment():
        try:
            get_tokenizer(rc.route.tokenizer).count("warm up")
        except Exception as exc:
            where = f"{rc.route.alias!r} (deployment {rc.deployment_id!r})"
            raise ConfigError(f"{config.path}: route {where}: {exc}") from None
    return config


#: Settings read at start-up only (see the module doc): (name, how to read it).
_AT_START: Sequence[tuple[str, Any]] = (
    ("store (redis_url, store_path, ...)", lambda s: s.store),
    ("calibration", lambda s: (s.calibration, s.calibration_refresh, s.anchor_ttl)),
    ("budget_failure_mode", lambda s: s.budget_failure_mode),
    (
        "tls / trusted_proxies",
        lambda s: (s.access.tls_certfile, s.access.tls_keyfile, s.access.trusted_proxies),
    ),
    ("simulator.fetch_loopback_images", lambda s: s.access.sim_fetch_loopback_images),
)


def _kept(old: Config, new: Config) -> list[str]:
    return [name for name, read in _AT_START if read(old.settings) != read(new.settings)]


async def checked(state: AppState) -> Config:
    """The config file read again and checked as a reload would apply it (raises ConfigError);
    nothing applied."""
    old = state.live.current.config
    config = await asyncio.to_thread(_prepare, old.path)
    if not old.open and config.open:
        raise ConfigError(
            f"{config.path}: no team, admin key or master key is left: the gateway would run "
            "OPEN (every request admitted); restart routefit to run it open"
        )
    return config


def refused(state: AppState, cause: str, exc: ConfigError) -> None:
    """A refused reload: logged at ERROR with the reason, counted."""
    state.metrics.config_reloads.labels("refused").inc()
    log.error(
        "config reload (%s) refused; still serving generation %d: %s",
        cause,
        state.live.current.number,
        exc,
    )


async def reload(state: AppState, cause: str) -> Generation:
    """Load the config file again and serve it from now on; raises ConfigError (logged at
    ERROR, counted) and leaves the running config serving when the new one is refused."""
    async with state.reloading:
        try:
            g = await _next(state)
        except ConfigError as exc:
            refused(state, cause, exc)
            raise
        except Exception as exc:  # nothing is swapped before the end: the running config stays
            log.exception("config reload (%s) failed", cause)
            failed = ConfigError(f"{state.live.current.config.path}: the reload failed: {exc}")
            refused(state, cause, failed)
            raise failed from exc
        state.metrics.config_reloads.labels("applied").inc()
        log.info(
            "config reloaded (%s) from %s: generation %d, %d route(s), %d team(s)",
            cause,
            g.config.path,
            g.number,
            len(g.config.routes),
            len(g.config.teams),
        )
        return g


async def _next(state: AppState) -> Generation:
    old = state.live.current
    config = await checked(state)
    config, local = attach(config, serve=state.transport is None, running=state.local)
    if local is not None and state.local is None:
        await asyncio.to_thread(local.start)  # the first sim:// route: its simulator
        state.local = local
    modelmap.release()
    for name in _kept(old.config, config):
        log.warning("config reload: %s changed in the file: restart routefit to apply it", name)
    shared = Shared(state.metrics, state.calibrator, state.budgets, state.sizer, state.transport)
    g = build_generation(old.number + 1, config, shared, old)
    start_providers(g.providers)
    state.calibrator.track(
        {rc.calibration_key: rc.route.exact_text for rc in config.every_deployment()}
    )
    g.keys.log_warnings()
    for warning in config.warnings:
        log.warning("%s", warning)
    done = state.live.swap(g)
    if done is not None:
        await retire(done)
    return g


def summary(g: Generation) -> dict[str, Any]:
    """``POST /routefit/reload``'s answer: what now serves."""
    return {
        "reloaded": True,
        "generation": g.number,
        "config": g.config.path,
        "routes": sorted(g.config.routes),
        "teams": len(g.config.teams),
        "warnings": list(g.config.warnings),
    }
