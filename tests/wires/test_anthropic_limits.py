"""Bodies routefit sends Anthropic that the real API refuses (400) unless routefit keeps two of
its rules: cache breakpoints with mixed lifetimes in order (every 1-hour breakpoint before any
5-minute one, tools → system → messages), and extended thinking's minimum (``budget_tokens`` ≥
1,024 and below ``max_tokens``). Each is asserted on the body the simulator received, not on the
simulator's refusal, through routefit served in-process; the breakpoints' order besides as a
property over generated client placements."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from itertools import pairwise
from typing import Any

import anthropic
import httpx
import pytest
from harness import claude_route, gateway_config
from hypothesis import given
from hypothesis import strategies as st
from inprocess import run_inprocess
from test_anthropic_properties import COMMON, POLICIES, ROUTE, _markable, _user_turn

from proxy.wires.anthropic import native_body
from proxy.wires.anthropic_parse import parse_anthropic
from strategies.fit import FitError, fit
from strategies.mask import MASK_PREFIX
from strategies.output import OutputReserveError, fit_output
from strategies.policy import FitPolicy, output_room

HOUR = {"type": "ephemeral", "ttl": "1h"}
FIVE = {"type": "ephemeral"}


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    url = sim.base_url
    small = claude_route(
        "claude-thinking",
        url,
        "claude-sim",
        max_input_tokens=4096,
        max_output_tokens=8192,
    )
    small["routefit"] = {"fit": {"min_output_reserve": 256}}
    low = claude_route(
        "claude-low-limit", url, "claude-sim", max_input_tokens=16384, max_output_tokens=1000
    )
    routes = [
        claude_route(
            "claude-16k", url, "claude-sim", max_input_tokens=16384, max_output_tokens=4096
        ),
        small,
        low,
    ]
    config = gateway_config(tmp_path_factory.mktemp("gw") / "routefit.yaml", routes)
    with run_inprocess(config) as running:
        yield running


@pytest.fixture
def client(gw):
    return anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)


TOOLS = [
    {
        "name": "lookup",
        "description": "Look something up",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
]


# -- the breakpoints' lifetimes ----------------------------------------------------------------


def _seconds(mark: Any) -> int:
    """A breakpoint's lifetime: ``ttl`` "1h", else Anthropic's default of 5 minutes."""
    return 3600 if isinstance(mark, dict) and mark.get("ttl") == "1h" else 300


def _marks_in_order(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every breakpoint of a Messages body as (where, cache_control), in the order Anthropic
    reads them: tools, system, messages (a tool_result's inner blocks before the block's own
    mark), and the request's own (automatic caching: the last block)."""
    found: list[tuple[str, Any]] = []
    for t, tool in enumerate(body.get("tools") or []):
        if tool.get("cache_control"):
            found.append((f"tool {t}", tool["cache_control"]))
    system = body.get("system")
    for s, block in enumerate(system if isinstance(system, list) else []):
        if block.get("cache_control"):
            found.append((f"system {s}", block["cache_control"]))
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        for j, block in enumerate(content if isinstance(content, list) else []):
            inner = block.get("content")
            if block.get("type") == "tool_result" and isinstance(inner, list):
                for k, part in enumerate(inner):
                    if isinstance(part, dict) and part.get("cache_control"):
                        found.append((f"msg {i}.{j}.{k}", part["cache_control"]))
            if block.get("cache_control"):
                found.append((f"msg {i}.{j}", block["cache_control"]))
    if body.get("cache_control"):
        found.append(("request", body["cache_control"]))
    return found


def _ordered(marks: list[tuple[str, Any]]) -> bool:
    """No breakpoint is followed by one that lives longer (Anthropic's rule for mixed TTLs)."""
    lives = [_seconds(mark) for _, mark in marks]
    return all(a >= b for a, b in pairwise(lives))


def _rounds(rounds: int, size: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Investigate the repository."}]
    for t in range(rounds):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Looking at part {t}."},
                    {"type": "tool_use", "id": f"toolu_{t}", "name": "lookup", "input": {"q": t}},
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": f"r{t} " * size}
                ],
            }
        )
    return messages


