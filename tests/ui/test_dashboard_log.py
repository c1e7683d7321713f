"""The dashboard's operating figures from a live gateway (in-process, the simulator behind it):
a refusal counts on its own route, a route without its provider key is flagged, spend per team
and key comes from the request log, and the page's request-log endpoint filters it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import gateway_config
from inprocess import InProcess, run_inprocess

from proxy.teams import fingerprint, hash_key

ADMIN = "admin-log-test-key"
SEARCH = "team-search-log-key"
ADS = "team-ads-log-key"
UNSET = "ROUTEFIT_UI_TEST_UNSET_KEY"


def _route(alias: str, model: str, **info: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"model": f"openai/{model}", "api_base": "sim://local"}
    if info.pop("keyless", False):
        # a real provider's route (the simulator needs no key): nothing listens there
        params.update(api_base="http://127.0.0.1:9/v1", api_key=f"os.environ/{UNSET}")
    entry: dict[str, Any] = {"model_name": alias, "litellm_params": params}
    if info:
        entry["model_info"] = info
    return entry


def _chat(base: str, key: str, model: str, text: str) -> httpx.Response:
    return httpx.post(
        base + "/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 64},
        timeout=60,
    )


def _admin(base: str, path: str, **params: str) -> httpx.Response:
    return httpx.get(
        base + path, params=params, headers={"authorization": f"Bearer {ADMIN}"}, timeout=30
    )


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    path = tmp_path_factory.mktemp("ui-log") / "routefit.yaml"
    routes = [
        _route("sim-gpt-4o", "gpt-4o"),
        _route("sim-small", "gpt-4o-small", max_input_tokens=2048, max_output_tokens=512),
        _route("keyless", "gpt-4o", keyless=True),
    ]
    teams = [{"id": "search", "keys": [SEARCH]}, {"id": "ads", "keys": [ADS]}]
    gateway_config(path, routes, admin_key=ADMIN, teams=teams)
    assert UNSET not in os.environ
    with run_inprocess(Path(path)) as running:
        base = running.base_url
        sent = [
            (_chat(base, SEARCH, "sim-gpt-4o", "hello " * 50), 200),
            (_chat(base, SEARCH, "sim-gpt-4o", "again " * 80), 200),
            (_chat(base, ADS, "sim-gpt-4o", "ads " * 20), 200),
            # one message larger than the whole window: nothing to elide, refused while fitted
            (_chat(base, ADS, "sim-small", "word " * 6000), 400),
            (_chat(base, ADS, "keyless", "hi"), 503),
            (_chat(base, ADS, "no-such-model", "hi"), 404),
        ]
        for response, status in sent:
            assert response.status_code == status, response.text
        # records are written after each response is sent: wait until all six are in
        for _ in range(200):
            if len(_admin(base, "/routefit/requests").json()["data"]) >= len(sent):
                break
            time.sleep(0.05)
        yield running


def _data(gateway: InProcess) -> dict[str, Any]:
    response = _admin(gateway.base_url, "/routefit/ui/data")
    assert response.status_code == 200
    data: dict[str, Any] = response.json()
    return data


def test_a_refusal_while_fitting_counts_on_its_own_route(gateway: InProcess) -> None:
    errors = {r["route"]: r for r in _data(gateway)["errors"]["routes"]}
    assert errors["sim-small"]["by_status"] == {"400": 1}
    assert errors["keyless"]["by_status"] == {"503": 1}
    assert errors["sim-gpt-4o"]["errors"] == 0 and errors["sim-gpt-4o"]["requests"] == 3
    # only the request that named no route stays unrouted
    assert errors["-"]["by_status"] == {"404": 1}


def test_a_route_whose_key_variable_is_unset_is_flagged(gateway: InProcess) -> None:
    routes = {r["alias"]: r for r in _data(gateway)["routes"]}
    assert routes["keyless"]["key"] == {"state": "missing", "env": UNSET}
    assert routes["sim-gpt-4o"]["key"]["state"] == "local"
    deployments = {r["alias"]: r["deployments"] for r in _data(gateway)["deployments"]["routes"]}
    assert set(deployments) == {"sim-gpt-4o", "sim-small", "keyless"}
    assert all(len(d) == 1 for d in deployments.values())


def test_spend_per_team_and_key_is_the_request_logs(gateway: InProcess) -> None:
    spend = _data(gateway)["spend"]
    log = _admin(gateway.base_url, "/routefit/requests").json()["data"]
    for team in ("search", "ads"):
        priced = [r["cost_usd"] for r in log if r["team"] == team and r["cost_usd"] is not None]
        assert priced  # gpt-4o has prices: the served requests are priced
        (row,) = [t for t in spend["teams"] if t["team"] == team]
        assert row["usd"] == pytest.approx(sum(priced), abs=1e-6) and row["usd"] > 0
    keys = {k["key_id"]: k for k in spend["keys"]}
    search, ads = fingerprint(hash_key(SEARCH)), fingerprint(hash_key(ADS))
    assert keys[search]["team"] == "search" and keys[search]["requests"] == 2
    assert keys[ads]["requests"] == 4 and keys[ads]["errors"] == 3
    assert spend["usd"] == pytest.approx(sum(r["cost_usd"] or 0 for r in log), abs=1e-6)


def test_the_pages_request_log_filters_by_team_key_route_and_status(gateway: InProcess) -> None:
    base = gateway.base_url

    def log(**params: str) -> list[dict[str, Any]]:
        response = _admin(base, "/routefit/ui/requests", **params)
        assert response.status_code == 200, response.text
        data: list[dict[str, Any]] = response.json()["data"]
        return data

    everything = log()
    assert len(everything) == 6
    assert everything == _admin(base, "/routefit/requests").json()["data"]  # one source
    assert {r["team"] for r in log(team="search")} == {"search"}
    ads_key = fingerprint(hash_key(ADS))
    assert len(log(key=ads_key)) == 4 and {r["key_id"] for r in log(key=ads_key)} == {ads_key}
    (refused,) = log(route="sim-small", status="400")
    assert refused["team"] == "ads" and refused["error_code"] == "context_length_exceeded"
    assert {r["status"] for r in log(status="4xx")} == {400, 404}
    assert log(team="search", status="5xx") == []
    assert len(log(limit="2")) == 2


def test_the_pages_request_log_needs_the_admin_key_and_sane_filters(gateway: InProcess) -> None:
    base = gateway.base_url
    url = base + "/routefit/ui/requests"
    assert httpx.get(url).status_code == 401
    team_key = httpx.get(url, headers={"authorization": f"Bearer {SEARCH}"})
    assert team_key.status_code == 403
    for params, param in (({"team": "nobody"}, "team"), ({"status": "teapot"}, "status")):
        response = _admin(base, "/routefit/ui/requests", **params)
        assert response.status_code == 400
        assert response.json()["error"]["param"] == param
