"""Who gets in, over what: LiteLLM's master key, no silent open door, the dashboard's sessions
and login throttle, TLS and trusted forwarded headers on ``routefit serve``, and the packaged
simulator's (``sim://local``) image fetching.

Every test talks to routefit over real HTTP(S) on loopback, served in-process or, for TLS and
forwarded headers (the CLI's uvicorn options), as a real ``routefit serve``; the routes go to the
in-process simulator (``sim://local``).
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from harness import Running, run_routefit
from inprocess import run_inprocess
from relkit import check_error_shape, record
from wire_shapes import check_anthropic_error_shape

from proxy.config import ConfigError, parse_config

MASTER = "sk-master-" + uuid.uuid4().hex
ADMIN = "sk-admin-" + uuid.uuid4().hex
TEAM = "sk-team-" + uuid.uuid4().hex
ROUTE = {
    "model_name": "gpt-4o",
    "litellm_params": {"model": "openai/gpt-4o", "api_base": "sim://local"},
}
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
MESSAGES = {"model": "gpt-4o", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "gpt-4o", "input": "hi", "max_output_tokens": 16}
UI = "/routefit/ui"


def write_config(path: Path, settings: dict[str, Any], **top: Any) -> Path:
    data = {"model_list": [ROUTE], "routefit_settings": {"store_path": ":memory:", **settings}}
    path.write_text(yaml.safe_dump({**data, **top}, sort_keys=False))
    return path


class Images:
    """A loopback image server that counts what it is asked (the simulator's fetches)."""

    def __init__(self) -> None:
        hits: list[str] = []
        self.hits = hits

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"


@pytest.fixture(scope="module")
def images() -> Iterator[Images]:
    server = Images()
    yield server
    server.server.shutdown()
    server.server.server_close()


def image_chat(gw: Running, url: str, key: str | None = None) -> httpx.Response:
    content = [{"type": "text", "text": "?"}, {"type": "image_url", "image_url": {"url": url}}]
    body = {**CHAT, "messages": [{"role": "user", "content": content}]}
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(gw.v1 + "/chat/completions", json=body, headers=headers, timeout=30)


# -- master_key and the open door ------------------------------------------------------------


@pytest.fixture(scope="module")
def master_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """Only LiteLLM's ``general_settings.master_key`` (it used to load with a warning, open)."""
    path = write_config(
        tmp_path_factory.mktemp("master") / "c.yaml", {}, general_settings={"master_key": MASTER}
    )
    with run_inprocess(path) as running:
        yield running


def wire_calls(gw: Running, headers: dict[str, str]) -> dict[str, httpx.Response]:
    anthropic = {**headers, "anthropic-version": "2023-06-01"}
    return {
        "chat": httpx.post(gw.v1 + "/chat/completions", json=CHAT, headers=headers, timeout=30),
        "messages": httpx.post(gw.v1 + "/messages", json=MESSAGES, headers=anthropic, timeout=30),
        "responses": httpx.post(gw.v1 + "/responses", json=RESPONSES, headers=headers, timeout=30),
    }


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer sk-wrong"},
        {"x-api-key": MASTER[:-1]},
        {"x-api-key": "é".encode()},
    ],
)
def test_a_master_key_config_refuses_every_wire_without_it(master_gw, headers):
    for wire, r in wire_calls(master_gw, headers).items():
        assert r.status_code == 401, (wire, r.text)
        if wire == "messages":
            check_anthropic_error_shape(r.status_code, r.content, wire)
            assert r.json()["error"]["type"] == "authentication_error"
        else:
            check_error_shape(r.status_code, r.content, wire)
            assert r.json()["error"]["code"] == "invalid_api_key"


