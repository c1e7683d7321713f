"""Browsers and open mode (``proxy.origin``): another site's page cannot spend an open routefit's
provider keys through the developer's browser, nor read it by re-pointing its own name at
127.0.0.1 (DNS rebinding); the SDKs and CLIs, the dashboard's own page, health probes and keyed
deployments behind any ``Host`` keep working.

Each request is shaped as the browser (or program) sends it: its ``Host``, ``Origin`` and
``Sec-Fetch-*`` headers. routefit is served in process over ASGI, its client's URL on
127.0.0.1:4000 (the connection's local address, as uvicorn reports a loopback socket's), the
provider the packaged simulator in process; one test goes over a real loopback socket.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import yaml
from inprocess import asgi_client, run_inprocess
from wire_shapes import check_wire_error_shape

from proxy.config import ConfigError, load_config, parse_config
from proxy.sim.app import create_app as create_sim
from proxy.transports.mock import asgi_handler

pytestmark = pytest.mark.anyio

LOOPBACK = "http://127.0.0.1:4000"
TEAM_KEY = "sk-team-browser-origin-test"
ROUTES = [
    {"model_name": "gpt", "litellm_params": {"model": "openai/gpt-4o", "api_base": "sim://local"}},
    {
        "model_name": "embed",
        "litellm_params": {"model": "openai/text-embedding-3-small", "api_base": "sim://local"},
    },
]
CHAT = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
#: Every wire's spending endpoint and a body it serves.
SPENDING = [
    ("/v1/chat/completions", CHAT),
    ("/v1/messages", {"model": "gpt", "max_tokens": 5, "messages": CHAT["messages"]}),
    ("/v1/responses", {"model": "gpt", "input": "hi", "max_output_tokens": 16}),
    (
        "/v1beta/models/gpt:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    ),
    ("/v1/embeddings", {"model": "embed", "input": "hi"}),
]
#: What another site's page makes the browser send with a ``text/plain`` body (no preflight).
CROSS_SITE = {
    "origin": "https://evil.example",
    "sec-fetch-site": "cross-site",
    "sec-fetch-mode": "no-cors",
    "sec-fetch-dest": "empty",
    "content-type": "text/plain;charset=UTF-8",
}
#: A page opened (a link followed, an address typed).
NAVIGATE = {"sec-fetch-mode": "navigate", "sec-fetch-dest": "document"}
#: A page on a name its owner re-pointed at 127.0.0.1: same-origin, as far as the browser knows.
REBOUND = {
    "host": "rebind.evil.example:4000",
    "origin": "http://rebind.evil.example:4000",
    "sec-fetch-site": "same-origin",
    "sec-fetch-mode": "cors",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Provider:
    """The simulator in process, each path it was asked for kept: whether a key was spent."""

    def __init__(self) -> None:
        self.sim = asgi_handler(create_sim())
        self.paths: list[str] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return await self.sim(request)


def config(**settings: Any) -> Any:
    data = {"model_list": ROUTES, "routefit_settings": {"store_path": ":memory:", **settings}}
    return parse_config(data, "c.yaml", environ={})


@asynccontextmanager
async def gateway(**settings: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Provider]]:
    """routefit over ``settings`` (open mode unless they name keys), reached at 127.0.0.1:4000."""
    provider = Provider()
    async with asgi_client(config(**settings), provider) as client:
        client.base_url = httpx.URL(LOOPBACK)
        yield client, provider


async def post(client: httpx.AsyncClient, path: str, body: Any, headers: dict[str, str]) -> Any:
    """``body`` as a browser's ``text/plain`` or a program's JSON (by ``headers``)."""
    return await client.post(path, content=orjson.dumps(body), headers=headers, timeout=60)


def _json(headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "content-type": "application/json"}


async def _chat(client: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    reply: httpx.Response = await post(client, "/v1/chat/completions", CHAT, _json(headers))
    return reply


def refused(reply: httpx.Response, path: str, code: str, setting: str) -> None:
    """A 403 in the wire's own shape, its message naming the setting to change."""
    assert reply.status_code == 403, (path, reply.status_code, reply.text)
    check_wire_error_shape(path, reply.status_code, reply.content)
    assert setting in reply.text, reply.text
    if not path.startswith(("/v1/messages", "/v1beta")):
        assert reply.json()["error"]["code"] == code


