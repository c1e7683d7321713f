"""What one app holds while it runs, typed: the handlers in ``proxy.app`` read it from
``request.app.state.routefit``.

What the config decides is one ``Generation`` (``proxy.generation``), replaced whole when the
config is reloaded (``proxy.reload``); a request reads its own with
``proxy.generation.pinned``. The properties here are the current generation's, for what runs
outside a request (start-up, shutdown, probes)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from proxy.budgets import Budgets
from proxy.calibrator import Calibrator
from proxy.config import Config
from proxy.fetch import ImageSizer
from proxy.gateway import Gateway
from proxy.generation import Generation, Live
from proxy.local_provider import LocalProvider
from proxy.metrics import Metrics
from proxy.provider_keys import ProviderKeys
from proxy.providers import ProviderTable, Transport
from proxy.serve_settings import DEFAULTS, ServeSettings
from proxy.store import Store
from proxy.teams import TeamDirectory
from proxy.ui import Dashboard

__all__ = ["AppState", "Readiness"]


@dataclass(slots=True)
class Readiness:
    """Whether the route tokenizers are loaded (the one thing /readyz waits for), and whether
    the worker is draining (SIGTERM: not ready again)."""

    tokenizers: bool = False
    error: str | None = None
    draining: bool = False


@dataclass(slots=True)
class AppState:
    #: The config-derived generation serving new requests, and the retired ones still held.
    live: Live
    metrics: Metrics
    store: Store
    calibrator: Calibrator
    budgets: Budgets
    sizer: ImageSizer
    #: The in-process simulator behind ``sim://`` routes, when the config has any (a reload
    #: points new ``sim://`` routes at it, or starts it for the first).
    local: LocalProvider | None = None
    #: ``routefit serve``'s limits and drain deadline (the defaults in-process).
    settings: ServeSettings = DEFAULTS
    #: The provider transport injected in place of the network (tests), shared by generations.
    transport: Transport | None = None
    readiness: Readiness = field(default_factory=Readiness)
    #: One reload at a time (two SIGHUPs in a row load the file twice, in order).
    reloading: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def current(self) -> Generation:
        return self.live.current

    @property
    def config(self) -> Config:
        return self.live.current.config

    @property
    def gateway(self) -> Gateway:
        return self.live.current.gateway

    @property
    def providers(self) -> ProviderTable:
        return self.live.current.providers

    @property
    def keys(self) -> ProviderKeys:
        return self.live.current.keys

    @property
    def dashboard(self) -> Dashboard:
        return self.live.current.dashboard

    @property
    def teams(self) -> TeamDirectory:
        return self.live.current.teams
