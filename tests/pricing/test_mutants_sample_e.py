"""What the fifth fresh sample of pricing/'s mutants (seed 20261212, docs/mutation.md) let
through: a JSON text too long for its cap refused naming that cap, a tool property's type in
its price (the OpenAI cookbook's ``name:type:description``), config and request errors naming
their field and what is allowed (a framing that is not a name or a mapping, an image rule
without a kind, a heuristic ratio out of range, a message's ``name`` and the request's ``n``),
a lossy WebP without its key-frame start code, the elision marker's singular, and the cut
search's proportional step from a candidate priced at one token or none."""

from __future__ import annotations

import json
import re

import pytest
from feature_samples import INDEX as _I
from feature_samples import features as _features
from feature_samples import liars_window
from feature_samples import sample as _sample
from gpt4o_route import gpt4o_route
from hypothesis import example, given
from hypothesis import strategies as st

from pricing.calibration import CalibrationPolicy, _base, _prior, fit_correction
from pricing.capped import SMALL_JSON_CAP, CapTooSmall, cap_message, cut_text
from pricing.framing import Framing, parse_framing, tools_tokens
from pricing.images.kinds import KINDS, Anthropic
from pricing.images.spec import parse_image_rule
from pricing.messages import (
    Message,
    RequestError,
    ToolCall,
    message_wire,
    parse_message,
    parse_request,
)
from pricing.probe import ImageError, read_header
from pricing.textcut import elision_marker, search
from pricing.tokenizers import TokenizerError, get_tokenizer, parse_tokenizer_spec

# -- pricing/calibration.py --------------------------------------------------------------------


def test_a_rise_of_exactly_the_regime_band_is_followed_at_once() -> None:
    """``_regime`` (docs/calibration.md): a rise *at most* ``regime_band`` (1.5x) in the newest
    ``min_samples`` scales the older samples' counts to the new level at once, none dropped;
    at exactly 1.5x the new model's price is learnt, not screened out as a few liars."""
    policy = CalibrationPolicy(quantile=0.5)
    older = [_sample(_features(prose=1000), 1000, i) for i in range(32)]
    newer = [_sample(_features(prose=1000), 1500, 32 + i) for i in range(policy.min_samples)]
    assert all(s.actual / s.raw == policy.regime_band for s in newer)  # exactly the band
    learnt = fit_correction(older + newer, policy, exact=True)
    assert learnt.samples == len(older) + len(newer)
    assert learnt.price(older[0].vector) >= 1500


def test_lying_answers_over_the_band_above_the_default_are_left_out_of_the_defaulted_weight() -> (
    None
):
    """``_leftover_weight``: a few lying answers cannot raise the weight of defaulted image
    tokens beyond ``regime_band`` over the median of what the samples leave over — or over the
    default (1 token per token) when the median is below it. Honest answers here leave exactly
    the default; two of eight say 2.5, over 1.5x the default, and are left out."""
    policy = CalibrationPolicy()
    window = liars_window(honest=1.0, lying=2.5)
    learnt = fit_correction(window, policy, exact=True)
    assert learnt.samples == len(window)  # the liars got past the outlier filter
    assert 1.0 <= learnt.vector[_I["defaulted"]] <= 1.0 * policy.regime_band


def _priced_below_nothing() -> list:  # type: ignore[type-arg]
    """A window an inexact route's bounded fit prices at nothing or less, sample by sample:
    the counts fall by 3 tokens a digit, which the per-character range (at least -2) cannot
    follow, while prose is held at ``high`` (3)."""
    out = []
    for i in range(12):
        t = 100 + 10 * i
        d = t * (25 + 7 * i % 8) // 10  # 2.5 to 3.2 digits a token
        out.append(_sample(_features(prose=t, digits=d), 10 * t - 3 * d, i))
    return out


def test_a_window_the_bounded_fit_would_price_at_nothing_is_priced_by_the_prior() -> None:
    """A fit the ranges clamp into pricing its own samples at nothing or less is no fit
    (``_base``): the route keeps its prior, which prices every sample above nothing. Before, the
    98th-percentile scale-up skipped the samples priced at or below zero — here all of them —
    and the route priced each of these prompts at -136 to -439 tokens."""
    samples = _priced_below_nothing()
    _, seen, _ = _base(samples, CalibrationPolicy(), False, _prior(CalibrationPolicy(), False))
    assert not any(seen)
    learnt = fit_correction(samples, exact=False)
    assert all(
        sum(a * b for a, b in zip(learnt.vector, s.vector, strict=True)) > 0 for s in samples
    )


# -- pricing/capped.py -------------------------------------------------------------------------


