"""routefit, served in-process over loopback, between the real anthropic SDK and the simulator."""

from __future__ import annotations

import base64
import io
import json
import re
from typing import Any

import anthropic
import httpx
import pytest
from anthropic_bodies import SEARCHED
from harness import claude_route, gateway_config, sim_route
from inprocess import run_inprocess
from PIL import Image

from strategies.mask import MASK_PREFIX


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    url = sim.base_url
    routes = [
        claude_route("claude", url, "claude-sim"),
        claude_route(
            "claude-small", url, "claude-sim-small", max_input_tokens=8192, max_output_tokens=4096
        ),
        sim_route("gpt-4o", url),
    ]
    config = gateway_config(tmp_path_factory.mktemp("gw") / "routefit.yaml", routes)
    with run_inprocess(config) as running:
        yield running


@pytest.fixture
def client(gw):
    return anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)


def direct(sim) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.base_url, api_key="x", max_retries=0)


TOOLS = [
    {
        "name": "lookup",
        "description": "Look something up",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
]


def test_non_streaming_is_the_providers_answer_and_body(client, fresh_sim):
    messages = [{"role": "user", "content": "Say something about tokens."}]
    raw = client.messages.with_raw_response.create(
        model="claude",
        max_tokens=256,
        messages=messages,
        stop_sequences=["END"],
        metadata={"user_id": "u1"},
    )
    reply = raw.parse()
    sent = fresh_sim.last_request("/v1/messages")
    mine = direct(fresh_sim).messages.create(model="claude-sim", max_tokens=256, messages=messages)
    assert reply.content[0].text == mine.content[0].text
    assert sent["body"] == {
        "model": "claude-sim",
        "max_tokens": 256,
        "messages": messages,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u1"},
    }
    assert raw.headers["x-routefit-route"] == "claude"
    assert raw.headers["x-routefit-actions"] == "none"
    assert reply.usage.input_tokens > 0


def test_streaming_relays_anthropic_events_and_usage(client, fresh_sim):
    messages = [{"role": "user", "content": "Stream a short answer."}]
    with client.messages.stream(model="claude", max_tokens=256, messages=messages) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds
    whole = client.messages.create(model="claude", max_tokens=256, messages=messages)
    assert final.content[0].text == whole.content[0].text
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_client_beta_and_version_headers_reach_the_provider(gw, fresh_sim):
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31"}
    body = {"model": "claude", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(gw.base_url + "/v1/messages?beta=true", json=body, headers=headers)
    assert r.status_code == 200
    seen = fresh_sim.last_request("/v1/messages")["headers"]
    assert seen["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert seen["x-api-key"] == "sk-ant-sim"


def test_tool_use_round_trip(client, fresh_sim):
    messages = [{"role": "user", "content": "please call:lookup now"}]
    first = client.messages.create(model="claude", max_tokens=256, messages=messages, tools=TOOLS)
    use = next(b for b in first.content if b.type == "tool_use")
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "42"}],
        },
    ]
    second = client.messages.create(model="claude", max_tokens=256, messages=messages, tools=TOOLS)
    assert second.stop_reason in ("end_turn", "tool_use")
    assert fresh_sim.last_request("/v1/messages")["status"] == 200


def test_overflow_is_refused_in_anthropics_exact_shape(client, gw, fresh_sim):
    huge = "word " * 20_000
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="claude-small", max_tokens=256, messages=[{"role": "user", "content": huge}]
        )
    body = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    found = re.fullmatch(
        r"prompt is too long: (\d+) tokens > (\d+) maximum", body["error"]["message"]
    )
    assert found and int(found[1]) > int(found[2]) == 8192
    assert fresh_sim.requests(path="/v1/messages") == []


def _tool_session(turns: int, size: int) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "Investigate the repository."}]
    for t in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"step {t}", "signature": f"sig{t}"},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{t}",
                        "name": "lookup",
                        "input": {"q": str(t)},
                    },
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{t}",
                        "content": f"r{t} " * size,
                    },
                    {"type": "text", "text": f"note {t}"},
                ],
            }
        )
    return messages


