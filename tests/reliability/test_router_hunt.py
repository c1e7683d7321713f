"""How an alias of several deployments meets its providers' failures, and what the client sees.

In process, as test_stream_faults.py drives it (routefit's app before ``MockTransport``, whose
handler is the simulator unless a host has a fault queued):

* Anthropic's 529 "overloaded" reached an OpenAI or Gemini client as a 529 (Gemini's body even
  said ``"code": 529, "status": "INTERNAL"``): a status only Anthropic's clients know. It is a
  503 to them (what OpenAI and Google answer when overloaded), still 529 to an Anthropic client;
  a CDN's 520 is a 502.
* A provider's 404 "model not found" at one deployment was the alias's answer, its sibling
  never tried: a deployment misconfigured while the others work is what an alias of several
  deployments is for. A 404 about anything else is still the request's own answer.
* An error after Anthropic's ``ping`` (or an SSE comment) at the start of a stream was relayed
  as a 200 stream carrying the provider's error (its key in the message, unscrubbed), the next
  deployment never tried: a keep-alive is not the stream's first word.
* The provider's own error event mid-stream (after bytes went out) on a native route reached
  the client as the provider sent it, the route's key in its message when the provider echoed
  it; before the first byte the same error was scrubbed.
* A 429 saying ``retry-after: 30`` left its deployment first in line: every request of those
  30 s was sent there again, each an attempt spent and another 429.
* On a route forwarding the client's own provider key (BYOK), one client's exhausted key (its
  429s) cooled the deployment down for every other client, as a 401 of the client's key does
  not.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import test_stream_faults as streams
from test_provider_answer_faults import KEY, MAX_TOKENS, Answer
from test_stream_faults import (
    _anthropic_error,
    _chat_error,
    _responses_error,
    _sim_then,
    _sse,
    _stream,
)
from wire_shapes import check_wire_error_shape

import tests.proxy.test_routing_e2e as e2e
from proxy.router import Health, Policy, cooling, failed

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Gateway(streams.Gateway):
    async def ask(self, wire: str, model: str) -> httpx.Response:
        """A whole (not streamed) request in ``wire``."""
        text = "Say hello."
        headers = {"authorization": f"Bearer {KEY}"}
        body: dict[str, Any]
        if wire == "messages":
            path = "/v1/messages"
            headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
            body = {"model": model, "messages": [{"role": "user", "content": text}]}
            body["max_tokens"] = MAX_TOKENS
        elif wire == "responses":
            path = "/v1/responses"
            body = {"model": model, "input": text, "max_output_tokens": MAX_TOKENS, "store": False}
        elif wire == "gemini":
            path = f"/v1beta/models/{model}:generateContent"
            headers = {"x-goog-api-key": KEY}
            body = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
        else:
            path = "/v1/chat/completions"
            body = {"model": model, "messages": [{"role": "user", "content": text}]}
            body["max_tokens"] = MAX_TOKENS
        return await self.client.post(path, json=body, headers=headers)


@asynccontextmanager
async def gateway() -> AsyncIterator[Gateway]:
    async with streams.served(streams.MODELS) as (client, provider):
        yield Gateway(client, provider)


def _status(status: int, body: Any, headers: dict[str, str] | None = None) -> Answer:
    async def answer(request: httpx.Request, sim: Any) -> httpx.Response:
        return httpx.Response(status, json=body, headers=headers or {})

    return answer


OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
WIRES = ["messages", "chat", "responses", "gemini"]


# -- a provider's status the client's SDK does not know -------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("wire", WIRES)
async def test_anthropic_s_529_is_a_status_every_client_reads(wire: str, stream: bool) -> None:
    async with gateway() as gw:
        gw.provider.faults["an"] = [_status(529, OVERLOADED)]
        r = await (gw.stream(wire, "claude") if stream else gw.ask(wire, "claude"))
    status = 529 if wire == "messages" else 503
    assert r.status_code == status, r.text
    check_wire_error_shape(r.request.url.path, status, r.content, wire, None, True)
    assert "Overloaded" in r.text
    if wire == "messages":
        assert r.json()["error"]["type"] == "overloaded_error"
    elif wire == "gemini":
        assert r.json()["error"]["status"] == "UNAVAILABLE"
    else:
        assert r.json()["error"]["type"] == "service_unavailable_error"


@pytest.mark.parametrize("wire", WIRES)
async def test_a_cdn_s_own_5xx_is_a_502(wire: str) -> None:
    async with gateway() as gw:
        gw.provider.faults["oa"] = [_status(520, {"error": {"message": "origin unreachable"}})]
        r = await gw.ask(wire, "gpt")
    assert r.status_code == 502, r.text
    check_wire_error_shape(r.request.url.path, 502, r.content, wire, None, True)
    assert "origin unreachable" in r.text


# -- a deployment whose model is not there ---------------------------------------------------------

NOT_FOUND = {
    "oa1": {
        "error": {
            "message": "The model `gpt-4o` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    },
    "an1": {"type": "error", "error": {"type": "not_found_error", "message": "model: claude-x"}},
    "gm1": {
        "error": {
            "code": 404,
            "message": "models/gemini-x is not found for API version v1beta",
            "status": "NOT_FOUND",
        }
    },
}
#: (client wire, alias, its first deployment, its second).
PAIRS = [
    ("chat", "gpt-pair", "oa1", "oa2"),
    ("messages", "claude-pair", "an1", "an2"),
    ("gemini", "gem-pair", "gm1", "gm2"),
]


@pytest.mark.parametrize("pair", PAIRS, ids=[p[1] for p in PAIRS])
async def test_a_deployment_whose_model_is_not_there_passes_to_its_sibling(
    pair: tuple[str, str, str, str],
) -> None:
    wire, alias, first, second = pair
    async with gateway() as gw:
        gw.provider.faults[first] = [_status(404, NOT_FOUND[first])]
        r = await gw.ask(wire, alias)
        assert r.status_code == 200, r.text
        assert r.headers["x-routefit-deployment"] == second
        assert r.headers["x-routefit-attempts"] == "2"
        assert gw.provider.hits == {first: 1, second: 1}


async def test_a_deployment_whose_account_cannot_pay_passes_to_its_sibling() -> None:
    """A 402 (DeepSeek's "Insufficient Balance", OpenRouter's credits) is the account behind
    the deployment's key, not the request: the sibling answers, and on a lone deployment the
    client reads the provider's 402."""
    broke = {"error": {"message": "Insufficient Balance", "type": "unknown_error"}}
    async with gateway() as gw:
        gw.provider.faults["oa1"] = [_status(402, broke)]
        r = await gw.ask("chat", "gpt-pair")
        assert r.status_code == 200, r.text
        assert r.headers["x-routefit-deployment"] == "oa2"
        gw.provider.faults["oa"] = [_status(402, broke)]
        alone = await gw.ask("chat", "gpt")
    assert alone.status_code == 402 and "Insufficient Balance" in alone.text


