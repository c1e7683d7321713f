"""The provider simulator itself: counting facts, wire formats, caching, streams and faults.

Clients are the real ones routefit meets in production: the openai SDK (sync and async),
plain httpx, and litellm.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import sim_fixtures as fixtures
from anthropic_bodies import SEARCHED
from cookbook import COOKBOOK_MESSAGES, WEATHER_MESSAGES, WEATHER_TOOL
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.sim import SimModel, get_builtin, openai_prompt, run_sim
from proxy.sim.counting import deepseek_render
from proxy.sim.server import SimServer
from proxy.sim.tokens import get_encoder

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The simulator fixtures (a session-scoped server, reset before each test that asks for it).
sim = fixtures.sim
fresh_sim = fixtures.fresh_sim

# The OpenAI cookbook's examples ("How to count tokens with tiktoken").
JARGON = COOKBOOK_MESSAGES
WEATHER_TOOLS = [WEATHER_TOOL]
SIMPLE = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC_HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
LONG = " ".join(f"fact{i} is stored in row {i}." for i in range(400))  # ~3000 tokens


def client(sim: SimServer, api_key: str = "sk-test", **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url("/v1"), api_key=api_key, max_retries=0, **kw)


def png(width: int, height: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


def data_url(width: int, height: int) -> str:
    return "data:image/png;base64," + base64.b64encode(png(width, height)).decode()


def post(
    sim: SimServer,
    body: dict[str, Any],
    *,
    fault: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    headers = {**(headers or {}), **({"x-sim-fault": fault} if fault else {})}
    return httpx.post(sim.url("/v1/chat/completions"), json=body, headers=headers, timeout=10)


def messages_post(sim: SimServer, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(
        sim.url("/v1/messages"), json=body, headers={**ANTHROPIC_HEADERS, **headers}, timeout=10
    )


# ------------------------------------------------------------------------- counting (cookbook)


@pytest.mark.parametrize(("model", "expected"), [("gpt-4o", 124), ("gpt-4", 129)])
def test_cookbook_conversation_counts(fresh_sim: SimServer, model: str, expected: int) -> None:
    resp = client(fresh_sim).chat.completions.create(model=model, messages=JARGON)
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == expected
    assert resp.usage.total_tokens == expected + resp.usage.completion_tokens


@pytest.mark.parametrize(("model", "expected"), [("gpt-4o", 101), ("gpt-4", 105)])
def test_cookbook_tool_request_counts(fresh_sim: SimServer, model: str, expected: int) -> None:
    resp = client(fresh_sim).chat.completions.create(
        model=model,
        messages=WEATHER_MESSAGES,
        tools=WEATHER_TOOLS,
        temperature=0,
    )
    assert resp.usage is not None and resp.usage.prompt_tokens == expected


def test_offline_count_matches_server_and_skewed_model_counts_more(fresh_sim: SimServer) -> None:
    body = {"model": "gpt-4o", "messages": JARGON}
    assert openai_prompt(body, get_builtin("gpt-4o"), lambda p: None).total == 124
    counted = httpx.post(fresh_sim.url("/sim/count"), json=body).json()
    assert counted["prompt_tokens"] == 124
    mystery = httpx.post(fresh_sim.url("/sim/count"), json={**body, "model": "mystery-1"}).json()
    # o200k × 1.11 per text, + 6 per message instead of 3: well above what routefit would guess.
    assert mystery["prompt_tokens"] > 124 * 1.11 + 3 * len(JARGON) - 10


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200), st.text(max_size=50))
def test_scaled_tokenizer_is_a_deterministic_prefix_preserving_ceil(a: str, b: str) -> None:
    base = get_encoder("o200k_base")
    scaled = get_encoder("o200k_base", 1.11)
    n = base.count(a)
    assert scaled.count(a) == len(scaled.encode(a)) == n + math.ceil(round(n * 0.11, 9))
    assert scaled.encode(a) == scaled.encode(a)


def test_deepseek_template_is_rendered_once_and_tokenized_once(fresh_sim: SimServer) -> None:
    body = {
        "model": "deepseek-chat",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
    }
    text = deepseek_render(body)
    assert text.startswith("<｜begin▁of▁sentence｜>Be brief.<｜User｜>Weather?<｜Assistant｜>")
    assert "<｜tool▁sep｜>w\n```json\n{}\n```<｜tool▁call▁end｜>" in text
    assert text.endswith("<｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜><｜tool▁outputs▁end｜>")
    resp = post(fresh_sim, body).json()
    assert resp["usage"]["prompt_tokens"] == get_encoder("deepseek").count(text)
    usage = resp["usage"]
    assert (
        usage["prompt_cache_hit_tokens"] + usage["prompt_cache_miss_tokens"]
        == usage["prompt_tokens"]
    )


def test_image_tokens_follow_the_models_rule(fresh_sim: SimServer) -> None:
    def cost(model: str, url: str, detail: str = "high") -> int:
        text_only = {
            "model": model,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
        }
        with_image = json.loads(json.dumps(text_only))
        part = {"type": "image_url", "image_url": {"url": url, "detail": detail}}
        with_image["messages"][0]["content"].append(part)
        a = httpx.post(fresh_sim.url("/sim/count"), json=text_only).json()["prompt_tokens"]
        b = httpx.post(fresh_sim.url("/sim/count"), json=with_image).json()["prompt_tokens"]
        return int(b - a)

    assert cost("gpt-4o", data_url(1024, 1024)) == 765
    assert cost("gpt-4o", data_url(1024, 1024), "low") == 85
    assert cost("gpt-4o", "https://example.com/big.png#2048x4096") == 1105  # size hint, no fetch
    assert cost("gpt-4o-mini", data_url(512, 512)) == 2833 + 5667
    resp = post(
        fresh_sim,
        {
            "model": "gpt-4",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": data_url(8, 8)}}],
                }
            ],
        },
    )
    assert resp.status_code == 400 and "image_url is only supported by certain models" in resp.text
    bad = post(
        fresh_sim,
        {
            "model": "gpt-4o",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}
                    ],
                }
            ],
        },
    )
    assert bad.status_code == 400 and "base64-encoded data URL" in bad.json()["error"]["message"]


# ----------------------------------------------------------------------------- OpenAI behaviour


def test_overflow_is_rejected_like_openai(fresh_sim: SimServer) -> None:
    c = client(fresh_sim)
    big = [{"role": "user", "content": "word " * 9000}]
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model="gpt-4o-small", messages=big)
    assert exc.value.code == "context_length_exceeded"
    assert re.match(
        r"This model's maximum context length is 8192 tokens\. However, your messages resulted in "
        r"\d+ tokens\. Please reduce the length of the messages\.",
        exc.value.body["message"],
    )
    # fits alone, not with the completion reserved
    fits = [{"role": "user", "content": "word " * 7000}]
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model="gpt-4o-small", messages=fits, max_tokens=2000)
    assert exc.value.code == "context_length_exceeded"
    assert "in the messages, 2000 in the completion" in str(exc.value)
    with pytest.raises(openai.BadRequestError, match="max_tokens is too large"):
        c.chat.completions.create(model="gpt-4o-small", messages=fits, max_tokens=5000)


def test_orphan_tool_message_is_rejected(fresh_sim: SimServer) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        client(fresh_sim).chat.completions.create(
            model="gpt-4o",
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            ],
        )
    assert (
        "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
        in str(exc.value)
    )


def test_unanswered_tool_call_is_rejected(fresh_sim: SimServer) -> None:
    call = {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call, {**call, "id": "call_b"}]},
            {"role": "tool", "tool_call_id": "call_a", "content": "1"},
            {"role": "user", "content": "and?"},
        ],
    }
    resp = post(fresh_sim, body)
    assert resp.status_code == 400
    message = resp.json()["error"]["message"]
    assert message.startswith(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to "
        "each 'tool_call_id'."
    )
    assert "call_b" in message and "call_a" not in message


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"model": "gpt-4o", "messages": []}, "empty array"),
        ({"model": "gpt-4o"}, "Missing required parameter: 'messages'."),
        (
            {"model": "gpt-4o", "messages": [{"role": "bot", "content": "x"}]},
            "Invalid value: 'bot'",
        ),
        (
            {"model": "gpt-4o", "messages": [{"role": "user", "content": 3}]},
            "expected one of a string",
        ),
        (
            {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "routefit": 1},
            "Unrecognized",
        ),
        (
            {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            "minimum",
        ),
    ],
)
def test_malformed_bodies_get_invalid_request_error(
    fresh_sim: SimServer, body: dict[str, Any], needle: str
) -> None:
    resp = post(fresh_sim, body)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and needle in error["message"]


def _openai_refusal(resp: httpx.Response, param: str, code: str) -> str:
    """The message of OpenAI's 400 ``invalid_request_error``, after checking its shape."""
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code), error
    return str(error["message"])


