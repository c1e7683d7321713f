"""LiteLLM's health endpoints on a real ``routefit serve``: ``/health/liveliness``,
``/health/readiness`` answer as LiteLLM's proxy does; ``/health`` reports each route the
caller may use and whether routefit can forward to it, without calling any provider."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest
from harness import gateway_config, routefit_command, run_routefit
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import load_config
from proxy.store.sqlite import SqliteStore
from proxy.version import package_version

_UNSET = "ROUTEFIT_TEST_HEALTH_UNSET_KEY"


def _routes() -> list[dict]:
    return [
        {
            "model_name": "local",
            "litellm_params": {"model": "openai/gpt-4o", "api_base": "sim://local"},
        },
        {
            "model_name": "keyless",
            "litellm_params": {"model": "openai/gpt-4o-mini", "api_key": f"os.environ/{_UNSET}"},
        },
        {
            "model_name": "byok",
            "litellm_params": {"model": "openai/gpt-4o-mini"},
            "routefit": {"forward_client_key": True},
        },
    ]


@pytest.fixture(scope="module")
def open_gateway(tmp_path_factory: pytest.TempPathFactory):
    config = gateway_config(tmp_path_factory.mktemp("health") / "routefit.yaml", _routes())
    with run_routefit(config) as running:
        yield running


def test_liveliness_answers_as_litellm(open_gateway) -> None:
    for path in ("/health/liveliness", "/health/liveness"):
        r = httpx.get(open_gateway.base_url + path)
        assert r.status_code == 200 and r.json() == "I'm alive!"


def test_readiness_answers_as_litellm_once_readyz_does(open_gateway) -> None:
    assert httpx.get(open_gateway.base_url + "/readyz").status_code == 200
    r = httpx.get(open_gateway.base_url + "/health/readiness")
    assert r.status_code == 200
    assert r.json() == {
        "status": "healthy",
        "db": "connected",
        "version": package_version(),
    }


def test_health_reports_routes_and_their_keys_without_calling_a_provider(open_gateway) -> None:
    r = httpx.get(open_gateway.base_url + "/health")
    assert r.status_code == 200
    body = r.json()
    healthy = {e["model"]: e["provider_key"] for e in body["healthy_endpoints"]}
    assert healthy == {"local": "set", "byok": "client"}
    [bad] = body["unhealthy_endpoints"]
    assert (bad["model"], bad["provider_key"]) == ("keyless", "unset")
    assert _UNSET in bad["error"]
    assert (body["healthy_count"], body["unhealthy_count"], body["probed"]) == (2, 1, False)
    # the simulator behind "local" saw no request: a health check is no provider call
    assert "POST /v1/chat/completions" not in open_gateway.log()


def test_health_for_one_model_is_503_when_it_cannot_be_served(open_gateway) -> None:
    base = open_gateway.base_url + "/health"
    assert httpx.get(base, params={"model": "local"}).status_code == 200
    r = httpx.get(base, params={"model": "keyless"})
    assert r.status_code == 503 and r.json()["unhealthy_count"] == 1
    r = httpx.get(base, params={"model": "nope"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


def test_health_needs_a_key_and_shows_a_team_only_its_routes(tmp_path: Path) -> None:
    teams = [{"id": "search", "keys": ["team-key-1"], "routes": ["local"]}]
    config = gateway_config(tmp_path / "routefit.yaml", _routes(), teams=teams)
    with run_routefit(config) as running:
        assert httpx.get(running.base_url + "/health").status_code == 401
        # the probes stay open: orchestrators have no key
        assert httpx.get(running.base_url + "/health/liveliness").status_code == 200
        assert httpx.get(running.base_url + "/health/readiness").status_code == 200
        r = httpx.get(running.base_url + "/health", headers={"authorization": "Bearer team-key-1"})
        assert r.status_code == 200
        assert [e["model"] for e in r.json()["healthy_endpoints"]] == ["local"]
        assert r.json()["unhealthy_endpoints"] == []


def test_a_draining_gateway_is_shutting_down_for_litellm_probes(tmp_path: Path) -> None:
    """After SIGTERM (``proxy.drain`` sets the flag /readyz reads), both LiteLLM probes say
    shutting_down (503) on connections still open, as LiteLLM's do in its graceful shutdown."""
    config = gateway_config(tmp_path / "routefit.yaml", _routes()[:1])
    app = create_app(load_config(config), store=SqliteStore(":memory:"))
    client = TestClient(app)  # no lifespan: nothing else runs, the flag is the only input
    app.state.routefit.readiness.tokenizers = True
    assert client.get("/health/liveliness").status_code == 200
    app.state.routefit.readiness.draining = True
    for path in ("/health/liveliness", "/health/readiness"):
        r = client.get(path)
        assert (r.status_code, r.json()) == (503, {"status": "shutting_down"})
    assert client.get("/readyz").json()["status"] == "draining"  # the one rule behind both


def test_version_flag_and_command_print_the_installed_version() -> None:
    for args in (["--version"], ["version"]):
        out = subprocess.run(
            [*routefit_command(), *args], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"routefit {package_version()}"
    assert package_version() not in ("", "unknown")
