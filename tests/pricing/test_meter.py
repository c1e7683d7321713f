"""The meter: DeepSeek's template priced exactly, totals, determinism."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer

from pricing.framing import default_framing
from pricing.messages import RequestError, parse_request
from pricing.meter import measure
from pricing.route import Route
from pricing.tokenizers import litellm_tokenizer_dir

DEEPSEEK = Route(
    alias="deepseek-chat",
    model="deepseek/deepseek-chat",
    provider="deepseek",
    tokenizer="deepseek",
    framing=default_framing("deepseek-chat", "deepseek"),
)


def render_deepseek(messages: list[dict]) -> str:
    """DeepSeek V3's chat template rendered as one string (the test's independent oracle)."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    out = ["<｜begin▁of▁sentence｜>", system]
    in_tools = False
    for m in messages:
        role = m["role"]
        if role == "user":
            if in_tools:
                out.append("<｜tool▁outputs▁end｜>")
            out.append("<｜User｜>" + m["content"])
            in_tools = False
        elif role == "assistant":
            out.append("<｜tool▁outputs▁end｜>" if in_tools else "<｜Assistant｜>")
            out.append(m.get("content") or "")
            calls = m.get("tool_calls") or []
            if calls:
                rendered = [
                    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                    + c["function"]["name"]
                    + "\n```json\n"
                    + c["function"]["arguments"]
                    + "\n```<｜tool▁call▁end｜>"
                    for c in calls
                ]
                out.append("<｜tool▁calls▁begin｜>" + "\n".join(rendered) + "<｜tool▁calls▁end｜>")
            out.append("<｜end▁of▁sentence｜>")
            in_tools = False
        elif role == "tool":
            if in_tools:
                out.append("\n<｜tool▁output▁begin｜>" + m["content"] + "<｜tool▁output▁end｜>")
            else:
                out.append(
                    "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>"
                    + m["content"]
                    + "<｜tool▁output▁end｜>"
                )
            in_tools = True
    out.append("<｜tool▁outputs▁end｜>" if in_tools else "<｜Assistant｜>")
    return "".join(out)


@pytest.fixture(scope="module")
def deepseek_oracle():
    tok = HFTokenizer.from_file(str(litellm_tokenizer_dir() / "deepseek_tokenizer.json"))
    return lambda messages: len(tok.encode(render_deepseek(messages), add_special_tokens=False).ids)


def call(i: int, name: str, args: dict) -> dict:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


AGENT = [
    {"role": "system", "content": "You are a careful coding agent. Use tools."},
    {"role": "user", "content": "Find why the build fails and fix it."},
    {"role": "assistant", "content": None, "tool_calls": [call(1, "run", {"cmd": "make"})]},
    {"role": "tool", "tool_call_id": "call_1", "content": "error: missing header foo.h\n"},
    {
        "role": "assistant",
        "content": "Two checks at once.",
        "tool_calls": [
            call(2, "read_file", {"path": "src/main.c"}),
            call(3, "grep", {"pattern": "foo.h", "path": "."}),
        ],
    },
    {"role": "tool", "tool_call_id": "call_2", "content": '#include "foo.h"\nint main() {}'},
    {"role": "tool", "tool_call_id": "call_3", "content": 'src/main.c:1:#include "foo.h"'},
    {"role": "user", "content": "Also, 你好 — keep the fix small. 🚀"},
    {"role": "assistant", "content": "I'll add the header."},
    {"role": "user", "content": "Go ahead."},
]


@pytest.mark.parametrize("upto", [2, 4, 7, 8, 9, 10])
def test_deepseek_template_is_priced_exactly(deepseek_oracle, upto):
    messages = AGENT[:upto]
    assert measure(parse_request({"messages": messages}), DEEPSEEK).total == deepseek_oracle(
        messages
    )


plain = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="<>｜"),
    max_size=200,
)


@settings(max_examples=40, deadline=None)
@given(turns=st.lists(st.tuples(plain, plain), min_size=1, max_size=6), system=plain)
def test_deepseek_plain_conversations_are_exact(deepseek_oracle, turns, system):
    messages = [{"role": "system", "content": system or "s"}]
    for user, assistant in turns:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages.append({"role": "user", "content": "next?"})
    assert measure(parse_request({"messages": messages}), DEEPSEEK).total == deepseek_oracle(
        messages
    )


def test_totals_add_up_and_are_deterministic():
    route = Route(alias="gpt-4o", model="gpt-4o")
    body = {"messages": AGENT, "tools": [{"type": "function", "function": {"name": "run"}}]}
    first = measure(parse_request(body), route)
    again = measure(parse_request(json.loads(json.dumps(body))), route)
    assert first == again
    assert first.total == sum(m.total for m in first.messages) + first.tools + first.priming
    assert first.total == first.text + first.framing + first.images
    assert [m.role for m in first.messages] == [m["role"] for m in AGENT]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "messages[0].content[0]",
        ),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": {}}, "tools"),
    ],
)
def test_bad_requests_name_the_field(body, param):
    with pytest.raises(RequestError) as err:
        parse_request(body)
    assert err.value.param == param