def test_the_master_key_opens_every_wire_and_the_admin_endpoints(master_gw):
    for headers in ({"authorization": f"Bearer {MASTER}"}, {"x-api-key": MASTER}):
        for wire, r in wire_calls(master_gw, headers).items():
            assert r.status_code == 200, (wire, r.text)
    admin = {"authorization": f"Bearer {MASTER}"}
    assert httpx.get(master_gw.base_url + "/routefit/calibration").status_code == 401
    assert httpx.get(master_gw.base_url + "/routefit/calibration", headers=admin).is_success
    login = httpx.post(master_gw.base_url + UI + "/session", json={"key": MASTER})
    assert login.status_code == 204 and "routefit_ui=" in login.headers["set-cookie"]
    ready = httpx.get(master_gw.base_url + "/readyz").json()
    assert ready["auth"] == "keys"


def test_a_config_with_no_keys_runs_open_and_says_so(tmp_path, images):
    """...and its local simulator, not told to fetch, fetches nothing."""
    with run_inprocess(write_config(tmp_path / "c.yaml", {})) as gw:
        assert httpx.get(gw.base_url + "/readyz").json()["auth"] == "open"
        assert "running OPEN" in gw.log()
        assert all(r.status_code == 200 for r in wire_calls(gw, {}).values())
        images.hits.clear()
        r = image_chat(gw, images.url(f"/open-{uuid.uuid4().hex}.png"))
        assert r.status_code == 200, r.text
        assert images.hits == []  # the simulator priced the URL, it did not fetch it


def test_the_local_simulator_fetches_only_when_its_setting_says_so(tmp_path, images):
    path = write_config(tmp_path / "c.yaml", {"simulator": {"fetch_loopback_images": True}})
    with run_inprocess(path) as gw:
        images.hits.clear()
        url = images.url(f"/told-{uuid.uuid4().hex}.png")
        r = image_chat(gw, url)
        assert r.status_code == 400 and "Error while downloading" in r.text  # a provider's 400
        assert [h for h in images.hits if "told-" in h]


def test_an_auth_key_whose_variable_is_unset_never_opens_the_door(tmp_path):
    """``admin_key: os.environ/NAME`` with NAME unset, no teams: closed (nobody gets in), and
    the start-up log says why; it used to run every route open."""
    name = "ROUTEFIT_TEST_UNSET_" + uuid.uuid4().hex.upper()
    path = write_config(tmp_path / "c.yaml", {"admin_key": f"os.environ/{name}"})
    with run_inprocess(path) as gw:
        calls = wire_calls(gw, {"authorization": "Bearer anything"})
        assert {w: r.status_code for w, r in calls.items()} == dict.fromkeys(calls, 401)
        assert httpx.get(gw.base_url + "/routefit/calibration").status_code == 401
        assert httpx.get(gw.base_url + UI + "/data").status_code == 403
        assert httpx.get(gw.base_url + "/readyz").json()["auth"] == "keys"
        assert "no key is set" in gw.log()


@pytest.mark.parametrize(
    ("general", "error"),
    [
        ({"custom_auth": "my_module.auth"}, "general_settings.custom_auth"),
        ({"enable_jwt_auth": True}, "general_settings.enable_jwt_auth"),
        ({"allowed_ips": ["10.0.0.1"]}, "general_settings.allowed_ips"),
        ({"master_key": TEAM}, "general_settings.master_key: is also a team's key"),
    ],
)
def test_litellm_auth_settings_routefit_cannot_honour_are_refused(general, error):
    data = {
        "model_list": [ROUTE],
        "general_settings": general,
        "routefit_settings": {"teams": [{"id": "t", "keys": [TEAM]}]},
    }
    with pytest.raises(ConfigError, match=error):
        parse_config(data, "c.yaml", environ={})


def test_what_asks_for_auth(tmp_path):
    def config(settings: dict[str, Any], general: dict[str, Any] | None = None) -> Any:
        data = {"model_list": [ROUTE], "routefit_settings": settings}
        if general is not None:
            data["general_settings"] = general
        return parse_config(data, "c.yaml", environ={})

    assert config({}).open and config({}, {"database_url": "postgres://x"}).open
    assert not config({"teams": []}).open
    assert not config({"admin_key": "os.environ/UNSET"}).open
    assert not config({}, {"master_key": "os.environ/UNSET"}).open
    assert config({}, {"database_url": "postgres://x"}).warnings  # ignored, with a warning


