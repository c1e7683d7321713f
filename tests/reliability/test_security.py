"""Security: keys, team isolation, admin endpoints, secrets that must never leave the process,
URL images that must not reach private addresses, size limits, header injection.

routefit in-process (with its access log on) in front of the provider simulator and of a
deliberately hostile fake provider that echoes the key it was given and tries to smuggle
headers into routefit's response.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess
from PIL import Image
from relkit import check_error_shape, record

from proxy.teams import Quotas, Team, TeamDirectory, hash_key

ADMIN = "sk-admin-" + uuid.uuid4().hex
ALPHA = "sk-alpha-" + uuid.uuid4().hex
BETA = "sk-beta-" + uuid.uuid4().hex
GAMMA = "sk-gamma-" + uuid.uuid4().hex
#: The provider key routefit holds. Its tail is what providers echo in a masked form.
PROVIDER_KEY = "sk-provider-" + uuid.uuid4().hex + "Q7ZX"
SECRETS = {"admin": ADMIN, "alpha": ALPHA, "beta": BETA, "gamma": GAMMA, "provider": PROVIDER_KEY}


def png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (1, 2, 3)).save(buf, "PNG")
    return buf.getvalue()


class Hostile(BaseHTTPRequestHandler):
    """A fake provider: images and redirects for the URL-fetch tests; errors that echo the key
    and try to inject headers for the secrecy tests. Counts every request it gets."""

    hits: list[str] = []  # noqa: RUF012 - shared on purpose (one server per module)
    image = png(64, 64)

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        Hostile.hits.append(self.path)
        if self.path.startswith("/img.png"):
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.send_header("content-length", str(len(self.image)))
            self.end_headers()
            self.wfile.write(self.image)
        elif self.path.startswith("/to-metadata"):
            self.send_response(302)
            self.send_header("location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def do_POST(self) -> None:
        Hostile.hits.append(self.path)
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length))
        key = (self.headers.get("authorization") or "").removeprefix("Bearer ")
        model = body.get("model")
        if model == "echo":
            message = f"Incorrect API key provided: {key}. Masked: {key[:6]}****{key[-4:]}."
            payload = {"error": {"message": message, "type": "invalid_request_error"}}
            data = json.dumps(payload).encode()
            self.send_response(400)
        else:  # "smuggle": a 429 whose headers try to reach the client
            data = json.dumps(
                {"error": {"message": "slow down\r\nSet-Cookie: a=b", "type": "rate_limit"}}
            ).encode()
            self.send_response(429)
            self.send_header("retry-after", "7")
            self.send_header("x-request-id", "req-1\r\nSet-Cookie: stolen=1")
            self.send_header("x-injected", "yes")
            self.send_header("set-cookie", "session=upstream")
            self.send_header("location", "http://evil.example/")
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _route(alias: str, base: str, model: str, **own) -> dict:
    entry = sim_route(alias, base, model, **own)
    entry["litellm_params"]["api_key"] = PROVIDER_KEY
    return entry


@pytest.fixture(scope="module")
def gw(sim, hostile, tmp_path_factory):
    url = sim.base_url
    hosts = ["127.0.0.1", "localhost", "::ffff:127.0.0.1", "169.254.169.254"]
    routes = [
        _route("gpt-4o", url, "gpt-4o", image_limits={"max_image_bytes": 100_000}),
        _route("small", url, "gpt-4o-small", model_info={"max_input_tokens": 8192}),
        _route("fetch-public", url, "gpt-4o", image_fetch={"allow_hosts": hosts}),
        _route(
            "fetch-private",
            url,
            "gpt-4o",
            image_fetch={"allow_hosts": hosts, "allow_private": True},
        ),
        _route("via-litellm", url, "gpt-4o", transport="litellm"),
        # by name, not address: a cookie jar keeps what a named host sets (aiohttp's default
        # one refuses an IP address's cookies)
        _route("by-name", url.replace("127.0.0.1", "localhost"), "gpt-4o"),
        # the same through litellm, which reaches an OpenAI-wire provider with the OpenAI SDK
        _route(
            "litellm-by-name", url.replace("127.0.0.1", "localhost"), "gpt-4o", transport="litellm"
        ),
        {
            "model_name": "claude-by-name",
            "litellm_params": {
                "model": "anthropic/claude-sim",
                "api_base": url.replace("127.0.0.1", "localhost"),
                "api_key": PROVIDER_KEY,
            },
        },
        {
            "model_name": "echo",
            "litellm_params": {
                "model": "openai/echo",
                "api_base": hostile + "/v1",
                "api_key": PROVIDER_KEY,
            },
        },
        {
            "model_name": "smuggle",
            "litellm_params": {
                "model": "openai/smuggle",
                "api_base": hostile + "/v1",
                "api_key": PROVIDER_KEY,
            },
        },
    ]
    config = gateway_config(
        tmp_path_factory.mktemp("security") / "c.yaml",
        routes,
        admin_key=ADMIN,
        max_body_bytes=200_000,
        teams=[
            {"id": "alpha", "keys": [ALPHA], "quotas": {"tokens_per_minute": 10_000_000}},
            {"id": "beta", "keys": [BETA], "routes": ["gpt-4o"]},
            {"id": "gamma", "keys": [GAMMA], "routes": ["by-name", "litellm-by-name"]},
        ],
    )
    with run_inprocess(config, access_log=True) as running:
        yield running


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 10}


# -- keys -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": ""},
        {"authorization": "Bearer"},
        {"authorization": "Bearer \t x"},
        {"authorization": f"Basic {ALPHA}"},
        {"authorization": f"Bearer {ALPHA}x"},
        {"authorization": f"Bearer {ALPHA[:-1]}"},
        {"authorization": f"Bearer {ALPHA.upper()}"},
        {"x-api-key": "sk-nope"},
        {"authorization": "Bearer sk-nope", "x-api-key": ALPHA},  # authorization wins
        {"authorization": f"Bearer {ADMIN}"},  # the admin key is not a team key
    ],
)
def test_no_or_wrong_key_is_401(gw, headers):
    for method, path, body in (
        ("POST", "/v1/chat/completions", BODY),
        ("POST", "/chat/completions", BODY),
        ("POST", "/routefit/fit", BODY),
        ("GET", "/v1/models", None),
        ("GET", "/models", None),
    ):
        r = httpx.request(method, gw.base_url + path, json=body, headers=headers)
        assert r.status_code == 401, (path, headers, r.text)
        check_error_shape(r.status_code, r.content, path)
        assert r.json()["error"]["code"] == "invalid_api_key"
        for secret in SECRETS.values():
            assert secret not in r.text and secret.upper() not in r.text


def test_the_right_keys_work_by_either_header(gw):
    assert httpx.post(gw.v1 + "/chat/completions", json=BODY, headers=bearer(ALPHA)).is_success
    r = httpx.post(gw.v1 + "/chat/completions", json=BODY, headers={"x-api-key": BETA})
    assert r.status_code == 200


def test_a_team_cannot_reach_another_teams_routes_or_usage(gw):
    small = {**BODY, "model": "small"}
    nowhere = {**BODY, "model": "no-such-model"}
    for path in ("/v1/chat/completions", "/routefit/fit"):
        r = httpx.post(gw.base_url + path, json=small, headers=bearer(BETA))
        # the answer to a model that is not there: nothing says the route exists
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        absent = httpx.post(gw.base_url + path, json=nowhere, headers=bearer(BETA))
        assert r.text == absent.text.replace("no-such-model", "small")
        assert httpx.post(gw.base_url + path, json=small, headers=bearer(ALPHA)).status_code == 200
    models = httpx.get(gw.v1 + "/models", headers=bearer(BETA)).json()
    assert [m["id"] for m in models["data"]] == ["gpt-4o"]
    for team in ("alpha", "..", "%2e%2e", "alpha%2F..%2Fbeta", "ALPHA", "alpha%00"):
        r = httpx.get(f"{gw.base_url}/routefit/teams/{team}/usage", headers=bearer(BETA))
        assert r.status_code in (403, 404) and "windows" not in r.text, (team, r.text)
        check_error_shape(r.status_code, r.content)
    assert httpx.get(gw.base_url + "/routefit/teams/beta/usage", headers=bearer(BETA)).is_success
    r = httpx.get(gw.base_url + "/routefit/teams/alpha/usage", headers=bearer(ALPHA))
    assert r.status_code == 200 and r.json()["team"] == "alpha"


def test_admin_endpoints_need_the_admin_key(gw):
    for path in ("/routefit/calibration", "/routefit/teams/alpha/usage"):
        assert httpx.get(gw.base_url + path).status_code == 401
        wrong = httpx.get(gw.base_url + path, headers=bearer("sk-admin-" + "0" * 32))
        assert wrong.status_code == 401 if "teams" in path else 403
        assert httpx.get(gw.base_url + path, headers=bearer(ADMIN)).status_code == 200
    r = httpx.get(gw.base_url + "/routefit/calibration", headers=bearer(ALPHA))
    assert r.status_code == 403 and r.json()["error"]["code"] == "admin_key_required"
    r = httpx.get(gw.base_url + "/routefit/teams/nobody/usage", headers=bearer(ADMIN))
    assert r.status_code == 404


def test_keys_are_compared_in_constant_time_on_one_code_path(monkeypatch):
    """Valid and invalid keys of equal length make the same comparisons, of fixed-length
    digests, against every known key: no early exit, nothing that depends on the key length."""
    keys = [f"sk-{i}-" + uuid.uuid4().hex for i in range(6)]
    teams = [Team(f"t{i}", (hash_key(k),), None, Quotas()) for i, k in enumerate(keys[:3])] + [
        Team("t3", tuple(hash_key(k) for k in keys[3:]), None, Quotas())
    ]
    directory = TeamDirectory(teams, hash_key(ADMIN))
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    invalid = "sk-0-" + uuid.uuid4().hex  # same length as keys[0]
    traces = {}
    for name, key in (("first", keys[0]), ("last", keys[-1]), ("invalid", invalid)):
        calls.clear()
        found = (
            directory.authenticate({"authorization": f"Bearer {key}"})
            if name != "invalid"
            else None
        )
        if name == "invalid":
            with pytest.raises(Exception, match="invalid API key"):
                directory.authenticate({"authorization": f"Bearer {key}"})
        traces[name] = list(calls)
        assert name == "invalid" or found is not None
    assert traces["first"] == traces["last"] == traces["invalid"] == [(32, 32)] * 6
    calls.clear()
    assert directory.is_admin(ADMIN) and not directory.is_admin(invalid)
    assert calls == [(32, 32)] * 4  # the admin and the master key, each time (none is set)
    assert hashlib.sha256(ALPHA.encode()).digest() == hash_key(ALPHA)


# -- secrets never leave ----------------------------------------------------------------------


def test_provider_keys_never_reach_a_client(gw, fresh_sim):
    seen = []
    # a provider that echoes the key it was sent, in full and masked
    r = httpx.post(
        gw.v1 + "/chat/completions", json={**BODY, "model": "echo"}, headers=bearer(ALPHA)
    )
    assert r.status_code == 400 and "Incorrect API key" in r.json()["error"]["message"]
    seen.append(r.text)
    # the simulator refusing the key with OpenAI's masked echo (sk-*****Q7ZX)
    fresh_sim.state.config.api_keys = frozenset({"sk-some-other-key"})
    for stream in (False, True):
        r = httpx.post(
            gw.v1 + "/chat/completions", json={**BODY, "stream": stream}, headers=bearer(ALPHA)
        )
        assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_auth_failed"
        seen.append(r.text)
    fresh_sim.state.config.api_keys = None
    for path in (
        "/metrics",
        "/routefit/calibration",
        "/routefit/teams/alpha/usage",
        "/v1/models",
        "/openapi.json",
        "/readyz",
        "/healthz",
    ):
        seen.append(httpx.get(gw.base_url + path, headers=bearer(ADMIN)).text)
    r = httpx.post(gw.base_url + "/routefit/fit", json=BODY, headers=bearer(ALPHA))
    seen.append(r.text + json.dumps(dict(r.headers)))
    blob = "\n".join(seen)
    assert PROVIDER_KEY not in blob
    assert PROVIDER_KEY[-4:] not in blob  # not even the tail providers echo
    assert PROVIDER_KEY[3:15] not in blob
    assert PROVIDER_KEY not in gw.log()


#: Body keys litellm reads as its own settings, not the model's: where to send the request and
#: with which credentials, headers, a canned answer instead of the provider's.
STEERING = ("base_url", "api_base", "api_key", "extra_headers", "headers", "custom_llm_provider")


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_cannot_steer_litellm_to_another_host_or_key(gw, hostile, fresh_sim, stream):
    """A route translated by litellm: the request body's keys that litellm would read as where
    to send it (``base_url`` even over the route's own ``api_base``) and with which key never
    steer it — routefit's provider key never reaches the client's host, and no canned
    ``mock_response`` stands in for the provider's answer."""
    Hostile.hits.clear()
    body = {
        **BODY,
        "model": "via-litellm",
        "stream": stream,
        "base_url": hostile + "/v1",
        "api_base": hostile + "/v1",
        "api_key": "sk-client-chosen",
        "extra_headers": {"x-exfiltrate": "1"},
        "headers": {"x-exfiltrate": "1"},
        "custom_llm_provider": "openai",
        "mock_response": "answered by nobody",
    }
    r = httpx.post(gw.v1 + "/chat/completions", json=body, headers=bearer(ALPHA), timeout=30)
    assert r.status_code == 200, r.text
    assert "answered by nobody" not in r.text
    assert Hostile.hits == []  # nothing went to the client's host
    [seen] = fresh_sim.requests(path="/v1/chat/completions")
    assert seen["headers"]["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert "x-exfiltrate" not in seen["headers"]
    assert not set(STEERING) & set(seen["body"])


def test_a_cookie_one_team_s_answer_set_never_goes_out_with_another_s(gw, fresh_sim):
    """The simulator's edge sets a new cookie on every client that sends none (as
    api.openai.com's does); the provider client routefit shares between teams must not keep it:
    no request, from either team, on the native chat or Messages path, carries a cookie."""
    for key in (ALPHA, GAMMA):
        body = {**BODY, "model": "by-name"}
        r = httpx.post(gw.v1 + "/chat/completions", json=body, headers=bearer(key))
        assert r.status_code == 200, r.text
    for _ in range(2):
        r = httpx.post(
            gw.v1 + "/messages",
            json={**BODY, "model": "claude-by-name"},
            headers={"x-api-key": ALPHA, "anthropic-version": "2023-06-01"},
        )
        assert r.status_code == 200, r.text
    seen = fresh_sim.requests()
    assert [r["path"] for r in seen] == ["/v1/chat/completions"] * 2 + ["/v1/messages"] * 2
    assert [r["headers"].get("cookie") for r in seen] == [None] * 4


@pytest.mark.parametrize("stream", [False, True])
def test_no_cookie_goes_out_from_the_client_litellm_shares_between_teams(gw, fresh_sim, stream):
    """The same through litellm to an OpenAI-wire provider: litellm keeps one OpenAI SDK client
    per provider key and address, for every team, and that client's cookie jar would send the
    cookie one team's answer set with the next team's request."""
    for key in (ALPHA, GAMMA, ALPHA):
        body = {**BODY, "model": "litellm-by-name", "stream": stream}
        r = httpx.post(gw.v1 + "/chat/completions", json=body, headers=bearer(key))
        assert r.status_code == 200, r.text
    seen = fresh_sim.requests()
    assert [r["path"] for r in seen] == ["/v1/chat/completions"] * 3
    assert [r["headers"].get("cookie") for r in seen] == [None] * 3


def test_client_keys_are_never_logged(gw):
    for key in (ALPHA, BETA, ADMIN, "sk-wrong-" + uuid.uuid4().hex):
        httpx.post(gw.v1 + "/chat/completions", json=BODY, headers=bearer(key))
        httpx.get(gw.base_url + "/routefit/calibration", headers={"x-api-key": key})
    time.sleep(0.2)
    log = gw.log()
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in log  # the access log is on
    for name, secret in SECRETS.items():
        assert secret not in log, name
        assert secret[-12:] not in log, name


# -- URL images --------------------------------------------------------------------------------


def fit_estimate(gw, model: str, url: str) -> tuple[int, float]:
    body = {
        "model": model,
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
        ],
    }
    started = time.monotonic()
    r = httpx.post(gw.base_url + "/routefit/fit", json=body, headers=bearer(ALPHA), timeout=10)
    assert r.status_code == 200, r.text
    return int(r.headers["x-routefit-prompt-tokens"]), time.monotonic() - started


def test_url_images_cannot_reach_private_addresses_unless_allowlisted(gw, hostile):
    port = hostile.rsplit(":", 1)[1]
    Hostile.hits.clear()
    image = f"{hostile}/img.png?n={uuid.uuid4().hex}"
    worst, _ = fit_estimate(gw, "gpt-4o", image)  # no fetch policy: worst case, nothing fetched
    refused = {}
    for url in (
        image,
        f"http://localhost:{port}/img.png?{uuid.uuid4().hex}",
        f"http://[::ffff:127.0.0.1]:{port}/img.png?{uuid.uuid4().hex}",
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        f"http://[::1]:{port}/img.png",
        "http://0.0.0.0/img.png",
        "file:///etc/passwd",
    ):
        refused[url] = fit_estimate(gw, "fetch-public", url)
    assert Hostile.hits == []  # loopback and metadata addresses were never contacted
    assert all(estimate == worst for estimate, _ in refused.values()), refused
    # the operator allows private addresses: the image is read and priced exactly (64x64)
    exact, _ = fit_estimate(gw, "fetch-private", f"{hostile}/img.png?{uuid.uuid4().hex}")
    assert Hostile.hits and exact < worst
    # ... but never the cloud metadata address, directly or through a redirect
    Hostile.hits.clear()
    direct, _ = fit_estimate(gw, "fetch-private", "http://169.254.169.254/latest/meta-data/")
    hop, _ = fit_estimate(gw, "fetch-private", f"{hostile}/to-metadata?{uuid.uuid4().hex}")
    assert direct == worst and hop == worst
    assert [h.split("?")[0] for h in Hostile.hits] == ["/to-metadata"]
    record(
        "ssrf",
        urls_refused=len(refused) + 2,
        hostile_hits_while_refused=0,
        worst_case_tokens=worst,
        allowlisted_exact_tokens=exact,
    )


# -- limits ----------------------------------------------------------------------------------


def test_body_and_image_limits_hold(gw):
    big = {**BODY, "messages": [{"role": "user", "content": "x" * 250_000}]}
    r = httpx.post(gw.v1 + "/chat/completions", json=big, headers=bearer(ALPHA))
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    raw = json.dumps(big).encode()
    r = httpx.post(
        gw.v1 + "/chat/completions",
        content=(raw[i : i + 8192] for i in range(0, len(raw), 8192)),
        headers=bearer(ALPHA),
    )
    assert r.status_code == 413  # chunked, no content-length: counted while reading
    import base64

    url = "data:image/png;base64," + base64.b64encode(png(8, 8) + b"\0" * 120_000).decode()
    body = {
        **BODY,
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
        ],
    }
    r = httpx.post(gw.v1 + "/chat/completions", json=body, headers=bearer(ALPHA))
    assert r.status_code in (400, 413)
    check_error_shape(r.status_code, r.content)


