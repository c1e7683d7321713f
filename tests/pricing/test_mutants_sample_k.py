"""What the eleventh fresh sample of pricing/'s mutants (120 mutants, seed 20261232,
docs/mutation.md) let through: the ``digits`` model of the bias losing the tokens of images of
unknown size, an unknown calibration model refused without naming the known ones, a tool schema
priced with its non-ASCII characters as ``\\uXXXX`` escapes, DeepSeek V4 making more passes
than its ``max_passes``, image rule constants of exactly 1 refused and a refusal that says
nothing, the wrong ``param`` and message in a chat request's 400s, and a data URL whose late
header carries a character outside ASCII crashing the probe cache instead of being refused.
The survivors judged equivalent are named in their module's section."""

from __future__ import annotations

import base64
import json
import math
import struct
from dataclasses import replace

import pytest
from feature_samples import INDEX as _I
from feature_samples import features as _features
from feature_samples import sample as _sample

from pricing.calibration import FEATURES, CalibrationPolicy, Sample, _project, fit_correction
from pricing.framing import default_framing
from pricing.images.spec import parse_image_rule
from pricing.messages import RequestError, parse_request
from pricing.meter import measure
from pricing.probe import ImageError, probe
from pricing.route import ImageLimits, Route
from pricing.tokenizers import get_tokenizer

# -- pricing/calibration.py (_project mutmut_6, CalibrationPolicy.__post_init__ mutmut_38) -----


def test_the_digits_model_sees_every_feature_but_the_count_of_numbers() -> None:
    """``CalibrationPolicy.model``: ``digits`` is "the same without the count of numbers".
    Projected onto it, a sample keeps every other feature where ``FEATURES`` names it — the
    image tokens of unknown size, the last feature, included."""
    vector = tuple(range(1, len(FEATURES) + 1))
    projected = _project(vector, "digits")
    assert len(projected) == len(FEATURES)
    for name, before, after in zip(FEATURES, vector, projected, strict=True):
        assert after == (0 if name == "numbers" else before), name


def test_the_numbers_model_sees_every_feature_but_the_scripts_counts() -> None:
    """``numbers`` is "the same without the scripts' counts": every other feature stays where
    ``FEATURES`` names it, numbers and the unsized image tokens included."""
    vector = tuple(range(1, len(FEATURES) + 1))
    projected = _project(vector, "numbers")
    assert len(projected) == len(FEATURES)
    scripts = ("hangul", "kana", "han", "cyrillic", "groups", "wide")  # came after the scripts
    for name, before, after in zip(FEATURES, vector, projected, strict=True):
        assert after == (0 if name in scripts else before), name


def test_the_scripts_model_sees_every_feature_but_the_groups() -> None:
    """``scripts`` is "the same without the digits' groups" (nor the wide characters, which
    came after them)."""
    vector = tuple(range(1, len(FEATURES) + 1))
    projected = _project(vector, "scripts")
    assert len(projected) == len(FEATURES)
    for name, before, after in zip(FEATURES, vector, projected, strict=True):
        assert after == (0 if name in ("groups", "wide") else before), name


def test_the_groups_model_sees_every_feature_but_the_wide_characters() -> None:
    """``groups`` is "the same without the count of wide characters"."""
    vector = tuple(range(1, len(FEATURES) + 1))
    projected = _project(vector, "groups")
    assert len(projected) == len(FEATURES)
    for name, before, after in zip(FEATURES, vector, projected, strict=True):
        assert after == (0 if name == "wide" else before), name


def test_the_digits_model_prices_images_of_unknown_size_as_the_features_model_does() -> None:
    """Without numbers in the prompts, ``digits`` and ``features`` are one model: prompts that
    carry image tokens of unknown size (priced at the rule's worst case, the provider counting
    10% more) teach both the same weights, that of the unsized tokens included."""
    samples: list[Sample] = []
    for i in range(32):
        m, n = 1 + i % 5, 400 + 37 * i
        if i % 4 == 3:
            unsized = 1_000 + 100 * i
            vector = _features(prose=n, messages=m, unsized=unsized)
            actual = n + 4 * m + unsized + unsized // 10
            samples.append(replace(_sample(vector, actual, i), images=unsized, image_count=1))
        else:
            samples.append(_sample(_features(prose=n, messages=m), n + 4 * m, i))
    features = fit_correction(samples, CalibrationPolicy(model="features"), exact=True)
    digits = fit_correction(samples, CalibrationPolicy(model="digits"), exact=True)
    assert features.vector[_I["unsized"]] > 1.05  # the premise: the unsized tokens were learnt
    assert digits.samples == features.samples == len(samples)
    assert digits.vector == pytest.approx(features.vector, abs=1e-9)