def test_long_tool_session_is_fitted_and_accepted(client, fresh_sim):
    messages = _tool_session(24, 120)
    raw = client.messages.with_raw_response.create(
        model="claude-small", max_tokens=1024, messages=messages, tools=TOOLS
    )
    assert "masked=" in raw.headers["x-routefit-actions"]  # outputs go before turns do
    sent = fresh_sim.last_request("/v1/messages")
    assert sent["status"] == 200  # the simulator checks pairing, roles and breakpoints
    kept = sent["body"]["messages"]
    assert kept[0] == messages[0] and kept[-1] == messages[-1]
    thinking = [
        b for m in kept for b in m["content"] if isinstance(b, dict) and b["type"] == "thinking"
    ]
    originals = [
        b for m in messages for b in m["content"] if isinstance(b, dict) and b["type"] == "thinking"
    ]
    assert thinking and all(b in originals for b in thinking)


def test_automatic_caching_counts_among_the_four_breakpoints(client, fresh_sim):
    # A client using automatic caching (the request's own cache_control, one of the 4) and
    # three breakpoints of its own leaves routefit no room: a fifth is Anthropic's 400.
    messages = _tool_session(24, 120)
    for i in (0, 2, 4):
        messages[i] = {**messages[i], "content": _marked(messages[i]["content"])}
    raw = client.messages.with_raw_response.create(
        model="claude-small",
        max_tokens=1024,
        messages=messages,
        tools=TOOLS,
        extra_body={"cache_control": {"type": "ephemeral"}},
    )
    assert raw.http_response.status_code == 200
    assert raw.headers["x-routefit-actions"] != "none"  # the fit changed it (room was wanted)
    sent = fresh_sim.last_request("/v1/messages")
    assert sent["status"] == 200  # the simulator refuses a fifth breakpoint
    body = sent["body"]
    assert body["cache_control"] == {"type": "ephemeral"}
    assert json.dumps(body).count('"cache_control"') == 4


def _marked(content: Any) -> list[dict]:
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return [*blocks[:-1], {**blocks[-1], "cache_control": {"type": "ephemeral"}}]


def test_server_tool_turns_and_search_results_reach_the_provider_as_sent(client, fresh_sim):
    # A web search's call and result in the assistant's turn and a user's search_result block:
    # priced as their JSON, forwarded as they came, in a request that fits and in one fitted.
    client.messages.create(model="claude", max_tokens=64, messages=SEARCHED)
    sent = fresh_sim.last_request("/v1/messages")
    assert sent["status"] == 200 and sent["body"]["messages"] == SEARCHED
    messages = [*SEARCHED[:2], {**SEARCHED[2]}, *_tool_session(24, 120)[1:]]
    messages[2] = {
        "role": "user",
        "content": [*SEARCHED[2]["content"], {"type": "text", "text": "go"}],
    }
    raw = client.messages.with_raw_response.create(
        model="claude-small", max_tokens=1024, messages=messages, tools=TOOLS
    )
    assert raw.headers["x-routefit-actions"] != "none"
    sent = fresh_sim.last_request("/v1/messages")
    assert sent["status"] == 200  # the simulator checks the blocks' places and pairing
    assert sent["body"]["messages"][:2] == SEARCHED[:2]  # the pinned head, as sent


def _unmarked(value: Any) -> Any:
    """A message as the provider's prefix sees it: breakpoints aside."""
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _masked_results(messages: list[dict]) -> int:
    return sum(
        block.get("type") == "tool_result" and MASK_PREFIX in json.dumps(block.get("content"))
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
    )


def test_consecutive_fitted_turns_read_the_providers_cache(client, fresh_sim):
    # Whenever a request shares with the one before it a prefix that reaches past a masked
    # output, the provider reads it back: routefit's breakpoints stand where the previous
    # request wrote (the end of the masking both share, the previous request's end) and where
    # the next one will read (the last masked output, after a mask step). Only a request that
    # re-sends from the verbatim head (a head masked) may read nothing.
    messages = _tool_session(20, 120)
    previous: list[dict] | None = None
    checked = 0
    for t in range(20, 34):
        reply = client.messages.create(
            model="claude-small", max_tokens=1024, messages=messages, tools=TOOLS
        )
        sent = [
            _unmarked(m) for m in fresh_sim.requests(path="/v1/messages")[-1]["body"]["messages"]
        ]
        if previous is not None:
            same = next(
                (i for i, (a, b) in enumerate(zip(previous, sent, strict=False)) if a != b),
                len(previous),
            )
            if _masked_results(previous[:same]):
                checked += 1
                assert (reply.usage.cache_read_input_tokens or 0) > 0, t
        previous = sent
        extra = _tool_session(t + 1, 120)[-2:]
        messages = [*messages, {**extra[0]}, {**extra[1]}]
    assert checked >= 8  # most requests share a masked prefix: the claim is not vacuous


