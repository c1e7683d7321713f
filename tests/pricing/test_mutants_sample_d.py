"""What the fourth fresh sample of pricing/'s mutants (seed 20261210, docs/mutation.md) let
through: a bounded image named by the message it is in, the one-factor model's images of
unknown size priced as images, an anchor extended by a message priced by feature (and an anchor
without features by the summary factors), a route configured with DeepSeek's framing getting
DeepSeek's constants, and a custom tool on an OpenAI route priced as its JSON — and the bug
one of its survivors showed: a weight quantised in a step finer than a millionth was rounded
down, not up."""

from __future__ import annotations

import base64
import io
import json

import pytest
from gpt4o_route import gpt4o_route
from hypothesis import example, given
from hypothesis import strategies as st
from PIL import Image

from pricing.bounds import bound_pressure
from pricing.calibration import (
    FEATURES,
    Anchor,
    CalibrationPolicy,
    Correction,
    Sample,
    _round_up,
    anchored_estimate,
    fit_correction,
    pressure_features,
)
from pricing.framing import Framing, default_framing, parse_framing
from pricing.messages import parse_request
from pricing.meter import MessagePressure, Pressure, measure
from pricing.tokenizers import get_tokenizer

_I = {name: i for i, name in enumerate(FEATURES)}

# -- pricing/bounds.py -------------------------------------------------------------------------


def _png(width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new("P", (width, height)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_a_bounded_image_is_named_by_its_message_and_part() -> None:
    """``bound_pressure``'s image details say where each image is, as the meter's do: an image
    in the second message's second part is message 1, part 1, not the message of another."""
    image = {"type": "image_url", "image_url": {"url": _png(64, 48)}}
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": [image]},
            {"role": "user", "content": [{"type": "text", "text": "and this one?"}, image]},
        ],
    }
    request = parse_request(body)
    route = gpt4o_route(alias="bound-image-place")
    bound = bound_pressure(request.messages, request.tools, route)
    assert bound is not None
    assert [(d.message, d.part) for d in bound.image_details] == [(0, 0), (1, 1)]
    exact = measure(request, route).image_details
    assert [(d.message, d.part) for d in exact] == [(0, 0), (1, 1)]


# -- pricing/calibration.py --------------------------------------------------------------------


def _unsized_sample(text: int, unsized: int, actual: int, t: float) -> Sample:
    """A one-message prompt of ``text`` tokens and images of unknown size priced at ``unsized``
    tokens (their rule's worst case)."""
    features = [0] * len(FEATURES)
    features[0], features[_I["messages"]], features[_I["unsized"]] = text, 1, unsized
    return Sample("r", t, text, 0, unsized, 1, 1, 0, False, actual, 0, tuple(features))


def test_the_one_factor_model_prices_images_of_unknown_size_as_images() -> None:
    """``one-factor`` (the calibration before issue 18) has one image weight for every image
    token, unsized ones included: prompts whose unsized images cost twice what the meter said
    (their text as counted) teach an image weight of about 2 and a text weight of about 1 (the
    ridge's pull and the rounding apart), and unsized image tokens weigh what image tokens do."""
    samples = []
    for i in range(12):
        text, unsized = 1000 + 37 * i, 300 + 97 * (i * 7 % 12)  # varying independently
        samples.append(_unsized_sample(text, unsized, text + 2 * unsized, i))
    weights = fit_correction(samples, CalibrationPolicy(model="one-factor")).weights
    assert weights[_I["images"]] == pytest.approx(2.0, abs=0.05)
    assert weights[0] == pytest.approx(1.0, abs=0.05)
    assert weights[_I["unsized"]] == weights[_I["images"]]


def test_an_anchor_extended_by_a_message_prices_the_message_by_its_features() -> None:
    """``anchored_estimate``: an anchor with features prices the increment by feature, so a
    correction that says a message costs 5 tokens beyond its text and framing charges them for
    the message that extends the anchored prompt (the summary factors alone would not)."""
    msgs = tuple(MessagePressure(i, "user", 100, 4, 0, (100, 0, 0, 0, 0)) for i in range(3))
    p = Pressure("r", msgs, tools=0, priming=3, image_details=(), exact=True)
    anchor = Anchor(200, 11, 0, 250, pressure_features(p, 2))
    weights = list(Correction().vector)
    weights[_I["messages"]] = 5.0
    per_message = Correction(samples=20, weights=tuple(weights))
    assert anchored_estimate(anchor, p, per_message) == 250 + 100 + 4 + 5
    assert anchored_estimate(anchor, p, Correction()) == 250 + 100 + 4


def test_an_anchor_without_features_prices_the_increment_by_the_summary_factors() -> None:
    """An anchor recorded before features existed has none: the prompt extending it is priced
    as its text, framing and images at the correction's summary factors."""
    msgs = tuple(MessagePressure(i, "user", 100, 4, 0, (100, 0, 0, 0, 0)) for i in range(3))
    p = Pressure("r", msgs, tools=0, priming=3, image_details=(), exact=True)
    old = Anchor(200, 11, 0, 250)
    assert anchored_estimate(old, p, Correction(text=1.5, framing=2.0)) == 250 + 150 + 8


# -- pricing/framing.py ------------------------------------------------------------------------


@pytest.mark.parametrize("base", [Framing(), Framing(family="generic", per_message=5)])
def test_a_route_configured_with_deepseeks_framing_gets_deepseeks_constants(
    base: Framing,
) -> None:
    """``framing: deepseek`` on a route whose model implies another family frames it as a
    DeepSeek model does (no per-message or per-name constants, DeepSeek's priming), not with
    the other family's constants under DeepSeek's name."""
    deepseek = default_framing("deepseek-chat", "deepseek")
    assert parse_framing("deepseek", base) == deepseek
    assert parse_framing({"family": "deepseek", "priming": 4}, base) == Framing(
        family="deepseek", per_message=0, per_name=0, priming=4
    )


def test_a_custom_tool_on_an_openai_route_is_priced_as_its_json() -> None:
    """A tool that is not a function (a custom or built-in kind) has no published rendering: it
    is priced as its JSON (pricing/messages.py keeps it whole for that), plus the tool block's
    closing constant; written here with sorted keys and no spaces, so its compact JSON is the
    text it was sent as."""
    sent = (
        '{"custom":{"description":"Runs a Python snippet in a sandbox and returns what it'
        ' printed","name":"run_python"},"type":"custom"}'
    )
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [json.loads(sent)],
    }
    route = gpt4o_route(alias="custom-tool")
    tok = get_tokenizer(route.tokenizer)
    assert tok.count(sent) > 20
    assert measure(parse_request(body), route).tools == tok.count(sent) + route.framing.func_end


@given(
    st.floats(min_value=-50.0, max_value=50.0, allow_nan=False),
    st.floats(min_value=1e-9, max_value=1.0, allow_nan=False),
)
@example(1.1e-6, 3e-7)  # the helper's find: 1e-06 at 6 places
def test_a_weight_is_rounded_up_to_its_step_however_fine_the_step(value: float, step: float):
    # docs/calibration.md: weights are quantised in the policy's step, rounded up (towards more
    # tokens); at 6 decimal places a step finer than a millionth was rounded down
    rounded = _round_up(value, step)
    assert rounded >= value - 1e-9 * step - 1e-12
    assert rounded < value + step + 1e-12
    assert abs(rounded - round(rounded / step) * step) <= 1e-12  # a multiple of the step


def test_a_policy_s_step_must_be_positive():
    for step in (0.0, -0.005):
        with pytest.raises(ValueError, match="step"):
            CalibrationPolicy(step=step)