_FN_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    ("extra", "param", "code", "words"),
    [
        (
            {"tool_choice": {"type": "function", "function": 5}},
            "tool_choice.function",
            "invalid_type",
            "expected an object, but got an integer instead",
        ),
        (
            {"tool_choice": {"type": "function", "function": "f"}},
            "tool_choice.function",
            "invalid_type",
            "expected an object, but got a string instead",
        ),
        (
            {"tool_choice": {"type": "function"}},
            "tool_choice.function",
            "missing_required_parameter",
            "Missing required parameter: 'tool_choice.function'.",
        ),
        (
            {"tool_choice": {"type": "function", "function": {}}},
            "tool_choice.function.name",
            "missing_required_parameter",
            "Missing required parameter",
        ),
        (
            {"tool_choice": {"type": "function", "function": {"name": 5}}},
            "tool_choice.function.name",
            "invalid_type",
            "expected a string, but got an integer instead",
        ),
        ({"functions": 5}, "functions", "invalid_type", "expected an array"),
        ({"functions": [5]}, "functions[0]", "invalid_type", "expected an object"),
        ({"functions": [{}]}, "functions[0].name", "missing_required_parameter", "Missing"),
    ],
)
def test_chat_tool_choice_and_functions_of_the_wrong_type_are_openais_400(
    fresh_sim: SimServer, extra: dict[str, Any], param: str, code: str, words: str
) -> None:
    body = {**SIMPLE, "tools": _FN_TOOLS, **extra}
    assert words in _openai_refusal(post(fresh_sim, body), param, code)


def _responses(sim: SimServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(sim.url("/v1/responses"), json={"model": "gpt-4o", **body}, timeout=10)


_ASK = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"input": [{"type": "reasoning"}]}, "input[0].summary", "missing_required_parameter"),
        (
            {"input": [_ASK, {"type": "reasoning"}]},
            "input[1].summary",
            "missing_required_parameter",
        ),
        ({"input": [{"type": "reasoning", "summary": 5}]}, "input[0].summary", "invalid_type"),
        ({"input": [{"type": "reasoning", "summary": [5]}]}, "input[0].summary[0]", "invalid_type"),
        (
            {"input": [{"type": "reasoning", "summary": [{"type": "text", "text": "t"}]}]},
            "input[0].summary[0].type",
            "invalid_value",
        ),
        (
            {"input": [{"type": "reasoning", "summary": [{"type": "summary_text"}]}]},
            "input[0].summary[0].text",
            "missing_required_parameter",
        ),
        ({"input": [{"type": ["message"], "role": "user"}]}, "input[0].type", "invalid_value"),
        (
            {"input": [_ASK, {"type": "function_call_output", "call_id": [1]}]},
            "input[1].call_id",
            "invalid_type",
        ),
        ({"input": [_ASK], "tools": 5}, "tools", "invalid_type"),
        ({"input": [_ASK], "tools": [5]}, "tools[0]", "invalid_type"),
        (
            {"input": [_ASK], "tools": [{"type": "namespace", "tools": 5}]},
            "tools[0].tools",
            "invalid_type",
        ),
    ],
)
def test_responses_items_and_tools_of_the_wrong_shape_are_openais_400(
    fresh_sim: SimServer, body: dict[str, Any], param: str, code: str
) -> None:
    """OpenAI requires a reasoning input item's ``summary`` (an array of ``summary_text``
    parts, empty when there was none); the simulator refused nothing of it and crashed."""
    _openai_refusal(_responses(fresh_sim, body), param, code)


