"""What the ninth fresh sample of pricing/'s mutants (80 mutants at 9ec2a88, docs/mutation.md)
let through: a proof that stops counting once it has saved enough, an image a bound refuses as
the meter does, a constant cost per request learnt by the ridge fit, a patch of one pixel, a
JSON indent after a blank line, the elision marker counting exactly the items it drops, a
legacy function call's error path, a data URL that is not base64, a cut never splitting a long
token, a proportional step that lands on a linear price, an ``hf:`` tokenizer's name, the
known tokenizer forms listed exactly, and a count cache's size."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pricing.bounds import Proof, bound_pressure
from pricing.calibration import FEATURES, MESSAGES, REQUESTS, Sample, fit_correction
from pricing.capped import cut_text
from pricing.images import default_image_rule
from pricing.images.spec import parse_image_rule
from pricing.jsoncut import detect_style
from pricing.messages import ChatRequest, RequestError, parse_request
from pricing.meter import measure
from pricing.route import Route
from pricing.textcut import cut_points, search
from pricing.tokenizers import (
    NAMED_TOKENIZERS,
    CountCache,
    TokenizerError,
    _HuggingFace,
    get_tokenizer,
    litellm_tokenizer_dir,
    parse_tokenizer_spec,
)

# -- pricing/bounds.py (_batch mutmut_39, bound_pressure mutmut_34) ----------------------------


def test_a_proof_counts_the_biggest_text_first_and_stops_once_it_saved_enough() -> None:
    """``Proof.tighten`` counts pieces "of the biggest of ``texts`` until their bounds fell by
    ``need`` tokens". A need of one token is met by the first piece of the biggest text (prose
    has several bytes a token, its bound one a byte): the proof succeeds, that text's bound
    fell, and the smaller text is left at its bound, uncounted."""
    big = " ".join(f"sample i proves line {k} of a long prose prompt" for k in range(400))
    small = " ".join(f"a shorter note of sample i, line {k}" for k in range(40))
    proof = Proof(Route(alias="sample-i", model="gpt-4o", tokenizer="o200k_base"))
    big_bound, small_bound = proof(big), proof(small)
    assert proof.tighten([small, big], 1)
    assert proof(big) < big_bound
    assert proof(small) == small_bound


def _vision_route() -> Route:
    return Route(
        alias="gpt-4o",
        model="openai/gpt-4o",
        tokenizer="o200k_base",
        image_rule=default_image_rule("openai/gpt-4o", True),
        supports_vision=True,
    )


def _image_request(url: str) -> ChatRequest:
    content = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    return parse_request(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Describe images."},
                {"role": "user", "content": content},
            ],
        }
    )


def test_a_bound_refuses_an_image_as_the_meter_does_naming_the_part() -> None:
    """``bound_pressure`` "raises ImageError for an image the meter would refuse (the same
    check, the same message)": the same message and the same ``param``, the offending part's
    JSON path, for the client's 400."""
    request = _image_request("data:image/png,not-base64")
    route = _vision_route()
    with pytest.raises(RequestError) as metered:
        measure(request, route)
    with pytest.raises(RequestError) as bounded:
        bound_pressure(request.messages, request.tools, route)
    where = "messages[1].content[1].image_url.url"
    assert (bounded.value.message, bounded.value.param) == (
        metered.value.message,
        metered.value.param,
    )
    assert bounded.value.param == where
    assert bounded.value.message.startswith(f"{where}: ")


# -- pricing/probe.py (_split mutmut_29) -------------------------------------------------------


def test_a_data_url_that_is_not_base64_is_refused_saying_how_to_send_it() -> None:
    """A data URL without ``;base64`` cannot be sized; the client's 400 says exactly what is
    wrong and what to send instead, naming the part."""
    with pytest.raises(RequestError) as refused:
        measure(_image_request("data:image/png,not-base64"), _vision_route())
    where = "messages[1].content[1].image_url.url"
    assert refused.value.message == (
        f"{where}: image data URLs must be base64-encoded (data:image/png;base64,...)"
    )