@pytest.mark.parametrize("model", ["bogus", "Features", ""])
def test_an_unknown_calibration_model_is_refused_naming_the_known_ones(model: str) -> None:
    """A config error must say what would have been accepted: the seven models the policy
    documents, in its order."""
    with pytest.raises(ValueError) as refused:
        CalibrationPolicy(model=model)
    assert str(refused.value) == (
        "calibration model must be one of features, groups, scripts, numbers, digits, classes, "
        "one-factor"
    )


# -- pricing/capped.py (_cut_parts mutmut_69, _cut_plain mutmut_57: equivalent) ----------------
# mutmut_69: ``zip(cuts, costs, strict=None)``: ``cuts`` is ``_cut_all``'s list, built by a
# strict zip over ``costs``, so the two are always the same length and strictness never bites.
# mutmut_57: ``measured / 100`` for ``measured // 100``: both sides are whole tokens, and for an
# integer d and a real x, d > x + 8 exactly when d > ⌊x⌋ + 8 (d − 8 is an integer).

# -- pricing/framing.py (_compact_json mutmut_6) -----------------------------------------------


def test_a_tool_schema_is_priced_with_its_characters_as_written() -> None:
    """``tools_tokens``: families other than ``openai`` "render the schemas as JSON inside
    their system prompt; price that text". That text is the schema with its characters as
    the client wrote them (a template does not turn ``é`` into ``\\u00e9``, which costs more
    tokens): its compact JSON (sorted keys, no spaces), written out here by hand, plus the
    family's per-tool constant."""
    tool = {
        "type": "function",
        "function": {
            "name": "météo",
            "description": "Prévisions météo pour une ville — 天気予報",
            "parameters": {
                "type": "object",
                "properties": {"ville": {"type": "string", "description": "nom de la ville"}},
            },
        },
    }
    as_written = (
        '{"description":"Prévisions météo pour une ville — 天気予報","name":"météo",'
        '"parameters":{"properties":{"ville":{"description":"nom de la ville",'
        '"type":"string"}},"type":"object"}}'
    )
    assert json.loads(as_written) == tool["function"]
    framing = default_framing("mistral/mistral-large-latest", "o200k_base", "mistral")
    assert framing.family == "generic"
    route = Route(alias="mistral", model="mistral/mistral-large-latest", framing=framing)
    request = parse_request(
        {"model": "m", "messages": [{"role": "user", "content": "?"}], "tools": [tool]}
    )
    tok = get_tokenizer("o200k_base")
    escaped = json.dumps(tool["function"], separators=(",", ":"), sort_keys=True)
    assert tok.count(escaped) > tok.count(as_written)  # the premise: the two prices differ
    pressure = measure(request, route)
    assert pressure.tools == tok.count(as_written) + framing.per_message + framing.tools_preamble


# -- pricing/images/kinds.py (DeepSeekV4.price mutmut_7, GeminiTile.__post_init__ mutmut_8,
#    OpenAITile.__post_init__ mutmut_8, QwenVL.__post_init__ mutmut_4) -------------------------


