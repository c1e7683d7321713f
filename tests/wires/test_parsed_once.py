"""Messages parsed once per tenant (``pricing.parsed``): a session sent again as new JSON, as
every turn sends it, parses to exactly what a parse afresh makes of it — on the chat and the
Messages wire — and only the tenant who sent a message gets its parse back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_conversations import conversations
from hypothesis import given, settings
from hypothesis import strategies as st
from test_anthropic_properties import sessions
from watched import watch_writes

import pricing.digest
import pricing.parsed
from pricing.lru import LRU
from pricing.messages import RequestError, parse_message, parse_request
from pricing.parsed import LARGEST, PARSED, once
from proxy.teams import Quotas, Team
from proxy.wires.anthropic import AnthropicWire
from proxy.wires.anthropic_parse import parse_anthropic
from proxy.wires.base import RequestContext
from proxy.wires.chat import ChatWire


def again(value: Any) -> Any:
    """What the next request's body decodes to: new objects, the same JSON."""
    return json.loads(json.dumps(value))


def chat(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "m", "messages": messages}


@settings(max_examples=60, deadline=None)
@given(conversation=conversations())
def test_a_chat_session_parsed_again_is_what_a_parse_afresh_makes_of_it(conversation):
    PARSED.clear()
    afresh = parse_request(chat(again(conversation)))
    assert parse_request(chat(again(conversation)), b"team-a") == afresh  # each one kept
    assert parse_request(chat(again(conversation)), b"team-a") == afresh  # each one a hit
    # one message more before them: every kept message now at another place
    longer = [{"role": "user", "content": "first"}, *conversation]
    hit = parse_request(chat(again(longer)), b"team-a")
    assert hit == parse_request(chat(again(longer)))


@settings(max_examples=40, deadline=None)
@given(body=sessions())
def test_a_messages_session_parsed_again_is_what_a_parse_afresh_makes_of_it(body):
    PARSED.clear()
    afresh = parse_anthropic(again(body))
    for _ in range(2):  # kept, then hit
        hit = parse_anthropic(again(body), scope=b"team-a")
        assert (hit.messages, hit.fragments, hit.counts) == (
            afresh.messages,
            afresh.fragments,
            afresh.counts,
        )
        # the fit and the render find a message's place by its identity
        assert all(hit.position(m) == i for i, m in enumerate(hit.messages))
    # a turn inserted before: each kept message's fragments name its new place
    moved = again(body)
    moved["messages"] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        *moved["messages"],
    ]
    hit = parse_anthropic(again(moved), scope=b"team-a")
    expected = parse_anthropic(again(moved))
    assert (hit.messages, hit.fragments) == (expected.messages, expected.fragments)


def test_a_tenant_gets_back_its_own_parse_and_no_one_else_s():
    PARSED.clear()
    session = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the test."},
        {"role": "tool", "tool_call_id": "c1", "content": "OK"},
    ]
    first = parse_request(chat(again(session)), b"team-a").messages
    same = parse_request(chat(again(session)), b"team-a").messages
    other = parse_request(chat(again(session)), b"team-b").messages
    assert all(a is b for a, b in zip(first, same, strict=True))
    assert not any(a is b for a, b in zip(first, other, strict=True))
    assert other == first
    # the same JSON on another wire is another wire's message
    anthropic = parse_anthropic(
        {"model": "m", "max_tokens": 8, "messages": again(session[1:2])}, scope=b"team-a"
    )
    assert anthropic.messages[0] is not first[1]


def test_equal_messages_of_one_request_are_two_objects():
    PARSED.clear()
    twice = [
        {"role": "user", "content": "go"},
        {"role": "user", "content": "go"},
    ]
    for _ in range(2):
        a, b = parse_request(chat(again(twice)), b"team-a").messages
        assert a == b and a is not b


