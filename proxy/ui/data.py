"""What the dashboard shows, as one JSON document built from the running app's own objects.

Sources: the config (window, tokenizer, model and deployments per route, where each route's
provider key comes from: ``proxy.provider_keys``), the calibrator (factors, recent samples:
estimate error, anchored share and cached tokens over time), the metrics registry (requests by
route and status, errors by kind, fit actions, per-deployment attempts: ``proxy.ui.deployments``),
the budgets (each team's windows), the request log's records in the store, copied by
``proxy.ui.recent`` (spend per team and key: ``proxy.ui.spend``; the log view:
``Dashboard.requests``) and two small rings kept here:
recent fit reports (sizes and actions only — never message content) and a history of the
calibration factors (the calibrator keeps only the current ones).

The metrics and rings reflect the worker that answers; with several workers or replicas, Grafana
over the Prometheus metrics shows the fleet. The request log's figures are the fleet's (every
worker writes the same store).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from pricing.calibration import Sample
from proxy.budgets import Budgets
from proxy.calibrator import Calibrator
from proxy.config import Config
from proxy.errors import ProxyError
from proxy.local_provider import PLACEHOLDER_KEY
from proxy.metrics import Metrics
from proxy.provider_keys import ProviderKeys
from proxy.records import ANONYMOUS
from proxy.store import StoreUnavailable
from proxy.teams import MASTER_TEAM, TeamDirectory, fingerprint
from proxy.ui.deployments import deployment_health
from proxy.ui.recent import THREAD_AT, RecentRecords
from proxy.ui.spend import spend
from strategies.fit import FitReport
from strategies.registry import STRATEGIES

__all__ = ["ACTIONS", "DashboardData", "FitLog", "History", "errors_by_route", "key_states"]

#: Points per route series sent to the page (the newest).
SERIES_POINTS = 300
#: Seconds a long request log's spend is reused before it is summed again.
SPEND_EVERY = 10.0

#: How the page names each fit action, in the registry's order (it names none itself).
ACTIONS = [{"name": s.label.action, "verb": s.label.verb, "noun": s.label.noun} for s in STRATEGIES]


class FitLog:
    """The most recent fit reports: numbers only, so the page can never leak a prompt. Kept as
    the reports themselves (frozen values) and turned into the page's rows when it reads them:
    every request records one, the page reads a few times a minute."""

    def __init__(self, size: int = 200) -> None:
        self._kept: deque[tuple[float, FitReport]] = deque(maxlen=size)

    def record(self, report: FitReport, now: float | None = None) -> None:
        self._kept.append((now or time.time(), report))

    @property
    def entries(self) -> list[dict[str, Any]]:
        """The page's rows, oldest first."""
        return [_fit_row(at, report) for at, report in self._kept]


def _fit_row(at: float, report: FitReport) -> dict[str, Any]:
    return {
        "time": round(at, 3),
        "route": report.route,
        "budget": report.budget,
        "estimate_before": report.estimate_before,
        "estimate_after": report.estimate_after,
        "actions": {
            name: {"count": action.count, "tokens_removed": action.tokens}
            for name, action in report.actions.items()
        },
    }


class History:
    """Calibration factors and anchor hit rate over time, one point per ``interval`` at most,
    taken when a fit is recorded or the page asks (no background task to manage)."""

    def __init__(self, interval: float = 5.0, size: int = 720) -> None:
        self.interval = interval
        self.points: deque[dict[str, Any]] = deque(maxlen=size)
        self._last = 0.0

    def maybe_snapshot(self, calibrator: Calibrator, now: float | None = None) -> None:
        now = now or time.time()
        if now - self._last < self.interval:
            return
        self._last = now
        routes = {
            alias: [state.correction.text, state.correction.framing, state.correction.images]
            for alias, state in calibrator.routes.items()
        }
        lookups = calibrator.anchor_lookups
        self.points.append(
            {
                "time": round(now, 3),
                "factors": routes,
                "anchor_hit_rate": calibrator.anchor_hits / lookups if lookups else None,
            }
        )


