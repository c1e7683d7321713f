"""OpenAI's published counting rules (docs/pricing.md § OpenAI cookbook) and their structure."""

from __future__ import annotations

import copy

import pytest
from cookbook import COOKBOOK_MESSAGES, WEATHER_MESSAGES, WEATHER_TOOL

from pricing.framing import Framing, default_framing, parse_framing
from pricing.messages import parse_request
from pricing.meter import measure
from pricing.route import Route


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
