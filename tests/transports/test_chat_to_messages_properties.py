"""The chat → Anthropic Messages mapping, checked against the simulator's validator (an
independent reading of Anthropic's request rules) on generated agent conversations."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.sim.wire_anthropic import validate
from proxy.transports.chat_to_messages import Unmapped, messages_body
from proxy.transports.messages_to_chat import MessagesToChat, chat_completion

text = st.text(min_size=1, max_size=30)


@st.composite
def conversations(draw: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append(
            {"role": draw(st.sampled_from(["system", "developer"])), "content": draw(text)}
        )
    messages.append({"role": "user", "content": draw(text)})
    for turn in range(draw(st.integers(0, 4))):
        calls = [
            {
                "id": f"call_{turn}_{k}",
                "type": "function",
                "function": {
                    "name": "f",
                    "arguments": draw(st.sampled_from(['{"a": 1}', "", "[1]"])),
                },
            }
            for k in range(draw(st.integers(1, 3)))
        ]
        said = draw(st.one_of(st.none(), text))
        messages.append({"role": "assistant", "content": said, "tool_calls": calls})
        messages += [
            {"role": "tool", "tool_call_id": c["id"], "content": draw(text)} for c in calls
        ]
        if draw(st.booleans()):
            messages.append({"role": "user", "content": [{"type": "text", "text": draw(text)}]})
        if draw(st.booleans()):
            messages.append({"role": "system", "content": draw(text)})
    return messages


def _texts(chat: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in chat:
        content = m.get("content")
        if m["role"] not in ("user", "tool") and isinstance(content, str) and not content.strip():
            continue  # an assistant's or the system's whitespace alone: Anthropic refuses it
        if isinstance(content, str) and content:
            out.append(content)
        elif isinstance(content, list):
            out += [p["text"] for p in content if p.get("text")]
    return sorted(out)


def _sent_texts(body: dict[str, Any]) -> list[str]:
    out = [b["text"] for b in body.get("system", [])]
    for m in body["messages"]:
        for b in m["content"]:
            if b["type"] == "text":
                out.append(b["text"])
            elif b["type"] == "tool_result" and b.get("content"):
                out.append(b["content"])
    return sorted(out)


@settings(max_examples=200, deadline=None)
@given(conversations(), st.sampled_from(["auto", "required", "none", None]), st.booleans())
def test_every_translated_conversation_is_a_valid_messages_request(chat, choice, parallel):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body: dict[str, Any] = {"model": "m", "messages": chat, "tools": [tool]}
    if choice is not None:
        body["tool_choice"] = choice
    if not parallel:
        body["parallel_tool_calls"] = False
    sent = messages_body(body, 4096)
    validate(sent)  # raises the simulator's 400 on anything Anthropic would refuse
    assert _sent_texts(sent) == _texts(chat)
    ids = [c["id"] for m in chat for c in m.get("tool_calls") or []]
    uses = [b["id"] for m in sent["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert uses == ids


@pytest.mark.parametrize(
    "extra",
    [
        {"response_format": {"type": "json_object"}},
        {"n": 2},
        {"reasoning_effort": "high"},
        {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
    ],
)
def test_what_the_mapping_does_not_know_is_refused_not_dropped(extra):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    with pytest.raises(Unmapped):
        messages_body(body, 4096)


@pytest.mark.parametrize(
    "extra",
    [
        {"prompt_cache_key": "k", "prompt_cache_retention": "24h"},
        {"store": True, "metadata": {"a": "b"}},
        {"logprobs": False, "frequency_penalty": 0, "presence_penalty": 0.0},
        {"modalities": ["text"], "service_tier": "auto"},
    ],
)
def test_openais_hints_and_defaults_are_dropped(extra):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert messages_body({**body, **extra}, 4096) == messages_body(body, 4096)


@pytest.mark.parametrize(
    "extra",
    [
        {"logprobs": True},
        {"frequency_penalty": 0.5},
        {"modalities": ["text", "audio"]},
        {"service_tier": "flex"},
        {"seed": 7},
    ],
)
def test_a_value_that_changes_the_answer_is_not_dropped(extra):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    with pytest.raises(Unmapped):
        messages_body(body, 4096)


def test_the_end_user_is_anthropics_metadata_user_id():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    named = messages_body({**body, "safety_identifier": "u-1"}, 4096)
    assert named["metadata"] == {"user_id": "u-1"}
    both = messages_body({**body, "user": "u-2", "safety_identifier": "u-1"}, 4096)
    assert both["metadata"] == {"user_id": "u-2"}


@given(st.lists(st.sampled_from(["hi ", "there", " a"]), min_size=1, max_size=8))
def test_a_stream_says_what_the_whole_answer_says(pieces):
    message = {
        "id": "msg_1",
        "model": "claude",
        "content": [{"type": "text", "text": "".join(pieces)}],
        "stop_reason": "max_tokens",
        "usage": {"input_tokens": 7, "cache_read_input_tokens": 5, "output_tokens": 3},
    }
    events = [
        {"type": "message_start", "message": {**message, "content": [], "usage": message["usage"]}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
            for p in pieces
        ),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens"},
            "usage": {"output_tokens": 3},
        },
        {"type": "message_stop"},
    ]
    mapper = MessagesToChat()
    chunks = [orjson.loads(c[6:]) for e in events for c in mapper.event(e)]
    whole = chat_completion(message)
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert streamed == whole["choices"][0]["message"]["content"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["usage"] == whole["usage"]
    assert whole["usage"]["prompt_tokens"] == 12