def _counter(metric: Any, by: Iterable[str]) -> dict[tuple[str, ...], float]:
    """A labelled counter's current values (``*_total`` samples), keyed by label values."""
    out: dict[tuple[str, ...], float] = {}
    keys = tuple(by)
    for family in metric.collect():
        for s in family.samples:
            if s.name.endswith("_total"):
                out[tuple(s.labels.get(k, "") for k in keys)] = s.value
    return out


def _series(samples: Iterable[Sample]) -> dict[str, list[list[float]]]:
    recent = list(samples)[-SERIES_POINTS:]
    return {
        "error": [
            [round(s.time, 3), round((s.estimate - s.actual) / s.actual, 5)]
            for s in recent
            if s.actual > 0
        ],
        "cache": [[round(s.time, 3), round(s.cached / s.actual, 4)] for s in recent if s.actual],
        "anchored": [[round(s.time, 3), 1.0 if s.anchored else 0.0] for s in recent],
    }


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def key_states(config: Config, keys: ProviderKeys) -> dict[str, dict[str, Any]]:
    """Per route, where its provider key comes from and whether it is there: ``missing`` (an
    ``os.environ/NAME`` that is unset: the route answers ``provider_key_missing``), ``client``
    (``forward_client_key``: each client brings its own), ``set``, ``local`` (a ``sim://`` route)
    or ``none`` (no key named: a local server, or a provider library that reads its own
    variable — not known to fail)."""
    out: dict[str, dict[str, Any]] = {}
    for alias, rc in config.routes.items():
        source = keys.sources.get(alias)
        env = source.env if source is not None else None
        if source is not None and source.forward_client_key:
            state = "client"
        elif alias in keys.missing:
            state = "missing"
        elif rc.upstream.api_key == PLACEHOLDER_KEY:
            state = "local"  # a sim:// route: the packaged simulator checks no key
        elif rc.upstream.api_key is not None:
            state = "set"
        else:
            state = "none"
        out[alias] = {"state": state, "env": env}
    return out


def errors_by_route(
    requests: Mapping[tuple[str, ...], float], aliases: Iterable[str]
) -> dict[str, Any]:
    """``routefit_requests_total`` as a route × status table of everything but 200: configured
    routes first (in config order, each listed even without errors), then any other label —
    ``-`` is a request refused before it had a route (an unknown model, a key that opens
    nothing)."""
    rows: dict[str, dict[str, int]] = {alias: {} for alias in aliases}
    served: dict[str, int] = {}
    for (route, status), value in requests.items():
        if status == "200":
            served[route] = served.get(route, 0) + int(value)
        elif value:
            row = rows.setdefault(route, {})
            row[status] = row.get(status, 0) + int(value)
    statuses = sorted({st for row in rows.values() for st in row}, key=lambda st: (len(st), st))
    return {
        "statuses": statuses,
        "routes": [
            {
                "route": route,
                "by_status": row,
                "errors": sum(row.values()),
                "requests": served.get(route, 0) + sum(row.values()),
            }
            for route, row in rows.items()
        ],
    }