# -- pricing/calibration.py (_least_squares mutmut_17) -----------------------------------------


def _one_request(i: int, text: int, actual: int) -> Sample:
    features = [0] * len(FEATURES)
    features[0], features[MESSAGES], features[REQUESTS] = text, 1, 1
    return Sample("r", float(i), text, 0, 0, 0, 1, 0, False, actual, 0, tuple(features))


@pytest.mark.parametrize("constant", [40, 90])
def test_a_constant_cost_per_request_is_learnt_though_every_sample_has_one_message(
    constant: int,
) -> None:
    """``_least_squares`` is a "ridge regression towards ``prior``": the ridge keeps the fit
    solvable when two features are always equal (every sample one message, one request), so a
    provider that adds a fixed number of tokens to every request is learnt as that: the text
    weight stays about 1 and messages + requests carry the constant, not a text weight scaled
    up to cover it."""
    texts = [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000] * 3
    samples = [_one_request(i, t, t + constant) for i, t in enumerate(texts)]
    weights = fit_correction(samples).weights
    assert weights[0] <= 1.01
    assert weights[MESSAGES] + weights[REQUESTS] == pytest.approx(constant, abs=1)


# -- pricing/capped.py (_cut_parts mutmut_35: equivalent, see the report) ----------------------
# -- pricing/images/kinds.py (OpenAIPatch.__post_init__ mutmut_4) ------------------------------


def test_an_openai_patch_rule_of_one_pixel_is_a_rule() -> None:
    """``OpenAIPatch`` refuses a patch that is not positive; 1 px, the smallest there is, is a
    rule: a 10x10 image is 100 patches, priced ⌈100 x 1.62⌉ = 162 (gpt-4.1-mini's multiplier,
    the default variant's, docs/images.md § OpenAI patches)."""
    rule = parse_image_rule({"kind": "openai-patch", "patch": 1})
    assert rule.tokens(10, 10) == 162


# -- pricing/jsoncut.py (detect_style mutmut_48, _Planner._container mutmut_126) ---------------


def test_the_indent_is_the_first_items_even_after_a_blank_line() -> None:
    """``detect_style``: the indent is what starts the first element's line; a blank line
    between the bracket and the first element is not the indent."""
    assert detect_style("[\n\n  1,\n  2\n]").indent == "  "
    assert detect_style('{\n\n    "a": 1\n}').indent == "    "


_MARKER = re.compile(r"^\[\.\.\. (\d+) items? \(")


@pytest.mark.parametrize("budget", [300, 1000, 2000])
def test_the_elision_marker_counts_exactly_the_items_the_cut_dropped(budget: int) -> None:
    """docs/capping.md: a JSON array is cut structurally, whole items kept from both ends, at
    most one item at each end kept in part, and a marker naming how many items were dropped.
    An item kept in part is kept, not dropped: the items left plus those the marker names are
    the array's items, no more."""
    tok = get_tokenizer("o200k_base")
    items = [
        f"item {k}: " + " ".join(f"word{(k * 7 + w) % 53} of the list" for w in range(40))
        for k in range(30)
    ]
    cut = cut_text(json.dumps(items, indent=2), budget, tok)
    assert cut is not None and cut.kind == "json"
    out = json.loads(cut.text)
    named = [int(m.group(1)) for e in out if isinstance(e, str) and (m := _MARKER.match(e))]
    assert len(named) == 1
    assert len(out) - 1 + named[0] == len(items)


# -- pricing/messages.py (parse_message mutmut_45) ---------------------------------------------


def test_a_legacy_function_call_error_names_its_path() -> None:
    """A client mistake names the offending field's JSON path (``RequestError.param``): in a
    legacy ``function_call``, too."""
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "function_call": {"name": 5}},
        ],
    }
    with pytest.raises(RequestError) as refused:
        parse_request(body)
    where = "messages[1].function_call[0].function.name"
    assert refused.value.param == where
    assert refused.value.message == f"{where} must be a string"