def _v41_pass(width: int, height: int) -> tuple[int, int, int]:
    """One pass of DeepSeek V4.1 (docs/images.md § DeepSeek V4) for an image whose grid fits
    the 1,024-token budget: scale up to 544² (truncating), pad each side to a multiple of 14,
    ⌈⌊px/14⌋/3⌉ cells per axis, gh·(gw+1)+2 tokens. The padded image is the next pass's input."""
    if width * height < 544 * 544:
        scale = math.sqrt(544 * 544 / (width * height))
        width, height = max(1, math.trunc(width * scale)), max(1, math.trunc(height * scale))
    width, height = -(-width // 14) * 14, -(-height // 14) * 14
    cols, rows = -(-(width // 14) // 3), -(-(height // 14) // 3)
    tokens = rows * (cols + 1) + 2
    assert tokens <= 1024  # within budget: no grid to solve
    return width, height, tokens


@pytest.mark.parametrize("size", [(353, 1), (1, 353), (162, 1)])
@pytest.mark.parametrize("max_passes", [1, 2, 3, 10])
def test_deepseek_v4_makes_at_most_max_passes_passes(
    size: tuple[int, int], max_passes: int
) -> None:
    """docs/images.md: passes repeat "on their own output until it stops changing (at most 10
    passes)", and ``max_passes`` is a constant config may set (docs/configuration.md). A thin
    strip scaled up to 544² lands a little under it after truncation, so each pass scales it up
    again and adds a column or two: the price is that of the ``max_passes``-th pass, no later
    one."""
    passes = [_v41_pass(*size)]
    for _ in range(9):
        passes.append(_v41_pass(*passes[-1][:2]))
    assert passes[0][2] < passes[2][2] <= passes[-1][2]  # the premise: it takes several passes
    rule = parse_image_rule({"kind": "deepseek-v4", "max_passes": max_passes})
    assert rule.tokens(*size) == passes[max_passes - 1][2]


_GEMINI = (
    "image rule 'gemini-tile': gemini-tile needs crop_divisor > 0 and 1 <= min_crop <= max_crop"
)
_OPENAI = "image rule 'openai-tile': openai-tile max_dim, short_side and tile_size must be positive"
_QWEN = "image rule 'qwen-vl': qwen-vl needs factor >= 1, 1 <= min_pixels < max_pixels"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "gemini-tile", "crop_divisor": 0}, _GEMINI),
        ({"kind": "gemini-tile", "min_crop": 0}, _GEMINI),
        ({"kind": "gemini-tile", "min_crop": 769, "max_crop": 768}, _GEMINI),
        ({"kind": "openai-tile", "max_dim": 0}, _OPENAI),
        ({"kind": "openai-tile", "short_side": 0}, _OPENAI),
        ({"kind": "openai-tile", "tile_size": 0}, _OPENAI),
        ({"kind": "qwen-vl", "factor": 0}, _QWEN),
    ],
)
def test_an_impossible_image_rule_is_refused_saying_what_it_needs(
    spec: dict[str, object], message: str
) -> None:
    """docs/images.md § Rules are data: constants come from the operator's config, so a
    refusal names the kind and the condition its constants must meet."""
    with pytest.raises(ValueError) as refused:
        parse_image_rule(spec)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("spec", "size", "tokens"),
    [
        # fit in a 1x1 box: one tile (the default box leaves 600x600 at 2x2 tiles, 765)
        ({"kind": "openai-tile", "max_dim": 1}, (600, 600), 85 + 170),
        # a short side over 1 brought down to 1: 600x600 → 1x1, one tile
        ({"kind": "openai-tile", "short_side": 1}, (600, 600), 85 + 170),
        # 1-px tiles: a 3x2 image is 6 of them
        ({"kind": "openai-tile", "tile_size": 1}, (3, 2), 85 + 6 * 170),
        # factor 1: each side is its own multiple, 100x50 = 5,000 pixels within the bounds
        ({"kind": "qwen-vl", "factor": 1}, (100, 50), 100 * 50 + 2),
    ],
)
def test_an_image_rule_constant_of_exactly_one_is_positive(
    spec: dict[str, object], size: tuple[int, int], tokens: int
) -> None:
    """ "Must be positive", "factor >= 1": 1 is allowed, and the rule prices by its documented
    formula with it (docs/images.md § OpenAI tiles: base + tile·⌈w/t⌉·⌈h/t⌉ after the box and
    the short side; § Qwen-VL: (H/f)·(W/f) + 2)."""
    assert parse_image_rule(spec).tokens(*size, "high") == tokens


# -- pricing/jsoncut.py (detect_style mutmut_94: equivalent) -----------------------------------
# Leaving ``previous`` at ':' after the whitespace that follows one changes nothing: that
# whitespace token itself sets ``key_sep`` when it is still unset, and every later test of
# ``previous == ":"`` also asks ``key_sep is None``. Whitespace runs are matched whole, so two
# whitespace tokens never follow each other. (300,000 random texts agree.)

# -- pricing/messages.py (parse_message mutmut_57, mutmut_79; parse_request mutmut_35) ---------