def _hour_on_last_result(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last = messages[-1]
    block = {**last["content"][-1], "cache_control": HOUR}
    return [*messages[:-1], {**last, "content": [*last["content"][:-1], block]}]


def _post(gw, system: list[dict[str, Any]], messages: list[dict[str, Any]]) -> httpx.Response:
    """A 16k-route request, whatever the provider answers: the assertions are on what was sent
    (the simulator may refuse a misordered body itself, but the tests do not rely on it)."""
    body = {
        "model": "claude-16k",
        "max_tokens": 1024,
        "system": system,
        "messages": messages,
        "tools": TOOLS,
    }
    return httpx.post(gw.base_url + "/v1/messages", json=body, timeout=60)


def _sent(fresh_sim) -> dict[str, Any]:
    return fresh_sim.last_request("/v1/messages")["body"]


def _client_marks(sent: dict[str, Any], asked: dict[str, Any]) -> None:
    """Every breakpoint the client set on a message kept is sent as the client set it."""
    for message in asked["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if not block.get("cache_control") or block.get("type") != "tool_result":
                continue
            same = [
                b
                for m in sent["messages"]
                for b in (m["content"] if isinstance(m["content"], list) else [])
                if b.get("tool_use_id") == block["tool_use_id"]
            ]
            assert all(b.get("cache_control") == block["cache_control"] for b in same)


def test_breakpoints_routefit_adds_never_precede_a_longer_lived_one(gw, fresh_sim):
    # A colleague's repro: a 16k Claude route, 40 tool rounds, the system prompt and the last
    # tool result marked for an hour. routefit masks and adds breakpoints between them: each
    # takes the longest lifetime after it, so none is a 5-minute one before the hour's.
    messages = _hour_on_last_result(_rounds(40, 120))
    system = [{"type": "text", "text": "You are an agent.", "cache_control": HOUR}]
    _post(gw, system, messages)
    sent = _sent(fresh_sim)
    assert MASK_PREFIX in json.dumps(sent["messages"])  # the fit masked
    marks = _marks_in_order(sent)
    assert len(marks) > 2  # routefit added some: the claim is not vacuous
    assert _ordered(marks), marks
    assert marks[0] == ("system 0", HOUR) and marks[-1][1] == HOUR  # the client's, as set
    assert sent["messages"][-1] == messages[-1]


def test_after_the_clients_hour_marks_routefits_own_are_five_minutes(gw, fresh_sim):
    # The client marks only early blocks, for an hour: what routefit adds after them stays
    # Anthropic's default lifetime (1h before 5m is the order Anthropic asks for).
    messages = _rounds(40, 120)
    messages[0] = {
        "role": "user",
        "content": [{"type": "text", "text": "Investigate the repository.", "cache_control": HOUR}],
    }
    system = [{"type": "text", "text": "You are an agent.", "cache_control": HOUR}]
    _post(gw, system, messages)
    sent = _sent(fresh_sim)
    assert MASK_PREFIX in json.dumps(sent["messages"])
    marks = _marks_in_order(sent)
    assert marks[:2] == [("system 0", HOUR), ("msg 0.0", HOUR)]
    assert len(marks) > 2 and all(mark == FIVE for _, mark in marks[2:])
    assert _ordered(marks)


def test_a_clients_own_misordered_lifetimes_are_left_as_they_are(gw, fresh_sim):
    # The client itself puts a 5-minute mark before an hour's: its error is its own (the
    # provider's 400 is relayed), and routefit changes none of its marks. What routefit adds
    # between them takes the hour: it adds no wrong pair of its own.
    messages = _hour_on_last_result(_rounds(40, 120))
    system = [{"type": "text", "text": "You are an agent.", "cache_control": FIVE}]
    _post(gw, system, messages)  # the provider's 400 is the client's to read
    sent = _sent(fresh_sim)
    marks = _marks_in_order(sent)
    assert marks[0] == ("system 0", FIVE) and marks[-1][1] == HOUR
    assert len(marks) > 2 and all(mark == HOUR for _, mark in marks[1:])
    _client_marks(sent, {"messages": messages})


@st.composite
def _lived_sessions(draw: st.DrawFn) -> dict[str, Any]:
    """Agent sessions with up to 4 client breakpoints anywhere Anthropic counts one, each of
    5 minutes or an hour (in a valid order or not), and the request's own now and then."""
    turns = draw(st.integers(1, 14))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Task: investigate."}]
    for t in range(turns):
        calls = draw(st.integers(0, 2))
        blocks: list[dict[str, Any]] = [{"type": "text", "text": f"step {t} " * 10}]
        blocks += [
            {"type": "tool_use", "id": f"toolu_{t}_{c}", "name": "read", "input": {}}
            for c in range(calls)
        ]
        messages.append({"role": "assistant", "content": blocks})
        messages.append(_user_turn(draw, t, calls))
    body: dict[str, Any] = {
        "model": "claude",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are an agent."}],
        "messages": messages,
    }
    if draw(st.booleans()):
        body["tools"] = [
            {"name": "read", "description": "Read a file.", "input_schema": {"type": "object"}}
        ]
    lives = st.sampled_from([FIVE, HOUR, {"type": "ephemeral", "ttl": "5m"}])
    automatic = draw(st.booleans())
    if automatic:
        body["cache_control"] = draw(lives)
    spots = _markable(body)
    chosen = draw(st.lists(st.integers(0, len(spots) - 1), max_size=4 - automatic, unique=True))
    for i in chosen:
        spots[i]["cache_control"] = draw(lives)
    return body


def _fitted(body: dict[str, Any], policy: FitPolicy) -> dict[str, Any] | None:
    request = parse_anthropic(body)
    try:
        return dict(native_body(request, fit(request, ROUTE, policy)))
    except FitError:
        return None


@COMMON
@given(_lived_sessions(), st.sampled_from(POLICIES))
def test_no_added_breakpoint_precedes_a_longer_lived_one(
    body: dict[str, Any], policy: FitPolicy
) -> None:
    """Whatever lifetimes the client gave its marks and wherever it put them: the client's are
    sent as set, and each one routefit adds lives as long as the longest after it, so a body
    whose client marks are in order goes out in order."""
    client = _marks_in_order(body)
    out = _fitted(body, policy)
    if out is None:
        return
    sent = _marks_in_order(out)
    lives = [_seconds(mark) for _, mark in sent]
    for n, (where, mark) in enumerate(sent):
        if id(mark) in {id(m) for _, m in client}:
            continue  # the client's own (the very object: never rewritten)
        assert mark in (FIVE, HOUR), where
        assert _seconds(mark) == max(lives[n + 1 :], default=300), (where, sent)
    if _ordered(client):
        assert _ordered(sent), sent


# -- the thinking budget's minimum ---------------------------------------------------------


THINKING = {"type": "enabled", "budget_tokens": 2000}


def _note(words: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Summarise this. " + "tokens " * words}]


def _thinking_ok(body: dict[str, Any]) -> None:
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        assert 1024 <= thinking["budget_tokens"] < body["max_tokens"], body


def test_a_thinking_reservation_is_never_shrunk_below_the_thinking_minimum(client, fresh_sim):
    # A 4k-window route whose policy lets a reservation shrink to 256, and prompts on either
    # side of the line: a thinking request is either sent with room for the thinking minimum
    # (max_tokens ≥ 1,025, budget_tokens ≥ 1,024 below it) or refused before anything is sent,
    # naming the reservation or the prompt; never sent invalid.
    sent_caps = []
    refused = []
    for words in range(2400, 3300, 20):
        fresh_sim.reset()
        try:
            raw = client.messages.with_raw_response.create(
                model="claude-thinking", max_tokens=4000, thinking=THINKING, messages=_note(words)
            )
        except anthropic.BadRequestError as exc:
            message = exc.body["error"]["message"]
            assert re.search(r"exceed context limit|prompt is too long", message), message
            assert fresh_sim.requests(path="/v1/messages") == [], message
            refused.append(words)
            continue
        sent = _sent(fresh_sim)
        _thinking_ok(sent)
        assert raw.headers.get("x-routefit-output-clamped") == f"4000->{sent['max_tokens']}"
        sent_caps.append(sent["max_tokens"])
    assert sent_caps and refused  # both sides of the line are reached
    assert 1025 <= min(sent_caps) < 1100  # served right down to it


def test_without_thinking_the_reservation_still_shrinks_to_the_policys_floor(client, fresh_sim):
    # The thinking minimum is the thinking request's alone: the same prompt without thinking is
    # sent with a cap below 1,025 where the policy's floor (256) allows it.
    caps = []
    for words in range(2400, 3300, 20):
        fresh_sim.reset()
        try:
            client.messages.create(model="claude-thinking", max_tokens=4000, messages=_note(words))
        except anthropic.BadRequestError:
            continue
        caps.append(_sent(fresh_sim)["max_tokens"])
    assert min(caps) < 1025


def test_a_route_whose_output_limit_cannot_hold_thinking_refuses_it(client, fresh_sim):
    # The route's limit (1,000) is below what thinking needs: clamping the cap to it would send
    # budget_tokens under 1,024. The request is refused, naming the limit, and nothing is sent.
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="claude-low-limit", max_tokens=4000, thinking=THINKING, messages=_note(10)
        )
    message = info.value.body["error"]["message"]
    assert "1,000" in message and "thinking" in message, message
    assert fresh_sim.requests(path="/v1/messages") == []
    # without thinking the same request is clamped and sent
    client.messages.create(model="claude-low-limit", max_tokens=4000, messages=_note(10))
    assert _sent(fresh_sim)["max_tokens"] == 1000


def _thinking_body(words: int, cap: int) -> dict[str, Any]:
    return {"model": "claude", "max_tokens": cap, "thinking": THINKING, "messages": _note(words)}


def test_the_refusal_names_a_cap_thinking_can_use_or_the_prompt() -> None:
    # The fit core's side of the decision: with a floor of 2,048, a thinking request whose
    # prompt leaves room for 1,025 or more is refused by the reservation, naming that room;
    # one leaving less is refused as a prompt too long (a smaller cap would be Anthropic's 400).
    route = replace(ROUTE, max_output_tokens=8192)  # a 6,000-token window
    policy = FitPolicy(min_output_reserve=2048)
    kinds = set()
    for words in range(3000, 6000, 50):
        try:
            fit_output(parse_anthropic(_thinking_body(words, 4000)), route, policy)
        except OutputReserveError as exc:
            assert 1025 <= exc.fits < 2048
            kinds.add("reserve")
        except FitError as exc:
            assert output_room(exc.window, policy, exc.estimate) < 1025
            kinds.add("prompt")
    assert kinds == {"reserve", "prompt"}
