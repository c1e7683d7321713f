"""Invariants of parse → fit → write back on the Anthropic form, for generated sessions."""

from __future__ import annotations

import base64
import io
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from pricing.framing import CLAUDE_TOOLS_PREAMBLE, Framing
from pricing.images import default_image_rule
from pricing.route import Route
from proxy.wires.anthropic import native_body
from proxy.wires.anthropic_parse import parse_anthropic
from proxy.wires.anthropic_render import MAX_BREAKPOINTS, breakpoints
from strategies.fit import FitError, fit
from strategies.policy import FitPolicy

ROUTE = Route(
    alias="claude",
    model="anthropic/claude-sonnet-4-5",
    provider="anthropic",
    context_window=6000,
    max_output_tokens=1024,
    tokenizer="o200k_base",
    framing=Framing(family="generic", tools_preamble=CLAUDE_TOOLS_PREAMBLE),
    image_rule=default_image_rule("claude-sonnet-4-5", True),
    supports_vision=True,
)
POLICY = FitPolicy()


def _png() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (1, 2, 3)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


PNG = _png()
EPHEMERAL = {"type": "ephemeral"}


@st.composite
def sessions(draw: st.DrawFn) -> dict[str, Any]:
    turns = draw(st.integers(1, 14))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Task: investigate."}]
    for t in range(turns):
        calls = draw(st.integers(0, 2))
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": f"think {t}", "signature": f"s{t}"})
        blocks.append({"type": "text", "text": f"step {t} " * draw(st.integers(1, 30))})
        for c in range(calls):
            blocks.append(
                {"type": "tool_use", "id": f"toolu_{t}_{c}", "name": "read", "input": {"n": c}}
            )
        messages.append({"role": "assistant", "content": blocks})
        reply: list[dict[str, Any]] = []
        for c in range(calls):
            content: Any = f"out {t} " * draw(st.integers(1, 400))
            if draw(st.integers(0, 5)) == 0:
                content = [
                    {"type": "text", "text": "screenshot"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                ]
            reply.append(
                {"type": "tool_result", "tool_use_id": f"toolu_{t}_{c}", "content": content}
            )
        if not reply or draw(st.booleans()):
            reply.append({"type": "text", "text": f"user {t} " * draw(st.integers(1, 40))})
        messages.append({"role": "user", "content": reply})
        if draw(st.integers(0, 6)) == 0:
            messages.append({"role": "system", "content": f"reminder {t}"})
    # client breakpoints on up to 3 random text blocks (plus at most one in system)
    texts = [
        b for m in messages for b in m["content"] if isinstance(b, dict) and b["type"] == "text"
    ]
    for i in draw(st.lists(st.integers(0, len(texts) - 1), max_size=3, unique=True)):
        texts[i]["cache_control"] = EPHEMERAL
    system = [{"type": "text", "text": "You are an agent.", "cache_control": EPHEMERAL}]
    return {"model": "claude", "max_tokens": 1024, "system": system, "messages": messages}


def _fitted(body: dict[str, Any]) -> dict[str, Any] | None:
    request = parse_anthropic(body)
    try:
        fitted = fit(request, ROUTE, POLICY)
    except FitError:
        return None
    return dict(native_body(request, fitted))


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


COMMON = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@COMMON
@given(sessions())
def test_tool_results_are_never_orphaned(body: dict[str, Any]) -> None:
    # (Anthropic merges consecutive turns of one role, so alternation is not required; a
    # tool_result must be in the message right after its tool_use, and every tool_use answered.)
    out = _fitted(body)
    if out is None:
        return
    msgs = out["messages"]
    for i, m in enumerate(msgs):
        uses = {b["id"] for b in _blocks(m) if b["type"] == "tool_use"}
        results = {b["tool_use_id"] for b in _blocks(m) if b["type"] == "tool_result"}
        if results:
            before = (
                {b["id"] for b in _blocks(msgs[i - 1]) if b["type"] == "tool_use"} if i else set()
            )
            assert results <= before
        if uses:
            after = {b["tool_use_id"] for b in _blocks(msgs[i + 1]) if b["type"] == "tool_result"}
            assert uses <= after


@COMMON
@given(sessions())
def test_thinking_stays_with_its_turn_unaltered(body: dict[str, Any]) -> None:
    out = _fitted(body)
    if out is None:
        return
    originals = [orjson.dumps(m) for m in body["messages"] if m["role"] == "assistant"]
    for m in out["messages"]:
        if any(b["type"] in ("thinking", "tool_use") for b in _blocks(m)):
            # an assistant turn with thinking or tool calls goes out as the client sent it
            assert orjson.dumps(m) in originals


@COMMON
@given(sessions())
def test_never_more_than_four_breakpoints(body: dict[str, Any]) -> None:
    out = _fitted(body)
    if out is None:
        return
    assert breakpoints(out, out["messages"]) <= MAX_BREAKPOINTS


@COMMON
@given(sessions())
def test_same_input_same_bytes_and_unchanged_messages_reused(body: dict[str, Any]) -> None:
    again = orjson.loads(orjson.dumps(body))
    first, second = _fitted(body), _fitted(again)
    if first is None:
        assert second is None
        return
    assert orjson.dumps(first) == orjson.dumps(second)
    sent = {id(m) for m in body["messages"]}
    same = [m for m in first["messages"] if id(m) in sent]
    untouched = [m for m in first["messages"] if any(m == o for o in body["messages"])]
    assert len(same) >= len(untouched) - 1  # only the head breakpoint's message is a copy


def test_a_request_that_fits_goes_out_as_the_very_object() -> None:
    body = {"model": "claude", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    assert _fitted(body) is not None
    request = parse_anthropic(body)
    assert native_body(request, fit(request, ROUTE, POLICY)) is body