# -- header injection ------------------------------------------------------------------------


def test_upstream_headers_cannot_be_smuggled_into_responses(gw):
    r = httpx.post(
        gw.v1 + "/chat/completions", json={**BODY, "model": "smuggle"}, headers=bearer(ALPHA)
    )
    assert r.status_code == 429
    assert r.headers["retry-after"] == "7"
    assert r.headers["x-request-id"] == "req-1"
    for name in ("set-cookie", "x-injected", "location"):
        assert name not in r.headers, (name, r.headers)
    assert r.json()["error"]["message"] == "slow down\r\nSet-Cookie: a=b"  # body, JSON-escaped


def test_client_values_cannot_inject_response_headers(gw):
    for model in ("gpt-4o\r\nX-Injected: 1", "gpt-4o\nX-Injected: 1", "gpt-4o\rX-Injected: 1"):
        r = httpx.post(
            gw.v1 + "/chat/completions", json={**BODY, "model": model}, headers=bearer(ALPHA)
        )
        assert r.status_code == 404 and "x-injected" not in r.headers
    for path in ("/routefit/teams/a%0d%0aX-Injected:%201/usage", "/v1/x%0d%0aX-Injected:%201"):
        r = httpx.get(gw.base_url + path, headers=bearer(ADMIN))
        assert 400 <= r.status_code < 500 and "x-injected" not in r.headers
    # raw requests whose header values carry CR/LF (obs-fold, bare CR) are refused by the server
    host, port = gw.base_url.removeprefix("http://").split(":")
    for header in (
        b"Authorization: Bearer " + ALPHA.encode() + b"\r\n X-Injected: 1",
        b"Authorization: Bearer a\rX-Injected: 1",
        b"X-Request-Id: a\x00b",
    ):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(
                b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
                + header
                + b"\r\nConnection: close\r\n\r\n"
            )
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        status = int(reply.split(b" ", 2)[1])
        head = reply.split(b"\r\n\r\n", 1)[0].lower()
        assert 400 <= status < 500 and b"x-injected" not in head, reply[:300]