def test_responses_reasoning_items_with_their_summaries_are_taken(fresh_sim: SimServer) -> None:
    said = {"type": "summary_text", "text": "thought about it"}
    for items in (
        [{"type": "reasoning", "summary": []}],  # nothing the model reads: still answered
        [_ASK, {"type": "reasoning", "summary": [said]}, {"role": "user", "content": "go"}],
    ):
        resp = _responses(fresh_sim, {"input": items})
        assert resp.status_code == 200, resp.text


def test_config_endpoint_relaxes_unknown_parameters(fresh_sim: SimServer) -> None:
    body = {**SIMPLE, "routefit_internal": 1}
    assert post(fresh_sim, body).status_code == 400
    cfg = httpx.post(fresh_sim.url("/sim/config"), json={"strict_params": False}).json()
    assert cfg["strict_params"] is False
    assert post(fresh_sim, body).status_code == 200
    assert httpx.post(fresh_sim.url("/sim/config"), json={"nope": 1}).status_code == 400


def test_unparseable_json_and_unknown_model(fresh_sim: SimServer) -> None:
    resp = httpx.post(
        fresh_sim.url("/v1/chat/completions"),
        content=b"{nope",
        headers={"content-type": "application/json"},
    )
    assert (
        resp.status_code == 400
        and "could not parse the JSON body" in resp.json()["error"]["message"]
    )
    with pytest.raises(openai.NotFoundError) as exc:
        client(fresh_sim).chat.completions.create(
            model="gpt-9", messages=[{"role": "user", "content": "x"}]
        )
    assert exc.value.code == "model_not_found"


def test_completions_are_deterministic_and_bounded_by_max_tokens(fresh_sim: SimServer) -> None:
    c = client(fresh_sim)
    msgs = [{"role": "user", "content": "tell me a story"}]
    a = c.chat.completions.create(model="gpt-4o", messages=msgs)
    b = c.chat.completions.create(model="gpt-4o", messages=msgs)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.choices[0].finish_reason == "stop"
    short = c.chat.completions.create(model="gpt-4o", messages=msgs, max_completion_tokens=3)
    assert short.usage is not None and short.usage.completion_tokens <= 3
    assert short.choices[0].finish_reason == "length"
    text = short.choices[0].message.content or ""
    assert get_encoder("o200k_base").count(text) == short.usage.completion_tokens


def test_tool_calls_for_agent_loops(fresh_sim: SimServer) -> None:
    c = client(fresh_sim)
    msgs: list[Any] = [
        *WEATHER_MESSAGES[:1],
        {"role": "user", "content": "call:get_current_weather please"},
    ]
    first = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=WEATHER_TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    call = calls[0]
    assert call.function.name == "get_current_weather"
    assert json.loads(call.function.arguments)["unit"] == "celsius"
    again = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=WEATHER_TOOLS)
    assert again.choices[0].message.tool_calls[0].id == call.id
    msgs += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18C"},
    ]
    second = c.chat.completions.create(model="gpt-4o", messages=msgs, tools=WEATHER_TOOLS)
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content
    forced = c.chat.completions.create(
        model="gpt-4o",
        messages=WEATHER_MESSAGES,
        tools=WEATHER_TOOLS,
        tool_choice="required",
    )
    assert forced.choices[0].message.tool_calls


def test_prefix_cache_counts_shared_blocks(fresh_sim: SimServer) -> None:
    c = client(fresh_sim)

    def cached(msgs: list[dict[str, str]], model: str = "gpt-4o") -> tuple[int, int]:
        usage = c.chat.completions.create(model=model, messages=msgs).usage
        assert usage is not None and usage.prompt_tokens_details is not None
        return usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens or 0

    short = [{"role": "user", "content": "hello there"}]
    assert cached(short) == (cached(short)[0], 0)  # under 1024 tokens: never cached
    conversation = [{"role": "system", "content": LONG}, {"role": "user", "content": "q1"}]
    prompt, hit = cached(conversation)
    assert prompt > 2048 and hit == 0
    prompt2, hit2 = cached(conversation)
    assert prompt2 == prompt and hit2 % 128 == 0 and prompt - 128 <= hit2 < prompt
    grown = [
        *conversation,
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]
    prompt3, hit3 = cached(grown)
    assert hit3 >= hit2 and hit3 % 128 == 0 and hit3 < prompt3
    changed_head = [{"role": "system", "content": "Different. " + LONG}, *conversation[1:]]
    assert cached(changed_head)[1] == 0
    assert cached(conversation, "mystery-1")[1] == 0  # caches are per model


def test_async_client_streams_with_usage_only_when_asked(fresh_sim: SimServer) -> None:
    asyncio.run(_async_streams(fresh_sim))


