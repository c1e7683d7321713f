"""What one app holds while it runs, typed: the handlers in ``proxy.app`` read it from
``request.app.state.routefit``."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.budgets import Budgets
from proxy.calibrator import Calibrator
from proxy.config import Config
from proxy.fetch import ImageSizer
from proxy.gateway import Gateway
from proxy.local_provider import LocalProvider
from proxy.metrics import Metrics
from proxy.provider_keys import ProviderKeys
from proxy.providers import ProviderTable
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
    config: Config
    metrics: Metrics
    providers: ProviderTable
    store: Store
    calibrator: Calibrator
    budgets: Budgets
    sizer: ImageSizer
    gateway: Gateway
    keys: ProviderKeys
    dashboard: Dashboard
    openapi: bytes
    #: The in-process simulator behind ``sim://`` routes, when the config has any.
    local: LocalProvider | None = None
    #: ``routefit serve``'s limits and drain deadline (the defaults in-process).
    settings: ServeSettings = DEFAULTS
    readiness: Readiness = field(default_factory=Readiness)

    @property
    def teams(self) -> TeamDirectory:
        return self.gateway.teams
