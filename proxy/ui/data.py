"""What the dashboard shows, as one JSON document built from the running app's own objects.

Sources: the config (window, tokenizer, model per route), the calibrator (factors, recent
samples: estimate error, anchored share and cached tokens over time), the metrics registry
(requests by status, fit actions), the budgets (each team's windows) and two small rings kept
here: recent fit reports (sizes and actions only — never message content) and a history of the
calibration factors (the calibrator keeps only the current ones).

It reflects the worker that answers; with several workers or replicas, Grafana over the
Prometheus metrics shows the fleet.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from pricing.calibration import Sample
from proxy.budgets import Budgets
from proxy.calibrator import Calibrator
from proxy.config import Config
from proxy.errors import ProxyError
from proxy.metrics import Metrics
from proxy.teams import TeamDirectory
from strategies.fit import FitReport
from strategies.registry import STRATEGIES

__all__ = ["ACTIONS", "DashboardData", "FitLog", "History"]

#: Points per route series sent to the page (the newest).
SERIES_POINTS = 300

#: How the page names each fit action, in the registry's order (it names none itself).
ACTIONS = [{"name": s.label.action, "verb": s.label.verb, "noun": s.label.noun} for s in STRATEGIES]


class FitLog:
    """The most recent fit reports: numbers only, so the page can never leak a prompt."""

    def __init__(self, size: int = 200) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=size)

    def record(self, report: FitReport, now: float | None = None) -> None:
        self.entries.append(
            {
                "time": round(now or time.time(), 3),
                "route": report.route,
                "budget": report.budget,
                "estimate_before": report.estimate_before,
                "estimate_after": report.estimate_after,
                "actions": {
                    name: {"count": action.count, "tokens_removed": action.tokens}
                    for name, action in report.actions.items()
                },
            }
        )


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
            "fits": list(self.fits.entries)[::-1],
            "history": list(self.history.points),
        }

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
