"""fit: transparent when it fits; otherwise fits, keeps what it must, never orphans a tool
result, is deterministic and a fixed point — over hypothesis-generated conversations."""

from __future__ import annotations

import base64
import copy
import io
import json
import wave
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from pricing.calibration import Correction
from pricing.framing import default_framing
from pricing.images import default_image_rule
from pricing.messages import message_wire, parse_request
from pricing.meter import measure, sent_as_audio
from pricing.route import Route
from strategies.fit import FitError, fit
from strategies.offload import offload_images
from strategies.policy import FitPolicy, prompt_budget
from strategies.units import group_units, protected_units

#: The strategies before masking: the elision schedule's own tests run without it.
ELIDE_ONLY = ("cap", "offload_images", "elide")


def route(window: int, vision: bool = True, tokenizer: str = "o200k_base") -> Route:
    model = "gpt-4o" if tokenizer == "o200k_base" else "deepseek-chat"
    return Route(
        alias="test",
        model=model,
        context_window=window,
        max_output_tokens=1024,
        tokenizer=tokenizer,
        framing=default_framing(model, tokenizer),
        image_rule=default_image_rule(model, vision),
        supports_vision=vision,
    )


def png(width: int, height: int, seed: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (seed % 256, 40, 90)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


IMAGES = [png(64 + 37 * i, 48 + 53 * i, i) for i in range(6)]


def clip(seconds: float) -> str:
    """Base64 WAV of silence (10 tokens a second where it goes as audio)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(2000)
        w.writeframes(bytes([128]) * int(seconds * 2000))
    return base64.b64encode(buf.getvalue()).decode()


CLIPS = [clip(s) for s in (1.5, 8, 40, 150)]
WORDS = ["alpha", "beta", "gamma", "delta", "error:", "OK", "{", "}", '"k": 1,', "\n", "日本", "🙂"]


@st.composite
def texts(draw, max_words: int = 60) -> str:
    n = draw(st.integers(0, max_words))
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=n, max_size=n)))


@st.composite
def conversations(draw) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "You are an agent. " + draw(texts(20))}]
    messages.append({"role": "user", "content": "Task: " + draw(texts(40))})
    call = 0
    for _ in range(draw(st.integers(0, 14))):
        kinds = ["tools", "tools", "assistant", "user", "image", "audio", "big"]
        kind = draw(st.sampled_from(kinds))
        if kind in ("tools", "big"):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                call += 1
                calls.append(
                    {
                        "id": f"call_{call}",
                        "type": "function",
                        "function": {"name": "run", "arguments": json.dumps({"n": call})},
                    }
                )
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            for c in calls:
                body = draw(texts(80))
                if kind == "big":
                    body = (body + " log line with details\n") * draw(st.integers(50, 400))
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": body})
        elif kind == "assistant":
            messages.append({"role": "assistant", "content": draw(texts(80))})
        elif kind == "user":
            messages.append({"role": "user", "content": draw(texts(40))})
        elif kind == "audio":
            audio = {"data": draw(st.sampled_from(CLIPS)), "format": "wav"}
            content = [{"type": "text", "text": "hear: " + draw(texts(10))}]
            content.append({"type": "input_audio", "input_audio": audio})
            messages.append({"role": "user", "content": content})
        else:
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look: " + draw(texts(10))},
                        {"type": "image_url", "image_url": {"url": draw(st.sampled_from(IMAGES))}},
                    ],
                }
            )
    if messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls"):
        messages.append({"role": "user", "content": "continue " + draw(texts(10))})
    return messages


def check_no_orphans(messages: list[dict]) -> None:
    open_ids: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, "orphaned tool result"
            open_ids.discard(m["tool_call_id"])
        else:
            assert not open_ids, "tool call without its result"
            if m.get("tool_calls"):
                open_ids = {c["id"] for c in m["tool_calls"]}
    assert not open_ids


def protected_indices(messages: list[dict]) -> list[int]:
    request = parse_request({"messages": messages})
    units = group_units(request.messages)
    keep = protected_units(request.messages, units)
    return [i for u in sorted(keep) for i in range(units[u].start, units[u].end)]


settings_ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings_
@given(
    messages=conversations(),
    window=st.integers(1500, 40000),
    vision=st.booleans(),
    pin=st.sampled_from([0.0, 0.3, 0.5, FitPolicy().pin_fraction]),
    factor=st.sampled_from([1.0, 1.13]),
)
def test_fit_invariants(messages, window, vision, pin, factor):
    r = route(window, vision)
    policy = FitPolicy(pin_fraction=pin)
    correction = Correction(text=factor, framing=factor, images=factor)
    body = {"model": "test", "messages": messages, "max_tokens": 256}
    request = parse_request(copy.deepcopy(body))
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, 256)
    try:
        result = fit(request, r, policy, correction)
    except FitError as err:
        assert err.estimate > err.budget == budget
        return
    out = result.body["messages"]
    # 1. It fits, by the meter, with the correction applied.
    measured = measure(parse_request(result.body), r)
    assert correction.apply(measured.text, measured.framing, measured.images) <= budget
    assert result.report.estimate_after <= budget
    # 2. Transparent when it already fitted (a text-only route always gets placeholders).
    original = measure(request, r)
    has_images = any(not sent_as_audio(p, r) for m in request.messages for p in m.images)
    fitted_already = correction.apply(original.text, original.framing, original.images) <= budget
    if fitted_already and (vision or not has_images):
        assert result.body is request.body
        assert result.report.actions.header() == "none"
    # 3. Valid for the provider: no orphaned tool result, no unanswered call.
    check_no_orphans(out)
    # 4. Protected messages are there, in order; system and user ones byte for byte (a
    #    protected tool output may have been capped: its call id must still be there). What no
    #    cut may touch is the core, the system prompt and the latest user message (issue 31:
    #    refusal is the last resort); the other protected messages (the task, the newest unit,
    #    the round it answers) may yield only when all of them together, as sent, do not fit.
    out_json = [json.dumps(m, sort_keys=True) for m in out]
    positions = []
    protected, dropped = [], []
    for i in protected_indices(messages):
        m = messages[i]
        if not vision:  # on a text-only route every image is sent as its placeholder
            (parsed,) = parse_request({"messages": [m]}).messages
            if any(not sent_as_audio(p, r) for p in parsed.images):  # audio goes as audio
                m = dict(message_wire(offload_images(parsed, r)))
        protected.append(m)
        if m["role"] == "tool":
            found = [j for j, o in enumerate(out) if o.get("tool_call_id") == m["tool_call_id"]]
            assert len(found) <= 1
            if found:
                positions.append(found[0])
            else:
                dropped.append(i)
            continue
        # In order: an identical earlier message (same text) is not this one.
        start = positions[-1] + 1 if positions else 0
        try:
            positions.append(out_json.index(json.dumps(m, sort_keys=True), start))
        except ValueError:
            dropped.append(i)
    assert positions == sorted(positions)
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    core = {i for i, m in enumerate(messages) if m["role"] in ("system", "developer")}
    assert not core.intersection(dropped) and (not users or users[-1] not in dropped)
    if dropped:
        alone = measure(parse_request({"messages": protected}), r)
        assert correction.apply(alone.text, alone.framing, alone.images) > budget
    assert out[-1]["role"] == messages[-1]["role"]
    # 5. Deterministic, and a fixed point.
    again = fit(parse_request(copy.deepcopy(body)), r, policy, correction)
    assert json.dumps(again.body, sort_keys=True) == json.dumps(result.body, sort_keys=True)
    refit = fit(parse_request(json.loads(json.dumps(result.body))), r, policy, correction)
    assert refit.report.actions.header() == "none"
    assert json.dumps(refit.body, sort_keys=True) == json.dumps(result.body, sort_keys=True)


@st.composite
def intervals(draw) -> Correction:
    """A fitted correction with the interval an inexact route's fit leaves (any rows: the
    margin is their norm), the weights round the meter's."""
    from pricing.calibration import FEATURES

    n = len(FEATURES)
    weights = tuple(draw(st.floats(0.8, 1.4)) for _ in range(n))
    row = st.lists(st.floats(-0.3, 0.3), min_size=n, max_size=n).map(tuple)
    interval = tuple(draw(st.lists(row, min_size=1, max_size=3)))
    return Correction(samples=30, weights=weights, interval=interval)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=conversations(), window=st.integers(1500, 40000), correction=intervals())