async def _async_streams(fresh_sim: SimServer) -> None:
    c = openai.AsyncOpenAI(base_url=fresh_sim.url("/v1"), api_key="k", max_retries=0)
    msgs: Any = [{"role": "user", "content": "stream me"}]
    whole = await c.chat.completions.create(model="gpt-4o", messages=msgs)
    stream = await c.chat.completions.create(
        model="gpt-4o", messages=msgs, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len(chunks) > 4
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(ch.usage is None for ch in chunks[:-1])
    plain = await c.chat.completions.create(model="gpt-4o", messages=msgs, stream=True)
    plain_chunks = [chunk async for chunk in plain]
    assert all(ch.usage is None and ch.choices for ch in plain_chunks)
    assert plain_chunks[-1].choices[0].finish_reason == "stop"
    await c.close()


def test_sync_stream_raw_sse_ends_with_done(fresh_sim: SimServer) -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "stream": True}
    with httpx.stream("POST", fresh_sim.url("/v1/chat/completions"), json=body) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    sync = client(fresh_sim).chat.completions.create(
        model="gpt-4o", messages=body["messages"], stream=True
    )
    assert sum(1 for _ in sync) == len(lines) - 1


def test_chunks_flush_incrementally_and_disconnect_is_seen(fresh_sim: SimServer) -> None:
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "long"}],
        "stream": True,
        "max_tokens": 40,
    }
    with httpx.stream(
        "POST",
        fresh_sim.url("/v1/chat/completions"),
        json=body,
        headers={"x-sim-chunk-delay": "0.2"},
    ) as resp:
        lines = resp.iter_lines()  # keep a reference: dropping the iterator closes the stream
        first = next(lines)
        assert first.startswith("data: ")
        time.sleep(0.1)
        assert fresh_sim.stats()["streams_open"] == 1
    # The client closed the connection mid-stream: the sim notices and frees the stream.
    stats = fresh_sim.wait_for(lambda s: s["streams_open"] == 0 and s["in_flight"] == 0)
    assert stats["streams_cancelled"] == 1 and stats["streams_completed"] == 0


def test_models_endpoint_and_request_log(fresh_sim: SimServer) -> None:
    models = client(fresh_sim).models.list()
    ids = {m.id for m in models.data}
    assert {"gpt-4o", "gpt-4", "deepseek-chat", "mystery-1", "claude-sim", "gpt-4o-small"} <= ids
    post(
        fresh_sim,
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "logged"}]},
        headers={"x-trace": "t1"},
    )
    log = httpx.get(fresh_sim.url("/sim/requests"), params={"limit": 1}).json()["requests"]
    assert log[-1]["body"]["messages"][0]["content"] == "logged"
    assert log[-1]["headers"]["x-trace"] == "t1" and log[-1]["status"] == 200
    assert log[-1]["prompt_tokens"] == fresh_sim.last_request()["prompt_tokens"]
    httpx.post(fresh_sim.url("/sim/reset"))
    assert fresh_sim.requests() == [] and fresh_sim.stats()["requests_total"] == 0


def test_custom_models_and_api_keys() -> None:
    tiny = SimModel("tiny", context_window=64, max_output=16, completion_tokens=4)
    skew = replace(get_builtin("gpt-4o"), name="skew", token_scale=1.5, per_message=5)
    with run_sim([tiny, skew], api_keys=["sk-good"]) as s:
        assert client(s, api_key="sk-good").models.list().data[0].id == "tiny"
        missing = httpx.post(s.url("/v1/chat/completions"), json={"model": "tiny", "messages": []})
        assert (
            missing.status_code == 401
            and "didn't provide an API key" in missing.json()["error"]["message"]
        )
        with pytest.raises(openai.AuthenticationError) as exc:
            openai.OpenAI(
                base_url=s.url("/v1"), api_key="sk-wrong-key", max_retries=0
            ).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}])
        assert exc.value.code == "invalid_api_key"
        good = client(s, api_key="sk-good")
        msgs: Any = [{"role": "user", "content": "a b c d e f g"}]
        base = good.chat.completions.create(model="tiny", messages=msgs).usage
        skewed = good.chat.completions.create(model="skew", messages=msgs).usage
        assert base is not None and skewed is not None and skewed.prompt_tokens > base.prompt_tokens
        with pytest.raises(openai.BadRequestError):
            good.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "w " * 100}]
            )
        wrong = httpx.post(
            s.url("/v1/messages"), json={}, headers={"x-api-key": "nope", "anthropic-version": "1"}
        )
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"


# ----------------------------------------------------------------------------------- Anthropic


