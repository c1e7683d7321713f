"""The metrics' label children, kept per metric (``proxy.metrics``): the same series as the
library's own ``labels``, never shared between two apps' registries."""

from __future__ import annotations

from prometheus_client import generate_latest

from proxy.metrics import Metrics


def _sample(m: Metrics, name: str, labels: dict[str, str]) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_a_label_set_given_as_text_or_as_a_number_is_one_series() -> None:
    m = Metrics()
    m.requests.labels("gpt-4o", "200").inc()
    m.requests.labels("gpt-4o", 200).inc()
    m.requests.labels(route="gpt-4o", status="200").inc()
    assert _sample(m, "routefit_requests_total", {"route": "gpt-4o", "status": "200"}) == 3
    assert m.requests.labels("gpt-4o", "200") is m.requests.labels("gpt-4o", "200")
    text = generate_latest(m.registry).decode()
    assert text.count('routefit_requests_total{route="gpt-4o",status="200"}') == 1


def test_two_apps_never_share_a_child() -> None:
    one, two = Metrics(), Metrics()
    one.upstream_latency.labels("gpt-4o").observe(0.2)
    one.errors.labels("client").inc()
    assert _sample(two, "routefit_errors_total", {"kind": "client"}) is None
    assert _sample(two, "routefit_upstream_latency_seconds_count", {"route": "gpt-4o"}) is None
    assert _sample(one, "routefit_upstream_latency_seconds_count", {"route": "gpt-4o"}) == 1
    two.errors.labels("client").inc(2)
    assert _sample(one, "routefit_errors_total", {"kind": "client"}) == 1
    assert _sample(two, "routefit_errors_total", {"kind": "client"}) == 2