def test_a_fit_under_an_interval_prices_every_cut_by_the_requests_own_factor(
    messages, window, correction
):
    """The interval is the whole request's (``Correction.for_request``): the fit prices the
    request, its parts and every cut of it by the one factor it gives, so what it sends fits by
    that price, is transparent when the request's own estimate fits, and orphans nothing."""
    from pricing.calibration import pressure_features

    r = route(window)
    body = {"model": "test", "messages": messages, "max_tokens": 256}
    request = parse_request(copy.deepcopy(body))
    budget = prompt_budget(r.context_window, r.max_output_tokens, FitPolicy(), 256)
    original = measure(request, r)
    own = correction.for_request(pressure_features(original))
    assert own.price_pressure(original) == correction.price_request(original)
    try:
        result = fit(request, r, FitPolicy(), correction)
    except FitError as err:
        assert err.estimate > err.budget == budget
        return
    assert result.report.estimate_before == correction.price_request(original)
    sent = measure(parse_request(result.body), r)
    assert result.report.estimate_after == own.price_pressure(sent) <= budget
    if correction.price_request(original) <= budget:
        assert result.body is request.body
    check_no_orphans(result.body["messages"])


def test_transparent_request_is_forwarded_unchanged():
    body = {"model": "test", "messages": [{"role": "user", "content": "hi"}]}
    request = parse_request(body)
    result = fit(request, route(8000), FitPolicy())
    assert result.body is body
    assert result.messages == request.messages
    assert result.report.actions.header() == "none"