def test_anthropic_messages_shape_and_cache_usage(fresh_sim: SimServer) -> None:
    body: dict[str, Any] = {
        "model": "claude-sim",
        "max_tokens": 64,
        "system": [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "what is fact7?"}],
    }
    first = messages_post(fresh_sim, body)
    assert first.status_code == 200, first.text
    msg = first.json()
    assert (
        msg["type"] == "message" and msg["role"] == "assistant" and msg["stop_reason"] == "end_turn"
    )
    assert msg["content"][0]["type"] == "text" and msg["content"][0]["text"]
    u1 = msg["usage"]
    assert u1["cache_read_input_tokens"] == 0 and u1["cache_creation_input_tokens"] > 1024
    assert 0 < u1["input_tokens"] < 50  # only what follows the breakpoint
    u2 = messages_post(fresh_sim, body).json()["usage"]
    assert u2["cache_read_input_tokens"] == u1["cache_creation_input_tokens"]
    assert u2["cache_creation_input_tokens"] == 0 and u2["input_tokens"] == u1["input_tokens"]
    total = sum(
        u1[k] for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    no_cache = {**body, "system": LONG}
    u3 = messages_post(fresh_sim, no_cache).json()["usage"]
    assert u3["input_tokens"] == total and u3["cache_read_input_tokens"] == 0
    assert messages_post(fresh_sim, {**body, "model": "gpt-4o"}).status_code == 404
    versionless = httpx.post(fresh_sim.url("/v1/messages"), json=body, headers={"x-api-key": "k"})
    assert versionless.status_code == 400 and "anthropic-version" in versionless.text


def _rounds(n: int) -> list[dict[str, Any]]:
    """``n`` tool rounds after a first user message: each a call and its result, two blocks."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        call = {"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"path": f"f{i}"}}
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"file {i} holds {i}"}
        out += [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
    return out


def _marked_last(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with a breakpoint on the last block only, as agents mark them."""
    last = messages[-1]
    blocks = [dict(b) for b in last["content"]]
    blocks[-1]["cache_control"] = {"type": "ephemeral"}
    return [*messages[:-1], {**last, "content": blocks}]


@pytest.mark.parametrize(("added", "reads"), [(1, True), (10, True), (11, False)])
def test_anthropic_breakpoints_look_back_twenty_blocks(
    fresh_sim: SimServer, added: int, reads: bool
) -> None:
    """A breakpoint reads an earlier request's write that ends up to 20 content blocks before
    it (Anthropic's documented lookback): a client marking only its last block reads the
    previous request's prompt while a round adds at most 20 blocks (10 rounds of a call and a
    result), and writes the whole prompt afresh beyond."""
    start = [{"role": "user", "content": [{"type": "text", "text": LONG}]}, *_rounds(2)]
    body: dict[str, Any] = {"model": "claude-sim", "max_tokens": 16}
    first = messages_post(fresh_sim, {**body, "messages": _marked_last(start)}).json()["usage"]
    written = first["cache_creation_input_tokens"]
    assert first["cache_read_input_tokens"] == 0 and written > 1024
    grown = [*start, *_rounds(2 + added)[4:]]
    second = messages_post(fresh_sim, {**body, "messages": _marked_last(grown)}).json()["usage"]
    assert second["cache_read_input_tokens"] == (written if reads else 0)
    prompt = sum(second[k] for k in ("input_tokens", "cache_read_input_tokens"))
    assert prompt + second["cache_creation_input_tokens"] > written


def test_anthropic_automatic_caching_marks_the_last_block_and_is_one_of_four(
    fresh_sim: SimServer,
) -> None:
    """The request's own ``cache_control`` (Anthropic's automatic caching) is a breakpoint on
    its last block, counted among the 4 a request may carry."""
    messages = [{"role": "user", "content": [{"type": "text", "text": LONG}]}, *_rounds(2)]
    body: dict[str, Any] = {
        "model": "claude-sim",
        "max_tokens": 16,
        "cache_control": {"type": "ephemeral"},
        "messages": messages,
    }
    first = messages_post(fresh_sim, body).json()["usage"]
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 1024
    second = messages_post(fresh_sim, body).json()["usage"]
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    marked = [
        {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
        for i in range(4)
    ]
    four = {
        **body,
        "messages": [
            *messages,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": marked},
        ],
    }
    refused = messages_post(fresh_sim, four)
    assert refused.status_code == 400 and "Found 5" in refused.text
    assert messages_post(fresh_sim, {**four, "cache_control": None}).status_code == 200


def test_anthropic_server_tool_and_search_result_blocks_are_read(fresh_sim: SimServer) -> None:
    """A server tool's call and result (both in the assistant's turn) and a ``search_result``
    block are taken as Anthropic takes them, and read as their JSON; misplaced, refused."""
    body: dict[str, Any] = {"model": "claude-sim", "max_tokens": 16, "messages": SEARCHED}
    answered = messages_post(fresh_sim, body)
    assert answered.status_code == 200, answered.text
    plain = [SEARCHED[0], {"role": "assistant", "content": "It is sunny."}, SEARCHED[2]]
    plain[2] = {"role": "user", "content": "And on Friday?"}
    fewer = messages_post(fresh_sim, {**body, "messages": plain}).json()["usage"]
    assert answered.json()["usage"]["input_tokens"] > fewer["input_tokens"] + 60
    misplaced = [{"role": "user", "content": SEARCHED[1]["content"][:1]}]
    refused = messages_post(fresh_sim, {**body, "messages": misplaced})
    assert refused.status_code == 400 and "only allowed in assistant" in refused.text
    untitled = {k: v for k, v in SEARCHED[2]["content"][0].items() if k != "title"}
    bad = [{"role": "user", "content": [untitled]}]
    assert messages_post(fresh_sim, {**body, "messages": bad}).status_code == 400


def _image_prompts(sim: SimServer, url: str) -> tuple[httpx.Response, httpx.Response]:
    """One user image by URL on each image-taking wire: OpenAI chat, Anthropic Messages."""
    chat = post(
        sim,
        {
            "model": "gpt-4o",
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
            ],
        },
    )
    block = {"type": "image", "source": {"type": "url", "url": url}}
    messages = messages_post(
        sim,
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": [block, {"type": "text", "text": "?"}]}],
        },
    )
    return chat, messages


