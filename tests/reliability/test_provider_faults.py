"""Provider faults from the simulator: clear errors for clients, bounded retries before the first
byte, budgets released on failure, and no leaked connections, tasks or file descriptors.

Two gateways in front of the simulator: ``plain`` (no retries, the default; a ``routefit serve``
process, whose descriptors and threads are counted) and ``retry`` (``upstream_retries: 3``,
in-process). Faults are queued in the simulator (``sim.inject``),
so they hit exactly the upstream requests routefit makes.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
import pytest
from harness import gateway_config, run_routefit, sim_route
from inprocess import run_inprocess
from relkit import Proc, check_error_shape, metric, record, tasks

ADMIN = "sk-admin-" + uuid.uuid4().hex
KEY = "sk-team-" + uuid.uuid4().hex
TEAM = "faults"
AUTH = {"authorization": f"Bearer {KEY}"}
CHAT = [{"role": "user", "content": "tell me about faults"}]


class RetryAfter(BaseHTTPRequestHandler):
    """A provider whose first answer per model is a 429 with the Retry-After the model names
    (``ra-7``: ``Retry-After: 7``; ``ra-ms-300``: ``retry-after-ms: 300``; ``ra-date``: an
    HTTP date one second ahead); the next answer is a completion."""

    seen: Counter[str] = Counter()  # noqa: RUF012 - shared on purpose

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        model = body["model"]
        RetryAfter.seen[model] += 1
        if RetryAfter.seen[model] % 2 == 1:
            data = json.dumps({"error": {"message": "slow down", "type": "rate_limit"}}).encode()
            self.send_response(429)
            if model.startswith("ra-ms-"):
                self.send_header("retry-after-ms", model.removeprefix("ra-ms-"))
            elif model == "ra-date":
                self.send_header("retry-after", formatdate(time.time() + 1, usegmt=True))
            else:
                self.send_header("retry-after", model.removeprefix("ra-"))
        else:
            message = {"role": "assistant", "content": "ok"}
            usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
            data = json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": model,
                    "usage": usage,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                }
            ).encode()
            self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def retry_after_provider() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), RetryAfter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _config(sim, path, retries: int, litellm: bool = False, fake: str | None = None):
    url = sim.base_url
    routes = [
        sim_route("gpt-4o", url),
        sim_route("slow", url, "gpt-4o", upstream_timeout=1.0),
    ]
    for model in ("ra-7", "ra-ms-300", "ra-date", "ra-0.4"):
        if fake:
            routes.append(
                {
                    "model_name": model,
                    "litellm_params": {"model": f"openai/{model}", "api_base": fake},
                }
            )
    if litellm:
        routes.append(
            {
                "model_name": "claude",
                "litellm_params": {
                    "model": "anthropic/claude-sonnet-4-5",
                    "api_base": url,
                    "api_key": "sk-ant-sim",
                },
            }
        )
    return gateway_config(
        path,
        routes,
        admin_key=ADMIN,
        upstream_retries=retries,
        teams=[
            {
                "id": TEAM,
                "keys": [KEY],
                "quotas": {"tokens_per_minute": 1_000_000_000, "tokens_per_day": 10**10},
            }
        ],
    )


@pytest.fixture(scope="module")
def plain(sim, tmp_path_factory):
    # Its descriptors, threads and memory are measured (Proc): a process of its own.
    with run_routefit(_config(sim, tmp_path_factory.mktemp("plain") / "c.yaml", 0)) as gw:
        yield gw


@pytest.fixture(scope="module")
def retry(sim, tmp_path_factory, retry_after_provider):
    path = tmp_path_factory.mktemp("retry") / "c.yaml"
    config = _config(sim, path, 3, litellm=True, fake=retry_after_provider)
    with run_inprocess(config) as gw:
        yield gw


def used(gw) -> int:
    r = httpx.get(
        f"{gw.base_url}/routefit/teams/{TEAM}/usage",
        headers={"authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 200, r.text
    # The day window: a minute window may roll over between two reads of a slow test.
    return {w["name"]: w for w in r.json()["windows"]}["tokens_per_day"]["used"]


def chat(gw, model: str = "gpt-4o", **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": CHAT, "max_tokens": 30, **extra}
    return httpx.post(gw.v1 + "/chat/completions", json=body, headers=AUTH, timeout=30)


def stream_lines(gw, model: str = "gpt-4o", **extra: Any) -> tuple[int, list[str], bytes]:
    body = {"model": model, "messages": CHAT, "max_tokens": 30, "stream": True, **extra}
    with httpx.stream(
        "POST", gw.v1 + "/chat/completions", json=body, headers=AUTH, timeout=30
    ) as r:
        if r.status_code != 200:
            return r.status_code, [], r.read()
        return 200, [line for line in r.iter_lines() if line], b""


def upstream_requests(sim) -> int:
    return int(sim.stats()["by_path"].get("/v1/chat/completions", 0))


# -- clear errors, budgets released (no retries) ------------------------------------------------

FAULTS = [
    # fault, model, status, code (None: the provider's)
    ("status:429", "gpt-4o", 429, None),
    ("status:500", "gpt-4o", 500, None),
    ("status:502", "gpt-4o", 502, None),
    ("status:503", "gpt-4o", 503, None),
    ("status:504", "gpt-4o", 504, None),
    ("reset", "gpt-4o", 502, "upstream_unreachable"),
    ("malformed", "gpt-4o", 502, "upstream_malformed"),
    ("cut-stream:0", "gpt-4o", 502, "upstream_incomplete"),
    ("delay:3", "slow", 504, "upstream_timeout"),
]


@pytest.mark.parametrize(("fault", "model", "status", "code"), FAULTS)
def test_each_fault_is_a_clear_error_and_releases_the_budget(
    plain, fresh_sim, fault, model, status, code
):
    before = used(plain)
    fresh_sim.inject(fault)
    r = chat(plain, model)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert "Traceback" not in r.text
    if code:
        assert err["code"] == code
    if status == 429:
        assert r.headers["retry-after"] == "1"
    assert_settled(plain, before, code)
    assert upstream_requests(fresh_sim) == 1  # no retries by default
    released = code not in MAY_BE_BILLED
    record("fault", fault=fault, status=r.status_code, code=err["code"], budget_released=released)
    # and the same fault on a stream, before its first byte: the same clear error
    if fault.startswith("cut-stream") or fault == "malformed":
        return  # on streams these are not failures before the first byte: tested below
    before = used(plain)
    fresh_sim.inject(fault)
    got, lines, body = stream_lines(plain, model)
    assert got == status, (got, lines)
    assert json.loads(body)["error"]["message"]
    assert_settled(plain, before, code)


#: Failures after which the provider may have processed (and billed) the prompt: it stays
#: charged (docs/security.md "Charging on every exit"); a refusal or an unreachable provider
#: releases the reservation.
MAY_BE_BILLED = frozenset({"upstream_malformed", "upstream_incomplete", "upstream_timeout"})


def assert_settled(gw, before: int, code: str | None) -> None:
    deadline = time.monotonic() + 5  # a stream settles once its last byte went out
    while (charged := used(gw) - before) >= 30 and time.monotonic() < deadline:
        time.sleep(0.02)
    if code in MAY_BE_BILLED:
        assert 0 < charged < 30, charged  # the prompt, not the output reserve (max_tokens 30)
    else:
        assert charged == 0  # the reservation was released


def test_a_stream_cut_midway_ends_with_an_error_event_and_charges_the_prompt(plain, fresh_sim):
    before = used(plain)
    fresh_sim.inject("cut-stream:3")
    status, lines, _ = stream_lines(plain)
    assert status == 200
    assert lines[-1] != "data: [DONE]"
    error = json.loads(lines[-1].removeprefix("data: "))["error"]
    assert error["code"] == "upstream_error" and "before it was complete" in error["message"]
    assert_settled(plain, before, "upstream_incomplete")
    with pytest.raises(openai.APIError):  # the SDK surfaces it as an error, not a short answer
        client = openai.OpenAI(base_url=plain.v1, api_key=KEY, max_retries=0)
        fresh_sim.inject("cut-stream:2")
        for _ in client.chat.completions.create(model="gpt-4o", messages=CHAT, stream=True):
            pass


def test_a_malformed_stream_event_is_relayed_and_the_stream_still_settles(plain, fresh_sim):
    before = used(plain)
    fresh_sim.inject("malformed")
    status, lines, _ = stream_lines(plain, stream_options={"include_usage": True})
    assert status == 200 and lines[-1] == "data: [DONE]"
    usage = json.loads(lines[-2].removeprefix("data: "))["usage"]
    assert used(plain) - before == usage["prompt_tokens"] + usage["completion_tokens"]


def test_missing_usage_keeps_the_reservation_conservatively(plain, fresh_sim):
    for stream in (False, True):
        before = used(plain)
        fresh_sim.inject("no-usage")
        if stream:
            status, lines, _ = stream_lines(plain)
            assert status == 200 and lines[-1] == "data: [DONE]"
        else:
            r = chat(plain)
            assert r.status_code == 200 and "usage" not in r.json()
        # served, cost unknown: the reservation (prompt estimate + max_tokens) stays charged
        assert used(plain) - before >= 30


# -- retries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["status:429", "status:502", "status:503", "status:504", "reset"])
@pytest.mark.parametrize("stream", [False, True])
def test_transient_failures_are_retried_before_the_first_byte(retry, fresh_sim, fault, stream):
    before = used(retry)
    fresh_sim.inject(fault)
    started = time.monotonic()
    if stream:
        status, lines, _ = stream_lines(retry)
        assert status == 200 and lines[-1] == "data: [DONE]"
    else:
        r = chat(retry)
        assert r.status_code == 200, r.text
    elapsed = time.monotonic() - started
    assert upstream_requests(fresh_sim) == 2
    if fault == "status:429":
        assert elapsed >= 1.0  # the provider's Retry-After (1 s) was honoured
    assert used(retry) > before  # settled to the usage of the attempt that succeeded
    record("retried", fault=fault, stream=stream, attempts=2, elapsed_s=round(elapsed, 3))
    reason = "upstream_unreachable" if fault == "reset" else fault.split(":")[1]
    text = httpx.get(retry.base_url + "/metrics").text
    assert metric(text, "routefit_upstream_retries_total", reason=reason) >= 1


@pytest.mark.parametrize(
    ("model", "status", "attempts", "least"),
    [
        ("ra-0.4", 200, 2, 0.4),  # a short Retry-After is honoured
        ("ra-ms-300", 200, 2, 0.3),  # retry-after-ms (OpenAI) too
        ("ra-date", 200, 2, 0.0),  # an HTTP date (whole seconds)
        ("ra-7", 429, 1, 0.0),  # a long one is the client's to honour: passed on, one attempt
    ],
)
def test_retry_after_is_honoured_when_short_and_passed_on_when_long(
    retry, model, status, attempts, least
):
    RetryAfter.seen.clear()
    started = time.monotonic()
    r = chat(retry, model)
    elapsed = time.monotonic() - started
    assert r.status_code == status, r.text
    assert RetryAfter.seen[model] == attempts
    assert least <= elapsed, elapsed  # a waited Retry-After cannot take less than it says
    if status == 429:
        assert r.headers["retry-after"] == "7"
    record(
        "retry_after", model=model, status=status, attempts=attempts, elapsed_s=round(elapsed, 3)
    )


def test_backoff_grows_exponentially_within_bounds(retry, fresh_sim):
    fresh_sim.inject("status:503", count=3)
    started = time.monotonic()
    r = chat(retry)
    elapsed = time.monotonic() - started
    assert r.status_code == 200
    assert upstream_requests(fresh_sim) == 4
    # waits of 0.1·2^k·(1 - 0.5·u) for k = 0, 1, 2: at least 0.35 s in all (the sleeps alone)
    assert elapsed >= 0.35, elapsed
    record("retry_backoff", attempts=4, elapsed_s=round(elapsed, 3), bounds_s=[0.35, 0.7])


def test_retries_are_bounded_and_then_the_error_is_the_providers(retry, fresh_sim):
    before = used(retry)
    fresh_sim.inject("status:503", count=10)
    r = chat(retry)
    assert r.status_code == 503 and r.json()["error"]["message"]
    assert upstream_requests(fresh_sim) == 4  # 1 + upstream_retries
    assert used(retry) == before
    fresh_sim.reset()


@pytest.mark.parametrize(
    ("fault", "model", "status"),
    [
        ("status:500", "gpt-4o", 500),
        ("status:400", "gpt-4o", 400),
        ("status:401", "gpt-4o", 502),  # the provider refused routefit's key: its fault
        ("malformed", "gpt-4o", 502),
        ("cut-stream:0", "gpt-4o", 502),
        ("delay:3", "slow", 504),
    ],
)
def test_failures_that_may_have_been_processed_are_not_retried(
    retry, fresh_sim, fault, model, status
):
    fresh_sim.inject(fault, count=5)
    r = chat(retry, model)
    assert r.status_code == status, r.text
    assert upstream_requests(fresh_sim) == 1
    record("not_retried", fault=fault, status=status, attempts=1)
    fresh_sim.reset()


def test_a_stream_is_never_retried_once_bytes_reached_the_client(retry, fresh_sim):
    before = used(retry)
    fresh_sim.inject("cut-stream:2", count=5)
    status, lines, _ = stream_lines(retry)
    assert status == 200 and "error" in lines[-1]
    assert upstream_requests(fresh_sim) == 1
    assert_settled(retry, before, "upstream_incomplete")  # charged once, for one attempt
    fresh_sim.reset()


def test_litellm_transport_retries_too(retry, fresh_sim):
    fresh_sim.inject("status:503", path="/v1/messages")
    r = chat(retry, "claude")
    assert r.status_code == 200, r.text
    assert fresh_sim.stats()["by_path"]["/v1/messages"] == 2


def test_a_client_leaving_a_litellm_stream_closes_the_providers_stream(retry, fresh_sim):
    fresh_sim.state.config.chunk_delay = 0.2
    body = {"model": "claude", "stream": True, "max_tokens": 300, "messages": CHAT}
    with httpx.stream(
        "POST", retry.v1 + "/chat/completions", json=body, headers=AUTH, timeout=30
    ) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        next(lines)
    stats = fresh_sim.wait_for(lambda s: s["streams_open"] == 0, timeout=5)
    assert stats["streams_cancelled"] == 1 and stats["streams_completed"] == 0


# -- no leaks -----------------------------------------------------------------------------------

BARRAGE_FAULTS = [
    "status:429",
    "status:500",
    "status:502",
    "status:503",
    "reset",
    "malformed",
    "cut-stream:0",
    "cut-stream:2",
    "cut-stream:5",
    "no-usage",
    "delay:0.3",
    "delay:1",
    None,
    None,
]


def barrage(gw, sim, n: int, rng: random.Random) -> dict[str, Any]:
    """``n`` concurrent requests (streams and not), each meeting a queued fault; some clients
    disconnect mid-stream or give up before the answer."""
    plan = [rng.choice(BARRAGE_FAULTS) for _ in range(n)]
    rules = [{"fault": f, "path": "/v1/chat/completions"} for f in plan if f]
    httpx.post(sim.url("/sim/faults"), json={"faults": rules, "replace": True}).raise_for_status()
    outcomes = asyncio.run(_barrage(gw, n, rng))
    return {"faults": Counter(f or "none" for f in plan), "outcomes": outcomes}


async def _barrage(gw, n: int, rng: random.Random) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    gate = asyncio.Semaphore(12)
    async with httpx.AsyncClient(timeout=30, headers=AUTH) as client:

        async def one(i: int) -> None:
            stream = i % 2 == 0
            leave = rng.random() < 0.15
            impatient = rng.random() < 0.1
            body = {"model": "gpt-4o", "messages": CHAT, "max_tokens": 40, "stream": stream}
            async with gate:
                try:
                    if stream:
                        async with client.stream(
                            "POST", gw.v1 + "/chat/completions", json=body
                        ) as r:
                            if r.status_code != 200:
                                content = await r.aread()
                                check_error_shape(r.status_code, content, allow_5xx=True)
                                outcomes[f"stream {r.status_code}"] += 1
                                return
                            async for line in r.aiter_lines():
                                if leave:
                                    outcomes["stream left by client"] += 1
                                    return
                                if line.startswith('data: {"error"'):
                                    outcomes["stream error event"] += 1
                                    return
                            outcomes["stream 200"] += 1
                    else:
                        r = await client.post(
                            gw.v1 + "/chat/completions",
                            json=body,
                            timeout=0.2 if impatient else 30,
                        )
                        check_error_shape(r.status_code, r.content, allow_5xx=True)
                        outcomes[f"{r.status_code}"] += 1
                except httpx.TimeoutException:
                    outcomes["client gave up"] += 1

        await asyncio.gather(*(one(i) for i in range(n)))
    return outcomes


def _quiet(gw, sim) -> dict[str, Any]:
    stats = sim.wait_for(lambda s: s["in_flight"] == 0 and s["streams_open"] == 0, timeout=15)
    time.sleep(0.3)  # let routefit finish its bookkeeping (settle, calibration queue)
    proc = Proc(gw.process.pid)
    return {
        "fds": proc.fds(),
        "tasks": tasks(gw.base_url),
        "threads": proc.threads(),
        "rss_mb": round(proc.rss() / 2**20, 1),
        "sim_connections_open": stats["connections_open"],
        "sim_streams_open": stats["streams_open"],
    }


def test_fault_barrage_leaks_no_connection_task_or_descriptor(plain, fresh_sim):
    rng = random.Random(20240611)
    barrage(plain, fresh_sim, 60, random.Random(1))  # warm-up: pools fill
    baseline = _quiet(plain, fresh_sim)
    budget_before = used(plain)
    rounds = []
    for _ in range(2):
        rounds.append(barrage(plain, fresh_sim, 150, rng))
        rounds.append(_quiet(plain, fresh_sim))
    first, second = rounds[1], rounds[3]
    faults = rounds[0]["faults"] + rounds[2]["faults"]
    outcomes = rounds[0]["outcomes"] + rounds[2]["outcomes"]
    record(
        "fault_barrage",
        requests=300,
        faults=dict(faults),
        outcomes=dict(outcomes),
        baseline=baseline,
        after_round_1=first,
        after_round_2=second,
        budget_charged_by_no_usage=used(plain) - budget_before,
    )
    assert outcomes["200"] + outcomes["stream 200"] > 0
    assert second["sim_streams_open"] == 0
    # a pooled keep-alive connection may be opened or closed; a leak grows every round
    assert second["fds"] <= baseline["fds"] + 4, (baseline, first, second)
    assert second["fds"] <= first["fds"] + 2, (baseline, first, second)
    assert second["tasks"] <= baseline["tasks"] + 1, (baseline, second)
    assert second["threads"] <= baseline["threads"] + 2, (baseline, second)
    assert second["sim_connections_open"] <= baseline["sim_connections_open"] + 12
    assert "Traceback" not in plain.log()