def test_what_is_not_kept_is_parsed_every_time():
    PARSED.clear()
    huge = {"role": "user", "content": "word " * (LARGEST // 5 + 1)}
    lone = {"role": "user", "content": "\ud800 a lone surrogate"}  # JSON cannot write it
    for raw in (huge, lone):
        parse = once(parse_message, b"c", b"team-a")
        assert parse(raw, 0) == parse_message(raw, 0)
    assert len(PARSED) == 0


def test_a_message_the_parse_refuses_is_refused_every_time_and_not_kept():
    PARSED.clear()
    bad = {"role": "tool", "content": "no call id"}
    for index in (3, 5):
        with pytest.raises(RequestError) as refused:
            once(parse_message, b"c", b"team-a")(again(bad), index)
        assert f"messages[{index}].tool_call_id" in str(refused.value)
    assert len(PARSED) == 0


@settings(max_examples=60, deadline=None)
@given(
    puts=st.lists(
        st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.integers(1, 40)),
        max_size=30,
    )
)
def test_a_weighed_lru_holds_at_most_its_size_and_keeps_the_newest(puts):
    lru: LRU[int] = LRU(64)
    for key, weight in puts:
        lru.put(key, weight, weight)
        assert lru.get(key) == weight  # the newest is kept
        held = [lru.get(k) for k in (b"a", b"b", b"c", b"d", b"e")]
        assert lru.held == sum(w for w in held if w is not None) <= 64


def _team(team_id: str) -> Team:
    return Team(team_id, (), None, Quotas())


@pytest.mark.parametrize(
    ("wire", "body"),
    [
        (ChatWire(), chat([{"role": "user", "content": "Fix the test."}])),
        (
            AnthropicWire(),
            {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Fix it."}]},
        ),
    ],
)
def test_each_wire_parses_a_team_s_session_through_the_team_s_memo(wire, body):
    PARSED.clear()

    def parsed(team: Team | None) -> Any:
        return wire.parse(RequestContext(again(body), {}, {}, {}, team)).messages[0]

    first = parsed(_team("a"))
    assert parsed(_team("a")) is first
    assert parsed(_team("b")) is not first
    assert parsed(None) is not first  # routefit open: one tenant, its own
    assert parsed(None) is parsed(None)


#: A tool's JSON output, as a session carries it: every quote and newline an escape when written.
OUTPUT = "".join(f'{{\n  "id": {i},\n  "name": "item \\"{i}\\""\n}}\n' for i in range(400))


def long_sessions() -> list[tuple[str, dict[str, Any]]]:
    """A chat and a Messages session whose tool outputs are long, in each place a wire puts
    them (a string; a Messages tool result's string, or its text blocks)."""
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    chat_body = chat(
        [
            {"role": "user", "content": "read it"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": OUTPUT},
            {"role": "user", "content": [{"type": "text", "text": OUTPUT + "?"}]},
        ]
    )
    use = [{"type": "tool_use", "id": f"t{i}", "name": "read", "input": {}} for i in (1, 2)]
    results = [
        {"type": "tool_result", "tool_use_id": "t1", "content": OUTPUT},
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": OUTPUT}]},
    ]
    messages_body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "read them"},
            {"role": "assistant", "content": use},
            {"role": "user", "content": [*results, {"type": "text", "text": OUTPUT + "!"}]},
        ],
    }
    return [("chat", chat_body), ("messages", messages_body)]


def parse_on(wire: str, body: dict[str, Any], scope: bytes | None) -> Any:
    if wire == "chat":
        return parse_request(body, scope).messages
    return parse_anthropic(body, scope=scope).messages


@pytest.mark.parametrize(("wire", "body"), long_sessions())
def test_long_tool_outputs_are_kept_by_their_digest_never_written_out(wire, body, monkeypatch):
    PARSED.clear()
    afresh = parse_on(wire, again(body), None)
    writes = watch_writes(monkeypatch, pricing.parsed, pricing.digest)
    first = parse_on(wire, again(body), b"team-a")
    hit = parse_on(wire, again(body), b"team-a")
    assert first == hit == afresh
    assert all(a is b for a, b in zip(first, hit, strict=True))  # each one kept, each one a hit
    assert 0 < writes.longest < 1_000  # the keys' JSON, never an output's 17 KB
    # the same session with one character of one output changed is another parse
    changed = json.loads(
        json.dumps(body).replace('item \\\\\\"7\\\\\\"', 'item \\\\\\"X\\\\\\"', 1)
    )
    assert changed != body
    assert parse_on(wire, again(changed), b"team-a") == parse_on(wire, again(changed), None)
