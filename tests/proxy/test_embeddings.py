"""``/v1/embeddings`` through routefit with the real ``openai`` SDK (``proxy.embeddings``):
forwarded to the route, counted against the team's budget at the provider's usage, refusals in
OpenAI's shape; the legacy ``/v1/completions`` refused naming what is served. The simulator
answers embeddings by OpenAI's rules (``proxy.sim.wire_openai.embeddings``)."""

from __future__ import annotations

import base64
import math
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from harness import gateway_config, sim_route
from inprocess import InProcess, run_inprocess

ADMIN = "sk-admin-" + uuid.uuid4().hex
KEY = "sk-team-" + uuid.uuid4().hex
OTHER = "sk-other-" + uuid.uuid4().hex
TEAM = "embedders"
TEXTS = ["The quick brown fox.", "Jumps over the lazy dog, twice!", "数字 123 456"]


def _config(path: Path, sim_url: str) -> Path:
    routes = [
        sim_route("embed", sim_url, "text-embedding-3-small"),
        sim_route("via-litellm", sim_url, "text-embedding-3-small", transport="litellm"),
        sim_route("chat", sim_url, "gpt-4o"),
        {
            "model_name": "claude",
            "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": sim_url,
                "api_key": "sk-ant-sim",
            },
        },
    ]
    teams = [
        {"id": TEAM, "keys": [KEY], "quotas": {"tokens_per_day": 10**9}},
        {"id": "chat-only", "keys": [OTHER], "routes": ["chat"]},
    ]
    return gateway_config(path, routes, teams=teams, admin_key=ADMIN)