def test_count_tokens_is_the_estimate_the_fit_acts_on(client, fresh_sim):
    messages = [{"role": "user", "content": "How many tokens is this?"}]
    counted = client.messages.count_tokens(model="claude", messages=messages, tools=TOOLS)
    raw = client.messages.with_raw_response.create(
        model="claude", max_tokens=64, messages=messages, tools=TOOLS
    )
    assert counted.input_tokens == int(raw.headers["x-routefit-prompt-tokens"]) > 0
    assert fresh_sim.requests(path="/v1/messages/count_tokens") == []


def test_count_tokens_prices_the_placeholders_a_text_only_route_is_sent(client):
    # claude-sim sees no pictures: its images go as placeholders whatever the budget, and the
    # fit prices those. The count priced the client's images instead, below the fit's estimate
    # of the same request (50 tokens against 63 for one PNG): an agent compacting on the count
    # would send more than it was told.
    buf = io.BytesIO()
    Image.new("RGB", (300, 200), (200, 10, 10)).save(buf, "PNG")
    png = base64.b64encode(buf.getvalue()).decode()
    for image in (
        {"type": "base64", "media_type": "image/png", "data": png},
        {"type": "url", "url": "https://example.invalid/x.png"},
    ):
        content = [{"type": "image", "source": image}, {"type": "text", "text": "What is it?"}]
        messages = [{"role": "user", "content": content}]
        counted = client.messages.count_tokens(model="claude", messages=messages)
        raw = client.messages.with_raw_response.create(
            model="claude", max_tokens=16, messages=messages
        )
        assert counted.input_tokens == int(raw.headers["x-routefit-prompt-tokens"]), image


def test_errors_are_in_anthropics_shape(client, gw):
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(
            model="nope", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "not_found_error"
    for bad in (
        b"{",
        b"[]",
        b'{"model": "claude", "messages": "x", "max_tokens": 5}',
        b'{"model": "claude", "messages": [{"role": "user", "content": "x"}]}',
        b'{"model": "claude", "max_tokens": 5, "messages": [{"role": "bot", "content": "x"}]}',
    ):
        r = httpx.post(gw.base_url + "/v1/messages", content=bad)
        assert r.status_code == 400, bad
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"


def test_root_answers_head_and_get(gw):
    assert httpx.head(gw.base_url + "/").status_code == 200
    assert httpx.get(gw.base_url + "/").status_code == 200


def test_broken_stream_ends_with_an_anthropic_error_event(client, fresh_sim):
    httpx.post(fresh_sim.url("/sim/faults"), json={"faults": [{"fault": "cut-stream:3"}]})
    with (
        pytest.raises(anthropic.APIStatusError) as info,
        client.messages.stream(
            model="claude", max_tokens=256, messages=[{"role": "user", "content": "long story"}]
        ) as stream,
    ):
        for _ in stream:
            pass
    assert "stream" in str(info.value)


def test_translated_route_speaks_anthropic_to_the_client(client, fresh_sim):
    messages = [{"role": "user", "content": "Say something."}]
    reply = client.messages.create(
        model="gpt-4o", max_tokens=128, messages=messages, system="Be brief."
    )
    sent = fresh_sim.last_request("/v1/chat/completions")["body"]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say something."},
    ]
    assert reply.content[0].type == "text" and reply.content[0].text
    assert reply.usage.input_tokens > 0
    with client.messages.stream(
        model="gpt-4o", max_tokens=128, messages=messages, system="Be brief."
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == reply.content[0].text
    assert final.usage.output_tokens == reply.usage.output_tokens
    call = client.messages.create(
        model="gpt-4o",
        max_tokens=128,
        messages=[{"role": "user", "content": "please call:lookup"}],
        tools=TOOLS,
    )
    assert any(b.type == "tool_use" and b.name == "lookup" for b in call.content)