async def test_a_404_about_what_the_request_names_is_its_answer_on_one_deployment() -> None:
    async with gateway() as gw:
        gw.provider.faults["oa1"] = [_status(404, NOT_FOUND["oa1"])]
        gw.provider.faults["oa2"] = [_status(404, NOT_FOUND["oa1"])]
        every = await gw.ask("chat", "gpt-pair")  # no deployment has it: the provider's 404
        other = {"error": {"message": "No such file: file-abc", "type": "invalid_request_error"}}
        gw.provider.faults["oa1"] = [_status(404, other)]
        hits = dict(gw.provider.hits)
        mine = await gw.ask("chat", "gpt-pair")
    assert every.status_code == 404 and every.json()["error"]["code"] == "model_not_found"
    assert mine.status_code == 404, mine.text
    assert "No such file" in mine.text
    assert gw.provider.hits == {**hits, "oa1": hits["oa1"] + 1}  # not tried elsewhere


# -- keep-alives before a stream's first word ------------------------------------------------------

PING = _sse({"type": "ping"}, "ping")
COMMENT = b": keep-alive\n\n"


@pytest.mark.parametrize("wire", WIRES)
async def test_an_error_after_a_ping_goes_to_the_aliases_next_deployment(wire: str) -> None:
    async with gateway() as gw:
        gw.provider.faults["an1"] = [_stream(PING, PING, _anthropic_error("an1"))]
        r = await gw.stream(wire, "claude-pair")
        assert r.status_code == 200, r.text
        assert r.headers["x-routefit-deployment"] == "an2"
        assert gw.provider.hits == {"an1": 1, "an2": 1}
        assert "Overloaded" not in r.text and "sk-an1-" not in r.text


async def test_an_error_after_a_ping_on_the_only_deployment_is_its_status() -> None:
    async with gateway() as gw:
        error = _anthropic_error("an", "invalid_request_error")
        gw.provider.faults["an"] = [_stream(PING, error)]
        r = await gw.stream("messages", "claude")
    assert r.status_code == 400, r.text
    assert "text/event-stream" not in r.headers.get("content-type", "")
    check_wire_error_shape(r.request.url.path, 400, r.content, "claude")
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "sk-an-0123456789" not in r.text


async def test_an_error_after_an_sse_comment_goes_to_the_next_deployment() -> None:
    async with gateway() as gw:
        gw.provider.faults["oa1"] = [_stream(COMMENT, _chat_error("oa1"))]
        r = await gw.stream("chat", "gpt-pair")
        assert r.status_code == 200, r.text
        assert r.headers["x-routefit-deployment"] == "oa2"
        assert "Overloaded" not in r.text and "sk-oa1-" not in r.text
        assert r.text.rstrip().endswith("data: [DONE]")


async def test_a_ping_before_the_answer_is_not_the_streams_first_event() -> None:
    """Anthropic's SDK refuses any event before ``message_start`` (``accumulate_event``:
    "Unexpected event order, got ping before message_start"), so a provider's leading ping
    relayed as the stream's first event broke ``messages.stream`` for the client."""

    async def pinged(request: httpx.Request, sim: Any) -> httpx.Response:
        response = await sim(request)
        body = await response.aread()
        return httpx.Response(
            200, content=PING + body, headers={"content-type": "text/event-stream"}
        )

    async with gateway() as gw:
        gw.provider.faults["an"] = [pinged]
        r = await gw.stream("messages", "claude")
    assert r.status_code == 200, r.text
    kinds = [
        json.loads(line[5:])["type"] for line in r.text.splitlines() if line.startswith("data:")
    ]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds


# -- the provider's error mid-stream ---------------------------------------------------------------

#: (client wire, alias, host, the route's key, the provider's error event mid-stream, echoing it).
MID = [
    ("messages", "claude", "an", "sk-an-0123456789", _anthropic_error),
    ("chat", "gpt", "oa", "sk-oa-0123456789", _chat_error),
    ("responses", "gpt", "oa", "sk-oa-0123456789", _responses_error),
    ("gemini", "gem", "gm", "AIza-gm-secret-key", None),
]


@pytest.mark.parametrize("case", MID, ids=[c[0] for c in MID])
async def test_a_providers_error_mid_stream_reaches_the_client_without_its_key(
    case: tuple[Any, ...],
) -> None:
    wire, alias, host, key, error = case
    if error is None:  # Google's keys look like no other: only the route's own is known
        event = _sse({"error": {"code": 503, "message": f"bad key {key}", "status": "UNAVAILABLE"}})
    else:
        event = error(host)
    async with gateway() as gw:
        gw.provider.faults[host] = [_sim_then(event, keep=3)]
        r = await gw.stream(wire, alias)
    assert r.status_code == 200, r.text
    assert "[redacted]" in r.text  # the provider's error is relayed, in its own words
    assert key not in r.text and "sk-live-abcdef123456" not in r.text


# -- a provider's retry-after ---------------------------------------------------------------------


async def test_a_429_with_retry_after_cools_its_deployment_that_long() -> None:
    slow = {"error": {"message": "slow down", "type": "rate_limit_error"}}
    async with gateway() as gw:
        gw.provider.faults["oa1"] = [_status(429, slow, {"retry-after": "30"})]
        first = await gw.ask("chat", "gpt-pair")
        later = await gw.ask("chat", "gpt-pair")
        hits = dict(gw.provider.hits)
    assert first.status_code == 200 and first.headers["x-routefit-deployment"] == "oa2"
    # oa1 said "not before 30 s": the next request goes straight to its sibling
    assert later.status_code == 200, later.text
    assert later.headers["x-routefit-deployment"] == "oa2"
    assert later.headers["x-routefit-attempts"] == "1"
    assert hits == {"oa1": 1, "oa2": 2}


async def test_a_429_without_retry_after_does_not_cool_at_once() -> None:
    slow = {"error": {"message": "slow down", "type": "rate_limit_error"}}
    async with gateway() as gw:
        gw.provider.faults["oa1"] = [_status(429, slow)]
        await gw.ask("chat", "gpt-pair")
        later = await gw.ask("chat", "gpt-pair")
    assert later.headers["x-routefit-deployment"] == "oa1"  # one failure of allowed_fails 3


def test_the_policy_cools_a_deployment_for_its_providers_retry_after() -> None:
    policy = Policy(allowed_fails=3, cooldown_time=5.0)
    hinted = failed(Health(), "rate_limit", 100.0, policy, hint=30.0)
    assert cooling(hinted, 129.9) and not cooling(hinted, 130.0)
    # the request's own fault is no hint of the deployment's, whatever it says
    assert not cooling(failed(Health(), "bad_request", 100.0, policy, hint=30.0), 100.0)
    for odd in (0.0, -5.0, float("inf"), float("nan")):
        assert not cooling(failed(Health(), "rate_limit", 100.0, policy, hint=odd), 100.0)


def test_a_clients_own_key_out_of_quota_cools_nothing_down_for_the_others(
    tmp_path: Path,
) -> None:
    """A BYOK alias of two deployments (open gateway: the client's bearer is its provider key):
    a client whose own key is out of quota meets 429s on both; another client is then served by
    the deployment the strategy picks, not moved off it by the first one's quota."""
    providers = e2e.Providers()
    byok = {"routefit": {"forward_client_key": True}}
    models = [
        {**e2e.deployment("by1.test", **e2e.PRIMARY), **byok},
        {**e2e.deployment("by2.test"), **byok},
    ]
    with e2e.serve(e2e.write_config(tmp_path, models), providers) as gw:
        providers.fail["by1.test"] = providers.fail["by2.test"] = "429"
        exhausted = {"authorization": "Bearer sk-exhausted-0123456789"}
        refused = [e2e.post(gw, {"model": "chat", **e2e.CHAT}, headers=exhausted) for _ in "ab"]
        providers.fail["by1.test"] = providers.fail["by2.test"] = None
        fine = {"authorization": "Bearer sk-fine-0123456789"}
        other = e2e.post(gw, {"model": "chat", **e2e.CHAT}, headers=fine)
    assert [r.status_code for r in refused] == [429, 429], refused[-1].text
    assert providers.hits["by1.test"] >= 4  # more than allowed_fails: once a cooldown
    assert other.status_code == 200, other.text
    assert other.headers["x-routefit-deployment"] == "by1.test"