class DashboardData:
    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        calibrator: Calibrator,
        budgets: Budgets,
        teams: TeamDirectory,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.calibrator = calibrator
        self.budgets = budgets
        self.teams = teams
        self.fits = FitLog()
        self.history = History()
        self.keys = key_states(config, ProviderKeys.from_file(config, config.open))
        # the request log's records: the lists the gateway's ``Records`` writes to the store
        self.recent = RecentRecords(budgets.store, config.settings.request_log.keep)
        self._spent: tuple[float, dict[str, Any]] | None = None

    def record(self, report: FitReport) -> None:
        """Called by the chat path once per fitted request (no I/O, a few microseconds)."""
        self.fits.record(report)
        self.history.maybe_snapshot(self.calibrator)

    async def build(self) -> dict[str, Any]:
        self.history.maybe_snapshot(self.calibrator)
        cal = self.calibrator.report()
        return {
            "time": time.time(),
            "store": cal["store"],
            "anchor": {
                "lookups": self.calibrator.anchor_lookups,
                "hits": self.calibrator.anchor_hits,
                "hit_rate": cal["anchor_hit_rate"],
            },
            "samples": {"recorded": cal["samples_recorded"], "dropped": cal["samples_dropped"]},
            "routes": self._routes(cal["routes"]),
            "teams": await self._teams(),
            "open": self.teams.open,
            "actions": ACTIONS,
            "fits": self.fits.entries[::-1],
            "history": list(self.history.points),
            "errors": errors_by_route(
                _counter(self.metrics.requests, ("route", "status")), self.config.routes
            ),
            "error_kinds": {
                k: int(v) for (k,), v in _counter(self.metrics.errors, ("kind",)).items()
            },
            "deployments": deployment_health(self.config, self.metrics.registry),
            "spend": await self._spend(),
        }

    def log_teams(self) -> tuple[str, ...]:
        """Whose records the request log holds: every team's, the master key's, and the
        records of no team (routefit running open, or a key that opened nothing)."""
        if self.teams.open:
            return (ANONYMOUS,)
        master = (MASTER_TEAM,) if self.teams.master is not None else ()
        return (*self.teams.teams, *master, ANONYMOUS)

    async def _spend(self) -> dict[str, Any]:
        teams = self.log_teams()
        try:
            await self.recent.refresh(teams)
        except StoreUnavailable as exc:
            return {"error": f"the store is unavailable: {exc}"}
        found = self.recent.records(teams)
        keys = {
            team.id: [fingerprint(h) for h in team.key_hashes] for team in self.teams.teams.values()
        }
        now = time.time()
        if len(found) < THREAD_AT:
            return {"keep": self.recent.keep, **spend(found, now, keys)}
        # ~15 µs a record: a long log is summed off the event loop, at most every SPEND_EVERY
        # seconds (the page polls every 3 s; spend moves slower than that)
        if self._spent is None or now - self._spent[0] >= SPEND_EVERY:
            summed = await asyncio.to_thread(spend, found, now, keys)
            self._spent = (now, {"keep": self.recent.keep, **summed})
        return self._spent[1]

    def _routes(self, summaries: Mapping[str, Any]) -> list[dict[str, Any]]:
        requests = _counter(self.metrics.requests, ("route", "status"))
        actions = _counter(self.metrics.fit_actions, ("route", "action"))
        removed = _counter(self.metrics.fit_tokens_removed, ("route", "action"))
        out = []
        for alias, rc in self.config.routes.items():
            state = self.calibrator.routes.get(alias)
            samples = list(state.samples) if state is not None else []
            actual = sum(s.actual for s in samples)
            out.append(
                {
                    "alias": alias,
                    "model": rc.upstream.model,
                    "provider": rc.upstream.provider,
                    "transport": rc.upstream.transport,
                    "window": rc.route.context_window,
                    "max_output": rc.route.max_output_tokens,
                    "tokenizer": rc.route.tokenizer,
                    "exact": rc.route.exact_text,
                    "key": self.keys[alias],
                    "calibration": summaries.get(alias),
                    "cache_hit_ratio": _ratio(sum(s.cached for s in samples), actual),
                    "anchored_share": _ratio(sum(s.anchored for s in samples), len(samples)),
                    "requests": {st: int(v) for (r, st), v in requests.items() if r == alias},
                    "fit_actions": {a: int(v) for (r, a), v in actions.items() if r == alias},
                    "tokens_removed": {a: int(v) for (r, a), v in removed.items() if r == alias},
                    "series": _series(samples),
                }
            )
        return out

    async def _teams(self) -> list[dict[str, Any]]:
        out = []
        for team in self.teams.teams.values():
            entry: dict[str, Any] = {"id": team.id, "windows": None, "error": None}
            try:
                states = await self.budgets.usage(team)
            except ProxyError as err:
                entry["error"] = err.message
            else:
                entry["windows"] = [
                    {
                        "name": w.name,
                        "limit": w.limit,
                        "used": w.used,
                        "reset_seconds": round(w.reset_seconds, 1),
                    }
                    for w in states
                ]
            out.append(entry)
        return out
