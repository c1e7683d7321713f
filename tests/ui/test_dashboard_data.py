"""The dashboard's operating figures: spend from the request log, errors by route and status,
deployment health from the metrics registry, each route's provider key."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from proxy.config import parse_config
from proxy.metrics import Metrics
from proxy.provider_keys import ProviderKeys, key_sources
from proxy.records import RequestRecord
from proxy.ui.data import errors_by_route, key_states
from proxy.ui.deployments import deployment_health
from proxy.ui.spend import BIN_WIDTHS, MAX_BINS, MIN_BINS, bin_width, spend


def _record(t: float, team: str | None, key: str | None, usd: float | None, **kw) -> RequestRecord:
    fields = {"status": 200, "prompt_tokens": 100, "output_tokens": 10, **kw}
    return RequestRecord(
        id=f"{t}-{team}-{key}",
        time=t,
        kind=fields.pop("kind", "serve"),
        wire="chat",
        latency_ms=5.0,
        team=team,
        key_id=key,
        route="r",
        cost_usd=usd,
        **fields,
    )


# -- spend -------------------------------------------------------------------------------


def test_spend_sums_per_team_and_key_and_never_counts_unpriced_as_zero_spent() -> None:
    now = 10_000.0
    records = [
        _record(now - 500, "search", "aaaa1111", 0.25),
        _record(now - 400, "search", "aaaa1111", 0.5),
        _record(now - 300, "search", "bbbb2222", None),  # a route without prices
        _record(now - 200, "ads", "cccc3333", 1.0, status=429, prompt_tokens=None),
        _record(now - 100, "ads", "cccc3333", None, kind="count"),  # not a forwarded request
    ]
    keys = {"search": ["aaaa1111", "bbbb2222", "dddd4444"], "ads": ["cccc3333"]}
    out = spend(records, now, keys)
    assert out["records"] == 4 and out["usd"] == pytest.approx(1.75)
    teams = {t["team"]: t for t in out["teams"]}
    assert teams["search"]["usd"] == pytest.approx(0.75) and teams["search"]["unpriced"] == 1
    assert teams["search"]["requests"] == 3 and teams["search"]["prompt_tokens"] == 300
    assert teams["ads"]["errors"] == 1 and teams["ads"]["prompt_tokens"] == 0
    assert [t["team"] for t in out["teams"]] == ["ads", "search"]  # most spent first
    by_key = {k["key_id"]: k for k in out["keys"]}
    assert by_key["aaaa1111"]["usd"] == pytest.approx(0.75)
    assert by_key["bbbb2222"]["unpriced"] == 1 and by_key["bbbb2222"]["usd"] == 0
    # a configured key that sent nothing is listed, with nothing
    assert by_key["dddd4444"]["requests"] == 0 and by_key["dddd4444"]["last"] is None
    assert out["since"] == now - 500


def test_spend_with_no_records_is_empty_not_an_error() -> None:
    out = spend([], 5_000.0)
    assert out["records"] == 0 and out["usd"] == 0 and out["teams"] == [] and out["since"] is None
    assert out["bins"] == MIN_BINS


@given(
    st.lists(
        st.tuples(
            st.floats(0, 30 * 86400),
            st.sampled_from(["a", "b", None]),
            st.sampled_from(["k1", "k2", None]),
            st.one_of(st.none(), st.floats(0, 5)),
        ),
        max_size=60,
    )
)
def test_every_priced_dollar_lands_in_exactly_one_bar(rows) -> None:
    now = 30 * 86400 + 1.0
    records = [_record(now - age, team, key, usd) for age, team, key, usd in rows]
    out = spend(records, now)
    assert MIN_BINS <= out["bins"] <= MAX_BINS and out["bin_seconds"] in BIN_WIDTHS
    assert out["start"] % out["bin_seconds"] == 0
    # the last bar holds now; the first one the oldest record (when there is one)
    assert out["start"] + out["bins"] * out["bin_seconds"] > now
    assert all(out["start"] <= now - age for age, *_ in rows)
    for group in (out["teams"], out["keys"]):
        assert sum(g["usd"] for g in group) == pytest.approx(out["usd"], abs=1e-5)
        for g in group:
            assert len(g["series"]) == out["bins"]
            assert sum(g["series"]) == pytest.approx(g["usd"], abs=1e-5)
    assert out["usd"] == pytest.approx(sum(u for *_, u in rows if u is not None), abs=1e-5)


@given(st.floats(1, 400 * 86400))
def test_bin_width_is_the_smallest_round_width_that_fits(span: float) -> None:
    width = bin_width(span)
    assert span / width < MAX_BINS - 1 or width == BIN_WIDTHS[-1]
    smaller = [w for w in BIN_WIDTHS if w < width]
    assert all(span / w >= MAX_BINS - 1 for w in smaller)


# -- errors by route and status ----------------------------------------------------------


def test_errors_table_lists_every_route_and_keeps_unrouted_refusals_apart() -> None:
    requests = {
        ("big", "200"): 5.0,
        ("big", "400"): 2.0,
        ("big", "503"): 1.0,
        ("-", "404"): 3.0,
        ("-", "401"): 1.0,
        ("small", "200"): 1.0,
    }
    out = errors_by_route(requests, ["small", "big", "idle"])
    assert out["statuses"] == ["400", "401", "404", "503"]
    rows = {r["route"]: r for r in out["routes"]}
    assert [r["route"] for r in out["routes"]] == ["small", "big", "idle", "-"]
    assert rows["big"] == {
        "route": "big",
        "by_status": {"400": 2, "503": 1},
        "errors": 3,
        "requests": 8,
    }
    assert rows["idle"]["errors"] == 0 and rows["small"]["requests"] == 1
    assert rows["-"]["by_status"] == {"404": 3, "401": 1}


# -- provider keys -----------------------------------------------------------------------

KEYS = """
model_list:
  - model_name: keyed
    litellm_params: {model: openai/gpt-4o, api_key: os.environ/KEYED_KEY}
  - model_name: unset
    litellm_params: {model: openai/gpt-4o, api_key: os.environ/UNSET_KEY}
  - model_name: byok
    litellm_params: {model: openai/gpt-4o, api_key: os.environ/UNSET_KEY}
    routefit: {forward_client_key: true}
  - model_name: inline
    litellm_params: {model: openai/gpt-4o, api_key: sk-inline}
  - model_name: local-vllm
    litellm_params: {model: hosted_vllm/llama, api_base: "http://127.0.0.1:9/v1"}