def test_protected_messages_alone_overflow_raise_fit_error():
    huge = "word " * 5000
    body = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": huge}]}
    with pytest.raises(FitError) as err:
        fit(parse_request(body), route(2000), FitPolicy())
    assert err.value.estimate > err.value.budget
    assert "context window 2,000" in str(err.value)


def agent_session(turns: int, tool_size: int = 120) -> list[list[dict]]:
    """The request sent at each turn of a growing agent session (append-only)."""
    messages: list[dict] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing tests in the repository."},
    ]
    requests = []
    for t in range(turns):
        cid = f"call_{t}"
        messages.append(
            {
                "role": "assistant",
                "content": f"Step {t}: running a check.",
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "sh", "arguments": json.dumps({"cmd": f"t {t}"})},
                    }
                ],
            }
        )
        output = " ".join(f"line{t}-{k} result value" for k in range(tool_size + (t * 7) % 50))
        messages.append({"role": "tool", "tool_call_id": cid, "content": output})
        if t % 17 == 16:
            messages.append({"role": "user", "content": f"Keep going ({t})."})
        requests.append({"model": "test", "messages": copy.deepcopy(messages)})
    return requests


def test_replayed_session_keeps_its_prefix_between_jumps():
    r = route(24000)
    policy = FitPolicy()
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, None)
    previous: list[dict] | None = None
    jumps = 0
    fitted_turns = 0
    for body in agent_session(200):
        result = fit(parse_request(body), r, policy)
        assert result.report.estimate_after <= budget
        sent = result.body["messages"]
        check_no_orphans(sent)
        if not result.report.transparent:
            fitted_turns += 1
        if previous is not None and sent[: len(previous)] != previous:
            jumps += 1
        previous = sent
    assert fitted_turns > 100  # the session really outgrew the budget
    # Between jumps the conversation must grow by at least (1 - low_water) of the budget.
    total = measure(parse_request(agent_session(200)[-1]), r).total
    allowed = total / ((1 - policy.low_water) * budget) + 2
    assert 1 <= jumps <= allowed, (jumps, allowed)


def test_cut_is_late_with_a_pinned_head():
    r = route(24000)
    body = agent_session(120)[-1]
    policy = FitPolicy(strategies=ELIDE_ONLY)
    pinned = fit(parse_request(body), r, replace(policy, pin_fraction=0.5)).body["messages"]
    oldest = fit(parse_request(body), r, replace(policy, pin_fraction=0.0)).body["messages"]
    marker_at = next(
        i for i, m in enumerate(pinned) if "earlier messages (" in str(m.get("content"))
    )
    oldest_marker = next(
        i for i, m in enumerate(oldest) if "earlier messages (" in str(m.get("content"))
    )
    assert marker_at > oldest_marker
    assert pinned[:marker_at] == body["messages"][:marker_at]


