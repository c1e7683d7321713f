"""routefit (in-process) between the openai SDK and the simulator's Anthropic wire: a chat client on
a Claude route, translated by routefit's own mapping, checked against the same request translated
by litellm (a second route whose extra litellm_params keep it on litellm)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import yaml
from harness import gateway_config
from inprocess import run_inprocess


def claude(alias: str, sim_url: str, **extra: object) -> dict:
    return {
        "model_name": alias,
        "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5",
            "api_base": sim_url,
            "api_key": "sk-ant-sim",
            **extra,
        },
    }


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    routes = [claude("claude", sim.base_url), claude("via-litellm", sim.base_url, drop_params=True)]
    config = gateway_config(tmp_path_factory.mktemp("ac") / "routefit.yaml", routes)
    with run_inprocess(config) as running:
        yield running


@pytest.fixture
def client(gw):
    return openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def test_plain_answer_matches_litellm_translation(client, fresh_sim):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tell me about prompt caching."},
    ]
    ours = client.chat.completions.create(model="claude", messages=messages, max_tokens=60)
    sent = fresh_sim.last_request("/v1/messages")
    theirs = client.chat.completions.create(model="via-litellm", messages=messages, max_tokens=60)
    assert sent["headers"]["x-api-key"] == "sk-ant-sim"
    assert sent["body"]["system"] == [{"type": "text", "text": "Be brief."}]
    assert ours.choices[0].message.content == theirs.choices[0].message.content
    assert ours.choices[0].finish_reason == theirs.choices[0].finish_reason
    assert ours.usage.prompt_tokens == theirs.usage.prompt_tokens > 0
    assert ours.usage.completion_tokens == theirs.usage.completion_tokens


def test_stream_carries_the_same_text_and_usage_only_when_asked(client, fresh_sim):
    messages = [{"role": "user", "content": "Stream a few words, Claude."}]
    whole = client.chat.completions.create(model="claude", messages=messages, max_tokens=40)
    chunks = list(
        client.chat.completions.create(
            model="claude",
            messages=messages,
            max_tokens=40,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert fresh_sim.last_request("/v1/messages")["body"]["stream"] is True
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    plain = list(
        client.chat.completions.create(
            model="claude", messages=messages, max_tokens=40, stream=True
        )
    )
    assert all(c.usage is None for c in plain)


def test_tool_calls_round_trip_whole_and_streamed(client, fresh_sim):
    ask = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
    reply = client.chat.completions.create(
        model="claude", messages=ask, tools=[WEATHER], tool_choice="required", max_tokens=200
    )
    assert fresh_sim.last_request("/v1/messages")["body"]["tool_choice"] == {"type": "any"}
    calls = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls"
    assert calls and all(c.function.name == "get_weather" for c in calls)
    assert all(isinstance(json.loads(c.function.arguments), dict) for c in calls)

    streamed = list(
        client.chat.completions.create(
            model="claude",
            messages=ask,
            tools=[WEATHER],
            tool_choice="required",
            max_tokens=200,
            stream=True,
        )
    )
    parts: dict[int, dict[str, str]] = {}
    for chunk in streamed:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            got = parts.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            got["id"] += call.id or ""
            got["name"] += (call.function.name or "") if call.function else ""
            got["arguments"] += (call.function.arguments or "") if call.function else ""
    assert [p["name"] for p in parts.values()] == [c.function.name for c in calls]
    assert [json.loads(p["arguments"]) for p in parts.values()] == [
        json.loads(c.function.arguments) for c in calls
    ]

    # the results of every call go back in one user message, as Anthropic requires
    follow = [
        *ask,
        reply.choices[0].message.model_dump(exclude_none=True),
        *({"role": "tool", "tool_call_id": c.id, "content": "sunny, 21 C"} for c in calls),
    ]
    final = client.chat.completions.create(
        model="claude", messages=follow, tools=[WEATHER], max_tokens=100
    )
    sent = fresh_sim.last_request("/v1/messages")["body"]["messages"]
    results = [b for b in sent[-1]["content"] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == [c.id for c in calls]
    assert final.choices[0].message.content


@pytest.mark.parametrize(
    ("fault", "exc"),
    [
        ("status:429", openai.RateLimitError),
        ("status:400", openai.BadRequestError),
        ("status:529", openai.InternalServerError),
    ],
)
def test_provider_errors_reach_the_chat_client_in_its_shape(client, fresh_sim, fault, exc):
    fresh_sim.inject(fault, path="/v1/messages")
    with pytest.raises(exc) as caught:
        client.chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "hi"}], max_tokens=20
        )
    assert isinstance(caught.value.body, dict) and caught.value.body.get("message")


def test_a_stream_cut_short_ends_with_an_error_event(gw, fresh_sim):
    fresh_sim.inject("cut-stream:3", path="/v1/messages")
    body = {
        "model": "claude",
        "messages": [{"role": "user", "content": "a long story please"}],
        "max_tokens": 50,
        "stream": True,
    }
    with httpx.stream("POST", f"{gw.v1}/chat/completions", json=body, timeout=30) as resp:
        events = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert resp.status_code == 200
    assert "data: [DONE]" not in events
    assert json.loads(events[-1][6:])["error"]["type"] == "upstream_error"


def test_requests_the_mapping_does_not_cover_go_through_litellm(client, fresh_sim):
    reply = client.chat.completions.create(
        model="claude",
        messages=[{"role": "user", "content": "Answer in JSON."}],
        max_tokens=200,
        response_format={"type": "json_object"},
    )
    assert reply.choices[0].message.content or reply.choices[0].message.tool_calls
    sent = fresh_sim.last_request("/v1/messages")
    assert sent["body"]["model"] == "claude-sonnet-4-5"
    assert "aiohttp" not in sent["headers"].get("user-agent", "")  # litellm's client sent it
    client.chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "plain"}], max_tokens=20
    )
    assert "aiohttp" in fresh_sim.last_request("/v1/messages")["headers"]["user-agent"]


def test_openai_hints_are_dropped_on_the_way_not_refused(client, fresh_sim):
    """A chat client's OpenAI-only hints (a prompt cache key, stored completions, a field at its
    default) mean nothing to Anthropic: routefit's mapping drops them and names the end user,
    where handing them to litellm answered 400 UnsupportedParamsError for each."""
    reply = client.chat.completions.create(
        model="claude",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=20,
        prompt_cache_key="session-7",
        store=False,
        metadata={"team": "search"},
        frequency_penalty=0,
        extra_body={"safety_identifier": "user-42", "prompt_cache_retention": "24h"},
    )
    assert reply.choices[0].message.content
    sent = fresh_sim.last_request("/v1/messages")
    assert sent["status"] == 200  # the simulator refuses a field Anthropic does not know
    assert "aiohttp" in sent["headers"]["user-agent"]  # routefit's mapping, not litellm
    assert sent["body"]["metadata"] == {"user_id": "user-42"}
    for hint in ("prompt_cache_key", "store", "frequency_penalty", "prompt_cache_retention"):
        assert hint not in sent["body"]
    # a value that would change the answer is still litellm's to translate or refuse
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="claude",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=20,
            frequency_penalty=0.5,
        )


def test_litellm_settings_drop_params_drops_what_the_provider_does_not_take(
    client, sim, fresh_sim, tmp_path
):
    """A chat client's ``seed`` on a Claude route: Anthropic has no seed, so routefit's own
    mapping hands the request to litellm, which refuses it (400) unless LiteLLM's
    ``litellm_settings.drop_params`` is set, as in LiteLLM's own proxy; then it is answered.
    A request the mapping covers stays on it either way."""
    ask = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "seed": 7}
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="claude", **ask)
    config = gateway_config(tmp_path / "routefit.yaml", [claude("claude", sim.base_url)])
    data = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**data, "litellm_settings": {"drop_params": True}}))
    with run_inprocess(config) as running:
        dropping = openai.OpenAI(base_url=running.v1, api_key="unused", max_retries=0)
        assert dropping.chat.completions.create(model="claude", **ask).choices[0].message
        sent = fresh_sim.last_request("/v1/messages")
        assert "seed" not in sent["body"]
        assert "aiohttp" not in sent["headers"].get("user-agent", "")  # litellm's client
        plain = {"messages": [{"role": "user", "content": "plain"}], "max_tokens": 20}
        dropping.chat.completions.create(model="claude", **plain)
        assert "aiohttp" in fresh_sim.last_request("/v1/messages")["headers"]["user-agent"]


@pytest.mark.parametrize("kind", ["retrieval", "x"])
def test_what_litellm_cannot_translate_is_the_clients_400_not_the_routes_failure(
    gw, fresh_sim, kind
):
    """A tool kind neither routefit's mapping nor litellm's translation knows fails inside
    litellm before anything is sent: a 400 in OpenAI's shape. It was a 502 "unreachable",
    retried and held against the deployment: a team's malformed requests cooled down a
    deployment every team shares (more than ``allowed_fails``, 3, in a minute)."""
    tool = {"type": kind, "function": WEATHER["function"]}
    body = {"model": "claude", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
    for _ in range(5):
        r = httpx.post(f"{gw.v1}/chat/completions", json={**body, "tools": [tool]}, timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"].startswith("the request cannot be translated"), r.text
    assert fresh_sim.requests(path="/v1/messages") == []
    metrics = httpx.get(f"{gw.base_url}/metrics", timeout=10).text
    assert "routefit_deployment_cooldowns_total{" not in metrics
    assert 'reason="upstream_unreachable"' not in metrics
    # the deployment serves the next request as it would have
    assert httpx.post(f"{gw.v1}/chat/completions", json=body, timeout=30).status_code == 200