# -- pricing/textcut.py (_token_start mutmut_16, search mutmut_110) ----------------------------


def test_a_cut_point_is_a_token_start_past_a_long_token() -> None:
    """``cut_points``: "no token ever is" cut. Runs of 40 spaces are one token each in
    o200k_base (as is every shorter run: checked below), longer than the 16 characters a cut
    point looks behind it; a point falling inside one moves to the token after it."""
    tok = get_tokenizer("o200k_base")
    assert all(tok.count(" " * k) == 1 for k in range(1, 41))
    text = "".join(f"word{k} and more" + " " * 40 for k in range(40)) + "the end."
    starts = {*tok.boundaries(text), len(text)}
    for kept in range(50, len(text), 5):
        a, b = cut_points(text, tok, kept)
        assert a in starts and b in starts, kept


@given(budget=st.integers(1, 3000), over=st.integers(1, 200))
@example(budget=20, over=1)
def test_a_proportional_step_lands_on_a_linear_price(budget: int, over: int) -> None:
    """``search``: steps "proportional to the measured overshoot" first; on a price exactly
    linear in what is kept (one character, one token: ``heuristic:1``) a first guess over the
    budget, even by one token, is followed by one step that lands on the target,
    ``budget - tol // 2`` with ``tol`` 2% of the budget: that is the cut, found in two
    renders."""
    tok = get_tokenizer("heuristic:1")
    tol = max(1, budget // 50)
    target = budget - tol // 2
    k0 = budget + over  # priced over the budget
    found, _ = search(lambda k: ("x" * k, 0), k0, k0 + 10, budget, tok)
    assert found is not None
    assert (found.kept, found.tokens, found.steps) == (target, target, 2)


# -- pricing/tokenizers.py (_hugging_face mutmut_15, parse_tokenizer_spec mutmut_35,
#    CountCache.__len__ mutmut_1) --------------------------------------------------------------


def test_an_hf_tokenizer_counted_by_hugging_face_is_named_by_its_spec(tmp_path: Path) -> None:
    """A tokenizer's ``name`` (the ``Tokenizer`` protocol) is the spec it was loaded for, also
    for an ``hf:`` file Hugging Face counts (a vocabulary entry that is no byte string keeps it
    off tiktoken, see ``pricing.byte_level``)."""
    shipped = litellm_tokenizer_dir() / "anthropic_tokenizer.json"
    spec = json.loads(shipped.read_text(encoding="utf-8"))
    vocab = dict(spec["model"]["vocab"])
    vocab["Ő"] = max(vocab.values()) + 1
    spec["model"] = {**spec["model"], "vocab": vocab}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    tok = get_tokenizer(f"hf:{path}")
    assert isinstance(tok, _HuggingFace)
    assert tok.name == f"hf:{path}"


def test_an_unknown_tokenizer_error_lists_exactly_the_forms_a_spec_takes() -> None:
    """The error for an unknown spec lists what a ``tokenizer`` may be, as
    docs/configuration.md lists it: the named ones, ``hf:PATH`` and
    ``heuristic:CHARS_PER_TOKEN``, spelled as a user writes them."""
    with pytest.raises(TokenizerError) as raised:
        parse_tokenizer_spec("gpt-9-tokenizer")
    prefix = "unknown tokenizer 'gpt-9-tokenizer' (known: "
    message = str(raised.value)
    assert message.startswith(prefix) and message.endswith(")")
    listed = message.removeprefix(prefix).removesuffix(")").split(", ")
    assert listed == [*NAMED_TOKENIZERS, "hf:PATH", "heuristic:CHARS_PER_TOKEN"]


def test_a_count_cache_holds_its_short_and_long_entries() -> None:
    """``len(CountCache)`` is how many counts it holds: short texts (their own key) and long
    ones (by digest) alike."""
    cache = CountCache()
    assert len(cache) == 0
    cache.get_or_compute("short", len)
    cache.get_or_compute("a long text " * 20, len)
    cache.get_or_compute("another short", len, b"tenant")
    assert len(cache) == 3