def test_a_json_text_whose_smallest_cut_is_over_the_cap_is_refused_naming_that_cap() -> None:
    """``CapTooSmall`` says which cap was too small and what the smallest form costs, for a
    JSON document as for plain text: the caller decides what to do with those two numbers."""
    tok = get_tokenizer("o200k_base")
    text = json.dumps([f"entry number {i} of a long list" for i in range(200)])
    assert tok.count(text) > 3
    with pytest.raises(CapTooSmall) as refused:
        cut_text(text, 3, tok)
    assert refused.value.cap == 3
    assert refused.value.minimum > 3
    assert str(refused.value).startswith("a cap of 3 tokens is below the ")


def test_what_a_coarse_json_part_leaves_under_its_share_goes_to_the_largest_cut_part() -> None:
    """docs/capping.md: a content-part list is water-filled and "what the cuts leave under
    their shares goes to the largest cut part", so the message keeps at least 90% of the cap
    once the content budget is ``SMALL_JSON_CAP`` per text part. A JSON array of 1,000-digit
    numbers (never cut: ~330 tokens each) lands far under its share; the prose takes the rest."""
    numbers = json.dumps([int(str(i % 10) * 3 + "7" * 997) for i in range(12)])
    prose = "\n".join(f"line {i}: the build step finished without errors" for i in range(600))
    parts = [{"type": "text", "text": numbers}, {"type": "text", "text": prose}]
    message = parse_message({"role": "tool", "tool_call_id": "c1", "content": parts}, 0)
    route = gpt4o_route()
    for cap in range(2 * SMALL_JSON_CAP + 52, 5_000, 61):
        capped = cap_message(message, cap, route)
        assert capped is not None and capped.kind == "parts"
        assert 0.9 * cap <= capped.tokens <= cap


OBJECT_MARKER = re.compile(r'"\.\.\.\d*": "\[\.\.\. ([\d,]+) keys \(([\d,]+) tokens\) elided')


def test_an_objects_dropped_keys_are_reported_with_the_tokens_of_their_keys() -> None:
    """docs/capping.md: an object's dropped run becomes ``"...": "[... 12 keys (3,456 tokens)
    elided ...]"``, the tokens those entries cost — their keys included: an object of long keys
    and short values is mostly keys."""
    tok = get_tokenizer("o200k_base")
    doc = {
        f"feature_flag_{i:04d}_enabled_for_the_billing_service_region": i % 2 == 0
        for i in range(300)
    }
    text = json.dumps(doc, indent=2)
    for budget in (400, 1200, 3000):
        cut = cut_text(text, budget, tok)
        assert cut is not None and cut.kind == "json" and cut.tokens <= budget
        kept = json.loads(cut.text)
        [(keys, reported)] = OBJECT_MARKER.findall(cut.text)
        lines = {json.dumps(k): line for k, line in zip(doc, text.splitlines()[1:], strict=False)}
        dropped = [line for key, line in lines.items() if json.loads(key) not in kept]
        assert int(keys.replace(",", "")) == len(dropped)
        truth = sum(tok.count(line + "\n") for line in dropped)
        assert abs(int(reported.replace(",", "")) - truth) <= truth // 10


# -- pricing/framing.py ------------------------------------------------------------------------


def test_a_tool_propertys_type_is_priced_with_its_name_and_description() -> None:
    """The cookbook's rule (shared PRICING.md): per property ``prop_key`` plus the tokens of
    ``name:type:description``, the description's trailing period stripped."""
    tok = get_tokenizer("o200k_base")
    f = Framing()
    properties = {
        "city": {"type": "string", "description": "The city to look up."},
        "days": {"type": "integer", "description": "How many days ahead."},
    }
    fn = {
        "name": "get_weather",
        "description": "Get the weather.",
        "parameters": {"type": "object", "properties": properties},
    }
    expected = (
        f.func_init
        + tok.count("get_weather:Get the weather")
        + f.prop_init
        + f.prop_key
        + tok.count("city:string:The city to look up")
        + f.prop_key
        + tok.count("days:integer:How many days ahead")
        + f.func_end
        + f.tools_preamble
    )
    assert tools_tokens((fn,), f, tok) == expected


def test_a_framing_that_is_neither_a_name_nor_a_mapping_is_refused_saying_what_is_allowed() -> None:
    with pytest.raises(ValueError) as refused:
        parse_framing(3, Framing())
    assert str(refused.value) == "framing must be a family name or a mapping"


# -- pricing/images/spec.py --------------------------------------------------------------------


def test_an_image_rule_mapping_without_a_kind_lists_the_known_kinds() -> None:
    """The operator's error lists every kind by name, comma-separated, and nothing else."""
    with pytest.raises(ValueError) as refused:
        parse_image_rule({"max_dim": 2048})
    message = str(refused.value)
    prefix = "image rule mapping needs a kind (known: "
    assert message.startswith(prefix)
    listed = message.removeprefix(prefix).removesuffix(")")
    assert listed.split(", ") == list(KINDS)