class _Images:
    """A loopback HTTP server that counts every request: ``/img.png`` (64x32), ``/text``."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from threading import Thread

        hits: list[str] = []
        self.hits = hits

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hits.append(self.path)
                body = png(64, 32) if self.path == "/img.png" else b"plain text"
                self.send_response(200 if self.path in ("/img.png", "/text") else 404)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def images() -> Iterator[_Images]:
    server = _Images()
    yield server
    server.close()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_simulator_fetches_no_url_unless_started_to(
    fresh_sim: SimServer, images: _Images
) -> None:
    """Off by default on both wires: a loopback image URL is priced at the assumed size, never
    fetched, whatever is (or is not) listening behind it; no client can turn fetching on."""
    assumed = None
    for url in (
        images.url("/img.png"),
        images.url("/text"),
        f"http://127.0.0.1:{_closed_port()}/a.png",
        "http://localhost:6379/",
    ):
        chat, messages = _image_prompts(fresh_sim, url)
        assert chat.status_code == messages.status_code == 200, (url, chat.text, messages.text)
        usage = (chat.json()["usage"]["prompt_tokens"], messages.json()["usage"]["input_tokens"])
        assert assumed in (None, usage), url
        assumed = usage
    assert images.hits == []
    r = httpx.post(fresh_sim.url("/sim/config"), json={"fetch_loopback_images": True})
    assert r.status_code == 400 and "not over HTTP" in r.text
    assert fresh_sim.config.fetch_loopback_images is False


def test_a_fetching_simulator_tells_no_port_from_another(
    fresh_sim: SimServer, images: _Images
) -> None:
    """Started to fetch (in process here; ``--fetch-loopback-images`` on the command line), it
    reads a real image exactly, and answers every failure with one message: a closed port, a
    404, a non-image body and a port that does not speak HTTP are indistinguishable."""
    fresh_sim.state.config.fetch_loopback_images = True
    ok, ok_messages = _image_prompts(fresh_sim, images.url("/img.png"))
    assert ok.status_code == ok_messages.status_code == 200
    assert images.hits == ["/img.png", "/img.png"]
    seen: dict[str, set[str]] = {"chat": set(), "messages": set()}
    for url in (
        f"http://127.0.0.1:{_closed_port()}/x.png",  # closed
        images.url("/no-such.png"),  # open, 404
        images.url("/text"),  # open, 200, not an image
        "http://127.0.0.1:6379/x.png",  # open, not HTTP (Redis)
    ):
        chat, messages = _image_prompts(fresh_sim, url)
        assert chat.status_code == messages.status_code == 400, (url, chat.text)
        seen["chat"].add(chat.json()["error"]["message"].replace(url, "<url>"))
        seen["messages"].add(messages.json()["error"]["message"].replace(url, "<url>"))
    assert len(seen["chat"]) == 1 and len(seen["messages"]) == 1, seen


def test_anthropic_images_and_breakpoint_limit(fresh_sim: SimServer) -> None:
    def block(data: bytes, media: str = "image/png") -> dict[str, Any]:
        source = {"type": "base64", "media_type": media, "data": base64.b64encode(data).decode()}
        return {"type": "image", "source": source}

    def usage(content: list[dict[str, Any]]) -> Any:
        body = {
            "model": "claude-sim",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": content}],
        }
        return messages_post(fresh_sim, body)

    text = {"type": "text", "text": "describe"}
    plain = usage([text]).json()["usage"]["input_tokens"]
    assert usage([block(png(200, 200)), text]).json()["usage"]["input_tokens"] - plain == 54
    assert usage([block(png(1000, 1000)), text]).json()["usage"]["input_tokens"] - plain == 1334
    mismatch = usage([block(png(20, 20), "image/jpeg"), text])
    assert mismatch.status_code == 400 and "does not match the provided media type" in mismatch.text
    marked = [{**text, "cache_control": {"type": "ephemeral"}} for _ in range(5)]
    assert "A maximum of 4 blocks with cache_control" in usage(marked).text


def test_anthropic_validation_and_overflow(fresh_sim: SimServer) -> None:
    def error(body: dict[str, Any]) -> str:
        resp = messages_post(fresh_sim, body)
        assert resp.status_code == 400, resp.text
        payload = resp.json()
        assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
        return str(payload["error"]["message"])

    user = {"role": "user", "content": "hi"}
    assert "max_tokens: Field required" in error({"model": "claude-sim", "messages": [user]})
    big = {"role": "user", "content": "word " * 9000}
    assert re.fullmatch(
        r"prompt is too long: \d+ tokens > 8192 maximum",
        error({"model": "claude-sim-small", "max_tokens": 10, "messages": [big]}),
    )
    use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    dangling = [user, {"role": "assistant", "content": [use]}, {"role": "user", "content": "ok?"}]
    assert "`tool_use` ids were found without `tool_result` blocks" in error(
        {"model": "claude-sim", "max_tokens": 10, "messages": dangling}
    )
    orphan = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "1"}],
    }
    assert "unexpected `tool_use_id`" in error(
        {"model": "claude-sim", "max_tokens": 10, "messages": [orphan]}
    )
    assert "Extra inputs are not permitted" in error(
        {"model": "claude-sim", "max_tokens": 10, "messages": [user], "routefit": True}
    )


def _anthropic_refusal(sim: SimServer, body: dict[str, Any]) -> str:
    """The message of Anthropic's 400 ``invalid_request_error`` for a body, in its shape."""
    resp = messages_post(sim, body)
    assert resp.status_code == 400, resp.text
    payload = resp.json()
    assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
    return str(payload["error"]["message"])


_H1 = {"type": "ephemeral", "ttl": "1h"}
_M5 = {"type": "ephemeral"}


def _ttl_body(tool: Any = None, system: Any = None, message: Any = None) -> dict[str, Any]:
    """A body with a breakpoint (or none) on its one tool, system block and user block."""

    def marked(block: dict[str, Any], mark: Any) -> dict[str, Any]:
        return {**block, "cache_control": mark} if mark is not None else block

    return {
        "model": "claude-sim",
        "max_tokens": 10,
        "tools": [marked({"name": "f", "input_schema": {"type": "object"}}, tool)],
        "system": [marked({"type": "text", "text": "be brief"}, system)],
        "messages": [
            {"role": "user", "content": [marked({"type": "text", "text": "hi"}, message)]}
        ],
    }


@pytest.mark.parametrize(
    ("tool", "system", "message", "where"),
    [
        (_M5, None, _H1, "messages.0.content.0"),
        (None, _M5, _H1, "messages.0.content.0"),
        (_M5, _H1, None, "system.0"),
        ({**_M5, "ttl": "5m"}, None, _H1, "messages.0.content.0"),
        (_H1, _M5, _H1, "messages.0.content.0"),
    ],
)
def test_anthropic_refuses_a_one_hour_breakpoint_after_a_five_minute_one(
    fresh_sim: SimServer, tool: Any, system: Any, message: Any, where: str
) -> None:
    """Anthropic processes breakpoints tools → system → messages, and a ``ttl: "1h"`` one may
    not follow a 5-minute one (no ``ttl``, or "5m"): 400, in Anthropic's own words."""
    assert _anthropic_refusal(fresh_sim, _ttl_body(tool, system, message)) == (
        f"{where}.cache_control.ttl: a ttl='1h' cache_control block must not come after a "
        "ttl='5m' cache_control block. Note that blocks are processed in the following order: "
        "`tools`, `system`, `messages`."
    )


