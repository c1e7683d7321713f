"""OpenAI's ``POST /v1/responses/input_tokens`` through routefit in-process, with the real
``openai`` SDK (``client.responses.input_tokens.count``): the count is the estimate the fit of
the same request acts on, answered without the provider, behind the same key, team scope and
limits as ``/v1/responses``, its errors in OpenAI's shape."""

from __future__ import annotations

import uuid

import httpx
import jsonschema
import openai
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess

KEY = "sk-count-" + uuid.uuid4().hex
NARROW = "sk-narrow-" + uuid.uuid4().hex
#: The count rate of each team on the rated gateway.
RATE = 3
MAX_BODY = 64 * 1024

TOOLS = [
    {
        "type": "function",
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    }
]
INPUT = [
    {"role": "developer", "content": "Answer in one word."},
    {"role": "user", "content": "How many tokens is this question?"},
]


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    routes = [sim_route("gpt-4o", sim.base_url), sim_route("other", sim.base_url, "gpt-4o")]
    teams = [
        {"id": "count", "keys": [KEY]},
        {"id": "narrow", "keys": [NARROW], "routes": ["other"]},
    ]
    config = gateway_config(
        tmp_path_factory.mktemp("input_tokens") / "c.yaml",
        routes,
        teams=teams,
        max_body_bytes=MAX_BODY,
    )
    with run_inprocess(config) as running:
        yield running


@pytest.fixture(scope="module")
def rated(sim, tmp_path_factory):
    """A gateway whose teams may count ``RATE`` times a minute."""
    config = gateway_config(
        tmp_path_factory.mktemp("input_tokens_rated") / "c.yaml",
        [sim_route("gpt-4o", sim.base_url)],
        teams=[{"id": "count", "keys": [KEY]}],
        count_requests_per_minute=RATE,
    )
    with run_inprocess(config) as running:
        yield running


def openai_shaped(err: openai.APIStatusError) -> bool:
    """The SDK read an OpenAI error object (it hands over the body's ``error``)."""
    body = err.body
    return isinstance(body, dict) and {"message", "type", "param", "code"} <= set(body)


def client(gw, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key=key, max_retries=0)


def test_the_count_is_the_estimate_the_fit_acts_on(gw, fresh_sim):
    c = client(gw)
    counted = c.responses.input_tokens.count(
        model="gpt-4o", input=INPUT, instructions="Be brief.", tools=TOOLS
    )
    assert counted.object == "response.input_tokens"
    raw = c.responses.with_raw_response.create(
        model="gpt-4o", input=INPUT, instructions="Be brief.", tools=TOOLS, store=False
    )
    assert counted.input_tokens == int(raw.headers["x-routefit-prompt-tokens"]) > 0
    # answered by routefit alone: the provider saw the real request, never a count
    assert [r["path"] for r in fresh_sim.requests()] == ["/v1/responses"]


def test_the_path_without_v1_is_served_too(gw):
    body = {"model": "gpt-4o", "input": "hello"}
    r = httpx.post(
        gw.base_url + "/responses/input_tokens",
        json=body,
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "response.input_tokens" and r.json()["input_tokens"] > 0


def test_a_key_is_required(gw):
    with pytest.raises(openai.AuthenticationError) as info:
        client(gw, "sk-not-a-key").responses.input_tokens.count(model="gpt-4o", input="hi")
    assert openai_shaped(info.value)


def test_a_route_outside_the_teams_scope_is_refused(gw):
    c = client(gw, NARROW)
    assert c.responses.input_tokens.count(model="other", input="hi").input_tokens > 0
    with pytest.raises(openai.NotFoundError) as info:  # as a model that is not there
        c.responses.input_tokens.count(model="gpt-4o", input="hi")
    assert info.value.code == "model_not_found" and info.value.param == "model"
    assert openai_shaped(info.value)


def test_errors_are_in_openais_shape(gw):
    c = client(gw)
    with pytest.raises(openai.NotFoundError) as missing:
        c.responses.input_tokens.count(model="nope", input="hi")
    assert missing.value.code == "model_not_found" and missing.value.param == "model"
    with pytest.raises(openai.BadRequestError) as empty:
        c.responses.input_tokens.count(model="gpt-4o", input=[])
    assert empty.value.param == "input"
    for bad in (b"{", b"[]", b'{"model": "gpt-4o", "input": [{"role": "bot", "content": "x"}]}'):
        r = httpx.post(
            gw.v1 + "/responses/input_tokens",
            content=bad,
            headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
        )
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["type"] == "invalid_request_error", r.text


def test_a_stored_conversation_is_counted_whole(gw, fresh_sim):
    # A count that continues a stored response counts what creating it would send: the whole
    # chain, not the body's own input (which the request would exceed by all of it).
    c = client(gw)
    first = c.responses.create(model="gpt-4o", input=INPUT, max_output_tokens=32)
    follow = {"model": "gpt-4o", "input": "And then?", "previous_response_id": first.id}
    counted = c.responses.input_tokens.count(**follow).input_tokens
    raw = c.responses.with_raw_response.create(**follow, max_output_tokens=32)
    assert counted == int(raw.headers["x-routefit-prompt-tokens"])
    assert counted > c.responses.input_tokens.count(model="gpt-4o", input="And then?").input_tokens
    with pytest.raises(openai.NotFoundError) as info:
        c.responses.input_tokens.count(**{**follow, "previous_response_id": "resp_nope"})
    assert openai_shaped(info.value)


def test_a_body_over_the_limit_is_refused(gw):
    with pytest.raises(openai.APIStatusError) as info:
        client(gw).responses.input_tokens.count(model="gpt-4o", input="x" * (2 * MAX_BODY))
    assert info.value.status_code == 413 and openai_shaped(info.value)


def test_counts_are_held_to_the_teams_count_rate(rated):
    statuses = []
    for _ in range(RATE + 1):
        try:
            # a client per count: no connection kept alive across a loaded machine's stalls
            # (max_retries=0 would report the server's idle close as the test's failure)
            client(rated).responses.input_tokens.count(model="gpt-4o", input="hi")
            statuses.append(200)
        except openai.RateLimitError as exc:
            statuses.append(exc.status_code)
    assert statuses[-1] == 429 and 200 in statuses, statuses


def test_the_openapi_document_describes_it(gw):
    doc = httpx.get(gw.base_url + "/openapi.json").json()
    op = doc["paths"]["/v1/responses/input_tokens"]["post"]
    schemas = doc["components"]["schemas"]

    def schema(ref: dict) -> dict:
        return {**schemas[ref["$ref"].rsplit("/", 1)[1]], "components": doc["components"]}

    body = {"model": "gpt-4o", "input": INPUT, "instructions": "Be brief.", "tools": TOOLS}
    request = schema(op["requestBody"]["content"]["application/json"]["schema"])
    jsonschema.validate(body, request)
    r = httpx.post(
        gw.v1 + "/responses/input_tokens", json=body, headers={"authorization": f"Bearer {KEY}"}
    )
    assert r.status_code == 200, r.text
    jsonschema.validate(
        r.json(), schema(op["responses"]["200"]["content"]["application/json"]["schema"])
    )
    for status in ("401", "403", "404", "413", "429"):
        assert status in op["responses"]