@given(
    width=st.integers(1, 20_000),
    height=st.integers(1, 20_000),
    max_edge=st.integers(1, 4_000),
    token_limit=st.integers(1, 5_000),
    per=st.integers(1, 1_000),
)
@example(width=1000, height=1, max_edge=1568, token_limit=1, per=750)
@example(width=1, height=1000, max_edge=1568, token_limit=1, per=750)
def test_an_anthropic_price_never_exceeds_its_token_limit_whatever_the_constants(
    width: int, height: int, max_edge: int, token_limit: int, per: int
) -> None:
    """``Anthropic``: "guaranteed never to exceed ``token_limit``" — also when a side scaled
    below one pixel is kept at one, which leaves a thin image over a small limit (a 1000x1
    image under a 1-token limit scales to 866x1: 2 tokens, then trimmed to 750x1)."""
    rule = Anthropic(max_edge=max_edge, token_limit=token_limit, pixels_per_token=per)
    assert 1 <= rule.price(width, height, "auto") <= token_limit


# -- pricing/messages.py -----------------------------------------------------------------------


def _body(**extra: object) -> dict[str, object]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"])
def test_a_bad_choice_count_is_refused_naming_n(n: object) -> None:
    with pytest.raises(RequestError) as refused:
        parse_request(_body(n=n))
    assert refused.value.param == "n"
    assert refused.value.message.startswith("n must be a positive integer, not ")


def test_a_message_name_that_is_not_a_string_is_refused_naming_its_place() -> None:
    body = _body()
    body["messages"] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi", "name": 7},
    ]
    with pytest.raises(RequestError) as refused:
        parse_request(body)
    assert refused.value.param == "messages[1].name"
    assert refused.value.message == "messages[1].name must be a string"


def test_legacy_functions_that_are_not_a_list_are_refused_naming_the_field() -> None:
    with pytest.raises(RequestError) as refused:
        parse_request(_body(functions={"name": "lookup"}))
    assert refused.value.param == "functions"
    assert refused.value.message == "functions must be a list"


def test_a_rendered_messages_tool_calls_parse_back_to_the_same_calls() -> None:
    """A message routefit built (no client wire dict) is rendered in the chat wire format: its
    tool calls as ``{"id", "type": "function", "function": {"name", "arguments"}}``, which read
    back give the same calls."""
    calls = (
        ToolCall("call_1", "get_weather", '{"city":"Oslo"}'),
        ToolCall("call_2", "get_time", "{}"),
    )
    built = Message(role="assistant", parts=(), tool_calls=calls)
    wire = message_wire(built)
    assert [c["function"]["name"] for c in wire["tool_calls"]] == ["get_weather", "get_time"]
    assert parse_message(wire, 0).tool_calls == calls


# -- pricing/probe.py --------------------------------------------------------------------------


def test_a_lossy_webp_without_its_key_frame_start_code_is_refused_as_corrupt() -> None:
    raw = b"RIFF\x00\x00\x00\x00WEBPVP8 " + bytes(4) + b"\x00\x00\x00" + b"\x00\x00\x00" + bytes(8)
    with pytest.raises(ImageError) as refused:
        read_header(raw)
    assert str(refused.value) == "corrupt WebP: missing the VP8 key-frame start code"


# -- pricing/textcut.py ------------------------------------------------------------------------


def test_the_elision_marker_says_token_for_one_and_tokens_otherwise() -> None:
    assert elision_marker(1) == "[... 1 token elided ...]"
    assert elision_marker(2) == "[... 2 tokens elided ...]"
    assert elision_marker(0) == "[... 0 tokens elided ...]"
    assert elision_marker(1, "1 item") == "[... 1 item (1 token) elided ...]"
    assert elision_marker(2, "2 items") == "[... 2 items (2 tokens) elided ...]"


@given(k0=st.integers(min_value=0, max_value=1_000))
@example(k0=0)
@example(k0=1)
def test_a_price_proportional_to_what_is_kept_is_landed_in_one_proportional_step(k0: int) -> None:
    """``search`` steps in proportion to the measured price: when the price is exactly
    proportional to the kept size (one token a character here), the step from the first
    candidate lands within the 2% tolerance, wherever it started — from a candidate priced at
    one token, or at none, too."""
    tok = get_tokenizer("heuristic:1")
    budget = 100

    def render(k: int) -> tuple[str, int]:
        return "x" * k, 0

    found, _ = search(render, k0, 1_000, budget, tok)
    assert found is not None
    assert budget - max(1, budget // 50) <= found.tokens <= budget
    assert found.steps <= 2


# -- pricing/tokenizers.py ---------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["heuristic:0.4", "heuristic:33"])
def test_a_heuristic_ratio_out_of_range_is_refused_naming_the_range_and_the_spec(
    spec: str,
) -> None:
    with pytest.raises(TokenizerError) as refused:
        parse_tokenizer_spec(spec)
    message = str(refused.value)
    assert "[0.5, 32]" in message
    assert repr(spec) in message
