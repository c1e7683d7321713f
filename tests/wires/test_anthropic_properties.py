"""Invariants of parse → fit → write back on the Anthropic form, for generated sessions."""

from __future__ import annotations

import base64
import io
from typing import Any

import orjson
from depth import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from media_files import document_block, text_pdf
from PIL import Image

from pricing.calibration import Correction
from pricing.framing import CLAUDE_TOOLS_PREAMBLE, Framing
from pricing.images import default_image_rule
from pricing.meter import measure
from pricing.route import Route
from proxy.wires.anthropic import native_body
from proxy.wires.anthropic_parse import parse_anthropic
from proxy.wires.anthropic_render import MAX_BREAKPOINTS, breakpoints, mark_head
from strategies.fit import FitError, fit
from strategies.policy import STRATEGIES, FitPolicy, prompt_budget

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
#: The default policy masks old tool outputs before it elides, so on these sessions it almost
#: never elides and routefit's head mark almost never falls on an assistant turn (0 in 300
#: examples); a policy that elides without masking (a deployment may configure one) puts it
#: there in about one example in 30, so the properties draw both.
POLICIES = [POLICY, FitPolicy(strategies=tuple(s for s in STRATEGIES if s != "mask"))]


def _png() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (1, 2, 3)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


PNG = _png()
#: A one-page PDF (~2,300 tokens: its text and the page's picture), priced from its pages.
PDF = document_block(text_pdf(1, words=120))
EPHEMERAL = {"type": "ephemeral"}


#: What a generated session may carry a client breakpoint on: tools, system blocks, message
#: blocks (text, tool_result) and the blocks inside a tool_result, as Anthropic counts them all.
TOOLS = [
    {"name": "read", "description": "Read a file.", "input_schema": {"type": "object"}},
    {"name": "grep", "description": "Search files.", "input_schema": {"type": "object"}},
]


def _assistant_turn(draw: st.DrawFn, t: int, calls: int) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    thinking = draw(st.sampled_from(["thinking", "thinking", "redacted_thinking", None]))
    if thinking == "thinking":
        blocks.append({"type": "thinking", "thinking": f"think {t}", "signature": f"s{t}"})
    elif thinking == "redacted_thinking":
        blocks.append({"type": "redacted_thinking", "data": f"opaque{t}"})
    blocks.append({"type": "text", "text": f"step {t} " * draw(st.integers(1, 30))})
    for c in range(calls):
        blocks.append({"type": "tool_use", "id": f"toolu_{t}_{c}", "name": "read", "input": {}})
    return {"role": "assistant", "content": blocks}


