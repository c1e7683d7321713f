"""deploy/grafana/routefit.json queries only metrics a live routefit exposes on /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
from conftest import Traffic
from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "routefit.json"
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
}


def _queries(node: Any) -> list[str]:
    """Every PromQL text in the dashboard: panel targets and template variable queries."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_queries(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_queries(item))
    return found


def _exposed(text: str) -> set[str]:
    """Series names /metrics serves, including those of families with no sample yet (a
    labelled counter nothing has incremented is declared but has no line)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in _SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def test_every_panel_has_a_query_and_a_datasource() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["panels"]
    for panel in doc["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"]["type"] == "prometheus"


def test_every_queried_metric_exists_in_live_metrics(traffic: Traffic) -> None:
    doc = json.loads(DASHBOARD.read_text())
    queried = {m for q in _queries(doc) for m in re.findall(r"\broutefit_\w+", q)}
    assert len(queried) >= 10
    text = httpx.get(traffic.gateway.base_url + "/metrics").text
    assert queried - _exposed(text) == set()
    # The traffic made the request series real, not just declared.
    samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert "routefit_requests_total" in samples
