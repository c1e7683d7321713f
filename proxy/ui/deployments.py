"""Deployment health: each alias's deployments as the config lists them, with what the
gateway's per-deployment metrics say of them.

The series are read from the app's metrics registry by name, as Prometheus would scrape them:

* ``routefit_deployment_attempts_total{route,deployment,outcome}`` — ``ok`` or a failure kind;
* ``routefit_deployment_cooldowns_total{route,deployment}``;
* ``routefit_deployment_latency_seconds{route,deployment}`` — a histogram (mean and p95 from its
  buckets) or a gauge (its value).

Reading by name rather than through ``Metrics`` attributes keeps this page independent of which
release declares them: a gateway that does not export them shows its deployments with
``exported: false`` ("no deployment metrics"), one that does but sent nothing to a deployment
shows "no traffic". Deployments are listed from the config, so one that never saw a request is
still on the page; a series naming a deployment the config no longer has is left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from proxy.config import Config, RouteConfig

__all__ = ["ATTEMPTS", "COOLDOWNS", "LATENCY", "deployment_health", "read_series"]

ATTEMPTS = "routefit_deployment_attempts"
COOLDOWNS = "routefit_deployment_cooldowns"
LATENCY = "routefit_deployment_latency_seconds"
#: A deployment whose share of failed attempts reaches this is shown failing.
FAILING_SHARE = 0.5


@dataclass(slots=True)
class _Series:
    """One deployment's figures, as found in the registry."""

    outcomes: dict[str, float] = field(default_factory=dict)
    cooldowns: float = 0.0
    latency_sum: float = 0.0
    latency_count: float = 0.0
    latency_value: float | None = None
    buckets: dict[float, float] = field(default_factory=dict)

    def p95(self) -> float | None:
        """The upper bound of the bucket holding the 95th percentile (None above the last
        finite bound, or without buckets)."""
        total = self.buckets.get(math.inf, 0.0)
        if total <= 0:
            return None
        for bound in sorted(self.buckets):
            if self.buckets[bound] >= 0.95 * total:
                return None if math.isinf(bound) else bound
        return None


@dataclass(slots=True)
class Found:
    """Every deployment series in a registry, keyed by (route, deployment)."""

    exported: bool = False
    series: dict[tuple[str, str], _Series] = field(default_factory=dict)

    def of(self, route: str, deployment: str) -> _Series | None:
        return self.series.get((route, deployment))


def read_series(registry: CollectorRegistry) -> Found:
    """The deployment series present in ``registry`` (``exported``: any family declared)."""
    found = Found()
    for family in registry.collect():
        if family.name not in (ATTEMPTS, COOLDOWNS, LATENCY):
            continue
        found.exported = True
        for s in family.samples:
            key = (s.labels.get("route", ""), s.labels.get("deployment", ""))
            _take(found.series.setdefault(key, _Series()), s.name, s.labels, s.value)
    return found


def _take(d: _Series, name: str, labels: Mapping[str, str], value: float) -> None:
    if name == ATTEMPTS + "_total":
        outcome = labels.get("outcome", "")
        d.outcomes[outcome] = d.outcomes.get(outcome, 0.0) + value
    elif name == COOLDOWNS + "_total":
        d.cooldowns += value
    elif name == LATENCY + "_sum":
        d.latency_sum += value
    elif name == LATENCY + "_count":
        d.latency_count += value
    elif name == LATENCY + "_bucket":
        bound = float(labels.get("le", "inf"))
        d.buckets[bound] = d.buckets.get(bound, 0.0) + value
    elif name == LATENCY:
        d.latency_value = value


def _row(rc: RouteConfig, found: Found) -> dict[str, Any]:
    d = found.of(rc.route.alias, rc.deployment_id)
    row: dict[str, Any] = {
        "id": rc.deployment_id,
        "model": rc.upstream.model,
        "provider": rc.upstream.provider,
        "weight": rc.weight,
        "first": rc.first,
        "ok": 0,
        "failed": {},
        "cooldowns": 0,
        "latency_mean": None,
        "latency_p95": None,
        "state": "unknown" if not found.exported else "idle",
    }
    if d is None:
        return row
    ok = int(d.outcomes.get("ok", 0))
    failed = {k: int(v) for k, v in sorted(d.outcomes.items()) if k != "ok" and v}
    mean = d.latency_sum / d.latency_count if d.latency_count else d.latency_value
    attempts = ok + sum(failed.values())
    state = "idle"
    if attempts:
        state = "failing" if sum(failed.values()) / attempts >= FAILING_SHARE else "ok"
        state = "degraded" if state == "ok" and (failed or d.cooldowns) else state
    row.update(
        ok=ok,
        failed=failed,
        cooldowns=int(d.cooldowns),
        latency_mean=None if mean is None else round(mean, 4),
        latency_p95=d.p95(),
        state=state,
    )
    return row


def deployment_health(
    config: Config, registry: CollectorRegistry, aliases: Iterable[str] | None = None
) -> dict[str, Any]:
    """Per alias (config order), its deployments (file order) with their figures."""
    found = read_series(registry)
    routes = []
    for alias in aliases if aliases is not None else config.routes:
        routes.append(
            {"alias": alias, "deployments": [_row(rc, found) for rc in config.deployments(alias)]}
        )
    return {"exported": found.exported, "routes": routes}