@pytest.mark.parametrize(
    ("tool", "system", "message"),
    [(_H1, _M5, _M5), (_H1, _H1, _M5), (_H1, _H1, _H1), (_M5, _M5, _M5), (None, _H1, _M5)],
)
def test_anthropic_takes_one_hour_breakpoints_before_five_minute_ones(
    fresh_sim: SimServer, tool: Any, system: Any, message: Any
) -> None:
    resp = messages_post(fresh_sim, _ttl_body(tool, system, message))
    assert resp.status_code == 200, resp.text


def test_anthropic_refuses_an_unknown_ttl_and_a_thinking_budget_under_1024(
    fresh_sim: SimServer,
) -> None:
    two_hours = _ttl_body(message={"type": "ephemeral", "ttl": "2h"})
    assert "Input should be '5m' or '1h'" in _anthropic_refusal(fresh_sim, two_hours)
    user = {"role": "user", "content": "hi"}
    base = {"model": "claude-sim", "max_tokens": 4000, "messages": [user]}
    for thinking, words in [
        ({"budget_tokens": 1023}, "budget_tokens: Input should be greater than or equal to 1024"),
        ({"budget_tokens": 0}, "budget_tokens: Input should be greater than or equal to 1024"),
        ({"budget_tokens": "2000"}, "budget_tokens: Input should be a valid integer"),
        ({}, "thinking.enabled.budget_tokens: Field required"),
    ]:
        body = {**base, "thinking": {"type": "enabled", **thinking}}
        assert words in _anthropic_refusal(fresh_sim, body)
    over = {**base, "max_tokens": 1024, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    assert "must be greater than `thinking.budget_tokens`" in _anthropic_refusal(fresh_sim, over)
    least = {**base, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    assert messages_post(fresh_sim, least).status_code == 200


@pytest.mark.parametrize("bad", [5, None, ["t1"], {"id": "t1"}])
def test_anthropic_tool_use_id_of_the_wrong_type_is_refused(fresh_sim: SimServer, bad: Any):
    use = {"type": "tool_use", "id": bad, "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    body = {
        "model": "claude-sim",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ],
    }
    words = "messages.1.content.0.id: Input should be a valid string"
    assert words in _anthropic_refusal(fresh_sim, body)


def test_anthropic_tool_use_and_stream_events(fresh_sim: SimServer) -> None:
    tools = [
        {
            "name": "lookup",
            "description": "Look up",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ]
    body: dict[str, Any] = {
        "model": "claude-sim",
        "max_tokens": 100,
        "tools": tools,
        "messages": [{"role": "user", "content": "call:lookup now"}],
    }
    msg = messages_post(fresh_sim, body).json()
    assert msg["stop_reason"] == "tool_use"
    use = msg["content"][0]
    assert use["type"] == "tool_use" and use["name"] == "lookup" and use["id"].startswith("toolu_")
    with_tools = msg["usage"]["input_tokens"]
    without = messages_post(fresh_sim, {k: v for k, v in body.items() if k != "tools"})
    assert with_tools - without.json()["usage"]["input_tokens"] > 346  # the tool-use system prompt
    follow = [
        *body["messages"],
        {"role": "assistant", "content": [use]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "found"}],
        },
    ]
    events = []
    with httpx.stream(
        "POST",
        fresh_sim.url("/v1/messages"),
        json={**body, "messages": follow, "stream": True},
        headers=ANTHROPIC_HEADERS,
    ) as resp:
        for line in resp.iter_lines():
            if line.startswith("event: "):
                events.append(line[7:])
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == events[-1]
                if data["type"] == "message_start":
                    assert data["message"]["usage"]["input_tokens"] > 0
                if data["type"] == "message_delta":
                    assert (
                        data["delta"]["stop_reason"] == "end_turn"
                        and data["usage"]["output_tokens"] > 0
                    )
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert {
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
    } <= set(events)