# -- attacks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "body"), SPENDING)
async def test_another_sites_simple_request_spends_nothing(path: str, body: Any) -> None:
    async with gateway() as (client, provider):
        reply = await post(client, path, body, CROSS_SITE)
    refused(reply, path, "cross_site", "routefit_settings.teams")
    assert provider.paths == []


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},  # a browser that sends no Sec-Fetch-* (older Safari)
        {"origin": "null"},  # a sandboxed frame, a file: page
        # another program's page on this machine: same site, another origin
        {"origin": "http://localhost:3000", "sec-fetch-site": "same-site"},
        # a form posted to routefit: a navigation, but a POST
        {
            "sec-fetch-site": "cross-site",
            "sec-fetch-mode": "navigate",
            "sec-fetch-dest": "document",
        },
    ],
)
async def test_every_sign_of_another_sites_page_is_refused(headers: dict[str, str]) -> None:
    async with gateway() as (client, provider):
        reply = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
    refused(reply, "/v1/chat/completions", "cross_site", "routefit_settings.teams")
    assert provider.paths == []


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/chat/completions"), ("GET", "/routefit/ui/data"), ("GET", "/v1/models")],
)
async def test_a_rebound_name_reads_nothing(method: str, path: str) -> None:
    async with gateway() as (client, provider):
        body = CHAT if method == "POST" else None
        reply = await client.request(method, path, json=body, headers=REBOUND)
    refused(reply, path, "host_not_allowed", "routefit_settings.allowed_hosts")
    assert provider.paths == []