_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        (
            {"model": "m", "messages": [{"role": "user", "content": "hi", "tool_calls": [_CALL]}]},
            "messages[0]: only assistant messages carry tool_calls",
            "messages[0]",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {"role": "assistant", "content": None, "tool_calls": [_CALL]},
                    {
                        "role": "tool",
                        "tool_call_id": "c1",
                        "content": "ok",
                        "function_call": {"name": "f", "arguments": "{}"},
                    },
                ],
            },
            "messages[1]: only assistant messages carry tool_calls",
            "messages[1]",
        ),
        (
            {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user"}]},
            "messages[1].content is required for role 'user'",
            "messages[1].content",
        ),
        (
            {"model": "m", "messages": [{"role": "system"}]},
            "messages[0].content is required for role 'system'",
            "messages[0].content",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {"role": "assistant", "tool_calls": [_CALL]},
                    {"role": "tool", "tool_call_id": "c1"},
                ],
            },
            "messages[1].content is required for role 'tool'",
            "messages[1].content",
        ),
        (
            {"model": 4, "messages": [{"role": "user", "content": "hi"}]},
            "model must be a string",
            "model",
        ),
        (
            {"model": ["gpt-4o"], "messages": [{"role": "user", "content": "hi"}]},
            "model must be a string",
            "model",
        ),
    ],
)
def test_a_refused_chat_request_names_its_message_and_says_why(
    body: dict[str, object], message: str, param: str
) -> None:
    """A refusal is the client's 400 (docs/reliability.md: ``param`` names the field): the
    message to fix is the one at fault, and the text says what it lacks or must not carry —
    the same words the other wires use (``model must be a string``)."""
    with pytest.raises(RequestError) as refused:
        parse_request(body)
    assert (refused.value.message, refused.value.param) == (message, param)
    assert str(refused.value) == message


# -- pricing/probe.py (_reads_digest mutmut_15) ------------------------------------------------

_LIMITS = ImageLimits()
_SCOPE = b"test_mutants_sample_k"


def _late_frame_jpeg(width: int, height: int) -> bytes:
    """A JPEG whose frame header sits after 80 KB of metadata (beyond the fingerprint's prefix,
    so the probe cache compares the characters it was read from by digest), then 200 KB of
    data."""
    app = b"\xff\xe1" + struct.pack(">H", 65_000) + bytes(64_998)
    app2 = b"\xff\xe2" + struct.pack(">H", 15_000) + bytes(14_998)
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app + app2 + sof + bytes(200_000) + b"\xff\xd9"


def test_a_non_ascii_character_in_a_cached_images_header_is_refused_as_bad_base64() -> None:
    """A client's JSON string may hold any character. A data URL equal to a probed one
    everywhere the fingerprint looks, but with a character outside ASCII among those its
    frame header was read from, must be refused as the 400 ``probe`` promises for
    undecodable data — not served the cached size, and not crash comparing the cached
    header's characters."""
    raw = _late_frame_jpeg(1000, 500)
    prefix = "data:image/jpeg;base64,"
    url = prefix + base64.b64encode(raw).decode()
    height_at = raw.index(b"\xff\xc0") + 5  # marker, length, precision, then the height
    char = len(prefix) + height_at // 3 * 4 + 1  # a character holding the height's high bits
    assert url[char] == "A"  # the 6 bits that hold 0x01F4's high nibble (and more zeros)
    info = probe(url, _LIMITS, _SCOPE)
    assert info is not None and (info.width, info.height) == (1000, 500)
    # the premise: the character is outside the fingerprint (same key), yet it is read
    other = probe(url[:char] + "B" + url[char + 1 :], _LIMITS, _SCOPE)
    assert other is not None and other.digest == info.digest
    assert (other.width, other.height) == (1000, 0x11F4)
    with pytest.raises(ImageError) as refused:
        probe(url[:char] + "é" + url[char + 1 :], _LIMITS, _SCOPE)
    assert refused.value.message == "the image data is not valid base64"


# -- pricing/tokenizers.py (default_tokenizer mutmut_29: equivalent) ---------------------------
# ``"O3"`` never matches the lowered name, but a name starting with "o3" then falls through
# every later test (computer-use, gpt-4, claude...) to the fallback, which is o200k_base too.
