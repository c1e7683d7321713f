"""Hardening against clients and shutdowns, with real sockets against ``routefit serve``:
clients that leave mid-body or mid-stream (499, no 5xx, no traceback), slow clients cut by the
header and body deadlines while others are served, trailing slashes served without a redirect,
gzip bodies, the client's alias as ``model`` on every route, URL images on litellm routes fetched
by routefit or refused, ``/readyz`` with a fail-closed store away, SIGTERM with 50 streams in
flight (all finish, budgets settle, exit 0), and the same limits in every spawned worker.

The client-facing tests run routefit in-process with short limits as a ``ServeSettings`` value;
SIGTERM, ``--workers``, ``--max-connections`` and the drain run ``routefit serve`` itself.
"""

from __future__ import annotations

import gzip
import json
import signal
import socket
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import gateway_config, private_redis, run_routefit, sim_route
from inprocess import InProcess, run_inprocess
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from relkit import metric, record

from proxy.body import _decoder
from proxy.serve_settings import ServeSettings

ADMIN = "sk-admin-" + uuid.uuid4().hex
KEY = "sk-team-" + uuid.uuid4().hex
TEAM = "hardening"
AUTH = {"authorization": f"Bearer {KEY}"}
CHAT = [{"role": "user", "content": "tell me about hardening"}]
#: Limits the gateway under test runs with: short, so the slow clients are cut quickly (as
#: ``routefit serve`` flags; ``SHORT`` is the same as the value they build, tests/proxy/
#: test_serve_settings.py holds that the flags build it).
LIMITS = ["--header-timeout", "1", "--body-timeout", "1", "--body-min-rate", "0"]
SHORT = ServeSettings(header_timeout=1, body_timeout=1, body_min_rate=0)
#: How long a test waits for the server to close a slow connection before calling it a hang.
HANG = 20.0


def _team(**quotas: int) -> dict[str, Any]:
    return {"id": TEAM, "keys": [KEY], "quotas": quotas or {"tokens_per_day": 10**10}}


def _routes(sim: Any) -> list[dict[str, Any]]:
    url = sim.base_url
    return [
        sim_route("gpt-4o", url),
        # An alias in front of another upstream name: the client must get "fast" back.
        sim_route("fast", url, "gpt-4o-mini"),
        {
            "model_name": "claude",
            "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": url,
                "api_key": "sk-ant-sim",
            },
            "routefit": {
                "image_fetch": {"allow_hosts": ["127.0.0.1"], "allow_private": True},
            },
        },
        {
            "model_name": "claude-closed",
            "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": url,
                "api_key": "sk-ant-sim",
            },
        },
    ]


@pytest.fixture(scope="module")
def gw(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    path = tmp_path_factory.mktemp("hardening") / "c.yaml"
    config = gateway_config(path, _routes(sim), admin_key=ADMIN, teams=[_team()])
    with run_inprocess(config, settings=SHORT) as running:
        yield running


def _connect(gw: InProcess) -> socket.socket:
    host, port = gw.base_url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=HANG)
    return s