@pytest.fixture(scope="module")
def gw(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    config = _config(tmp_path_factory.mktemp("embeddings") / "c.yaml", sim.base_url)
    with run_inprocess(config) as running:
        yield running


def _client(gw: InProcess, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key=key, max_retries=0)


def _used(gw: InProcess) -> int:
    r = httpx.get(
        f"{gw.base_url}/routefit/teams/{TEAM}/usage",
        headers={"authorization": f"Bearer {ADMIN}"},
        timeout=10,
    )
    return int(r.json()["windows"][0]["used"])


def _norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def test_the_sdk_embeds_through_the_route_and_the_team_pays_the_providers_count(
    gw: InProcess, fresh_sim: Any
) -> None:
    before = _used(gw)
    answer = _client(gw).embeddings.create(model="embed", input=TEXTS)
    assert [d.index for d in answer.data] == [0, 1, 2]
    assert all(len(d.embedding) == 1536 for d in answer.data)
    assert all(abs(_norm(d.embedding) - 1) < 1e-3 for d in answer.data)
    sent = fresh_sim.last_request("/v1/embeddings")
    assert sent["path"] == "/v1/embeddings" and sent["body"]["model"] == "text-embedding-3-small"
    assert answer.usage.prompt_tokens == sent["prompt_tokens"] > 0
    assert _used(gw) - before == answer.usage.prompt_tokens
    again = _client(gw).embeddings.create(model="embed", input=TEXTS[0])
    assert again.data[0].embedding == answer.data[0].embedding  # the same text, the same vector


def test_a_litellm_route_embeds_through_litellm(gw: InProcess, fresh_sim: Any) -> None:
    before = _used(gw)
    answer = _client(gw).embeddings.create(model="via-litellm", input=TEXTS[:2], dimensions=16)
    assert [len(d.embedding) for d in answer.data] == [16, 16]
    sent = fresh_sim.last_request("/v1/embeddings")
    assert sent["body"]["input"] == TEXTS[:2]
    assert _used(gw) - before == sent["prompt_tokens"] > 0


def test_float_encoding_dimensions_and_token_id_inputs_pass_through(gw: InProcess) -> None:
    raw = httpx.post(
        gw.v1 + "/embeddings",
        json={
            "model": "embed",
            "input": [[1, 2, 3, 4], "words"],
            "dimensions": 64,
            "encoding_format": "float",
        },
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert raw.status_code == 200, raw.text
    assert raw.headers["x-routefit-route"] == "embed"
    body = raw.json()
    assert [len(d["embedding"]) for d in body["data"]] == [64, 64]
    # token ids count as themselves: the estimate and the provider agree
    assert int(raw.headers["x-routefit-prompt-tokens"]) == body["usage"]["prompt_tokens"]
    base64_answer = httpx.post(
        gw.v1 + "/embeddings",
        json={"model": "embed", "input": "words", "dimensions": 8, "encoding_format": "base64"},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    ).json()
    packed = base64.b64decode(base64_answer["data"][0]["embedding"])
    assert len(struct.unpack("<8f", packed)) == 8


def test_an_input_over_the_models_limit_is_the_providers_400_and_costs_nothing(
    gw: InProcess,
) -> None:
    before = _used(gw)
    with pytest.raises(openai.BadRequestError) as caught:
        _client(gw).embeddings.create(model="embed", input="lorem " * 9000)
    assert "maximum context length is 8192 tokens" in caught.value.message
    assert _used(gw) == before  # the reservation was released


@pytest.mark.parametrize("claim", [2, -5, 10**9])
def test_the_team_pays_the_providers_count_when_credible_else_routefits(
    gw: InProcess, fresh_sim: Any, claim: int
) -> None:
    rule = {"fault": f"lie-usage:{claim}", "model": "text-embedding-3-small", "count": 1}
    httpx.post(fresh_sim.url("/sim/faults"), json={"faults": [rule]}).raise_for_status()
    before = _used(gw)
    raw = httpx.post(
        gw.v1 + "/embeddings",
        json={"model": "embed", "input": TEXTS},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert raw.status_code == 200, raw.text
    assert raw.json()["usage"]["prompt_tokens"] == claim
    estimate = int(raw.headers["x-routefit-prompt-tokens"])
    assert estimate > 2
    # 2: a count the provider may bill (it is what the provider says); -5 and 10**9 are not
    # counts of three short texts: routefit's own count is charged
    assert _used(gw) - before == (claim if claim == 2 else estimate)


@pytest.mark.parametrize(
    ("key", "body", "status", "code"),
    [
        (KEY, {"model": "embed"}, 400, None),
        (KEY, {"model": "embed", "input": [1.5]}, 400, None),
        (KEY, {"input": "x"}, 400, "missing_model"),
        (KEY, {"model": "nope", "input": "x"}, 404, "model_not_found"),
        (KEY, {"model": "claude", "input": "x"}, 400, "unsupported_model"),
        (OTHER, {"model": "embed", "input": "x"}, 404, "model_not_found"),
        ("sk-wrong", {"model": "embed", "input": "x"}, 401, None),
    ],
    ids=["no-input", "bad-input", "no-model", "unknown", "unsupported", "other-team", "bad-key"],
)
def test_refusals_are_openai_shaped(
    gw: InProcess, key: str, body: dict[str, Any], status: int, code: str | None
) -> None:
    r = httpx.post(
        gw.v1 + "/embeddings", json=body, headers={"authorization": f"Bearer {key}"}, timeout=30
    )
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] and error["type"]
    if code is not None:
        assert error["code"] == code


def test_legacy_completions_are_refused_naming_what_is_served(gw: InProcess) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        _client(gw).completions.create(model="chat", prompt="Say hi")
    assert "/v1/chat/completions" in caught.value.message
    assert "/v1/embeddings" in caught.value.message
    assert caught.value.code == "unsupported_endpoint"


def _records(gw: InProcess) -> list[dict[str, Any]]:
    r = httpx.get(
        gw.base_url + "/routefit/requests",
        params={"team": TEAM, "route": "embed"},
        headers={"authorization": f"Bearer {ADMIN}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return list(r.json()["data"])


def test_each_request_is_in_the_request_log_with_its_tokens(gw: InProcess) -> None:
    answer = _client(gw).embeddings.create(model="embed", input=TEXTS[1])
    refused = httpx.post(
        gw.v1 + "/embeddings",
        json={"model": "embed", "input": "lorem " * 9000},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert refused.status_code == 400

    def found() -> list[dict[str, Any]]:
        return [r for r in _records(gw) if r["wire"] == "embeddings"][:2]

    deadline = time.monotonic() + 10  # the records are written after each answer
    while len(found()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    failed, served = found()
    assert served["status"] == 200 and served["prompt_tokens"] == answer.usage.prompt_tokens
    assert served["team"] == TEAM and served["model"] == "openai/text-embedding-3-small"
    assert failed["status"] == 400 and failed["prompt_tokens"] is None
    access = [line for line in gw.log().splitlines() if line.startswith("INFO routefit.access")]
    assert any(served["id"] in line and '"wire":"embeddings"' in line for line in access)


def test_a_sim_local_embedding_route_works_with_no_key_and_no_network(tmp_path: Path) -> None:
    routes = [
        {
            "model_name": "local-embed",
            "litellm_params": {"model": "openai/text-embedding-3-large", "api_base": "sim://local"},
        }
    ]
    config = gateway_config(tmp_path / "c.yaml", routes)
    with run_inprocess(config) as running:
        answer = openai.OpenAI(base_url=running.v1, api_key="none").embeddings.create(
            model="local-embed", input="hello"
        )
    assert len(answer.data[0].embedding) == 3072
    assert answer.usage.prompt_tokens == 1