def test_a_huge_new_turn_shortens_the_pinned_head_to_a_prefix_of_itself():
    # A turn too big for the room the pinned head leaves: the head shrinks to the longest prefix
    # of itself that fits (still the provider's cached prefix), not to the protected head.
    r = route(24000)
    policy = FitPolicy(strategies=ELIDE_ONLY)
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, None)
    before = agent_session(150)[-1]
    sent_before = fit(parse_request(before), r, policy).body["messages"]
    calls = [
        {"id": f"big_{k}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        for k in range(3)
    ]
    # The user asks for the huge turn, so the newest turn (kept whole) is that turn alone.
    ask = {"role": "user", "content": "Read the three logs."}
    messages = [
        *before["messages"],
        ask,
        {"role": "assistant", "content": None, "tool_calls": calls},
    ]
    for k in range(3):  # each one just under the tool-output cap: together ~40% of the budget
        output = " ".join(f"big{k}-{i} value" for i in range(int(budget * 0.13 / 4)))
        messages.append({"role": "tool", "tool_call_id": f"big_{k}", "content": output})
    result = fit(parse_request({"model": "test", "messages": messages}), r, policy)
    assert result.report.estimate_after <= budget
    sent = result.body["messages"]
    check_no_orphans(sent)
    marker = next(i for i, m in enumerate(sent) if "earlier messages (" in str(m.get("content")))
    head_before = next(
        i for i, m in enumerate(sent_before) if "earlier messages (" in str(m.get("content"))
    )
    # The same request with a small last turn shows the pinned head the huge turn shrank.
    small = [*messages[:-3], *({**m, "content": "ok"} for m in messages[-3:])]
    sent_small = fit(parse_request({"model": "test", "messages": small}), r, policy).body
    pinned = next(
        i for i, m in enumerate(sent_small["messages"]) if "earlier messages (" in str(m["content"])
    )
    assert 2 < marker < pinned  # more than the protected head, less than the pinned one
    assert sent[:marker] == before["messages"][:marker]
    shared = min(marker, head_before)  # the previous request's cached prefix is still sent
    assert sent[:shared] == sent_before[:shared]
    assert sent[-4] == messages[-4]  # the newest unit is all there (its outputs maybe capped)
    assert [m.get("tool_call_id") for m in sent[-3:]] == ["big_0", "big_1", "big_2"]


def test_a_user_message_after_a_tool_round_keeps_that_round():
    # An Anthropic client's last turn is tool results plus text: on the chat side the results
    # join the call's unit, which must stay with the user message that answers it, even when
    # the pinned head leaves no room for it (the head shrinks instead).
    r = route(24000)
    budget = prompt_budget(r.context_window, r.max_output_tokens, FitPolicy(), None)
    calls = [
        {"id": f"last{k}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        for k in range(2)
    ]
    outputs = [  # ~10% of the budget each
        {
            "role": "tool",
            "tool_call_id": f"last{k}",
            "content": " ".join(f"out{k}-{i} v" for i in range(int(budget * 0.1 / 4))),
        }
        for k in range(2)
    ]
    messages = [
        *agent_session(150)[-1]["messages"],
        {"role": "assistant", "content": None, "tool_calls": calls},
        *outputs,
        {"role": "user", "content": "note: look at that output"},
    ]
    result = fit(parse_request({"model": "test", "messages": messages}), r, FitPolicy())
    assert result.report.estimate_after <= budget
    check_no_orphans(result.body["messages"])
    assert result.body["messages"][-4:] == messages[-4:]


def test_a_text_only_route_gets_placeholders_not_images():
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": IMAGES[1]}},
                ],
            }
        ]
    }
    result = fit(parse_request(body), route(8000, vision=False), FitPolicy())
    sent = result.body["messages"][0]["content"]
    assert [p["type"] for p in sent] == ["text", "text"]
    assert sent[1]["text"].startswith("[image omitted:")
    assert result.report.actions["offloaded_images"].count == 1
    # what was priced is what is sent
    assert measure(parse_request(result.body), route(8000, vision=False)).total == (
        result.report.estimate_after
    )


def test_images_beyond_the_route_limit_are_offloaded_oldest_first():
    from dataclasses import replace

    from pricing.route import ImageLimits

    r = replace(route(200_000), image_limits=ImageLimits(max_images=4))
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f"image {i}"},
                {"type": "image_url", "image_url": {"url": IMAGES[i % len(IMAGES)]}},
            ],
        }
        for i in range(10)
    ]
    result = fit(parse_request({"messages": messages}), r, FitPolicy(image_offload_step=2))
    kinds = [m["content"][1]["type"] for m in result.body["messages"]]
    assert kinds == ["text"] * 6 + ["image_url"] * 4
    assert result.report.actions["offloaded_images"].count == 6