"""


def test_key_states_flag_only_a_named_variable_that_is_unset() -> None:
    data = yaml.safe_load(KEYS)
    config = parse_config(data, "routes.yaml", environ={"KEYED_KEY": "sk-real"})
    states = key_states(config, ProviderKeys(config, key_sources(data["model_list"]), True))
    assert states == {
        "keyed": {"state": "set", "env": "KEYED_KEY"},
        "unset": {"state": "missing", "env": "UNSET_KEY"},
        "byok": {"state": "client", "env": "UNSET_KEY"},
        "inline": {"state": "set", "env": None},
        "local-vllm": {"state": "none", "env": None},
    }


# -- deployment health -------------------------------------------------------------------

ROUTES = """
model_list:
  - model_name: chat
    litellm_params: {model: openai/gpt-4o, api_key: sk-x}
    model_info: {id: east}
  - model_name: other
    litellm_params: {model: openai/gpt-4o-mini, api_key: sk-x}
"""


def _two_deployments():
    """``chat`` with a second deployment (the loader refuses one until the gateway routes: the
    table is what it will hold then)."""
    config = parse_config(yaml.safe_load(ROUTES), "routes.yaml", environ={})
    first = config.routes["chat"]
    west = replace(first, deployment_id="west", first=False)
    table = {**{a: config.deployments(a) for a in config.routes}, "chat": (first, west)}
    return replace(config, deployment_table=table)


def test_without_deployment_metrics_every_deployment_is_listed_as_unknown() -> None:
    config = _two_deployments()
    # a registry without the series (a gateway before routing): every deployment unknown
    out = deployment_health(config, CollectorRegistry())
    assert out["exported"] is False
    assert [(r["alias"], [d["id"] for d in r["deployments"]]) for r in out["routes"]] == [
        ("chat", ["east", "west"]),
        ("other", [config.routes["other"].deployment_id]),
    ]
    assert {d["state"] for r in out["routes"] for d in r["deployments"]} == {"unknown"}


def test_deployment_series_fill_each_deployment_by_its_labels() -> None:
    config = _two_deployments()
    registry = CollectorRegistry()  # the series declared by hand, as a gateway would
    attempts = Counter(
        "routefit_deployment_attempts",
        "attempts",
        ["route", "deployment", "outcome"],
        registry=registry,
    )
    cooldowns = Counter(
        "routefit_deployment_cooldowns", "cooldowns", ["route", "deployment"], registry=registry
    )
    latency = Histogram(
        "routefit_deployment_latency_seconds",
        "latency",
        ["route", "deployment"],
        buckets=(0.1, 0.5, 1, 5),
        registry=registry,
    )
    attempts.labels("chat", "east", "ok").inc(9)
    attempts.labels("chat", "east", "timeout").inc(1)
    attempts.labels("chat", "west", "rate_limited").inc(3)
    attempts.labels("chat", "west", "ok").inc(1)
    attempts.labels("chat", "gone", "ok").inc(7)  # no longer in the config: left out
    cooldowns.labels("chat", "west").inc(2)
    for seconds in [0.05] * 8 + [0.3, 2.0]:
        latency.labels("chat", "east").observe(seconds)
    out = deployment_health(config, registry)
    assert out["exported"] is True
    east, west = out["routes"][0]["deployments"]
    assert (east["ok"], east["failed"], east["cooldowns"]) == (9, {"timeout": 1}, 0)
    assert east["latency_mean"] == pytest.approx((0.05 * 8 + 2.3) / 10, abs=1e-4)
    assert east["latency_p95"] == 5 and east["state"] == "degraded"
    assert (west["ok"], west["failed"], west["cooldowns"]) == (1, {"rate_limited": 3}, 2)
    assert west["state"] == "failing" and west["latency_mean"] is None
    (other,) = out["routes"][1]["deployments"]
    assert other["state"] == "idle" and other["ok"] == 0
    assert [d["id"] for d in out["routes"][0]["deployments"]] == ["east", "west"]


def test_a_latency_gauge_is_read_as_its_value() -> None:
    config = _two_deployments()
    registry = CollectorRegistry()  # the series declared by hand, as a gateway would
    gauge = Gauge(
        "routefit_deployment_latency_seconds", "l", ["route", "deployment"], registry=registry
    )
    gauge.labels("chat", "west").set(0.42)
    west = deployment_health(config, registry)["routes"][0]["deployments"][1]
    assert west["latency_mean"] == 0.42 and west["state"] == "idle"


def test_the_gateways_own_registry_exports_the_deployment_series() -> None:
    """The names the panel reads are the ones the gateway declares (proxy.metrics): a fresh
    gateway lists its deployments as exported with no traffic yet."""
    out = deployment_health(_two_deployments(), Metrics().registry)
    assert out["exported"] is True
    assert {d["state"] for r in out["routes"] for d in r["deployments"]} != {"unknown"}