def test_a_rebound_name_is_refused_over_a_real_loopback_socket(tmp_path: Path) -> None:
    """uvicorn's own scope (the socket's local address), not only the in-process one."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model_list": ROUTES[:1], "routefit_settings": {}}))
    with run_inprocess(path) as gw:
        url = gw.base_url + "/v1/chat/completions"
        rebound = httpx.post(url, json=CHAT, headers={"host": "rebind.evil.example"}, timeout=60)
        own = httpx.post(url, json=CHAT, timeout=60)
    refused(rebound, "/v1/chat/completions", "host_not_allowed", "allowed_hosts")
    assert own.status_code == 200, own.text


# -- legitimate clients -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:4000", "localhost:4000", "localhost", "[::1]:4000", "localhost.", "a.localhost"],
)
@pytest.mark.parametrize(("path", "body"), SPENDING)
async def test_programs_on_loopback_are_served(host: str, path: str, body: Any) -> None:
    async with gateway() as (client, provider):
        reply = await post(client, path, body, _json({"host": host}))
    assert reply.status_code == 200, (host, path, reply.text)
    assert len(provider.paths) == 1


async def test_the_openai_sdk_is_served() -> None:
    async with gateway() as (client, provider):
        sdk = openai.AsyncOpenAI(base_url=LOOPBACK + "/v1", api_key="unused", http_client=client)
        done = await sdk.chat.completions.create(**CHAT)
    assert done.choices[0].message.content
    assert len(provider.paths) == 1


async def test_the_dashboards_own_page_is_served() -> None:
    typed = {**NAVIGATE, "sec-fetch-site": "none"}
    own = {"sec-fetch-site": "same-origin", "sec-fetch-mode": "cors", "sec-fetch-dest": "empty"}
    async with gateway() as (client, _):
        page = await client.get("/routefit/ui", headers={"host": "localhost:4000", **typed})
        data = await client.get("/routefit/ui/data", headers={"host": "localhost:4000", **own})
        # a page of routefit's own origin posting (a browser sends its Origin on every POST)
        posted = await client.post(
            "/v1/chat/completions",
            json=CHAT,
            headers={"host": "localhost:4000", "origin": "http://localhost:4000", **own},
        )
    assert page.status_code == 200 and "html" in page.headers["content-type"], page.text
    assert data.status_code == 200, data.text
    assert posted.status_code == 200, posted.text


async def test_a_link_from_another_site_opens_the_dashboard() -> None:
    """A GET that opens a page: the developer sees it, no page can read it."""
    link = {
        "sec-fetch-site": "cross-site",
        "sec-fetch-mode": "navigate",
        "sec-fetch-dest": "document",
    }
    async with gateway() as (client, _):
        reply = await client.get("/routefit/ui", headers=link)
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/health/liveliness", "/health/readiness"])
async def test_probes_answer_any_host(path: str) -> None:
    async with gateway() as (client, _):
        reply = await client.get(path, headers={"host": "lb-check.internal"})
    assert reply.status_code == 200, reply.text


async def test_metrics_are_not_a_probe() -> None:
    async with gateway() as (client, _):
        reply = await client.get("/metrics", headers={"host": "rebind.evil.example"})
    refused(reply, "/metrics", "host_not_allowed", "allowed_hosts")


async def test_allowed_hosts_extend_the_names_open_mode_answers() -> None:
    async with gateway(allowed_hosts=["dev.box.example", "*.lan.example"]) as (client, _):
        status = {
            host: (
                await post(client, "/v1/chat/completions", CHAT, _json({"host": host}))
            ).status_code
            for host in ("dev.box.example:4000", "a.lan.example", "lan.example", "evil.example")
        }
    assert status == {
        "dev.box.example:4000": 200,
        "a.lan.example": 200,
        "lan.example": 403,  # '*.name' is its subdomains only
        "evil.example": 403,
    }


@pytest.mark.parametrize(
    ("address", "checked"),
    [("192.168.1.10", True), ("10.0.0.5", True), ("100.100.1.1", True), ("8.8.8.8", False)],
)
async def test_open_mode_checks_the_host_where_only_a_browser_inside_leads(
    address: str, checked: bool
) -> None:
    """A private (or shared, Tailscale's) address is where a re-pointed name leads a browser
    inside the network; a public one anybody reaches without a browser."""
    async with gateway() as (client, _):
        client.base_url = httpx.URL(f"http://{address}:4000")
        reply = await _chat(client, {"host": "rebind.evil.example:4000"})
    assert reply.status_code == (403 if checked else 200), reply.text


async def test_a_reload_applies_allowed_hosts_from_the_next_request(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    settings: dict[str, Any] = {"store_path": ":memory:"}
    path.write_text(yaml.safe_dump({"model_list": ROUTES, "routefit_settings": settings}))
    async with asgi_client(load_config(str(path)), Provider()) as client:
        client.base_url = httpx.URL(LOOPBACK)
        before = await _chat(client, {"host": "devbox.lan"})
        settings["allowed_hosts"] = ["devbox.lan"]
        path.write_text(yaml.safe_dump({"model_list": ROUTES, "routefit_settings": settings}))
        reloaded = await client.post("/routefit/reload")
        after = await _chat(client, {"host": "devbox.lan"})
    assert before.status_code == 403, before.text
    assert reloaded.status_code == 200, reloaded.text
    assert after.status_code == 200, after.text


# -- keyed deployments --------------------------------------------------------------------------


async def test_keyed_mode_answers_any_host_and_leaves_browsers_to_the_key() -> None:
    teams = [{"id": "t", "keys": [TEAM_KEY]}]
    key = {"authorization": f"Bearer {TEAM_KEY}"}
    async with gateway(teams=teams) as (client, provider):
        proxied = await post(
            client, "/v1/chat/completions", CHAT, _json({"host": "api.corp.example", **key})
        )
        keyless = await post(client, "/v1/chat/completions", CHAT, CROSS_SITE)
    assert proxied.status_code == 200, proxied.text
    assert keyless.status_code == 401, keyless.text  # the key refuses it, as ever
    assert len(provider.paths) == 1


async def test_keyed_mode_with_allowed_hosts_checks_every_request() -> None:
    teams = [{"id": "t", "keys": [TEAM_KEY]}]
    key = _json({"authorization": f"Bearer {TEAM_KEY}"})
    async with gateway(teams=teams, allowed_hosts="api.corp.example") as (client, provider):
        status = {
            host: (
                await post(client, "/v1/chat/completions", CHAT, {**key, "host": host})
            ).status_code
            for host in ("api.corp.example", "10.1.2.3:4000", "other.example")
        }
        probe = await client.get("/readyz", headers={"host": "other.example"})
    assert status == {"api.corp.example": 200, "10.1.2.3:4000": 200, "other.example": 403}
    assert probe.status_code == 200
    assert len(provider.paths) == 2


# -- the setting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["http://dev.example", "dev.example:4000", ["a b"], ["*."], [5], {"a": 1}]
)
def test_allowed_hosts_that_are_not_host_names_are_refused(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"routefit_settings\.allowed_hosts"):
        config(allowed_hosts=value)


def test_allowed_hosts_read_from_a_comma_separated_variable() -> None:
    data = {
        "model_list": ROUTES,
        "routefit_settings": {"store_path": ":memory:", "allowed_hosts": "os.environ/HOSTS"},
    }
    loaded = parse_config(data, "c.yaml", environ={"HOSTS": "Dev.Example., *.lan.example"})
    assert loaded.settings.access.allowed_hosts == ("dev.example", "*.lan.example")
