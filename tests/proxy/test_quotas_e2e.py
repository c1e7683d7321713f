"""Quotas through routefit (in-process): a reservation holds every output the request can produce
(``n × max_tokens``, each wire's output limit), and a team over its per-request prompt quota is
told the team's limit, not the model's window."""

from __future__ import annotations

import uuid

import anthropic
import httpx
import openai
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess

TIGHT = "sk-tight-" + uuid.uuid4().hex
NARROW = "sk-narrow-" + uuid.uuid4().hex


def claude_route(alias: str, sim_url: str) -> dict:
    return {
        "model_name": alias,
        "litellm_params": {
            "model": "anthropic/claude-sim",
            "api_base": sim_url,
            "api_key": "sk-ant-sim",
        },
    }


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    teams = [
        {
            "id": "tight-" + uuid.uuid4().hex[:8],
            "keys": [TIGHT],
            "quotas": {"tokens_per_minute": 500},
        },
        {
            "id": "narrow-" + uuid.uuid4().hex[:8],
            "keys": [NARROW],
            "quotas": {"max_prompt_tokens": 3000, "tokens_per_minute": 10_000_000},
        },
    ]
    routes = [sim_route("gpt-4o-mini", sim.base_url), claude_route("claude", sim.base_url)]
    config = gateway_config(tmp_path_factory.mktemp("quotas") / "c.yaml", routes, teams=teams)
    with run_inprocess(config) as running:
        yield running


def post(gw, path: str, body: dict, key: str) -> httpx.Response:
    return httpx.post(
        gw.base_url + path, json=body, headers={"authorization": f"Bearer {key}"}, timeout=30
    )


def test_n_completions_are_reserved_and_refused_in_openais_shape(gw):
    client = openai.OpenAI(base_url=gw.v1, api_key=TIGHT, max_retries=0)
    messages = [{"role": "user", "content": "Name a colour."}]
    # One completion of 400 fits a 500-token minute; 128 of them never can: the client's 400
    # (docs/security.md, "A reservation no window can hold"), not a wait.
    assert client.chat.completions.create(
        model="gpt-4o-mini", messages=messages, max_tokens=40
    ).choices
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, max_tokens=400, n=128
        )
    err = caught.value
    assert err.status_code == 400
    body = err.response.json()["error"]
    assert body["code"] == "request_over_quota" and body["type"] == "invalid_request_error"
    assert "tokens_per_minute limit of 500" in body["message"]
    needs = int(body["message"].split("needs ")[1].split(" tokens")[0].replace(",", ""))
    assert needs >= 128 * 400
    assert "retry-after" not in err.response.headers


def test_max_completion_tokens_counts_per_choice(gw):
    r = post(
        gw,
        "/v1/chat/completions",
        {
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 100,
            "n": 6,
        },
        TIGHT,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "request_over_quota"


@pytest.mark.parametrize("n", [0, -3, "2", 1.5, True])
def test_a_bad_n_is_a_400_naming_n(gw, n):
    r = post(
        gw,
        "/v1/chat/completions",
        {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "n": n},
        TIGHT,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "n"


def test_responses_max_output_tokens_is_reserved(gw):
    client = openai.OpenAI(base_url=gw.v1, api_key=TIGHT, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="tokens_per_minute limit of 500"):
        client.responses.create(model="gpt-4o-mini", input="hello", max_output_tokens=900)


def test_anthropic_max_tokens_is_reserved(gw):
    client = anthropic.Anthropic(base_url=gw.base_url, api_key=TIGHT, max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="tokens_per_minute limit of 500"):
        client.messages.create(
            model="claude", max_tokens=900, messages=[{"role": "user", "content": "hello"}]
        )


def long_text(words: int) -> str:
    return " ".join(f"word{i % 97} and more" for i in range(words))


def test_a_team_over_its_prompt_quota_is_told_the_teams_limit(gw):
    big = long_text(3000)  # far over 3,000 tokens, far under the model's 128k window
    r = post(
        gw,
        "/v1/chat/completions",
        {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": big}]},
        NARROW,
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "team's per-request prompt limit of 3,000 tokens" in error["message"]
    assert "maximum context length" not in error["message"]

    r = post(gw, "/v1/responses", {"model": "gpt-4o-mini", "input": big}, NARROW)
    assert r.status_code == 400, r.text
    assert "limit (3,000 tokens)" in r.json()["error"]["message"]

    client = anthropic.Anthropic(base_url=gw.base_url, api_key=NARROW, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="claude", max_tokens=100, messages=[{"role": "user", "content": big}]
        )
    message = caught.value.response.json()["error"]["message"]
    assert message.startswith("prompt is too long: ")
    assert "> 3000 maximum" in message


def test_under_the_prompt_quota_is_served(gw):
    client = openai.OpenAI(base_url=gw.v1, api_key=NARROW, max_retries=0)
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": long_text(200)}]
    )
    assert reply.choices
