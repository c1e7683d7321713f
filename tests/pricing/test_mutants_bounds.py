"""What the sampled mutation run of pricing/ let through (docs/mutation.md, 2026-12-04): a
bound's image details say what the meter's say, and the config refusals name what is known."""

from __future__ import annotations

import base64
import io

import pytest
from gpt4o_route import gpt4o_route
from PIL import Image

from pricing.bounds import bound_pressure
from pricing.framing import FAMILIES, Framing, parse_framing, tools_tokens
from pricing.messages import parse_request
from pricing.meter import measure
from pricing.route import Route
from pricing.tokenizers import get_tokenizer


def text_only_route() -> Route:
    return gpt4o_route(200_000, 1024, vision=False, alias="bounds")


def png(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("P", (width, height)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def test_an_image_a_text_only_route_sends_as_text_keeps_its_placeholder_in_the_bound() -> None:
    """On a text-only route an image goes as its placeholder text; the bound's details (what
    ``routefit fit`` and a bounded fit report) carry that placeholder as the meter's do."""
    image = {"type": "image_url", "image_url": {"url": png(40, 30)}}
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}],
    }
    request = parse_request(body)
    r = text_only_route()
    exact = measure(request, r)
    bound = bound_pressure(request.messages, request.tools, r)
    assert bound is not None
    [meter_detail] = exact.image_details
    [bound_detail] = bound.image_details
    assert meter_detail.placeholder is not None
    assert bound_detail.placeholder == meter_detail.placeholder
    assert (bound_detail.message, bound_detail.part) == (0, 1)
    assert bound_detail.tokens >= meter_detail.tokens


def test_an_unknown_framing_family_is_refused_with_the_known_ones_listed() -> None:
    with pytest.raises(ValueError) as refused:
        parse_framing("chatml", Framing())
    message = str(refused.value)
    assert message.startswith("unknown framing family 'chatml' (known: ")
    listed = message.removeprefix("unknown framing family 'chatml' (known: ").removesuffix(")")
    assert listed.split(", ") == list(FAMILIES)


def test_a_family_without_a_tools_rule_prices_its_schemas_as_compact_json() -> None:
    """Families other than OpenAI's render each tool's schema as JSON in their system prompt:
    priced as compact JSON with sorted keys (no space after ``,`` or ``:``), plus a message's
    framing each and the tools preamble."""
    tool = {"parameters": {"type": "object"}, "name": "lookup"}
    rendered = '{"name":"lookup","parameters":{"type":"object"}}'
    tok = get_tokenizer("o200k_base")
    for family in ("generic", "deepseek"):
        framing = Framing(family=family)
        expected = tok.count(rendered) + framing.per_message + framing.tools_preamble
        assert tools_tokens((tool,), framing, tok) == expected
        assert tok.count(rendered) < tok.count(rendered.replace(",", ", ").replace(":", ": "))