# -- the dashboard: sessions, throttle, cookies ------------------------------------------------


@pytest.fixture(scope="module")
def ui_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """Plain HTTP, no trusted proxy: forwarded headers are the client's own words."""
    path = write_config(
        tmp_path_factory.mktemp("ui") / "c.yaml",
        {"admin_key": ADMIN, "teams": [{"id": "t", "keys": [TEAM]}]},
    )
    # Believing forwarded headers or not is the CLI's choice of uvicorn options: the real process.
    with run_routefit(path) as running:
        yield running


@pytest.mark.parametrize(
    "cookie",
    [
        b"routefit_ui=\xc3\xa9t\xc3\xa9",
        b"routefit_ui=9999999999.\xc3\xa9",  # a well-formed expiry, a non-ASCII MAC
        "routefit_ui=1.é".encode("latin-1"),
        b"routefit_ui=\xff\xfe",
        "routefit_ui=é".encode("latin-1"),
        b"routefit_ui=" + b"a" * 43,
        b"routefit_ui=",
        b"routefit_ui=" + b"\xe2\x82\xac" * 5000,
    ],
)
def test_any_cookie_is_refused_not_crashed_on(ui_gw, cookie):
    for method, path in (("GET", "/data"), ("GET", "/session"), ("DELETE", "/session")):
        r = httpx.request(method, ui_gw.base_url + UI + path, headers={"cookie": cookie})
        assert r.status_code in (200, 204, 401), (path, r.status_code, r.text)
        assert "Traceback" not in r.text
        if r.status_code == 401:
            check_error_shape(r.status_code, r.content, path)
        if path == "/session" and method == "GET":
            assert r.json()["authorized"] is False


def test_logout_revokes_a_copied_cookie(ui_gw):
    login = httpx.post(ui_gw.base_url + UI + "/session", json={"key": ADMIN})
    assert login.status_code == 204
    cookie = login.cookies["routefit_ui"]
    assert "Secure" not in login.headers["set-cookie"]  # plain HTTP
    copied = {"cookie": f"routefit_ui={cookie}"}
    assert httpx.get(ui_gw.base_url + UI + "/data", headers=copied).status_code == 200
    assert httpx.delete(ui_gw.base_url + UI + "/session", headers=copied).status_code == 204
    r = httpx.get(ui_gw.base_url + UI + "/data", headers=copied)
    assert r.status_code == 401, r.text


def lock_out(attempt: Callable[[int], httpx.Response]) -> list[int]:
    """Wrong keys until the client is locked out for 8 s or more (long enough that the next
    requests of a test land inside it on a loaded machine); the statuses seen. A shorter
    lock-out is waited out, so the next wrong key doubles it whatever the machine's speed."""
    statuses = []
    for i in range(40):
        r = attempt(i)
        statuses.append(r.status_code)
        if r.status_code == 429:
            check_error_shape(r.status_code, r.content)
            wait = int(r.headers["retry-after"])
            if wait >= 8:
                break
            time.sleep(wait)
    return statuses


