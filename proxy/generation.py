"""A config's generation: everything one config decides, built once and never changed, and
the bookkeeping that pins each request to the generation current when it arrived.

``proxy.reload`` builds the next generation when the config is reloaded and swaps it in here
(``Live.swap``); the module doc there says what a reload keeps and what it refuses. A request
or stream in flight finishes on the generation it started with (``Pin``, read with
``pinned``); a retired generation's provider connections and trace exporter are closed once
its last request ends (``retire``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.budgets import Budgets
from proxy.calibrator import Calibrator
from proxy.config import Config
from proxy.exchange import Completion, EventStream, Outbound
from proxy.fetch import ImageSizer
from proxy.gateway import Gateway
from proxy.metrics import Metrics
from proxy.openapi import OpenAPIDocs
from proxy.provider_keys import ProviderKeys
from proxy.providers import Deployment, ProviderTable, Transport
from proxy.teams import TeamDirectory
from proxy.transports import Bounds, RetryPolicy, provider_table
from proxy.ui import Dashboard

__all__ = [
    "SCOPE_KEY",
    "Generation",
    "Live",
    "Pin",
    "Shared",
    "build_generation",
    "dispatched",
    "pinned",
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
    openapi: OpenAPIDocs

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
    openapi = OpenAPIDocs(config)
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
    live: Live = request.app.state.routefit.live
    return live.current


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
