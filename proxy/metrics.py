"""Prometheus metrics, one registry per app (tests run several apps in one process).

What an operator alerts on: error rates by kind, upstream latency, routefit's own overhead, how
often requests are fitted and how much, how far estimates are from the provider's truth, and the
health of the store behind calibration and budgets.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from pricing.meter import MEASURED
from pricing.tokenizers import count_cache_lookups

__all__ = ["Metrics"]

_Metric = TypeVar("_Metric", bound=prometheus_client.metrics.MetricWrapperBase)


def _children_kept(cls: type[_Metric]) -> type[_Metric]:
    """``cls`` whose ``labels(...)`` keeps the child it returns, by the values as given: the
    library validates, converts and locks on every call (eight or so a request, ~30 µs of
    py-spy samples together at small c16), though a label set's child never changes (routefit
    removes none). Same children, same series: the library's own ``labels`` makes each the
    first time."""

    class Kept(cls):  # type: ignore[valid-type,misc]
        def labels(self, *values: Any, **named: Any) -> Any:
            if named:
                return super().labels(*values, **named)
            kept: dict[tuple[Any, ...], Any] | None = self.__dict__.get("_kept")
            if kept is None:
                kept = {}
                self._kept = kept
            child = kept.get(values)
            if child is None:
                child = kept[values] = super().labels(*values)
            return child

    Kept.__name__ = Kept.__qualname__ = cls.__name__
    return Kept


Counter = _children_kept(prometheus_client.Counter)
Gauge = _children_kept(prometheus_client.Gauge)
Histogram = _children_kept(prometheus_client.Histogram)

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_OVERHEAD = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
_STORE = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
_ERROR = (-0.5, -0.2, -0.1, -0.05, -0.02, -0.01, 0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


class Metrics:
    """Every routefit metric in one registry, declared by group (names, labels and help texts
    are what dashboards and alerts read: keep them stable)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests(self.registry)
        self._tokens(self.registry)
        self._timing(self.registry)
        self._learning(self.registry)
        self._dependencies(self.registry)

    def _requests(self, r: CollectorRegistry) -> None:
        """Requests, errors and what fitting did to them."""
        self.requests = Counter(
            "routefit_requests",
            "Chat requests by route and status",
            ["route", "status"],
            registry=r,
        )
        self.deployment_attempts = Counter(
            "routefit_deployment_attempts",
            "Attempts per deployment by outcome: ok, or the kind of failure (connection, "
            "timeout, rate_limit, server, auth, bad_request, content_policy)",
            ["route", "deployment", "outcome"],
            registry=r,
        )
        self.deployment_cooldowns = Counter(
            "routefit_deployment_cooldowns",
            "Times a deployment was cooled down (skipped while others are healthy)",
            ["route", "deployment"],
            registry=r,
        )
        self.errors = Counter(
            "routefit_errors",
            "Errors by kind (client, upstream, fit, budget, internal)",
            ["kind"],
            registry=r,
        )
        self.fit_proofs = Counter(
            "routefit_fit_proofs",
            "How a request was shown to fit before forwarding: bound (a cheap upper bound), "
            "sample (a sample's guess, its answer held until the count proves it fits when the "
            "guess raised by its sample's doubt is over the budget), sample_missed (it did not, "
            "or the provider refused an unheld guess for its window: the exact fit went "
            "instead) or count (counted before forwarding)",
            ["route", "proof"],
            registry=r,
        )
        self.learning_counts = Counter(
            "routefit_learning_counts",
            "Exact counts of requests a bound or an unheld guess let go, for the calibration, "
            "the anchors and the request log (no answer waits for them): counted, begun beside "
            "the forward, or skipped when the counts before it had taken their share of the "
            "CPU (the request then teaches nothing)",
            ["route", "outcome"],
            registry=r,
        )
        self.overflow_refits = Counter(
            "routefit_overflow_refits",
            "Requests the provider refused for context length with its own count, refitted to "
            "that count and sent once more (routefit had under-estimated them)",
            ["route"],
            registry=r,
        )
        self.fit_actions = Counter(
            "routefit_fit_actions",
            "Fitting actions by route and action",
            ["route", "action"],
            registry=r,
        )
        self.fit_tokens_removed = Counter(
            "routefit_fit_tokens_removed",
            "Prompt tokens removed by fitting",
            ["route", "action"],
            registry=r,
        )

    def _tokens(self, r: CollectorRegistry) -> None:
        """Prompt tokens: routefit's estimate against the provider's count."""
        self.estimated_tokens = Counter(
            "routefit_prompt_tokens_estimated",
            "Estimated prompt tokens of completed requests",
            ["route"],
            registry=r,
        )
        self.actual_tokens = Counter(
            "routefit_prompt_tokens_actual",
            "Provider-reported prompt tokens",
            ["route"],
            registry=r,
        )
        self.cached_tokens = Counter(
            "routefit_prompt_tokens_cached",
            "Provider-reported prompt tokens read from the provider's prompt cache (a part of "
            "routefit_prompt_tokens_actual): the cache-hit ratio is their quotient",
            ["route"],
            registry=r,
        )
        self.estimate_error = Histogram(
            "routefit_estimate_relative_error",
            "(estimate - actual) / actual per completed request; negative = underestimate",
            ["route"],
            buckets=_ERROR,
            registry=r,
        )

    def _timing(self, r: CollectorRegistry) -> None:
        """Time spent upstream, and routefit's own."""
        self.upstream_latency = Histogram(
            "routefit_upstream_latency_seconds",
            "Time to the upstream's response headers",
            ["route"],
            buckets=_LATENCY,
            registry=r,
        )
        self.deployment_latency = Histogram(
            "routefit_deployment_latency_seconds",
            "Time to a deployment's response headers, per answering attempt",
            ["route", "deployment"],
            buckets=_LATENCY,
            registry=r,
        )
        self.overhead = Histogram(
            "routefit_overhead_seconds",
            "routefit's own time per request before forwarding (parse, price, fit, budget)",
            buckets=_OVERHEAD,
            registry=r,
        )

    def _learning(self, r: CollectorRegistry) -> None:
        """Calibration samples, the count cache, prefix anchors."""
        self.samples = Counter(
            "routefit_calibration_samples",
            "Calibration samples by outcome",
            ["outcome"],
            registry=r,
        )
        self.count_cache = Counter(
            "routefit_count_cache_lookups",
            "Token-count cache lookups of texts of 64+ characters by result: hit (a count served "
            "from the cache: a text the same team sent before) or miss (a text counted because "
            "the cache did not hold it for this team)",
            ["result"],
            registry=r,
        )
        for result in ("hit", "miss"):
            self.count_cache.labels(result)
        self.message_memo = Counter(
            "routefit_message_memo_lookups",
            "Message-pressure memo lookups (messages without images) by result: hit (a message "
            "the same team sent before, priced without looking at its text again) or miss",
            ["result"],
            registry=r,
        )
        for result in ("hit", "miss"):
            self.message_memo.labels(result)
        # pricing keeps the process-wide totals; this registry counts from its creation on
        self._count_cache_seen = count_cache_lookups()
        self._message_memo_seen = (MEASURED.hits, MEASURED.misses)
        self.anchor_lookups = Counter(
            "routefit_anchor_lookups",
            "Prefix-anchor lookups by outcome",
            ["outcome"],
            registry=r,
        )

    def _dependencies(self, r: CollectorRegistry) -> None:
        """What routefit depends on: the upstream's retries and the store."""
        self.config_reloads = Counter(
            "routefit_config_reloads",
            "Config reloads (SIGHUP or POST /routefit/reload) by result: applied, or refused "
            "(the file did not load; the running config stays)",
            ["result"],
            registry=r,
        )
        self.upstream_retries = Counter(
            "routefit_upstream_retries",
            "Upstream attempts retried, by reason (status, or upstream_unreachable)",
            ["reason"],
            registry=r,
        )
        self.store_up = Gauge(
            "routefit_store_up", "1 when the store answers", registry=r, multiprocess_mode="min"
        )
        self.budget_failures = Counter(
            "routefit_budget_store_failures",
            "Budget checks the store could not answer",
            ["mode"],
            registry=r,
        )

        self.store_latency = Histogram(
            "routefit_store_op_seconds",
            "Store calls by operation (failover retries included), failed ones too",
            ["op"],
            buckets=_STORE,
            registry=r,
        )
        self.store_errors = Counter(
            "routefit_store_op_errors",
            "Store calls that failed, by operation and error (the cause's class name)",
            ["op", "error"],
            registry=r,
        )
        self.store_retries = Counter(
            "routefit_store_op_retries",
            "Store attempts retried during a failover, by operation and error",
            ["op", "error"],
            registry=r,
        )

    def sync_memo_counters(self) -> None:
        """Bring the count-cache and message-memo counters up to pricing's totals
        (``count_cache_lookups``, ``MEASURED``). Synced after each request is priced, not only
        when scraped: with several workers, each one's share must reach the shared files
        whichever worker answers the scrape."""
        self._count_cache_seen = _synced(
            self.count_cache, count_cache_lookups(), self._count_cache_seen
        )
        self._message_memo_seen = _synced(
            self.message_memo, (MEASURED.hits, MEASURED.misses), self._message_memo_seen
        )

    # -- proxy.store.StoreObserver ---------------------------------------------------------
    def store_op(self, op: str, seconds: float, error: str | None) -> None:
        self.store_latency.labels(op).observe(seconds)
        if error is not None:
            self.store_errors.labels(op, error).inc()

    def store_retry(self, op: str, error: str) -> None:
        self.store_retries.labels(op, error).inc()

    def render(self) -> bytes:
        """This process's metrics; with several workers (``routefit serve --workers N`` sets
        ``PROMETHEUS_MULTIPROC_DIR``), every worker's, summed, whichever worker answers."""
        self.sync_memo_counters()
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)


def _synced(counter: Any, totals: tuple[int, int], seen: tuple[int, int]) -> tuple[int, int]:
    """``counter``'s hit and miss children brought up to pricing's ``totals``; the totals now
    seen. A total read while a pricing thread wrote a stale value may be lower: never counted
    back."""
    for result, total, was in zip(("hit", "miss"), totals, seen, strict=True):
        if total > was:
            counter.labels(result).inc(total - was)
    return (max(totals[0], seen[0]), max(totals[1], seen[1]))