def _user_turn(draw: st.DrawFn, t: int, calls: int) -> dict[str, Any]:
    reply: list[dict[str, Any]] = []
    for c in range(calls):
        content: Any = f"out {t} " * draw(st.integers(1, 400))
        shape = draw(st.integers(0, 7))
        if shape == 0:
            content = [
                {"type": "text", "text": "screenshot"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
            ]
        elif shape == 1:
            content = [{"type": "text", "text": content}, {"type": "text", "text": "exit 0"}]
        elif shape == 6:
            content = [dict(PDF)]
        elif shape == 7:  # a block routefit prices as its JSON (the stated fallback)
            text = {"type": "text", "media_type": "text/plain", "data": content}
            content = [{"type": "document", "source": text}]
        reply.append({"type": "tool_result", "tool_use_id": f"toolu_{t}_{c}", "content": content})
    if not reply or draw(st.booleans()):
        reply.append({"type": "text", "text": f"user {t} " * draw(st.integers(1, 40))})
    return {"role": "user", "content": reply}


def _markable(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every block a client may put ``cache_control`` on, in request order."""
    spots: list[dict[str, Any]] = [*body.get("tools", []), *body["system"]]
    for m in body["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else []:
            if b["type"] in ("text", "tool_result"):
                spots.append(b)
            if b["type"] == "tool_result" and isinstance(b["content"], list):
                spots.extend(x for x in b["content"] if x["type"] == "text")
    return spots


@st.composite
def sessions(draw: st.DrawFn) -> dict[str, Any]:
    """An agent session: thinking turns (often), tool rounds whose results are long strings or
    lists of blocks, a reminder now and then, and up to 4 client breakpoints anywhere Anthropic
    counts one (tools, system blocks, message blocks, blocks inside a tool result, and the
    request's own ``cache_control``: automatic caching, a breakpoint on the last block)."""
    turns = draw(st.integers(1, 14))
    task = "Task: investigate."
    first: Any = task if draw(st.booleans()) else [{"type": "text", "text": task}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    for t in range(turns):
        calls = draw(st.integers(0, 2))
        messages.append(_assistant_turn(draw, t, calls))
        messages.append(_user_turn(draw, t, calls))
        if draw(st.integers(0, 6)) == 0:
            messages.append({"role": "system", "content": f"reminder {t}"})
    system = [{"type": "text", "text": "You are an agent."}]
    if draw(st.booleans()):
        system.append({"type": "text", "text": "Work in /repo."})
    body: dict[str, Any] = {"model": "claude", "max_tokens": 1024, "system": system}
    if draw(st.booleans()):
        body["tools"] = [dict(tool) for tool in TOOLS]
    body["messages"] = messages
    automatic = draw(st.booleans())
    if automatic:  # automatic caching: Anthropic marks the last block, one of the 4
        body["cache_control"] = EPHEMERAL
    spots = _markable(body)
    most = MAX_BREAKPOINTS - automatic
    for i in draw(st.lists(st.integers(0, len(spots) - 1), max_size=most, unique=True)):
        spots[i]["cache_control"] = EPHEMERAL
    return body


def _fitted(body: dict[str, Any], policy: FitPolicy = POLICY) -> dict[str, Any] | None:
    request = parse_anthropic(body)
    try:
        fitted = fit(request, ROUTE, policy)
    except FitError:
        return None
    return dict(native_body(request, fitted))


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _marks(value: Any) -> int:
    """``cache_control`` marks anywhere in a JSON value: the count Anthropic limits to 4,
    taken without routefit's own counter."""
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(_marks(v) for v in value.values())
    if isinstance(value, list):
        return sum(_marks(v) for v in value)
    return 0


#: Elided sessions whose head ends on a thinking turn, or that carry 4 marks one of them on a
#: tool, are a small share of what is generated: the ``ci`` profile searches 1,500 examples
#: for the properties that guard them (DEEP), 500 for the others.
COMMON = settings(
    max_examples=examples(60, 500), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
DEEP = settings(COMMON, max_examples=examples(60, 1500))


@COMMON
@given(sessions(), st.sampled_from(POLICIES))
def test_what_goes_out_is_priced_within_the_budget(body: dict[str, Any], policy: FitPolicy) -> None:
    """The body written back, parsed and priced again, fits: whatever the fit cut, masked or
    offloaded is gone from the wire too (a block kept whole while priced as cut would not)."""
    request = parse_anthropic(body)
    try:
        fitted = fit(request, ROUTE, policy)
    except FitError:
        return
    again = parse_anthropic(dict(native_body(request, fitted)))
    budget = prompt_budget(
        ROUTE.context_window, ROUTE.max_output_tokens, policy, again.max_output_tokens
    )
    assert Correction().price_pressure(measure(again, ROUTE)) <= budget


@COMMON
@given(sessions(), st.sampled_from(POLICIES))
def test_tool_results_are_never_orphaned(body: dict[str, Any], policy: FitPolicy) -> None:
    # (Anthropic merges consecutive turns of one role, so alternation is not required; a
    # tool_result must be in the message right after its tool_use, and every tool_use answered.)
    out = _fitted(body, policy)
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


@DEEP
@given(sessions(), st.sampled_from(POLICIES))
def test_thinking_stays_with_its_turn_unaltered(body: dict[str, Any], policy: FitPolicy) -> None:
    out = _fitted(body, policy)
    if out is None:
        return
    originals = [orjson.dumps(m) for m in body["messages"] if m["role"] == "assistant"]
    for m in out["messages"]:
        if m["role"] == "assistant" and not _is_marker(m):
            # an assistant turn goes out as the client sent it: no breakpoint added to it
            # (thinking blocks carry signatures, tool_use blocks pair with their results)
            assert orjson.dumps(m) in originals
    assert orjson.dumps(out["system"]) == orjson.dumps(body["system"])
    assert orjson.dumps(out.get("tools")) == orjson.dumps(body.get("tools"))


@DEEP
@given(sessions(), st.sampled_from(POLICIES))
def test_never_more_than_four_breakpoints(body: dict[str, Any], policy: FitPolicy) -> None:
    out = _fitted(body, policy)
    if out is None:
        return
    assert _marks(out) <= MAX_BREAKPOINTS
    assert breakpoints(out, out["messages"]) == _marks(out)


def _is_marker(message: dict[str, Any]) -> bool:
    """A message routefit wrote in place of elided ones, and nothing else."""
    return all(
        b["type"] == "text" and b["text"].startswith("[routefit: ") for b in _blocks(message)
    )


def test_the_head_mark_goes_on_the_user_turn_before_a_thinking_turn() -> None:
    # The head of this elided session ends on an assistant turn with a thinking block: the
    # breakpoint routefit adds goes on the user message before it, the turn itself untouched.
    turn = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "plan", "signature": "sig"},
            {"type": "text", "text": "Reading."},
        ],
    }
    messages = [
        {"role": "user", "content": "Task: investigate."},
        turn,
        {"role": "user", "content": "long " * 3000},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "and now?"},
    ]
    head = (1, 1)
    assert mark_head({}, messages, head)
    assert messages[1] is turn
    assert messages[0]["content"] == [
        {"type": "text", "text": "Task: investigate.", "cache_control": {"type": "ephemeral"}}
    ]


def test_the_head_mark_counts_tools_system_and_tool_result_blocks() -> None:
    # Four client marks (a tool, a system block, a tool_result, a block inside one): no fifth.
    body = {
        "tools": [{"name": "read", "input_schema": {}, "cache_control": EPHEMERAL}],
        "system": [{"type": "text", "text": "s", "cache_control": EPHEMERAL}],
    }
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "cache_control": EPHEMERAL,
        "content": [{"type": "text", "text": "out", "cache_control": EPHEMERAL}],
    }
    messages: list[Any] = [
        {"role": "user", "content": "Task"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read"}]},
        {"role": "user", "content": [result, {"type": "text", "text": "go on"}]},
    ]
    assert breakpoints(body, messages) == 4
    assert not mark_head(body, messages, (2, 1))
    assert _marks([body, messages]) == 4
    del body["tools"][0]["cache_control"]
    assert mark_head(body, messages, (2, 1))
    assert _marks([body, messages]) == 4


@COMMON
@given(sessions(), st.sampled_from(POLICIES))
def test_same_input_same_bytes_and_unchanged_messages_reused(
    body: dict[str, Any], policy: FitPolicy
) -> None:
    again = orjson.loads(orjson.dumps(body))
    first, second = _fitted(body, policy), _fitted(again, policy)
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
