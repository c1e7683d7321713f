"""OpenAI's published counting rules (cookbook) and their structure."""

from __future__ import annotations

import copy

import pytest

from pricing.framing import Framing, default_framing, parse_framing
from pricing.messages import parse_request
from pricing.meter import measure
from pricing.route import Route

# The OpenAI cookbook's example ("How to count tokens with tiktoken"); published counts:
# 129 for gpt-3.5-turbo / gpt-4 (cl100k_base), 124 for gpt-4o / gpt-4o-mini (o200k_base).
COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that "
        "translates corporate jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
        "for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean "
        "for the client deliverable.",
    },
]

# The cookbook's function-calling example; published: 101 (gpt-4o, gpt-4o-mini), 105 (gpt-4).
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA",
                },
                "unit": {
                    "type": "string",
                    "description": "The unit of temperature to return",
                    "enum": ["celsius", "fahrenheit"],
                },
            },
            "required": ["location"],
        },
    },
}
WEATHER_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]


def openai_route(model: str) -> Route:
    tokenizer = (
        "cl100k_base"
        if model.startswith(("gpt-4-", "gpt-3.5")) or model == "gpt-4"
        else "o200k_base"
    )
    return Route(
        alias=model, model=model, tokenizer=tokenizer, framing=default_framing(model, tokenizer)
    )


def total(messages, model, tools=None):
    body = {"messages": messages}
    if tools:
        body["tools"] = tools
    return measure(parse_request(body), openai_route(model)).total


@pytest.mark.parametrize(
    ("model", "expected"),
    [("gpt-4o", 124), ("gpt-4o-mini", 124), ("gpt-4", 129), ("gpt-3.5-turbo", 129)],
)
def test_cookbook_messages(model, expected):
    assert total(COOKBOOK_MESSAGES, model) == expected


@pytest.mark.parametrize(
    ("model", "expected"), [("gpt-4o", 101), ("gpt-4o-mini", 101), ("gpt-4", 105)]
)
def test_cookbook_tools(model, expected):
    assert total(WEATHER_MESSAGES, model, [WEATHER_TOOL]) == expected


def test_name_costs_its_tokens_plus_one():
    plain = [{"role": "user", "content": "hi"}]
    named = [{"role": "user", "content": "hi", "name": "alice"}]
    route = openai_route("gpt-4o")
    from pricing.tokenizers import get_tokenizer

    extra = get_tokenizer(route.tokenizer).count("alice") + 1
    assert total(named, "gpt-4o") == total(plain, "gpt-4o") + extra


def _tool(properties=None, description="Do a thing"):
    fn = {"name": "act", "description": description}
    if properties is not None:
        fn["parameters"] = {"type": "object", "properties": properties}
    return {"type": "function", "function": fn}


def test_tool_without_properties_costs_init_name_and_end():
    from pricing.tokenizers import get_tokenizer

    base = total(WEATHER_MESSAGES, "gpt-4o")
    f = Framing()
    expected = f.func_init + get_tokenizer("o200k_base").count("act:Do a thing") + f.func_end
    assert total(WEATHER_MESSAGES, "gpt-4o", [_tool()]) == base + expected
    # An empty properties object is priced like none at all.
    assert total(WEATHER_MESSAGES, "gpt-4o", [_tool({})]) == base + expected


def test_trailing_period_of_descriptions_is_free():
    with_period = total(WEATHER_MESSAGES, "gpt-4o", [_tool(description="Do a thing.")])
    assert with_period == total(WEATHER_MESSAGES, "gpt-4o", [_tool()])


def test_each_enum_item_costs_enum_item_plus_its_tokens():
    from pricing.tokenizers import get_tokenizer

    tok = get_tokenizer("o200k_base")
    two = _tool({"u": {"type": "string", "enum": ["celsius", "fahrenheit"]}})
    three = copy.deepcopy(two)
    three["function"]["parameters"]["properties"]["u"]["enum"].append("kelvin")
    diff = total(WEATHER_MESSAGES, "gpt-4o", [three]) - total(WEATHER_MESSAGES, "gpt-4o", [two])
    assert diff == Framing().enum_item + tok.count("kelvin")


def test_nested_properties_are_priced_not_ignored():
    flat = _tool({"filter": {"type": "object", "description": "A filter"}})
    nested = copy.deepcopy(flat)
    nested["function"]["parameters"]["properties"]["filter"]["properties"] = {
        "field": {"type": "string", "description": "Which field to match"},
        "value": {"type": "string", "description": "The value it must have"},
    }
    assert (
        total(WEATHER_MESSAGES, "gpt-4o", [nested])
        > total(WEATHER_MESSAGES, "gpt-4o", [flat]) + 2 * Framing().prop_key
    )


def test_second_tool_adds_init_but_not_a_second_end():
    one = total(WEATHER_MESSAGES, "gpt-4o", [WEATHER_TOOL])
    two = total(WEATHER_MESSAGES, "gpt-4o", [WEATHER_TOOL, WEATHER_TOOL])
    base = total(WEATHER_MESSAGES, "gpt-4o")
    assert two - base == 2 * (one - base) - Framing().func_end


def test_parse_framing_overrides_and_errors():
    f = parse_framing({"family": "generic", "per_message": 5}, Framing())
    assert (f.family, f.per_message) == ("generic", 5)
    with pytest.raises(ValueError, match="unknown framing family"):
        parse_framing("chatml", Framing())
    with pytest.raises(ValueError, match="unknown framing constant"):
        parse_framing({"per_mesage": 5}, Framing())
    with pytest.raises(ValueError, match="integer"):
        parse_framing({"per_message": "5"}, Framing())


def test_claude_prices_anthropics_tool_use_preamble():
    from pricing.framing import CLAUDE_TOOLS_PREAMBLE

    claude = Route(
        alias="c",
        model="anthropic/claude-sonnet-4-5",
        tokenizer="anthropic-legacy",
        framing=default_framing("anthropic/claude-sonnet-4-5", "anthropic-legacy"),
    )
    without = measure(parse_request({"messages": WEATHER_MESSAGES}), claude)
    with_tools = measure(
        parse_request({"messages": WEATHER_MESSAGES, "tools": [WEATHER_TOOL]}), claude
    )
    assert with_tools.tools >= CLAUDE_TOOLS_PREAMBLE + 20
    assert with_tools.total - without.total == with_tools.tools


def test_any_model_served_by_openai_is_framed_the_openai_way_but_not_claimed_exact():
    framing = default_framing("openai/acme-large", "o200k_base", provider="openai")
    assert framing.family == "openai"
    route = Route(alias="a", model="openai/acme-large", framing=framing)
    assert not route.exact_text
    assert Route(alias="g", model="openai/gpt-4o").exact_text
