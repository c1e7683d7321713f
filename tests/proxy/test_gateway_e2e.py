"""routefit, served in-process over loopback, between the real openai SDK and the simulator."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import httpx
import openai
import pytest
from harness import gateway_config, run_routefit, sim_route
from inprocess import run_inprocess
from PIL import Image


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    url = sim.base_url
    routes = [
        sim_route("gpt-4o", url),
        # used only by the tests that compare estimates exactly (before calibration has samples)
        sim_route("exact", url, "gpt-4o"),
        sim_route(
            "small",
            url,
            "gpt-4o-small",
            model_info={"max_input_tokens": 8192, "max_output_tokens": 1024},
        ),
        sim_route(
            "deepseek",
            url,
            "deepseek-chat",
            tokenizer="deepseek",
            framing="deepseek",
            model_info={"max_input_tokens": 65536, "max_output_tokens": 8192},
        ),
        sim_route("slow", url, "gpt-4o", upstream_timeout=1.0),
        {
            "model_name": "claude",
            "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": url,
                "api_key": "sk-ant-sim",
            },
        },
    ]
    config = gateway_config(
        tmp_path_factory.mktemp("gw") / "routefit.yaml", routes, max_body_bytes=2_000_000
    )
    with run_inprocess(config) as running:
        yield running


@pytest.fixture
def client(gw):
    return openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)


def png_data_url(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_non_streaming_matches_the_provider_and_carries_headers(client, fresh_sim):
    messages = [{"role": "user", "content": "Say something about tokens."}]
    raw = client.chat.completions.with_raw_response.create(model="exact", messages=messages)
    reply = raw.parse()
    direct = openai.OpenAI(base_url=fresh_sim.url("/v1"), api_key="x").chat.completions.create(
        model="gpt-4o", messages=messages
    )
    assert reply.choices[0].message.content == direct.choices[0].message.content
    assert raw.headers["x-routefit-route"] == "exact"
    assert raw.headers["x-routefit-actions"] == "none"
    assert int(raw.headers["x-routefit-budget"]) > 100_000
    # exact route: the estimate is the provider's count
    assert int(raw.headers["x-routefit-prompt-tokens"]) == reply.usage.prompt_tokens


def test_body_is_forwarded_with_only_model_rewritten(client, fresh_sim):
    client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "hi"}],
        temperature=0.25,
        seed=7,
        user="team-member-1",
        logit_bias={"1734": -100},
        metadata={"run": "e2e"},
    )
    sent = fresh_sim.last_request("/v1/chat/completions")["body"]
    assert sent["model"] == "gpt-4o"
    assert sent["temperature"] == 0.25 and sent["seed"] == 7
    assert sent["user"] == "team-member-1" and sent["logit_bias"] == {"1734": -100}
    assert sent["metadata"] == {"run": "e2e"}
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


def test_streaming_relays_chunks_and_hides_usage_unless_asked(client, fresh_sim):
    messages = [{"role": "user", "content": "Stream a short answer."}]
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=messages, stream=True))
    assert all(c.usage is None for c in chunks)
    # routefit asked the upstream for usage anyway, to learn from it
    assert fresh_sim.last_request()["body"]["stream_options"] == {"include_usage": True}
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    whole = client.chat.completions.create(model="gpt-4o", messages=messages)
    assert text == whole.choices[0].message.content
    with_usage = list(
        client.chat.completions.create(
            model="gpt-4o", messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    assert with_usage[-1].usage is not None and with_usage[-1].usage.prompt_tokens > 0


def test_async_client_stream_and_non_stream(gw):
    async def go():
        async with openai.AsyncOpenAI(base_url=gw.v1, api_key="x", max_retries=0) as aclient:
            msgs = [{"role": "user", "content": "async hello"}]
            reply = await aclient.chat.completions.create(model="gpt-4o", messages=msgs)
            stream = await aclient.chat.completions.create(
                model="gpt-4o", messages=msgs, stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            return reply.choices[0].message.content, text

    whole, streamed = asyncio.run(go())
    assert whole and whole == streamed


def test_tool_calls_round_trip(client):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look something up",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ]
    messages = [{"role": "user", "content": "please call:lookup now"}]
    first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "lookup"
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "42"},
    ]
    second = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
    assert second.choices[0].message.content


def test_images_are_priced_by_the_route_rule(client, fresh_sim):
    content = [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": png_data_url(1024, 1024), "detail": "high"}},
    ]
    raw = client.chat.completions.with_raw_response.create(
        model="exact", messages=[{"role": "user", "content": content}]
    )
    usage = raw.parse().usage
    estimate = int(raw.headers["x-routefit-prompt-tokens"])
    assert usage.prompt_tokens > 765  # OpenAI's published price of a 1024x1024 high image
    assert estimate == usage.prompt_tokens


def test_anthropic_route_through_litellm(client, fresh_sim):
    raw = client.chat.completions.with_raw_response.create(
        model="claude",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello Claude"},
        ],
        max_tokens=50,
    )
    reply = raw.parse()
    assert reply.choices[0].message.content
    assert reply.usage.prompt_tokens > 0
    assert fresh_sim.last_request()["path"] == "/v1/messages"
    stream = client.chat.completions.create(
        model="claude",
        messages=[{"role": "user", "content": "Stream, Claude"}],
        max_tokens=50,
        stream=True,
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def agent_session(turns: int) -> list[dict]:
    messages: list[dict] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find the bug."},
    ]
    for t in range(turns):
        cid = f"call_{t}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "sh", "arguments": "{}"}}
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": cid, "content": f"step {t}: " + "output data " * 120}
        )
    messages.append({"role": "user", "content": "What did you find?"})
    return messages


def test_a_session_that_overflows_the_window_is_fitted_not_rejected(client, fresh_sim):
    messages = agent_session(40)
    direct = openai.OpenAI(base_url=fresh_sim.url("/v1"), api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        direct.chat.completions.create(model="gpt-4o-small", messages=messages, max_tokens=200)
    assert err.value.code == "context_length_exceeded"
    raw = client.chat.completions.with_raw_response.create(
        model="small", messages=messages, max_tokens=200
    )
    assert raw.parse().choices[0].message.content
    assert "masked=" in raw.headers["x-routefit-actions"]  # outputs go before turns do
    sent = fresh_sim.last_request()["body"]["messages"]
    assert sent[0] == messages[0] and sent[1] == messages[1] and sent[-1] == messages[-1]


def test_dry_run_fit_needs_no_provider(gw, fresh_sim):
    body = {"model": "small", "messages": agent_session(40), "max_tokens": 200}
    r = httpx.post(gw.base_url + "/routefit/fit", json=body)
    assert r.status_code == 200
    data = r.json()
    assert data["report"]["estimate_after"] <= data["report"]["budget"]
    acts = data["report"]["actions"]
    assert acts["masked"]["messages"] + acts["elided_messages"]["messages"] > 0
    assert fresh_sim.stats()["requests_total"] == 0


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"", 400, "invalid_json"),
        (json.dumps({"model": "gpt-4o", "messages": "hi"}).encode(), 400, None),
        (
            json.dumps({"model": "gpt-4o", "messages": [{"role": "x", "content": "y"}]}).encode(),
            400,
            None,
        ),
        (
            json.dumps({"model": "nope", "messages": [{"role": "user", "content": "y"}]}).encode(),
            404,
            "model_not_found",
        ),
        (
            json.dumps(
                {"model": "small", "messages": [{"role": "user", "content": "word " * 20000}]}
            ).encode(),
            400,
            "context_length_exceeded",
        ),
        (
            json.dumps(
                {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 3_000_000}]}
            ).encode(),
            413,
            "request_too_large",
        ),
    ],
)
def test_client_errors_are_openai_shaped(gw, body, status, code):
    r = httpx.post(
        gw.v1 + "/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == status
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    if code:
        assert err["code"] == code
    assert "Traceback" not in r.text


def test_unknown_path_and_method_are_openai_shaped(gw):
    r = httpx.get(gw.base_url + "/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(gw.v1 + "/chat/completions")
    assert r.status_code == 405 and "error" in r.json()


@pytest.mark.parametrize(
    ("fault", "status", "exc"),
    [
        ("status:429", 429, openai.RateLimitError),
        ("status:503", 503, openai.InternalServerError),
        # a provider refusing routefit's key is the provider's fault, not the client's key's
        ("status:401", 502, openai.InternalServerError),
        ("reset", 502, openai.InternalServerError),
        ("malformed", 502, openai.InternalServerError),
    ],
)
def test_upstream_errors_are_passed_through(client, fresh_sim, fault, status, exc):
    fresh_sim.inject(fault)
    with pytest.raises(exc) as err:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == status
    if status == 429:
        assert err.value.response.headers.get("retry-after") == "1"


def test_upstream_timeout_is_504(client, fresh_sim):
    fresh_sim.inject("delay:3")
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="slow", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 504


def test_stream_cut_midway_ends_with_an_error_event(client, fresh_sim):
    fresh_sim.inject("cut-stream:2")
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "long answer"}], stream=True
        ):
            pass


def test_client_disconnect_cancels_the_upstream_stream(gw, fresh_sim):
    fresh_sim.state.config.chunk_delay = 0.3
    body = {
        "model": "gpt-4o",
        "stream": True,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "a long streamed answer please"}],
    }
    with httpx.stream("POST", gw.v1 + "/chat/completions", json=body, timeout=10) as r:
        assert r.status_code == 200
        next(r.iter_lines())
    stats = fresh_sim.wait_for(lambda s: s["streams_open"] == 0, timeout=5)
    assert stats["streams_cancelled"] >= 1
    assert stats["streams_completed"] == 0


def test_models_health_ready_metrics(gw, client):
    ids = {m.id for m in client.models.list()}
    assert ids == {"gpt-4o", "exact", "small", "deepseek", "slow", "claude"}
    assert httpx.get(gw.base_url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(gw.base_url + "/readyz").json()
    assert ready["status"] == "ready" and ready["checks"]["store"] is True
    metrics = httpx.get(gw.base_url + "/metrics").text
    for name in (
        "routefit_requests_total",
        "routefit_overhead_seconds",
        "routefit_upstream_latency_seconds",
        "routefit_estimate_relative_error",
        "routefit_fit_actions_total",
    ):
        assert name in metrics


def _errors_by_kind(gw) -> dict[str, float]:
    out = {}
    for line in httpx.get(gw.base_url + "/metrics").text.splitlines():
        if line.startswith("routefit_errors_total{"):
            kind = line.split('kind="', 1)[1].split('"', 1)[0]
            out[kind] = float(line.rsplit(" ", 1)[1])
    return out


def test_errors_are_counted_by_where_they_came_from(gw, client, fresh_sim):
    before = _errors_by_kind(gw)
    fresh_sim.inject("status:429")  # the provider's 429 is the upstream's, not a budget's
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": "word " * 20000}]
        )
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    after = _errors_by_kind(gw)
    for kind in ("upstream", "fit", "client"):
        assert after.get(kind, 0) == before.get(kind, 0) + 1, (kind, before, after)


def test_metrics_add_up_across_workers(sim, tmp_path):
    config = gateway_config(tmp_path / "c.yaml", [sim_route("gpt-4o", sim.base_url)])
    with run_routefit(config, workers=2) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        for _ in range(40):  # spread over both workers by the kernel's accept balancing
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "count"}]
            )
        for _ in range(5):  # whichever worker answers the scrape, it reports all 40
            text = httpx.get(gw.base_url + "/metrics").text
            line = next(
                x
                for x in text.splitlines()
                if x.startswith('routefit_requests_total{route="gpt-4o",status="200"}')
            )
            assert float(line.rsplit(" ", 1)[1]) == 40