def test_litellm_anthropic_and_openai_paths(fresh_sim: SimServer) -> None:
    import litellm

    async def run() -> None:
        msgs = [{"role": "system", "content": "Be short."}, {"role": "user", "content": "hello"}]
        resp = await litellm.acompletion(
            model="anthropic/claude-sim",
            api_base=fresh_sim.base_url,
            api_key="x",
            messages=msgs,
            max_tokens=20,
        )
        sent = fresh_sim.last_request("/v1/messages")
        assert sent["body"]["system"] and sent["headers"]["x-api-key"] == "x"
        assert resp.usage.prompt_tokens == sent["prompt_tokens"]
        stream = await litellm.acompletion(
            model="anthropic/claude-sim",
            api_base=fresh_sim.base_url,
            api_key="x",
            messages=msgs,
            max_tokens=20,
            stream=True,
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == resp.choices[0].message.content
        via_openai = await litellm.acompletion(
            model="openai/gpt-4o",
            api_base=fresh_sim.url("/v1"),
            api_key="x",
            messages=msgs,
            max_tokens=20,
        )
        assert (
            via_openai.usage.prompt_tokens
            == fresh_sim.last_request("/v1/chat/completions")["prompt_tokens"]
        )

    asyncio.run(run())


# -------------------------------------------------------------------------------------- faults


@pytest.mark.parametrize("status", [429, 500, 502, 503, 401, 403])
def test_status_faults(fresh_sim: SimServer, status: int) -> None:
    resp = post(fresh_sim, SIMPLE, fault=f"status:{status}")
    assert resp.status_code == status
    assert set(resp.json()["error"]) == {"message", "type", "param", "code"}
    if status == 429:
        assert resp.headers["retry-after"] == "1"
    anthropic = messages_post(
        fresh_sim,
        {"model": "claude-sim", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
        **{"x-sim-fault": f"status:{status}"},
    )
    assert anthropic.status_code == status and anthropic.json()["type"] == "error"


def test_rate_limit_through_the_sdk_and_global_fault_queue(fresh_sim: SimServer) -> None:
    rules = {"faults": [{"fault": "status:429", "count": 2, "model": "gpt-4o"}]}
    assert httpx.post(fresh_sim.url("/sim/faults"), json=rules).status_code == 200
    c = client(fresh_sim)
    for _ in range(2):
        with pytest.raises(openai.RateLimitError):
            c.chat.completions.create(**SIMPLE)
    assert (
        post(fresh_sim, {**SIMPLE, "model": "gpt-4"}).status_code == 200
    )  # other model unaffected
    assert c.chat.completions.create(**SIMPLE).choices
    # the SDK's own retries get through once the queue is drained
    fresh_sim.inject("status:503", 1)
    retrying = openai.OpenAI(base_url=fresh_sim.url("/v1"), api_key="k", max_retries=1)
    assert retrying.with_options(timeout=10).chat.completions.create(**SIMPLE).choices
    assert fresh_sim.stats()["faults"] == {"status": 3}
    assert httpx.get(fresh_sim.url("/sim/faults")).json()["faults"] == []


def test_delay_fault_times_out_the_client(fresh_sim: SimServer) -> None:
    # a delay far past the client's timeout: a timeout error is the client giving up (had the
    # delay not held the answer back, the call would have succeeded)
    with pytest.raises(openai.APITimeoutError):
        client(fresh_sim, timeout=0.3).chat.completions.create(
            **SIMPLE, extra_headers={"x-sim-fault": "delay:30"}
        )
    fresh_sim.wait_for(lambda s: s["in_flight"] == 0)  # the sim gave up on the abandoned request
    slow = post(fresh_sim, SIMPLE, fault="delay:0.2")
    assert slow.status_code == 200 and slow.elapsed.total_seconds() >= 0.2


def test_reset_fault_drops_the_connection(fresh_sim: SimServer) -> None:
    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        post(fresh_sim, SIMPLE, fault="reset")
    with pytest.raises(openai.APIConnectionError):
        client(fresh_sim).chat.completions.create(**SIMPLE, extra_headers={"x-sim-fault": "reset"})
    assert post(fresh_sim, SIMPLE).status_code == 200


def test_malformed_fault(fresh_sim: SimServer) -> None:
    resp = post(fresh_sim, SIMPLE, fault="malformed")
    assert resp.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        resp.json()
    with httpx.stream(
        "POST",
        fresh_sim.url("/v1/chat/completions"),
        json={**SIMPLE, "stream": True},
        headers={"x-sim-fault": "malformed"},
    ) as s:
        datas = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    bad = 0
    for d in datas[:-1]:
        try:
            json.loads(d)
        except json.JSONDecodeError:
            bad += 1
    assert bad == 1 and datas[-1] == "[DONE]"


def test_cut_stream_fault(fresh_sim: SimServer) -> None:
    body = {**SIMPLE, "stream": True, "stream_options": {"include_usage": True}}
    received = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream(
            "POST",
            fresh_sim.url("/v1/chat/completions"),
            json=body,
            headers={"x-sim-fault": "cut-stream:3"},
        ) as s,
    ):
        for line in s.iter_lines():
            if line:
                received.append(line)
    assert len(received) == 3 and "data: [DONE]" not in received
    stats = fresh_sim.wait_for(lambda s: s["streams_open"] == 0)
    assert stats["streams_cut"] == 1
    with pytest.raises(httpx.RemoteProtocolError):
        post(fresh_sim, SIMPLE, fault="cut-stream:0")  # non-stream: a truncated body


def test_no_usage_fault(fresh_sim: SimServer) -> None:
    assert "usage" not in post(fresh_sim, SIMPLE, fault="no-usage").json()
    stream = client(fresh_sim).chat.completions.create(
        **SIMPLE,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-sim-fault": "no-usage"},
    )
    assert all(ch.usage is None for ch in stream)
    msg = messages_post(
        fresh_sim,
        {"model": "claude-sim", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
        **{"x-sim-fault": "no-usage"},
    ).json()
    assert "usage" not in msg
    assert post(fresh_sim, SIMPLE, fault="bogus:1").status_code == 400


# -------------------------------------------------------------------------------- standalone


def test_python_dash_m_proxy_sim_runs_standalone() -> None:
    tests_dir = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests_dir), str(tests_dir.parent)])}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy.sim",
            "--port",
            "0",
            "--model",
            "gpt-4o",
            "--model-json",
            '{"base": "gpt-4o", "name": "gpt-4o-tiny", "context_window": 100}',
            "--fetch-loopback-images",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tests_dir,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"http://\S+", line)
        assert url, line
        models = httpx.get(url.group(0) + "/v1/models").json()["data"]
        assert [m["id"] for m in models] == ["gpt-4o", "gpt-4o-tiny"]
        assert httpx.get(url.group(0) + "/sim/config").json()["fetch_loopback_images"] is True
        resp = httpx.post(
            url.group(0) + "/v1/chat/completions", json={**SIMPLE, "model": "gpt-4o-tiny"}
        )
        assert resp.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_an_image_fetch_is_logged_so_a_test_can_say_nobody_fetched_it(fresh_sim: SimServer) -> None:
    """``/sim/images/...`` serves the image-URL tests; unlogged, "nobody fetched it" held
    whatever routefit did (tests/reliability/test_hardening.py)."""
    path = "/sim/images/8x4.png"
    assert not fresh_sim.requests(path=path)
    assert httpx.get(fresh_sim.url(path), timeout=10).status_code == 200
    assert [e["method"] for e in fresh_sim.requests(path=path)] == ["GET"]
