"""What the mutation run of pricing/ let through in bounds, calibration, framing, the meter,
the tokenizers and the image kinds (docs/mutation.md): a bound adds a message's texts and
tightens by what it counted, the one-factor model prices defaulted images as images, DeepSeek
frames a developer message as a system one, and the image kinds refuse (and accept) the
constants their docs say."""

from __future__ import annotations

import dataclasses

import pytest
from feature_samples import INDEX as _I
from gpt4o_route import gpt4o_route

from pricing.bounds import Proof, bound_pressure, byte_level_bound
from pricing.calibration import FEATURES, CalibrationPolicy, Sample, fit_correction
from pricing.framing import default_framing, frame_message, tools_tokens
from pricing.images import DeepSeekV4, OpenAIPatch, OpenAITile
from pricing.images.constants import count
from pricing.messages import ChatRequest, parse_request
from pricing.meter import measure
from pricing.tokenizers import CountCache, get_tokenizer


def _request(*messages: dict[str, object]) -> ChatRequest:
    return parse_request({"model": "m", "messages": list(messages)})


# -- bounds ------------------------------------------------------------------------------------


def test_a_heuristic_routes_bound_is_the_meters_count_message_by_message() -> None:
    """docs: for ``heuristic:CHARS`` the bound is the count; a message of several text parts is
    bounded by the sum of its parts, no more and no less."""
    route = dataclasses.replace(gpt4o_route(alias="heuristic"), tokenizer="heuristic:4")
    request = _request(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "the first part of a question"},
                {"type": "text", "text": "and its second part, somewhat longer than the first"},
            ],
        },
        {"role": "assistant", "content": "an answer"},
    )
    exact = measure(request, route)
    bound = bound_pressure(request.messages, request.tools, route)
    assert bound is not None
    assert [(m.text, m.framing, m.images) for m in bound.messages] == [
        (m.text, m.framing, m.images) for m in exact.messages
    ]


def test_a_text_counted_whole_by_a_proof_is_bounded_by_its_count() -> None:
    """A proof that counted every piece of a text has that text's exact count as its bound
    (the counted pieces' bounds are all spent)."""
    route = gpt4o_route(alias="proof")
    text = ("x" * 30 + " ") * 400  # 12,400 characters: three pieces
    tok = get_tokenizer("o200k_base", b"test-proof-whole")
    exact = tok.count(text)
    proof = Proof(dataclasses.replace(route, scope=b"test-proof-whole-p"))
    assert proof(text) == byte_level_bound(text)
    assert proof.tighten([text], byte_level_bound(text) - exact)
    assert proof(text) == exact


# -- calibration -------------------------------------------------------------------------------


def _image_sample(text: int, images: int, actual: int, t: float) -> Sample:
    features = [0] * len(FEATURES)
    features[0], features[_I["images"]], features[_I["messages"]] = text, images, 1
    return Sample("r", t, text, 0, images, 1, 1, 0, False, actual, 0, tuple(features))


def test_the_one_factor_model_prices_defaulted_image_tokens_as_image_tokens() -> None:
    """``one-factor`` is the calibration before issue 18: images with the tokens priced by a
    default among them, so a defaulted or unsized image token weighs what an image token does."""
    samples = [
        _image_sample(1000 + 37 * i, 500 + 11 * i, 1000 + 37 * i + 2 * (500 + 11 * i), float(i))
        for i in range(12)
    ]
    weights = fit_correction(samples, CalibrationPolicy(model="one-factor")).weights
    assert weights[_I["images"]] > 1.0
    assert weights[_I["defaulted"]] == weights[_I["unsized"]] == weights[_I["images"]]


# -- framing -----------------------------------------------------------------------------------


def test_deepseek_frames_a_developer_message_as_a_system_one() -> None:
    """DeepSeek's template has no developer turn: its text follows BOS like system text."""
    framing = default_framing("deepseek-chat", "deepseek")
    tok = get_tokenizer("deepseek")
    system, developer = _request(
        {"role": "system", "content": "be brief"}, {"role": "developer", "content": "be brief"}
    ).messages
    assert frame_message(developer, framing, tok) == frame_message(system, framing, tok)
    after_user = frame_message(developer, framing, tok, "user")
    assert (after_user.text, after_user.framing) == (0, 0)


def test_a_property_with_several_types_is_priced_with_them_joined_by_a_bar() -> None:
    """A union type (a JSON-schema list of type names) is priced as its names joined by ``|``."""
    framing = default_framing("gpt-4o", "o200k_base")
    tok = get_tokenizer("o200k_base")

    def tool(kind: object) -> dict[str, object]:
        prop = {"type": kind, "description": "a name"}
        params = {"type": "object", "properties": {"who": prop}}
        return {"name": "f", "parameters": params}

    union = tools_tokens((tool(["string", "null"]),), framing, tok)
    assert union == tools_tokens((tool("string|null"),), framing, tok)


# -- meter -------------------------------------------------------------------------------------


def test_an_image_of_unknown_size_is_defaulted_and_unsized_at_the_rules_worst_case() -> None:
    """A URL image of unknown size is priced at the rule's worst case: those tokens are both
    ``defaulted`` (priced by a default) and, of those, ``unsized``."""
    route = gpt4o_route(alias="unsized")
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    request = _request({"role": "user", "content": [image]})
    [message] = measure(request, route).messages
    worst = route.image_rule.worst_case("auto")
    assert worst is not None and worst > 0
    assert message.images == message.defaulted == message.unsized == worst


# -- tokenizers --------------------------------------------------------------------------------


def test_a_text_with_a_lone_surrogate_has_a_cache_key() -> None:
    """Lone surrogates are keyed as the 3 UTF-8 bytes a tokenizer replaces them by."""
    text = "a" * 100 + "\ud800"
    assert CountCache.key(text) != CountCache.key("a" * 100 + "\ud801")
    cache = CountCache()
    assert cache.get_or_compute(text, len) == 101
    assert cache.peek(text) == 101


@pytest.mark.parametrize("spec", ["deepseek", "o200k_base", "anthropic-legacy"])
def test_a_prefetch_memoises_each_texts_count(spec: str) -> None:
    """Hugging Face's batch, and tiktoken's counts shared out on the counting threads (added
    tokens and NFKC included on the legacy Anthropic file): each text's own count."""
    texts = ["word " * 8000, "other words <EOT> ½ " * 3000, "1234 5678 " * 2000]
    tok = get_tokenizer(spec, b"test-prefetch")
    tok.prefetch(texts)
    fresh = get_tokenizer(spec, b"test-prefetch-fresh")
    assert [tok.cache.peek(t, b"test-prefetch") for t in texts] == [fresh.count(t) for t in texts]


# -- images ------------------------------------------------------------------------------------


def test_a_null_count_constant_is_refused_by_its_name() -> None:
    with pytest.raises(ValueError, match=r"^openai-tile tile_size must not be null$"):
        count("openai-tile tile_size", None)


def test_a_zero_max_dim_is_refused_by_openai_tile() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        OpenAITile(max_dim=0)


def test_a_patch_budget_of_one_is_a_valid_openai_patch_budget() -> None:
    """A budget must be positive: one patch is; an image over it shrinks to that one patch."""
    rule = OpenAIPatch(high_patch_budget=1)
    assert rule.patches(640, 480, "high") == 1


def test_a_very_wide_image_is_priced_in_whole_tokens_by_deepseek_v4() -> None:
    """A row of a grid too wide for the budget: as many whole columns as fit in one row."""
    rule = DeepSeekV4(paired_rows=True, max_tokens=201)
    tokens = rule.price(20000, 20, "auto")
    assert type(tokens) is int
