"""Several deployments per model, end to end (issue 29): the gateway in process
(``run_inprocess``: real HTTP to routefit) over the mock transport, whose handler is a set of
fake providers, one per deployment (told apart by their API base's host), scripted to fail the
ways providers do — a 500, a 429 with ``retry-after``, Anthropic's 529 "overloaded", a
connection reset before the first byte, a stall, a 401 — and otherwise answered by the provider
simulator (``proxy.sim``), which refuses any prompt over its model's real window.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimState
from proxy.transports.mock import MockTransport, asgi_handler
from tests.inprocess import InProcess, run_inprocess

CHAT = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 20}


class Providers:
    """Fake providers by host: ``fail[host]`` names how that host fails (None: it answers, by
    the simulator); ``hits`` counts the requests each host received."""

    def __init__(self) -> None:
        self.sim = asgi_handler(create_sim(SimState()))
        self.fail: dict[str, str | None] = {}
        self.hits: Counter[str] = Counter()
        #: Statuses the providers answered, in order (a simulator overflow is a 400).
        self.statuses: list[int] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.hits[host] += 1
        response = await self._answer(host, request)
        self.statuses.append(response.status_code)
        return response

    async def _answer(self, host: str, request: httpx.Request) -> httpx.Response:
        how = self.fail.get(host)
        if how is None:
            return await self.sim(request)
        if how == "500":
            return httpx.Response(500, json={"error": {"message": "internal error"}})
        if how == "429":
            # no retry-after: one would cool the deployment that long at once (the count of
            # failures before a cooldown is what this fault is for)
            return httpx.Response(429, json={"error": {"message": "slow down"}})
        if how == "429-1s":
            return httpx.Response(
                429, headers={"retry-after": "1"}, json={"error": {"message": "slow down"}}
            )
        if how == "529":
            body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            return httpx.Response(529, json=body)
        if how == "401":
            key = request.headers.get("authorization", "")
            return httpx.Response(
                401, json={"error": {"message": f"Incorrect API key provided: {key[7:]}"}}
            )
        if how == "reset":
            raise httpx.ReadError("connection reset by peer")
        if how == "stall":
            raise httpx.ReadTimeout("no answer within the timeout")
        if how == "reset-after-first-byte":
            answer = await self.sim(request)
            await answer.aread()
            return httpx.Response(200, headers=answer.headers, stream=_FirstEventThenReset(answer))
        raise AssertionError(how)


class _FirstEventThenReset(httpx.AsyncByteStream):
    def __init__(self, answer: httpx.Response) -> None:
        self.answer = answer

    async def __aiter__(self) -> AsyncIterator[bytes]:
        body = self.answer.content
        yield body[: body.index(b"\n\n") + 2]
        raise httpx.ReadError("connection reset by peer")


def deployment(host: str, alias: str = "chat", model: str = "openai/gpt-4o", **extra: Any) -> Any:
    entry: dict[str, Any] = {
        "model_name": alias,
        "litellm_params": {
            "model": model,
            "api_base": f"http://{host}/v1",
            "api_key": f"sk-{host}-secret-key-0123456789",
        },
        "model_info": {"id": host},
    }
    for key, value in extra.items():
        block = "litellm_params" if key == "weight" else "model_info"
        entry[block][key] = value
    return entry


def write_config(tmp_path: Path, models: list[Any], router: Any = None, **settings: Any) -> Path:
    data: dict[str, Any] = {"model_list": models, "routefit_settings": settings}
    if router is not None:
        data["router_settings"] = router
    path = tmp_path / f"routefit-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def serve(config: Path, providers: Providers) -> Any:
    return run_inprocess(config, provider=lambda _: {"transport": MockTransport(providers)})


def sample(metrics: str, name: str, **labels: str) -> float | None:
    """The value of ``name``'s sample with ``labels`` (and route ``chat``) in /metrics text."""
    wanted = {"route": "chat", **labels}
    for family in text_string_to_metric_families(metrics):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in wanted.items()):
                return float(s.value)
    return None