def _request_head(body_length: int | None, path: str = "/v1/chat/completions") -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines.append(f"Authorization: Bearer {KEY}")
    if body_length is None:
        lines.append("Transfer-Encoding: chunked")
    else:
        lines.append(f"Content-Length: {body_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _closed_by_server(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a hang fails the test)."""
    got = b""
    try:
        while chunk := s.recv(65536):
            got += chunk
    except TimeoutError:
        pytest.fail(f"the server did not close the connection within {HANG} s: {got[:200]!r}")
    except ConnectionResetError:
        pass
    return got


def _metrics(gw: InProcess) -> str:
    return httpx.get(gw.base_url + "/metrics", timeout=10).text


def _five_xx(text: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith("routefit_requests_total{") and 'status="5' in line:
            total += float(line.rpartition(" ")[2])
    return total


def _chat(gw: InProcess, model: str = "gpt-4o", **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": CHAT, "max_tokens": 20, **extra}
    return httpx.post(gw.v1 + "/chat/completions", json=body, headers=AUTH, timeout=30)


def _stream(gw: InProcess, model: str = "gpt-4o", **extra: Any) -> list[str]:
    body = {"model": model, "messages": CHAT, "max_tokens": 20, "stream": True, **extra}
    with httpx.stream(
        "POST", gw.v1 + "/chat/completions", json=body, headers=AUTH, timeout=60
    ) as r:
        assert r.status_code == 200, r.read()
        return [line for line in r.iter_lines() if line]


# -- clients that leave ---------------------------------------------------------------------


def test_clients_leaving_mid_body_and_mid_stream_are_499_not_5xx(gw: InProcess, fresh_sim):
    fresh_sim.state.config.chunk_delay = 0.05
    before = metric(_metrics(gw), "routefit_requests_total", route="-", status="499")
    body = json.dumps({"model": "gpt-4o", "messages": CHAT}).encode()
    for _ in range(5):  # mid-body: half the body, then gone
        with _connect(gw) as s:
            s.sendall(_request_head(len(body)) + body[: len(body) // 2])
            time.sleep(0.05)
    stream = json.dumps(
        {"model": "gpt-4o", "messages": CHAT, "max_tokens": 200, "stream": True}
    ).encode()
    for _ in range(5):  # mid-stream: the first events, then gone
        with _connect(gw) as s:
            s.sendall(_request_head(len(stream)) + stream)
            assert b"data:" in s.recv(4096) or b"data:" in s.recv(4096)
    deadline = time.monotonic() + HANG
    while fresh_sim.stats()["streams_cancelled"] < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    text = _metrics(gw)
    assert _five_xx(text) == 0, text
    assert metric(text, "routefit_errors_total", kind="internal") == 0
    mid_body = metric(text, "routefit_requests_total", route="-", status="499") - before
    assert mid_body == 5
    assert metric(text, "routefit_requests_total", route="gpt-4o", status="499") >= 5
    assert fresh_sim.stats()["streams_cancelled"] == 5  # the upstream streams were cancelled
    assert httpx.get(gw.base_url + "/healthz").status_code == 200
    assert _chat(gw).status_code == 200
    log = gw.log()
    assert "Traceback" not in log and "ClientDisconnect" not in log
    record("disconnects", mid_body=5, mid_stream=5, five_xx=0)


def test_a_client_leaving_while_the_provider_thinks_cancels_the_upstream(gw, fresh_sim):
    fresh_sim.inject("delay:30")
    body = json.dumps({"model": "gpt-4o", "messages": CHAT}).encode()
    with _connect(gw) as s:
        s.sendall(_request_head(len(body)) + body)
        deadline = time.monotonic() + HANG
        while not fresh_sim.requests(path="/v1/chat/completions"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    deadline = time.monotonic() + HANG
    while True:  # the 499 is counted once routefit gave up on the provider
        text = _metrics(gw)
        if metric(text, "routefit_requests_total", route="gpt-4o", status="499") >= 1:
            break
        assert time.monotonic() < deadline, text
        time.sleep(0.05)
    assert _five_xx(text) == 0


# -- slow clients ---------------------------------------------------------------------------


def test_slow_clients_are_cut_while_others_are_served(gw: InProcess):
    body = json.dumps({"model": "gpt-4o", "messages": CHAT}).encode()
    slow = {
        "request line": b"POST /v1/chat/comp",
        "headers": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n",
        "body": _request_head(len(body)) + body[:10],
        "chunked body": _request_head(None) + b"10\r\n" + body[:16] + b"\r\n4",
        "unauthenticated body": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: 100000\r\n\r\n{",
    }
    sockets = {}
    for name, data in slow.items():
        s = _connect(gw)
        s.sendall(data)
        sockets[name] = s
    served = [_chat(gw).status_code for _ in range(5)]
    assert served == [200] * 5
    answers = {}
    for name, s in sockets.items():
        with s:
            answers[name] = _closed_by_server(s)
    # Headers never completed: closed without an answer. A body that stalled: a 408.
    assert answers["request line"] == b"" and answers["headers"] == b""
    for name in ("body", "chunked body"):
        assert answers[name].startswith(b"HTTP/1.1 408"), answers[name]
        assert b"request_timeout" in answers[name]
    assert answers["unauthenticated body"].startswith(b"HTTP/1.1 401")
    assert [_chat(gw).status_code for _ in range(3)] == [200] * 3
    assert _five_xx(_metrics(gw)) == 0
    record("slow_clients", cut=len(slow), served_meanwhile=len(served), limits=LIMITS)


def test_a_slow_client_on_a_kept_alive_connection_is_cut_too(gw: InProcess):
    body = json.dumps({"model": "gpt-4o", "messages": CHAT, "max_tokens": 5}).encode()
    with _connect(gw) as s:
        s.sendall(_request_head(len(body)) + body)
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        s.sendall(b"POST /v1/chat/comp")
        assert b"HTTP/1.1" not in _closed_by_server(s)


def test_an_endless_header_block_gets_431_and_is_closed(gw: InProcess):
    with _connect(gw) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        sent = 0
        try:
            while sent < 64 * 1024 * 1024:  # the server stops it long before (64 KiB default)
                s.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
                sent += 1009
        except OSError:
            pass
        answer = _closed_by_server(s)
    # The 431 may be lost to the reset that closing a socket with unread bytes sends.
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:100]
    assert sent < 64 * 1024 * 1024
    assert httpx.get(gw.base_url + "/healthz").status_code == 200
    record("header_flood", bytes_sent_before_close=sent)


# -- paths, encodings, models ---------------------------------------------------------------


def test_trailing_slash_is_served_without_a_redirect(gw: InProcess):
    body = {"model": "gpt-4o", "messages": CHAT, "max_tokens": 5}
    r = httpx.post(
        gw.v1 + "/chat/completions/",
        json=body,
        headers={**AUTH, "host": "evil.example.com"},
        follow_redirects=False,
    )
    assert r.status_code == 200, r.text
    assert "location" not in r.headers
    models = httpx.get(gw.v1 + "/models/", headers=AUTH, follow_redirects=False)
    assert models.status_code == 200 and "location" not in models.headers
    unknown = httpx.get(gw.base_url + "/nowhere/", headers={"host": "evil.example.com"})
    assert unknown.status_code == 404 and "evil" not in unknown.headers.get("location", "")


def _encoded(gw: InProcess, data: bytes, encoding: str) -> httpx.Response:
    headers = {**AUTH, "content-type": "application/json", "content-encoding": encoding}
    return httpx.post(gw.v1 + "/chat/completions", content=data, headers=headers, timeout=30)


def test_gzip_and_deflate_bodies_are_decoded_and_others_refused(gw: InProcess):
    raw = json.dumps({"model": "gpt-4o", "messages": CHAT, "max_tokens": 5}).encode()
    assert _encoded(gw, gzip.compress(raw), "gzip").status_code == 200
    assert _encoded(gw, zlib.compress(raw), "deflate").status_code == 200
    r = _encoded(gw, raw, "br")
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_content_encoding"
    assert "gzip" in r.json()["error"]["message"]
    r = _encoded(gw, gzip.compress(raw)[:-12], "gzip")
    assert r.status_code == 400 and "truncated" in r.json()["error"]["message"]
    for short in (b"x", b"\x08"):  # less than a zlib header: a 400, not a 500
        r = _encoded(gw, short, "deflate")
        assert r.status_code == 400 and "truncated" in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("wrapped", [True, False])
def test_a_deflate_body_arriving_a_byte_at_a_time_is_decoded(wrapped: bool):
    """Whether a deflate body is zlib-wrapped is read from its first two bytes, which may come
    in two pieces."""
    raw = json.dumps({"model": "gpt-4o", "messages": CHAT}).encode()
    if wrapped:
        data = zlib.compress(raw)
    else:
        squeeze = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        data = squeeze.compress(raw) + squeeze.flush()
    decoder = _decoder("deflate")
    assert decoder is not None
    out = b"".join(decoder.decompress(data[i : i + 1], 1 << 20) for i in range(len(data)))
    assert out == raw and decoder.eof


def test_a_zip_bomb_is_refused_without_inflating_it(gw: InProcess):
    # 64 MiB of zeros in ~64 KiB: twice the default body limit once inflated.
    bomb = gzip.compress(b"0" * (64 * 1024 * 1024), compresslevel=9)
    r = _encoded(gw, bomb, "gzip")
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    record("zip_bomb", compressed=len(bomb), inflated=64 * 1024 * 1024, status=r.status_code)


@pytest.mark.parametrize("model", ["gpt-4o", "fast", "claude"])
def test_every_route_answers_with_the_clients_alias(gw: InProcess, fresh_sim, model: str):
    r = _chat(gw, model)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == model
    lines = _stream(gw, model)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert chunks and {c["model"] for c in chunks} == {model}


def test_upstream_reset_mid_stream_ends_with_a_stream_error(gw: InProcess, fresh_sim):
    for model in ("gpt-4o", "claude"):
        fresh_sim.inject("cut-stream:2")
        lines = _stream(gw, model)
        assert lines[-1] != "data: [DONE]"
        error = json.loads(lines[-1].removeprefix("data: "))["error"]
        assert error["code"] == "upstream_error" and error["message"]
    assert _chat(gw).status_code == 200


# -- URL images on litellm routes -----------------------------------------------------------


def _image_chat(gw: InProcess, model: str, url: str) -> httpx.Response:
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 5}
    return httpx.post(gw.v1 + "/chat/completions", json=body, headers=AUTH, timeout=30)


def test_litellm_routes_get_images_from_routefits_fetcher_or_a_400(gw: InProcess, fresh_sim):
    url = fresh_sim.url("/sim/images/64x32.png")
    refused = _image_chat(gw, "claude-closed", url)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "image_url_not_allowed"
    assert error["param"] == "messages[0].content[1].image_url.url"
    assert "messages[0].content[1]" in error["message"]
    assert not fresh_sim.requests(path="/sim/images/64x32.png")  # nobody fetched it
    metadata = _image_chat(gw, "claude", "http://169.254.169.254/latest/meta-data/")
    assert metadata.status_code == 400 and "image_url_not_allowed" in metadata.text
    ok = _image_chat(gw, "claude", url)
    assert ok.status_code == 200, ok.text
    sent = json.dumps(fresh_sim.last_request(path="/v1/messages"))
    assert "/sim/images/" not in sent  # the provider got the bytes, not the URL
    assert "iVBORw0KGgo" in sent  # a PNG's first bytes, base64


# -- readiness with a fail-closed store -----------------------------------------------------


def test_readyz_is_not_ready_while_a_fail_closed_store_is_away(sim, tmp_path: Path):
    with private_redis() as redis:
        config = gateway_config(
            tmp_path / "c.yaml",
            [sim_route("gpt-4o", sim.base_url)],
            redis_url=redis.url,
            budget_failure_mode="closed",
            teams=[_team()],
        )
        with run_inprocess(config) as running:
            assert httpx.get(running.base_url + "/readyz").status_code == 200
            redis.kill()
            r = httpx.get(running.base_url + "/readyz", timeout=10)
            assert r.status_code == 503 and r.json()["checks"]["store"] is False
            redis.start()
            deadline = time.monotonic() + HANG
            while httpx.get(running.base_url + "/readyz", timeout=10).status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.1)


# -- graceful drain -------------------------------------------------------------------------


def _team_used(base_url: str) -> int:
    r = httpx.get(
        f"{base_url}/routefit/teams/{TEAM}/usage",
        headers={"authorization": f"Bearer {ADMIN}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return int({w["name"]: w for w in r.json()["windows"]}["tokens_per_day"]["used"])


def test_sigterm_drains_50_streams_settles_budgets_and_exits_0(sim, tmp_path: Path):
    streams = 50
    store = tmp_path / "store.sqlite3"
    config = gateway_config(
        tmp_path / "c.yaml",
        [sim_route("gpt-4o", sim.base_url)],
        store_path=str(store),
        admin_key=ADMIN,
        teams=[_team(tokens_per_day=10**9)],
    )
    sim.state.config.chunk_delay = 0.1  # ~20 events: each stream lasts a couple of seconds
    results: list[list[str]] = []
    usage: list[int] = []
    started = threading.Barrier(streams + 1, timeout=HANG)
    lock = threading.Lock()

    def one(base_url: str) -> None:
        body = {
            "model": "gpt-4o",
            "messages": CHAT,
            "max_tokens": 20,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        lines: list[str] = []
        with httpx.stream(
            "POST", base_url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60
        ) as r:
            for line in r.iter_lines():
                if line and not lines:
                    started.wait()
                if line:
                    lines.append(line)
        with lock:
            results.append(lines)
            for line in lines:
                if '"usage"' in line and line != "data: [DONE]":
                    u = json.loads(line.removeprefix("data: ")).get("usage")
                    if u:
                        usage.append(u["prompt_tokens"] + u["completion_tokens"])

    try:
        with run_routefit(config, extra_args=["--drain-seconds", "30"]) as running:
            threads = [threading.Thread(target=one, args=(running.base_url,)) for _ in range(50)]
            for t in threads:
                t.start()
            started.wait()  # every stream has its first event
            running.process.send_signal(signal.SIGTERM)
            code = running.process.wait(timeout=60)
            for t in threads:
                t.join(timeout=HANG)
            log = running.log()
    finally:
        sim.state.config.chunk_delay = 0.0
    assert code == 0, log
    assert len(results) == streams
    assert all(lines and lines[-1] == "data: [DONE]" for lines in results)
    assert len(usage) == streams
    assert "Traceback" not in log
    # Budgets settled: the store holds what the provider reported, not the reservations.
    with run_inprocess(config) as again:
        assert _team_used(again.base_url) == sum(usage)
    record("drain", streams=streams, completed=len(results), exit_code=code)


def test_worker_logs_keep_the_routefit_format(sim, tmp_path: Path):
    config = gateway_config(tmp_path / "c.yaml", [sim_route("gpt-4o", sim.base_url)])
    with run_routefit(config, workers=2) as running:
        deadline = time.monotonic() + HANG
        while running.log().count("INFO routefit: routefit ready") < 2:
            assert time.monotonic() < deadline, running.log()
            time.sleep(0.1)
        log = running.log()
    # Open mode (no teams) warns once per worker, in routefit's own format.
    assert log.count("WARNING routefit: no teams configured") == 2, log


def test_spawned_workers_get_the_command_lines_limits(sim, tmp_path: Path):
    """With --workers 2 the limits cross into spawned processes: the header cap inside
    uvicorn's pickled config (the protocol), the body and drain deadlines as the record the
    command hands over (proxy.serve_settings). The defaults (64 KiB, 30 s, 30 s) would fail each
    check: a 3 KB header block waits, a stalled body outlasts HANG, the drain says 30 s."""
    config = gateway_config(tmp_path / "c.yaml", [sim_route("gpt-4o", sim.base_url)])
    args = ["--max-header-bytes", "2048", "--body-timeout", "1", "--body-min-rate", "0"]
    with run_routefit(config, workers=2, extra_args=[*args, "--drain-seconds", "1"]) as running:
        deadline = time.monotonic() + HANG
        while running.log().count("INFO routefit: routefit ready") < 2:
            assert time.monotonic() < deadline, running.log()
            time.sleep(0.1)
        for _ in range(4):  # the kernel spreads the connections over the workers
            with _connect(running) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 3000 + b"\r\n")
                assert _closed_by_server(s).startswith(b"HTTP/1.1 431")
            body = json.dumps({"model": "gpt-4o", "messages": CHAT}).encode()
            with _connect(running) as s:
                s.sendall(_request_head(len(body)) + body[:10])
                assert _closed_by_server(s).startswith(b"HTTP/1.1 408")
        running.process.send_signal(signal.SIGTERM)
        running.process.wait(timeout=HANG)
        log = running.log()
    assert log.count("draining for up to 1 s") == 2, log
    assert "Traceback" not in log, log


def test_work_outliving_the_drain_deadline_ends_cleanly_and_settles_its_budget(
    fresh_sim, tmp_path: Path
):
    sim = fresh_sim
    store = tmp_path / "store.sqlite3"
    config = gateway_config(
        tmp_path / "c.yaml",
        [sim_route("gpt-4o", sim.base_url)],
        store_path=str(store),
        admin_key=ADMIN,
        teams=[_team(tokens_per_day=10**9)],
    )
    sim.state.config.chunk_delay = 1.0  # ~20 events: far longer than the 1 s deadline
    lines: list[str] = []
    first = threading.Event()

    def hold(base_url: str) -> None:
        body = {"model": "gpt-4o", "messages": CHAT, "max_tokens": 20, "stream": True}
        try:
            with httpx.stream(
                "POST", base_url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60
            ) as r:
                for line in r.iter_lines():
                    if line:
                        lines.append(line)
                        first.set()
        except httpx.HTTPError:
            pass  # the connection was cut

    answers: list[httpx.Response] = []

    def wait_long(base_url: str) -> None:
        sim.inject("delay:30")
        body = {"model": "gpt-4o", "messages": CHAT, "max_tokens": 20}
        url = base_url + "/v1/chat/completions"
        answers.append(httpx.post(url, json=body, headers=AUTH, timeout=60))

    # The worker's counters outlive it as prometheus_client's multiprocess files.
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    try:
        with run_routefit(config, env=env, extra_args=["--drain-seconds", "1"]) as running:
            holder = threading.Thread(target=hold, args=(running.base_url,))
            holder.start()
            assert first.wait(HANG)
            waiter = threading.Thread(target=wait_long, args=(running.base_url,))
            waiter.start()
            deadline = time.monotonic() + HANG
            while len(sim.requests(path="/v1/chat/completions")) < 2:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            running.process.send_signal(signal.SIGTERM)
            code = running.process.wait(timeout=HANG)
            holder.join(timeout=HANG)
            waiter.join(timeout=HANG)
            log = running.log()
    finally:
        sim.state.config.chunk_delay = 0.0
    assert code == 0, log
    assert lines and lines[-1] != "data: [DONE]"
    error = json.loads(lines[-1].removeprefix("data: "))["error"]  # a well-formed ending
    assert error["code"] == "upstream_error"
    # The request still waiting for its provider: a 503 it may retry elsewhere.
    assert [a.status_code for a in answers] == [503]
    assert answers[0].json()["error"]["code"] == "shutting_down"
    assert "Traceback" not in log, log
    # The stream the drain cut is counted with the disconnects (499), not as the provider's
    # failure (502): the provider did nothing wrong.
    counted = _counters(metrics_dir)
    assert counted.get(("routefit_requests_total", "499")) == 1, counted
    assert ("routefit_requests_total", "502") not in counted, counted
    assert counted.get(("routefit_errors_total", "disconnect")) == 1, counted
    assert ("routefit_errors_total", "upstream") not in counted, counted
    with run_inprocess(config) as again:
        # Settled, not left reserved: both requests had reached the provider, so each is
        # charged its prompt (and the stream what it relayed), never its 20-token output reserve
        # (docs/security.md "Charging on every exit").
        charged = _team_used(again.base_url)
        assert 0 < charged < 2 * 20, charged


def _counters(metrics_dir: Path) -> dict[tuple[str, str], float]:
    """(sample, status or kind) → value of the request and error counters a worker left."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    found: dict[tuple[str, str], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            label = sample.labels.get("status") or sample.labels.get("kind")
            if sample.name in ("routefit_requests_total", "routefit_errors_total") and label:
                found[(sample.name, label)] = sample.value
    return found


def test_connections_beyond_the_limit_get_503_until_slots_free(sim, tmp_path: Path):
    config = gateway_config(tmp_path / "c.yaml", [sim_route("gpt-4o", sim.base_url)])
    args = ["--max-connections", "4", "--header-timeout", "2"]
    # --max-connections and --header-timeout are serve's flags: the real process.
    with run_routefit(config, extra_args=args) as running:
        host, port = running.base_url.removeprefix("http://").split(":")
        idle = [socket.create_connection((host, int(port)), timeout=HANG) for _ in range(4)]
        try:
            for s in idle:
                s.sendall(b"GET /hea")  # holding a slot, headers unfinished
            time.sleep(0.2)
            refused = httpx.get(running.base_url + "/healthz")
            assert refused.status_code == 503
            for s in idle:
                assert _closed_by_server(s) == b""  # the header deadline frees the slots
        finally:
            for s in idle:
                s.close()
        assert httpx.get(running.base_url + "/healthz").status_code == 200