def test_admin_key_guesses_are_throttled_per_client_and_spoofing_does_not_help(ui_gw):
    """The first guesses get 403; then 429 with Retry-After, even for the right key, and a
    client that claims other addresses in X-Forwarded-For (untrusted here) is the same client."""
    statuses = lock_out(
        lambda i: httpx.post(
            ui_gw.base_url + UI + "/session",
            json={"key": f"g{i}"},
            headers={"x-forwarded-for": f"203.0.113.{i}", "x-forwarded-proto": "https"},
        )
    )
    assert statuses[:5] == [403] * 5 and 429 in statuses, statuses
    checked = statuses.count(403)
    assert checked <= 9, statuses  # 5 free guesses, then one per lock-out (1, 2, 4, 8 s)
    right = httpx.post(ui_gw.base_url + UI + "/session", json={"key": ADMIN})
    assert right.status_code == 429  # the key is not even looked at while locked out
    bearer = httpx.get(ui_gw.base_url + UI + "/data", headers={"authorization": f"Bearer {ADMIN}"})
    assert bearer.status_code == 429  # the bearer path is the same door
    for path in ("/routefit/calibration", "/routefit/teams/t/usage"):  # and so are the others
        other = httpx.get(ui_gw.base_url + path, headers={"authorization": f"Bearer {ADMIN}"})
        assert other.status_code == 429, path
    record("login_throttle", attempts=len(statuses), keys_checked=checked)


# -- TLS and trusted proxies -----------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made with the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def trust(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def test_serve_speaks_tls_and_its_dashboard_cookie_is_secure(tmp_path, certificate):
    cert, key = certificate
    path = write_config(
        tmp_path / "c.yaml",
        {"admin_key": ADMIN, "teams": [{"id": "t", "keys": [TEAM]}]},
    )
    args = ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    with run_routefit(path, extra_args=args, tls_ca=cert) as gw:
        assert gw.base_url.startswith("https://")
        with httpx.Client(verify=trust(cert)) as client:
            chat = client.post(gw.v1 + "/chat/completions", json=CHAT, headers={"x-api-key": TEAM})
            assert chat.status_code == 200, chat.text
            login = client.post(gw.base_url + UI + "/session", json={"key": ADMIN})
            assert login.status_code == 204
            assert "secure" in login.headers["set-cookie"].lower()
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not served on the TLS port
            httpx.get(gw.base_url.replace("https", "http") + "/readyz", timeout=5)


def test_config_tls_and_a_trusted_proxy(tmp_path, certificate):
    """``routefit_settings.tls`` serves HTTPS; ``--forwarded-allow-ips`` makes a proxy's
    X-Forwarded-For the client (its own throttle bucket) and its X-Forwarded-Proto the scheme."""
    cert, key = certificate
    path = write_config(
        tmp_path / "c.yaml",
        {"admin_key": ADMIN, "tls": {"certfile": str(cert), "keyfile": str(key)}},
    )
    proxy = ["--forwarded-allow-ips", "127.0.0.1"]
    with (
        run_routefit(path, extra_args=proxy, tls_ca=cert) as gw,
        httpx.Client(verify=trust(cert), base_url=gw.base_url + UI) as client,
    ):
        statuses = lock_out(
            lambda i: client.post(
                "/session", json={"key": f"n{i}"}, headers={"x-forwarded-for": "1.2.3.4"}
            )
        )
        assert 429 in statuses  # one client behind the proxy is locked out ...
        locked = client.post(
            "/session", json={"key": ADMIN}, headers={"x-forwarded-for": "1.2.3.4"}
        )
        assert locked.status_code == 429
        other = client.post("/session", json={"key": ADMIN}, headers={"x-forwarded-for": "5.6.7.8"})
        assert other.status_code == 204  # ... another one is not
        assert "secure" in other.headers["set-cookie"].lower()


def test_a_trusted_proxys_https_makes_the_cookie_secure(tmp_path):
    path = write_config(tmp_path / "c.yaml", {"admin_key": ADMIN, "trusted_proxies": ["127.0.0.1"]})
    # The CLI turns trusted_proxies into uvicorn's forwarded-header options: the real process.
    with run_routefit(path) as gw:
        proxied = {"x-forwarded-proto": "https", "x-forwarded-for": "198.51.100.1"}
        r = httpx.post(gw.base_url + UI + "/session", json={"key": ADMIN}, headers=proxied)
        assert r.status_code == 204 and "secure" in r.headers["set-cookie"].lower()
        plain = httpx.post(gw.base_url + UI + "/session", json={"key": ADMIN})
        assert "secure" not in plain.headers["set-cookie"].lower()