def post(gw: InProcess, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return httpx.post(f"{gw.v1}/chat/completions", json=body, **{"timeout": 30, **kw})


#: The first deployment is (all but surely) ranked first by simple-shuffle.
PRIMARY = {"weight": 1_000_000}


@pytest.fixture
def providers() -> Providers:
    return Providers()


@pytest.mark.parametrize("how", ["500", "429", "529", "reset", "stall"])
def test_a_failing_primary_fails_over_to_the_healthy_deployment(
    tmp_path: Path, providers: Providers, how: str
) -> None:
    """Issue 29's report: two entries of one model_name, the first failing — 6 of 6 answered
    500. Now every request is answered by the healthy one, and the response says so."""
    providers.fail["primary.test"] = how
    config = write_config(
        tmp_path, [deployment("primary.test", **PRIMARY), deployment("backup.test")]
    )
    with serve(config, providers) as gw:
        answers = [post(gw, {"model": "chat", **CHAT}) for _ in range(6)]
        metrics = httpx.get(f"{gw.base_url}/metrics").text
        log = gw.log()
    assert [r.status_code for r in answers] == [200] * 6, answers[-1].text
    assert {r.headers["x-routefit-deployment"] for r in answers} == {"backup.test"}
    # the primary failed 4 times (allowed_fails 3, then a cooldown), then was skipped
    attempts = [int(r.headers["x-routefit-attempts"]) for r in answers]
    assert attempts == [2, 2, 2, 2, 1, 1]
    assert providers.hits["primary.test"] == 4 and providers.hits["backup.test"] == 6
    kind = {"500": "server", "429": "rate_limit", "529": "server"}.get(how)
    kind = kind or {"reset": "connection", "stall": "timeout"}[how]
    assert re.search(
        r"INFO routefit.routing: routing chat: attempt 2 on backup.test \(retry\) after "
        + kind
        + " on primary.test",
        log,
    ), log
    assert "primary.test cooled down for 5s" in log
    attempts_total = "routefit_deployment_attempts_total"
    assert sample(metrics, attempts_total, deployment="primary.test", outcome=kind) == 4
    assert sample(metrics, attempts_total, deployment="backup.test", outcome="ok") == 6
    assert sample(metrics, "routefit_deployment_cooldowns_total", deployment="primary.test") == 1
    latency = "routefit_deployment_latency_seconds_count"
    assert sample(metrics, latency, deployment="backup.test") == 6
    assert sample(metrics, latency, deployment="primary.test") is None


def test_a_deployment_without_its_provider_key_is_skipped_for_one_that_has_its_own(
    tmp_path: Path, providers: Providers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each deployment has its own key: the first-ranked one's variable is unset, so the
    request goes to the one whose key is there — never keyless to a provider; with no such
    deployment left, the operator's error (503 provider_key_missing) is the answer."""
    monkeypatch.delenv("ROUTEFIT_TEST_UNSET_KEY", raising=False)
    keyless = deployment("keyless.test", **PRIMARY)
    keyless["litellm_params"]["api_key"] = "os.environ/ROUTEFIT_TEST_UNSET_KEY"
    with serve(write_config(tmp_path, [keyless, deployment("keyed.test")]), providers) as gw:
        answer = post(gw, {"model": "chat", **CHAT})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-routefit-deployment"] == "keyed.test"
    assert answer.headers["x-routefit-attempts"] == "1"
    assert providers.hits["keyless.test"] == 0
    with serve(write_config(tmp_path, [keyless]), providers) as gw:
        refused = post(gw, {"model": "chat", **CHAT})
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "provider_key_missing"
    assert "ROUTEFIT_TEST_UNSET_KEY" in refused.json()["error"]["message"]
    assert providers.hits["keyless.test"] == 0


def test_the_request_log_names_the_answering_deployment_and_the_attempts(
    tmp_path: Path, providers: Providers
) -> None:
    providers.fail["primary.test"] = "500"
    config = write_config(
        tmp_path, [deployment("primary.test", **PRIMARY), deployment("backup.test")]
    )
    with run_inprocess(
        config, provider=lambda _: {"transport": MockTransport(providers)}, access_log=True
    ) as gw:
        answer = post(gw, {"model": "chat", **CHAT})
        deadline = time.monotonic() + 10
        while '"attempts":' not in gw.log() and time.monotonic() < deadline:
            time.sleep(0.02)  # the line is written after the response
        lines = [
            json.loads(line[line.index("{") :])
            for line in gw.log().splitlines()
            if '"attempts":' in line
        ]
    assert answer.status_code == 200 and answer.headers["x-routefit-attempts"] == "2"
    [record] = lines
    assert record["deployment"] == "backup.test" and record["attempts"] == 2
    assert record["status"] == 200


@pytest.mark.parametrize("header", ["x-stainless-timeout", "x-litellm-timeout"])
def test_a_retry_the_client_would_not_wait_for_is_not_made(
    tmp_path: Path, providers: Providers, header: str
) -> None:
    """One deployment, asked to wait a second before its retry: a client that says it gives
    up in half a second gets the provider's 429 at once (one attempt); one that waits half a
    minute gets the retry, after the wait."""
    providers.fail["only.test"] = "429-1s"
    config = write_config(tmp_path, [deployment("only.test")], {"num_retries": 1})
    with serve(config, providers) as gw:
        hurried = post(gw, {"model": "chat", **CHAT}, headers={header: "0.5"})
        hurried_hits = providers.hits["only.test"]
        patient = post(gw, {"model": "chat", **CHAT}, headers={header: "30"})
        log = gw.log()
    assert hurried.status_code == 429 and patient.status_code == 429
    assert hurried_hits == 1  # no retry: the client would be gone before it
    assert providers.hits["only.test"] == 3  # the patient one was retried once
    assert re.search(r"not retrying only.test after rate_limit .* \(0\.\d+s left\)", log), log


def test_a_deployment_retried_after_another_waits_for_its_own_retry_after(
    tmp_path: Path, providers: Providers
) -> None:
    """Two deployments, each answering 429 with ``retry-after: 1``, and two retries: the
    third attempt goes back to the first deployment, which asked for a second. It was sent
    again at once (a few milliseconds after its 429, while it was cooling down for that
    second), a provider call sure to be refused; it waits for its own retry-after now."""
    providers.fail["one.test"] = providers.fail["two.test"] = "429-1s"
    models = [deployment("one.test", **PRIMARY), deployment("two.test")]
    with serve(write_config(tmp_path, models, {"num_retries": 2}), providers) as gw:
        started = time.monotonic()
        answer = post(gw, {"model": "chat", **CHAT})
        took = time.monotonic() - started
        log = gw.log()
    assert answer.status_code == 429 and answer.headers["x-routefit-attempts"] == "3"
    assert answer.headers["x-routefit-deployment"] == "one.test"
    assert providers.hits == Counter({"one.test": 2, "two.test": 1})
    assert took >= 0.9, (took, log)
    waited = r"attempt 3 on one.test \(retry\) after rate_limit on two.test.*waiting (0\.9|1\.0)"
    assert re.search(waited, log), log


@pytest.mark.parametrize("stream", [False, True])
def test_a_retry_the_client_would_not_wait_for_leaves_the_fallbacks_to_answer(
    tmp_path: Path, providers: Providers, stream: bool
) -> None:
    """One deployment answering 429 with ``retry-after: 1``, a fallback alias that answers,
    and a client that gives up in half a second: the retry on the same deployment is not
    waited for — and the fallback answers, at once. The request used to end there, the
    provider's 429 the answer while a fallback that could answer was never tried."""
    providers.fail["only.test"] = "429-1s"
    models = [deployment("only.test"), deployment("backup.test", alias="backup")]
    router = {"num_retries": 1, "fallbacks": [{"chat": ["backup"]}]}
    body = {"model": "chat", "stream": stream, **CHAT}
    with serve(write_config(tmp_path, models, router), providers) as gw:
        answer = post(gw, body, headers={"x-stainless-timeout": "0.5"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-routefit-deployment"] == "backup.test"
    assert answer.headers["x-routefit-attempts"] == "2"
    assert providers.hits == Counter({"only.test": 1, "backup.test": 1})


def test_a_client_that_leaves_during_a_retry_s_backoff_gets_no_further_attempt(
    tmp_path: Path, providers: Providers
) -> None:
    """One deployment, a 429 asking for a second before its retry, and a client that hangs up
    after a third of it: the wait ended with the client (nothing more is sent for nobody), and
    nothing is charged. The backoff used to sleep on, then send the retry to the provider for a
    client long gone."""
    providers.fail["only.test"] = "429-1s"
    team = {"id": "t", "keys": ["sk-team-t"], "quotas": {"tokens_per_day": 1_000_000}}
    key = {"authorization": "Bearer sk-team-t"}
    config = write_config(tmp_path, [deployment("only.test")], {"num_retries": 1}, teams=[team])
    with serve(config, providers) as gw:
        with pytest.raises(httpx.TimeoutException):
            post(gw, {"model": "chat", **CHAT}, headers=key, timeout=0.3)
        time.sleep(1.5)  # past the backoff: a retry would have been sent by now
        used = httpx.get(f"{gw.base_url}/routefit/teams/t/usage", headers=key).json()
        log = gw.log()
    assert providers.hits["only.test"] == 1, log
    assert {w["name"]: w["used"] for w in used["windows"]}["tokens_per_day"] == 0


def test_a_stream_fails_over_before_its_first_byte_but_never_after(
    tmp_path: Path, providers: Providers
) -> None:
    config = write_config(
        tmp_path, [deployment("primary.test", **PRIMARY), deployment("backup.test")]
    )
    body = {"model": "chat", "stream": True, **CHAT}
    with serve(config, providers) as gw:
        providers.fail["primary.test"] = "reset"
        before = post(gw, body)
        assert before.status_code == 200
        assert before.headers["x-routefit-deployment"] == "backup.test"
        assert before.headers["x-routefit-attempts"] == "2"
        assert b"data: [DONE]" in before.content
        providers.fail["primary.test"] = "reset-after-first-byte"
        hits = providers.hits["backup.test"]
        after = post(gw, body)
    # a byte reached the client: the stream ends in an error, on the primary, never retried
    assert after.status_code == 200
    assert after.headers["x-routefit-deployment"] == "primary.test"
    assert after.headers["x-routefit-attempts"] == "1"
    assert b"data: [DONE]" not in after.content and b"error" in after.content
    assert providers.hits["backup.test"] == hits


def test_a_cooled_down_deployment_is_skipped_and_when_all_are_the_soonest_back_is_tried(
    tmp_path: Path, providers: Providers
) -> None:
    router = {"allowed_fails": 0, "cooldown_time": 60, "num_retries": 0}
    models = [deployment("one.test", **PRIMARY), deployment("two.test")]
    with serve(write_config(tmp_path, models, router), providers) as gw:
        providers.fail["one.test"] = "500"
        assert post(gw, {"model": "chat", **CHAT}).status_code == 500  # no retries asked for
        skipped = post(gw, {"model": "chat", **CHAT})
        assert skipped.status_code == 200
        assert skipped.headers["x-routefit-deployment"] == "two.test"
        assert providers.hits["one.test"] == 1
        time.sleep(0.05)  # two.test's cooldown ends strictly after one.test's
        providers.fail["two.test"] = "500"
        assert post(gw, {"model": "chat", **CHAT}).status_code == 500
        providers.fail["one.test"] = None
        # both cooling down: no outage — the one whose cooldown ends first is tried first
        back = post(gw, {"model": "chat", **CHAT})
    assert back.status_code == 200
    assert back.headers["x-routefit-deployment"] == "one.test"
    assert back.headers["x-routefit-attempts"] == "1"


def test_a_provider_refusing_routefit_s_key_is_the_provider_s_fault(
    tmp_path: Path, providers: Providers
) -> None:
    models = [
        deployment("primary.test", **PRIMARY),
        deployment("backup.test"),
        deployment("alone.test", alias="alone"),
    ]
    providers.fail["primary.test"] = "401"
    providers.fail["alone.test"] = "401"
    with serve(write_config(tmp_path, models), providers) as gw:
        moved = post(gw, {"model": "chat", **CHAT})
        again = post(gw, {"model": "chat", **CHAT})
        alone = post(gw, {"model": "alone", **CHAT})
    assert moved.status_code == 200 and moved.headers["x-routefit-deployment"] == "backup.test"
    # a refused key cools its deployment down at once: the next request does not try it
    assert again.headers["x-routefit-attempts"] == "1" and providers.hits["primary.test"] == 1
    assert alone.status_code == 502
    error = alone.json()["error"]
    assert error["code"] == "upstream_auth_failed"
    assert "'alone.test'" in error["message"] and "secret" not in alone.text


def test_the_team_is_charged_once_at_the_answering_deployment_s_prices(
    tmp_path: Path, providers: Providers
) -> None:
    dear = {"input_cost_per_token": 1e-3, "output_cost_per_token": 2e-3}
    cheap = {"input_cost_per_token": 1e-6, "output_cost_per_token": 3e-6}
    models = [deployment("dear.test", **PRIMARY, **dear), deployment("cheap.test", **cheap)]
    team = {
        "id": "t",
        "keys": ["sk-team-t"],
        "quotas": {"tokens_per_day": 10_000_000, "usd_per_month": 1000},
    }
    providers.fail["dear.test"] = "500"
    key = {"authorization": "Bearer sk-team-t"}
    with serve(write_config(tmp_path, models, teams=[team]), providers) as gw:
        answer = post(gw, {"model": "chat", **CHAT}, headers=key)
        assert answer.status_code == 200 and answer.headers["x-routefit-attempts"] == "2"
        usage = answer.json()["usage"]
        tokens = usage["prompt_tokens"] + usage["completion_tokens"]
        cost = usage["prompt_tokens"] * 1e-6 + usage["completion_tokens"] * 3e-6
        windows: dict[str, int] = {}
        for _ in range(100):  # settled after the response went out
            found = httpx.get(f"{gw.base_url}/routefit/teams/t/usage", headers=key).json()
            windows = {w["name"]: w["used"] for w in found["windows"]}
            if windows["tokens_per_day"] == tokens:
                break
            time.sleep(0.02)
    # the failed attempt's reservation (prompt + the whole output reserve) was released
    assert windows["tokens_per_day"] == tokens
    assert windows["usd_per_month"] == pytest.approx(cost * 1e6, abs=1)


def test_the_openai_sdk_through_a_failing_primary(tmp_path: Path, providers: Providers) -> None:
    providers.fail["primary.test"] = "529"
    config = write_config(
        tmp_path, [deployment("primary.test", **PRIMARY), deployment("backup.test")]
    )
    with serve(config, providers) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="chat", messages=CHAT["messages"], max_tokens=20
        )
        streamed = client.chat.completions.create(
            model="chat", messages=CHAT["messages"], max_tokens=20, stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert raw.headers["x-routefit-deployment"] == "backup.test"
    assert raw.parse().choices[0].message.content
    assert text


def test_a_single_deployment_route_reads_no_health(tmp_path: Path, providers: Providers) -> None:
    models = [deployment("alone.test", alias="alone"), deployment("a.test"), deployment("b.test")]
    with serve(write_config(tmp_path, models), providers) as gw:
        single = post(gw, {"model": "alone", **CHAT})
        metrics = httpx.get(f"{gw.base_url}/metrics").text
        assert single.headers["x-routefit-deployment"] == "alone.test"
        health = "routefit_store_op_seconds_count"
        assert sample(metrics, health, route=None, op="deployment_health") is None  # type: ignore[arg-type]
        assert post(gw, {"model": "chat", **CHAT}).status_code == 200
        metrics = httpx.get(f"{gw.base_url}/metrics").text
    assert sample(metrics, health, route=None, op="deployment_health") == 1  # type: ignore[arg-type]


@pytest.fixture
def store_url(redis_url: str) -> Iterator[str]:
    client = redis.Redis.from_url(redis_url)
    try:
        for key in client.scan_iter("{rf:dep:*"):
            client.delete(key)
        yield redis_url
    finally:
        client.close()


def test_two_gateways_on_one_redis_share_a_cooldown(
    tmp_path: Path, providers: Providers, store_url: str
) -> None:
    router = {"allowed_fails": 0, "cooldown_time": 60}
    ids = uuid.uuid4().hex[:6]
    models = [deployment(f"p{ids}.test", **PRIMARY), deployment(f"b{ids}.test")]
    config = write_config(tmp_path, models, router, redis_url=store_url)
    providers.fail[f"p{ids}.test"] = "500"
    with serve(config, providers) as one, serve(config, providers) as two:
        first = post(one, {"model": "chat", **CHAT})
        assert first.headers["x-routefit-attempts"] == "2"
        second = post(two, {"model": "chat", **CHAT})
    # the other replica saw the cooldown: it went straight to the healthy deployment
    assert second.status_code == 200 and second.headers["x-routefit-attempts"] == "1"
    assert second.headers["x-routefit-deployment"] == f"b{ids}.test"
    assert providers.hits[f"p{ids}.test"] == 1


WORDS = (
    "the route counts tokens window provider answer session history plan file change test "
    "result error value line read write build check list item order model ünïcödé 数据 ✓"
).split()


def test_no_attempt_overflows_across_deployments_with_other_windows_and_tokenizers(
    tmp_path: Path, providers: Providers
) -> None:
    """Each attempt is fitted for the deployment it goes to: a conversation cut for a 128k
    o200k deployment and failed over to an 8k cl100k one is fitted again for the 8k one — the
    simulator, which counts as each real model does, never refuses one for its length."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    models = [
        deployment("big.test", model="openai/gpt-4o-mini"),
        deployment("small.test", model="openai/gpt-4"),
    ]
    config = write_config(tmp_path, models, {"cooldown_time": 1, "num_retries": 1})
    with serve(config, providers) as gw:

        @settings(
            max_examples=12,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            sizes=st.lists(st.integers(1, 6000), min_size=1, max_size=8),
            failing=st.sampled_from([None, "big.test", "small.test"]),
            seed=st.integers(0, 2**16),
        )
        def check(sizes: list[int], failing: str | None, seed: int) -> None:
            providers.fail = {failing: "500"} if failing else {}
            providers.statuses.clear()
            words = [WORDS[(seed + i * 7) % len(WORDS)] for i in range(sum(sizes))]
            messages, at = [], 0
            for i, size in enumerate(sizes):
                role = "user" if i % 2 == 0 or i == len(sizes) - 1 else "assistant"
                messages.append({"role": role, "content": " ".join(words[at : at + size])})
                at += size
            messages[-1]["role"] = "user"
            answer = post(gw, {"model": "chat", "messages": messages, "max_tokens": 50})
            # the big deployment holds every conversation here: only its own failure, when the
            # small one cannot hold what it was sent, is not answered — and by its failure
            if answer.status_code != 200:
                assert failing == "big.test" and answer.status_code == 500, answer.text
            else:
                assert answer.headers["x-routefit-deployment"] != failing
            assert 400 not in providers.statuses, providers.statuses

        check()


def test_a_deployment_that_cannot_take_the_request_is_skipped_not_answered(
    tmp_path: Path, providers: Providers
) -> None:
    """The primary fails; the next deployment's window cannot hold the request at all: it is
    skipped (the client's request was fine) — the next one answers, or, with none left, the
    provider's failure does, never a context-length refusal of the client's request."""
    tiny = {"max_input_tokens": 3000, "max_output_tokens": 500}
    big = " ".join(WORDS[i % len(WORDS)] for i in range(8000))
    body = {"model": "chat", "messages": [{"role": "user", "content": big}], "max_tokens": 20}
    providers.fail["big.test"] = "500"
    three = [
        deployment("big.test", weight=1_000_000),
        deployment("tiny.test", weight=1_000, **tiny),
        deployment("mid.test", weight=0.001),
    ]
    with serve(write_config(tmp_path, three, {"num_retries": 1}), providers) as gw:
        answered = post(gw, body)
    assert answered.status_code == 200, answered.text
    assert answered.headers["x-routefit-deployment"] == "mid.test"
    assert answered.headers["x-routefit-attempts"] == "2"  # big, then mid: tiny was no attempt
    assert providers.hits["tiny.test"] == 0
    two = three[:2]
    with serve(write_config(tmp_path, two, {"num_retries": 1}), providers) as gw:
        failed = post(gw, body)
    assert failed.status_code == 500, failed.text  # the provider's failure, not a 400
    assert providers.hits["tiny.test"] == 0


def _conversation(turns: int, words: int) -> list[dict[str, str]]:
    out = []
    for i in range(turns):
        text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words))
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    out.append({"role": "user", "content": "Sum it up."})
    return out


def _windows(tmp_path: Path, choice: str, small_price: float, large_price: float) -> Path:
    small = deployment(
        "small.test",
        alias="small",
        model="openai/gpt-4",
        input_cost_per_token=small_price,
        output_cost_per_token=small_price,
    )
    small["routefit"] = {"context_fallback": choice}
    large = deployment(
        "large.test",
        alias="large",
        model="openai/gpt-4o-mini",
        input_cost_per_token=large_price,
        output_cost_per_token=large_price,
    )
    return write_config(
        tmp_path, [small, large], {"context_window_fallbacks": [{"small": ["large"]}]}
    )


@pytest.mark.parametrize(
    ("choice", "small_price", "large_price", "word", "answered"),
    [
        ("keep_more", 1e-6, 1e-5, "kept", "large.test"),  # the larger window, whatever it costs
        ("pay_less", 1e-6, 1e-5, "cut", "small.test"),  # the cut is cheaper as sent
        ("pay_less", 1e-5, 1e-7, "kept", "large.test"),  # the whole one is cheaper
    ],
)
def test_a_context_window_fallback_is_a_decision_the_response_names(
    tmp_path: Path,
    providers: Providers,
    choice: str,
    small_price: float,
    large_price: float,
    word: str,
    answered: str,
) -> None:
    config = _windows(tmp_path, choice, small_price, large_price)
    long = {"model": "small", "messages": _conversation(12, 1200), "max_tokens": 50}
    short = {"model": "small", **CHAT}
    with serve(config, providers) as gw:
        decided = post(gw, long)
        fits = post(gw, short)
        log = gw.log()
    assert decided.status_code == 200, decided.text
    assert decided.headers["x-routefit-context"] == word
    assert decided.headers["x-routefit-deployment"] == answered
    cut = decided.headers["x-routefit-actions"] != "none"
    assert cut == (word == "cut")
    assert f"context_fallback {choice}: {word}" in log
    assert fits.headers["x-routefit-context"] == "fits"
    assert fits.headers["x-routefit-deployment"] == "small.test"
    assert 400 not in providers.statuses


def test_a_conversation_the_chosen_window_refuses_goes_to_the_larger_one(
    tmp_path: Path, providers: Providers
) -> None:
    """A conversation the small route may not cut (its fit allows no strategy) is refused
    there, and held whole by the context-window fallback — even under pay_less (refusing is not
    paying less)."""
    config = _windows(tmp_path, "pay_less", 1e-6, 1e-5)
    data = yaml.safe_load(config.read_text())
    data["model_list"][0]["routefit"]["fit"] = {"strategies": []}
    config.write_text(yaml.safe_dump(data))
    body = {"model": "small", "messages": _conversation(4, 3000), "max_tokens": 50}
    with serve(config, providers) as gw:
        answer = post(gw, body)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-routefit-deployment"] == "large.test"
    assert answer.headers["x-routefit-context"] == "kept"


def test_the_anthropic_sdk_through_an_overloaded_primary(
    tmp_path: Path, providers: Providers
) -> None:
    import anthropic

    providers.fail["primary.test"] = "529"
    model = "anthropic/claude-sonnet-4-5"
    models = [
        deployment("primary.test", model=model, **PRIMARY),
        deployment("backup.test", model=model),
    ]
    for entry in models:  # Anthropic's API base has no /v1
        entry["litellm_params"]["api_base"] = entry["litellm_params"]["api_base"][:-3]
    with serve(write_config(tmp_path, models), providers) as gw:
        client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
        raw = client.messages.with_raw_response.create(
            model="chat", max_tokens=20, messages=[{"role": "user", "content": "Say hello."}]
        )
        with client.messages.stream(
            model="chat", max_tokens=20, messages=[{"role": "user", "content": "Say hello."}]
        ) as stream:
            text = "".join(stream.text_stream)
    assert raw.headers["x-routefit-deployment"] == "backup.test"
    assert raw.parse().content[0].text and text
    assert providers.hits["primary.test"] == 2  # the stream failed over before its first byte


def test_a_request_the_chosen_deployment_cannot_hold_goes_to_one_that_can(
    tmp_path: Path, providers: Providers
) -> None:
    tiny = {"max_input_tokens": 3000, "max_output_tokens": 500}
    big = " ".join(WORDS[i % len(WORDS)] for i in range(8000))
    body = {"model": "chat", "messages": [{"role": "user", "content": big}], "max_tokens": 20}
    models = [deployment("tiny.test", weight=1_000_000, **tiny), deployment("large.test")]
    with serve(write_config(tmp_path, models), providers) as gw:
        answer = post(gw, body)
        alone = [deployment("tiny.test", **tiny)]
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-routefit-deployment"] == "large.test"
    assert providers.hits["tiny.test"] == 0
    with serve(write_config(tmp_path, alone), providers) as gw:
        refused = post(gw, body)
    assert refused.status_code == 400  # nowhere to go: the client's request is too long
    assert refused.json()["error"]["code"] == "context_length_exceeded"
