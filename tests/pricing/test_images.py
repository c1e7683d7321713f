"""Image rules: every published vector (docs/images.md § Sources and published vectors),
defaults per model family, config parsing, worst cases, properties, and images priced through
the meter."""

from __future__ import annotations

import base64
import io
import re
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from pricing.calibration import CalibrationPolicy
from pricing.images import (
    DETAILS,
    KINDS,
    UNKNOWN_VISION_TOKENS,
    ImageRule,
    OpenAIPatch,
    default_image_rule,
    parse_image_rule,
    text_only,
)
from pricing.images import constants as rule_constants
from pricing.images.constants import SCHEMA
from pricing.images.kinds import GOOGLE_KINDS, GOOGLE_LEVELS, KIND_CLASSES
from pricing.messages import RequestError, parse_request
from pricing.meter import measure
from pricing.probe import placeholder, probe
from pricing.route import ImageLimits, Route
from pricing.tokenizers import get_tokenizer

# --------------------------------------------------------------------------------------------
# Published vectors, one test per rule kind; each cites its docs/images.md section


# docs/images.md § OpenAI tiles
@pytest.mark.parametrize(
    ("size", "detail", "tokens"),
    [((1024, 1024), "high", 765), ((2048, 4096), "high", 1105), ((1024, 1024), "low", 85)],
)
def test_openai_tile_published_vectors(size: tuple[int, int], detail: str, tokens: int) -> None:
    rule = parse_image_rule("openai-tile:gpt-4o")
    assert rule.tokens(*size, detail) == tokens


@pytest.mark.parametrize("size", [(1, 1), (512, 512), (4000, 3000), (20000, 30)])
def test_openai_tile_low_is_base_at_any_size(size: tuple[int, int]) -> None:
    assert parse_image_rule("openai-tile:gpt-4o").tokens(*size, "low") == 85


def test_openai_tile_never_enlarges_by_default_and_keeps_the_older_reading_selectable() -> None:
    current = parse_image_rule("openai-tile")
    older = parse_image_rule({"kind": "openai-tile", "upscale_short_side": True})
    assert current.tokens(512, 512, "high") == 255  # current docs
    assert older.tokens(512, 512, "high") == 765  # older docs and libraries copied from them
    assert older.tokens(1024, 1024, "high") == current.tokens(1024, 1024, "high") == 765
    assert older.worst_case("high") is None  # a thin strip's long side grows without bound
    assert current.worst_case("high") == 85 + 170 * 8


# docs/images.md § OpenAI patches
@pytest.mark.parametrize(
    ("size", "budget", "patches"), [((1024, 1024), 1536, 1024), ((1800, 2400), 1536, 1452)]
)
def test_openai_patch_published_patch_counts(
    size: tuple[int, int], budget: int, patches: int
) -> None:
    constants = parse_image_rule({"kind": "openai-patch", "patch_budget": budget})
    counted = constants._constants
    assert isinstance(counted, OpenAIPatch)
    assert counted.patches(*size, "auto") == patches


@pytest.mark.parametrize(("size", "tokens"), [((1024, 1024), 1229), ((2048, 2048), 3000)])
def test_openai_patch_gpt_5_4_high_published_vectors(size: tuple[int, int], tokens: int) -> None:
    rule = default_image_rule("openai/gpt-5.4", supports_vision=True)
    assert rule.tokens(*size, "high") == tokens


def test_openai_patch_multiplier_is_exact_on_the_written_decimal() -> None:
    # 2500 patches x 1.2 is 3000, not ceil(3000.0000000000005) = 3001
    rule = parse_image_rule(
        {"kind": "openai-patch", "max_dim": 2048, "patch_budget": 2500, "multiplier": 1.2}
    )
    assert rule.tokens(2048, 2048) == 3000
    assert rule.worst_case() == 3000


# docs/images.md § Anthropic
@pytest.mark.parametrize(("size", "tokens"), [((200, 200), 54), ((1000, 1000), 1334)])
def test_anthropic_published_vectors(size: tuple[int, int], tokens: int) -> None:
    assert parse_image_rule("anthropic").tokens(*size) == tokens


@pytest.mark.parametrize("size", [(1092, 1092), (1920, 1080)])
def test_anthropic_published_approximate_vectors(size: tuple[int, int]) -> None:
    tokens = parse_image_rule("anthropic").tokens(*size)
    assert abs(tokens - 1568) <= 2
    assert tokens <= 1568  # never over the token limit


@pytest.mark.parametrize(
    ("size", "tokens"), [((1092, 1092), 1590), ((1920, 1080), 2765), ((2000, 1500), 4000)]
)
def test_anthropic_opus_4_7_published_vectors(size: tuple[int, int], tokens: int) -> None:
    rule = default_image_rule("anthropic/claude-opus-4-7", supports_vision=True)
    assert rule.tokens(*size) == tokens


@pytest.mark.parametrize(
    ("variant", "size", "tokens"),
    [
        # The long edge scales to exactly max_edge (s = 1568/2502: 2502·s = 1568, not the
        # float product's 1567.9999…), the short one to ⌊126·1568/2502⌋ = 78: ⌈78·1568/750⌉.
        ("claude", (126, 2502), 164),
        ("claude", (2401, 580), 791),  # 1568 x ⌊580·1568/2401⌋ = 378
        ("claude-opus-4-7", (58, 4832), 104),  # 2576 x 30
        # The token limit binds: ⌊w·√(limit·750/(w·h))⌋ = ⌊√(limit·750·w/h)⌋, exactly.
        ("claude", (3750, 2250), 1568),  # 1400 x 840: exactly 1568 tokens, no pixel trimmed
    ],
)
def test_anthropic_scales_to_the_floored_size_exactly(
    variant: str, size: tuple[int, int], tokens: int
) -> None:
    # docs/images.md § Anthropic: s = min(1, edge/max(w,h), √(limit·750/(w·h))), floored, then
    # ⌈w·h/750⌉. Float products used to land a pixel short (1567 for 1568): a token under.
    assert parse_image_rule(f"anthropic:{variant}").tokens(*size) == tokens


# docs/images.md § Gemini tiles
@pytest.mark.parametrize(("size", "tokens"), [((384, 384), 258), ((960, 540), 1548)])
def test_gemini_tile_published_vectors(size: tuple[int, int], tokens: int) -> None:
    assert parse_image_rule("gemini-tile").tokens(*size) == tokens


# docs/images.md § Gemini fixed levels
@pytest.mark.parametrize(
    ("variant", "detail", "tokens"),
    [
        ("gemini-3", "low", 280),
        ("gemini-3", "high", 1120),
        ("gemini-3", "auto", 1120),  # high is Gemini 3's default for images
        ("gemini-3", "original", 1120),  # litellm sends no media_resolution for it
        ("gemini-2.5", "low", 64),
        ("gemini-2.5", "high", 256),
    ],
)
def test_gemini_fixed_levels(variant: str, detail: str, tokens: int) -> None:
    rule = parse_image_rule(f"gemini-fixed:{variant}")
    assert rule.tokens(4000, 3000, detail) == tokens == rule.worst_case(detail)


def test_gemini_fixed_medium_and_ultra_high_are_reachable_from_config() -> None:
    medium = parse_image_rule({"kind": "gemini-fixed", "default_level": "medium"})
    ultra = parse_image_rule({"kind": "gemini-fixed", "default_level": "ultra_high"})
    assert medium.tokens(10, 10) == 560
    assert ultra.tokens(10, 10, "original") == 2240


# docs/images.md § DeepSeek V4
DEEPSEEK_V41 = [
    ((100, 100), 184),
    ((640, 480), 206),
    ((1024, 768), 496),
    ((1920, 1080), 968),
    ((5000, 5000), 994),
    ((300, 50), 200),
    ((8192, 100), 593),
    ((9000, 1), 1024),
    ((1, 9000), 1024),
    ((4921, 353), 906),
    ((1224, 1429), 959),
    ((1, 4096), 1024),
    ((2560, 1400), 991),
    ((1000, 500), 302),
]
DEEPSEEK_EXP = [
    ((100, 100), 117),
    ((640, 480), 209),
    ((1024, 768), 357),
    ((1920, 1080), 369),
    ((300, 50), 101),
    ((9000, 1), 113),
    ((16, 8192), 381),
    ((4921, 353), 289),
]


@pytest.mark.parametrize(("size", "tokens"), DEEPSEEK_V41)
def test_deepseek_v4_1_published_vectors(size: tuple[int, int], tokens: int) -> None:
    assert parse_image_rule({"kind": "deepseek-v4"}).tokens(*size) == tokens


@pytest.mark.parametrize(("size", "tokens"), DEEPSEEK_EXP)
def test_deepseek_v4_exp_published_vectors(size: tuple[int, int], tokens: int) -> None:
    assert parse_image_rule({"kind": "deepseek-v4", "variant": "exp"}).tokens(*size) == tokens


def test_deepseek_exp_vector_depends_on_the_calculators_float_order() -> None:
    # 4921x353 clamps to 2824x353; the solver's 353 * (252/353) / 14 is 17.999..., so the
    # height truncates to 238, the next pass re-clamps the width, and the price is 289.
    assert 353 * (6 * 42 / 353) / 14 < 18
    assert parse_image_rule("deepseek-v4:exp").tokens(4921, 353) == 289


# docs/images.md § Qwen-VL
@pytest.mark.parametrize(("size", "tokens"), [((1024, 1024), 1369), ((224, 448), 128)])
def test_qwen_vl_published_vectors(size: tuple[int, int], tokens: int) -> None:
    rule = parse_image_rule("qwen-vl:qwen2.5")
    assert rule.tokens(*size) - 2 == tokens  # published without the two wrapper tokens


def test_qwen_vl_variants_and_aspect_limit() -> None:
    qwen3 = parse_image_rule("qwen-vl:qwen3")
    assert qwen3.tokens(1024, 1024) == 32 * 32 + 2
    assert qwen3.tokens(10, 10) == 8 * 8 + 2  # scaled up to min_pixels 65536
    qwen25 = parse_image_rule("qwen-vl")
    # Qwen rejects aspect ratios over 200: priced at the bound, never a crash.
    assert qwen25.tokens(20100, 100) == qwen25.worst_case() == 12_845_056 // 784 + 2


# docs/images.md § Pixtral
@pytest.mark.parametrize(
    ("variant", "size", "tokens"),
    [
        ("pixtral-12b", (1024, 1024), 64 * 64 + 64),
        ("pixtral-12b", (512, 512), 32 * 32 + 32),
        ("pixtral-12b", (2048, 1024), 64 * 32 + 32),  # scaled to 1024x512
        ("pixtral-12b", (17, 16), 2 * 1 + 1),
        ("mistral-small-3", (1024, 1024), 37 * 37 + 37),
        ("mistral-small-3", (3080, 1540), 55 * 28 + 28),  # scaled to 1540x770
    ],
)
def test_pixtral(variant: str, size: tuple[int, int], tokens: int) -> None:
    assert parse_image_rule(f"pixtral:{variant}").tokens(*size) == tokens


# docs/images.md § Llama 4
@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((336, 336), 147),  # one tile: only the global view
        ((300, 200), 147),
        ((672, 336), 147 + 2 * 145),  # 1x2 canvas fits exactly
        ((1344, 1344), 147 + 16 * 145),  # 4x4
        ((5000, 100), 147 + 15 * 145),  # 1x15: the smallest canvas that still upscales
        ((8000, 100), 147 + 16 * 145),  # 1x16: no canvas upscales; the largest downscale
        ((700, 300), 147 + 3 * 145),  # 1x3 ties 1x4 at the smallest upscale; smaller wins
        ((700, 340), 147 + 6 * 145),  # 340 px needs two rows: 2x3
    ],
)
def test_llama4(size: tuple[int, int], tokens: int) -> None:
    assert parse_image_rule("llama4").tokens(*size) == tokens


def test_flat_and_text_only() -> None:
    assert parse_image_rule("flat:1500").tokens(4000, 3000) == 1500
    assert parse_image_rule("flat:1500").worst_case("high") == 1500
    assert text_only().tokens(4000, 3000) == 0
    assert text_only().worst_case() == 0
    assert not text_only().visual
    assert all(parse_image_rule(k).visual for k in KINDS if k != "text-only")


# --------------------------------------------------------------------------------------------
# Defaults by model family (pinned)

# (model, kind, variant, constants that must hold)
DEFAULTS: list[tuple[str, str, str | None, dict[str, object]]] = [
    ("gpt-4o", "openai-tile", "gpt-4o", {"base": 85, "tile": 170}),
    ("openai/gpt-4o-2024-08-06", "openai-tile", "gpt-4o", {"base": 85, "tile": 170}),
    ("azure/gpt-4.1", "openai-tile", "gpt-4o", {"base": 85, "tile": 170}),
    ("gpt-4.5-preview", "openai-tile", "gpt-4o", {"base": 85, "tile": 170}),
    ("chatgpt-4o-latest", "openai-tile", "gpt-4o", {"base": 85, "tile": 170}),
    ("gpt-4o-mini", "openai-tile", "gpt-4o-mini", {"base": 2833, "tile": 5667}),
    ("ft:gpt-4o-mini-2024-07-18:org::abc", "openai-tile", "gpt-4o-mini", {"base": 2833}),
    ("o1", "openai-tile", "o1", {"base": 75, "tile": 150}),
    ("openai/o3", "openai-tile", "o1", {"base": 75, "tile": 150}),
    ("o3-pro", "openai-tile", "o1", {"base": 75, "tile": 150}),
    ("gpt-5", "openai-tile", "gpt-5", {"base": 70, "tile": 140}),
    ("gpt-5.1", "openai-tile", "gpt-5", {"base": 70, "tile": 140}),
    ("gpt-5-chat-latest", "openai-tile", "gpt-5", {"base": 70, "tile": 140}),
    ("computer-use-preview", "openai-tile", "computer-use-preview", {"base": 65, "tile": 129}),
    (
        "gpt-4.1-mini",
        "openai-patch",
        "gpt-4.1-mini",
        {"multiplier": 1.62, "high_patch_budget": 6144},
    ),
    ("gpt-4.1-nano", "openai-patch", "gpt-4.1-nano", {"multiplier": 2.46}),
    ("o4-mini", "openai-patch", "o4-mini", {"multiplier": 1.72, "high_patch_budget": 1536}),
    ("gpt-5-mini", "openai-patch", "gpt-5-mini", {"multiplier": 1.62}),  # conservative
    ("gpt-5-nano", "openai-patch", "gpt-5-nano", {"multiplier": 2.46}),  # conservative
    ("gpt-5.1-codex-mini", "openai-patch", "gpt-5-mini", {"multiplier": 1.62}),
    ("gpt-5.2", "openai-patch", "gpt-5.2", {"multiplier": 1.2, "low_patch_budget": 6144}),
    (
        "gpt-5.4",
        "openai-patch",
        "gpt-5.4",
        {"multiplier": 1.2, "low_patch_budget": 6144, "high_patch_budget": 2500},
    ),
    ("gpt-5.4-mini", "openai-patch", "gpt-5.4-mini", {"multiplier": 1.62}),
    ("gpt-5.4-nano", "openai-patch", "gpt-5.4-nano", {"multiplier": 2.46}),
    (
        "gpt-5.5",
        "openai-patch",
        "gpt-5.5",
        {"low_max_dim": 512, "low_patch_budget": None, "original_max_dim": 6000},
    ),
    ("gpt-5.5-mini", "openai-patch", "gpt-5.5", {"multiplier": 1.62}),
    ("gpt-5.6", "openai-patch", "gpt-5.6", {"original_max_dim": None, "auto_patch_budget": None}),
    ("gpt-5.6-nano", "openai-patch", "gpt-5.6", {"multiplier": 2.46}),
    # after 5.6: 5.6's table, and the 5.x mini/nano multipliers (they used to fall to flat)
    ("gpt-6", "openai-patch", "gpt-5.6", {"multiplier": 1.2, "auto_patch_budget": None}),
    ("openai/gpt-6-mini", "openai-patch", "gpt-5.6", {"multiplier": 1.62}),
    ("gpt-6.1-nano-2027-01-01", "openai-patch", "gpt-5.6", {"multiplier": 2.46}),
    ("gpt-7-chat-latest", "openai-patch", "gpt-5.6", {"multiplier": 1.2}),
    ("claude-sonnet-4-5", "anthropic", "claude", {"max_edge": 1568, "token_limit": 1568}),
    ("anthropic/claude-3-5-sonnet-20240620", "anthropic", "claude", {"token_limit": 1568}),
    ("claude-opus-4-20250514", "anthropic", "claude", {"token_limit": 1568}),
    ("claude-opus-4-1", "anthropic", "claude", {"token_limit": 1568}),
    (
        "anthropic/claude-opus-4-7",
        "anthropic",
        "claude-opus-4-7",
        {"max_edge": 2576, "token_limit": 4784},
    ),
    ("openrouter/anthropic/claude-opus-4.7", "anthropic", "claude-opus-4-7", {}),
    ("bedrock/us.anthropic.claude-3-7-sonnet-20250219-v1:0", "anthropic", "claude", {}),
    ("gemini/gemini-2.5-pro", "gemini-tile", "gemini-2", {"tile_tokens": 258}),
    ("vertex_ai/gemini-2.0-flash", "gemini-tile", "gemini-2", {}),
    ("gemini/gemini-3-pro", "gemini-fixed", "gemini-3", {"high": 1120, "default_level": "high"}),
    ("gemini-3-flash-preview", "gemini-fixed", "gemini-3", {"low": 280}),
    # later generations and Google's moving aliases: Gemini 3's levels, the dearest by default
    ("gemini/gemini-flash-latest", "gemini-fixed", "gemini-3", {"default_level": "ultra_high"}),
    ("gemini-pro-latest", "gemini-fixed", "gemini-3", {"default_level": "ultra_high"}),
    ("vertex_ai/gemini-flash-lite-latest", "gemini-fixed", "gemini-3", {"high": 1120}),
    ("gemini-4-pro", "gemini-fixed", "gemini-3", {"default_level": "ultra_high"}),
    ("gemini/gemini-5.0-flash-preview", "gemini-fixed", "gemini-3", {"low": 280}),
    ("deepseek/deepseek-chat", "deepseek-v4", "v4.1", {"max_tokens": 1024}),
    ("deepseek/deepseek-v4-flash-vision-exp", "deepseek-v4", "exp", {"max_tokens": 384}),
    ("hosted_vllm/Qwen/Qwen2.5-VL-7B-Instruct", "qwen-vl", "qwen2.5", {"factor": 28}),
    ("openrouter/qwen/qwen2-vl-72b-instruct", "qwen-vl", "qwen2.5", {"factor": 28}),
    ("together_ai/Qwen/Qwen3-VL-235B-A22B-Instruct", "qwen-vl", "qwen3", {"factor": 32}),
    # QVQ: Qwen's visual reasoning model; DashScope's id has no "qwen" (it used to fall to flat)
    ("dashscope/qvq-max", "qwen-vl", "qwen2.5", {"factor": 28}),
    ("qvq-plus-latest", "qwen-vl", "qwen2.5", {"factor": 28}),
    ("hosted_vllm/Qwen/QVQ-72B-Preview", "qwen-vl", "qwen2.5", {"factor": 28}),
    ("mistral/pixtral-12b-2409", "pixtral", "pixtral-12b", {"patch": 16}),
    ("mistral/pixtral-large-latest", "pixtral", "pixtral-12b", {"max_image_size": 1024}),
    ("mistral/mistral-small-latest", "pixtral", "mistral-small-3", {"patch": 14, "merge": 2}),
    ("together_ai/meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4", "llama-4", {}),
    ("groq/meta-llama/llama-4-maverick-17b-128e-instruct", "llama4", "llama-4", {}),
    ("some-provider/brand-new-vision-model", "flat", None, {"tokens": UNKNOWN_VISION_TOKENS}),
    ("deepseek-vl2", "flat", None, {"tokens": 1600}),  # open weights, another processor
]


@pytest.mark.parametrize(("model", "kind", "variant", "constants"), DEFAULTS)
def test_default_rule_by_model_family(
    model: str, kind: str, variant: str | None, constants: dict[str, object]
) -> None:
    rule = default_image_rule(model, supports_vision=True)
    assert (rule.kind, rule.variant) == (kind, variant)
    params = dict(rule.params)
    for name, value in constants.items():
        assert params[name] == value, name


@pytest.mark.parametrize("model", ["gpt-4o", "deepseek/deepseek-chat", "claude-opus-4-7", "x"])
def test_default_rule_without_vision_is_text_only(model: str) -> None:
    assert default_image_rule(model, supports_vision=False) == text_only()


def _documented_maxima() -> dict[str, int | None]:
    """docs/images.md § Defaults by model name: each model (or config-only preset, a ``kind:``
    spec) of the maxima table, its figure."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "images.md").read_text()
    section = text.split("Each family's maximum for one image at default detail", 1)[1]
    out: dict[str, int | None] = {}
    rows = section.split("\n\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]  # past the head
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        figure = None if cells[-1] == "none" else int(cells[-1].replace(",", ""))
        for model in re.findall(r"`([^`]+)`", cells[0]):
            out[model] = figure
    return out


def test_the_unknown_price_against_every_family_maximum() -> None:
    """docs/images.md § Defaults by model name: the unknown price (a stand-in) is above the
    1,5xx-token families' default-detail maxima and below the others'; the table of maxima is
    derived here from the rules, and every rule the catalogue or a preset gives must be in it
    (a dearer family added later fails until the doc names it)."""
    documented = {
        parse_image_rule(name) if ":" in name else default_image_rule(name, True): (name, figure)
        for name, figure in _documented_maxima().items()
    }
    assert len(documented) >= 30
    for rule, (name, figure) in documented.items():
        assert rule.worst_case("auto") == figure, name
    covered = set(documented)
    catalogued = {default_image_rule(model, True) for model, *_ in DEFAULTS}
    presets = {
        ImageRule(cls.kind, (("variant", variant),))
        for cls in KIND_CLASSES
        for variant in cls.VARIANTS
        if "@" not in variant  # the selectable cheaper readings, never a default
    }
    missing = {str(rule) for rule in (catalogued | presets) - covered if rule.kind != "flat"}
    assert not missing, f"add to docs/images.md's maxima table: {sorted(missing)}"
    maxima = {rule: rule.worst_case("auto") for rule in covered}
    below = {str(rule) for rule, most in maxima.items() if most is not None and most <= 1600}
    # the families the doc names as under the unknown price, and no other
    assert below == {
        "openai-tile:gpt-4o",
        "openai-tile:o1",
        "openai-tile:gpt-5",
        "openai-tile:computer-use-preview",
        "anthropic:claude",
        "gemini-fixed:gemini-3",
        "deepseek-v4:v4.1",
        "deepseek-v4:exp",
        "gemini-fixed:gemini-2.5",  # config only
        "qwen-vl:qwen2.5-hosted",  # config only
    }
    assert UNKNOWN_VISION_TOKENS == 1600
    assert default_image_rule("brand-new-vision-model", True).worst_case("auto") == 1600
    # calibration's weight on a stand-in's tokens reaches every bounded maximum
    reach = UNKNOWN_VISION_TOKENS * CalibrationPolicy().defaulted_high
    assert all(most <= reach for most in maxima.values() if most is not None)
    assert None in maxima.values()  # hence no finite figure is a worst case


@pytest.mark.parametrize(
    ("model", "newest"),
    [
        ("gpt-6", "gpt-5.6"),
        ("gpt-6-mini", "gpt-5.6-mini"),
        ("gpt-6-nano", "gpt-5.6-nano"),
        ("gpt-10.2", "gpt-5.6"),
        ("gemini-flash-latest", "gemini-3-flash"),
        ("gemini-pro-latest", "gemini-3-pro"),
        ("gemini-flash-lite-latest", "gemini-3-flash-lite"),
        ("gemini-4-flash", "gemini-3-flash"),
        ("gemini-5-pro-preview", "gemini-3-pro"),
    ],
)
def test_a_later_generation_takes_the_newest_generations_rule(model: str, newest: str) -> None:
    """docs/images.md § Defaults by model name: a generation newer than the catalogue (or a
    moving ``-latest`` alias) gets the newest known generation's rule of its family, at least
    as dear as ``flat`` at the default detail (it used to be ``flat``: no Google kind, so a
    Gemini route refused HEIC and priced a video as its placeholder text)."""
    rule, known = default_image_rule(model, True), default_image_rule(newest, True)
    flat = default_image_rule("brand-new-vision-model", True)
    assert rule.kind == known.kind != "flat"
    for detail in DETAILS:
        most, flat_most = rule.worst_case(detail), flat.worst_case(detail)
        assert flat_most is not None
        if detail == "auto":  # the default detail: never under flat's price
            assert most is None or most >= flat_most, detail
    if known.kind == "openai-patch":
        assert rule == known  # 5.6's table, and its mini/nano multipliers
        return
    # Gemini: Gemini 3's levels; the level a later model defaults to is unknown, so the
    # dearest published one (as for a media_resolution name this version does not know)
    dearest = max(known.tokens(9, 9, level) for level in (*DETAILS, *GOOGLE_LEVELS))
    assert rule.tokens(9, 9) == dearest >= flat.tokens(9, 9)
    for level in ("low", "high", "medium", "ultra_high"):  # a level the client sets is Gemini 3's
        assert rule.tokens(4000, 3000, level) == known.tokens(4000, 3000, level)
    assert rule.kind in GOOGLE_KINDS


def test_where_the_docs_disagree_both_figures_are_selectable() -> None:
    assert (
        parse_image_rule("openai-patch:gpt-5-mini").params
        == parse_image_rule({"model": "gpt-5-mini"}).params
    )
    current = parse_image_rule("openai-patch:gpt-5-mini@current-docs")
    assert dict(current.params)["multiplier"] == 1.2
    assert (
        dict(parse_image_rule("openai-patch:gpt-5-nano@current-docs").params)["multiplier"] == 1.5
    )
    earlier = parse_image_rule("openai-patch:gpt-4.1-mini@earlier-docs")
    assert dict(earlier.params)["high_patch_budget"] == 1536
    # the defaults are the conservative (higher-priced) ones
    for model, alternative in [
        ("gpt-5-mini", "gpt-5-mini@current-docs"),
        ("gpt-5-nano", "gpt-5-nano@current-docs"),
        ("gpt-5.4-mini", "gpt-5.4-mini@current-docs"),
        ("gpt-5.4-nano", "gpt-5.4-nano@current-docs"),
        ("gpt-4.1-mini", "gpt-4.1-mini@earlier-docs"),
    ]:
        default = default_image_rule(model, True)
        other = parse_image_rule(f"openai-patch:{alternative}")
        assert default.tokens(1800, 2400) > other.tokens(1800, 2400), model
        assert (default.worst_case() or 0) > (other.worst_case() or 0), model


# --------------------------------------------------------------------------------------------
# Config parsing


def test_parse_forms() -> None:
    assert parse_image_rule("text-only") == text_only()
    assert parse_image_rule("flat:1500") == ImageRule("flat", (("tokens", 1500),))
    assert parse_image_rule({"kind": "flat", "tokens": 1500}) == parse_image_rule("flat:1500")
    assert parse_image_rule("anthropic") == parse_image_rule({"kind": "anthropic"})
    assert parse_image_rule("deepseek-v4:exp") == parse_image_rule(
        {"kind": "deepseek-v4", "variant": "exp"}
    )
    assert parse_image_rule("model:gpt-5.4") == default_image_rule("gpt-5.4", True)
    assert parse_image_rule({"model": "gpt-5.4"}) == default_image_rule("gpt-5.4", True)


def test_mapping_overrides_a_kinds_constants() -> None:
    rule = parse_image_rule(
        {"kind": "openai-patch", "max_dim": 2048, "patch_budget": 1536, "multiplier": 1.62}
    )
    params = dict(rule.params)
    assert params["multiplier"] == 1.62
    assert all(params[f"{d}_max_dim"] == 2048 for d in DETAILS)
    assert all(params[f"{d}_patch_budget"] == 1536 for d in DETAILS)
    assert rule.tokens(1800, 2400) == 2353  # ceil(1452 x 1.62)
    per_level = parse_image_rule({"kind": "openai-patch", "max_dim": 1024, "low_max_dim": 512})
    assert dict(per_level.params)["low_max_dim"] == 512
    assert dict(per_level.params)["high_max_dim"] == 1024


def test_model_preset_with_overrides() -> None:
    rule = parse_image_rule({"model": "gpt-5.4", "max_dim": 1024, "multiplier": 2})
    params = dict(rule.params)
    assert rule.kind == "openai-patch"
    assert params["multiplier"] == 2.0
    assert all(params[f"{d}_max_dim"] == 1024 for d in DETAILS)  # the alias overrides the preset
    assert params["original_patch_budget"] == 10000  # the rest of the preset stays
    opus = parse_image_rule({"model": "claude-opus-4-7", "token_limit": 5000})
    assert dict(opus.params) | {"token_limit": 4784} == dict(
        default_image_rule("claude-opus-4-7", True).params
    )


def test_direct_construction_is_normalised_and_hashable() -> None:
    a = ImageRule("flat", (("tokens", 1500),))
    b = parse_image_rule("flat:1500")
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b, parse_image_rule("flat:1600")}) == 2
    assert ImageRule("anthropic") == parse_image_rule("anthropic:claude")
    assert ImageRule("anthropic") != parse_image_rule("anthropic:claude-opus-4-7")


@pytest.mark.parametrize(
    "spec",
    [
        *KINDS,
        "flat:900",
        "deepseek-v4:exp",
        "gemini-fixed:gemini-2.5",
        {"kind": "openai-patch", "original_max_dim": None, "original_patch_budget": None},
    ],
)
def test_spec_round_trips(spec: str | dict[str, object]) -> None:
    rule = parse_image_rule(spec)
    assert parse_image_rule(rule.spec()) == rule
    if isinstance(spec, str):  # a preset's short name names it again
        assert parse_image_rule(str(rule)) == rule


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tiles", "unknown image rule kind 'tiles' (known: openai-tile, openai-patch, anthropic"),
        ({"kind": "tiles"}, "known: openai-tile"),
        ({"tokens": 5}, "needs a kind"),
        ({"kind": "anthropic", "edge": 2000}, "unknown constant(s) ['edge']"),
        ({"kind": "anthropic", "edge": 2000}, "known: max_edge, pixels_per_token, token_limit"),
        ({"kind": "openai-patch", "budget": 1}, "max_dim, multiplier, original_max_dim"),
        ({"kind": "anthropic", "max_edge": "big"}, "anthropic.max_edge must be"),
        ({"kind": "anthropic", "max_edge": True}, "anthropic.max_edge must be"),
        ({"kind": "anthropic", "max_edge": -1}, "non-negative"),
        ({"kind": "anthropic", "max_edge": 0}, "must be positive"),
        ({"kind": "openai-tile", "base": None}, "must not be null"),
        ({"kind": "openai-patch", "multiplier": float("nan")}, "multiplier"),
        ({"kind": "openai-tile", "upscale_short_side": "yes"}, "true or false"),
        ("deepseek-v4:v5", "unknown variant 'v5' for image rule kind 'deepseek-v4'"),
        ("deepseek-v4:v5", "known: v4.1, exp"),
        ("flat:lots", "whole number"),
        ({"kind": "gemini-fixed", "default_level": "huge"}, "default_level"),
        ({"model": "gpt-5.4", "kind": "anthropic"}, "implies kind 'openai-patch'"),
        (42, "kind name"),
    ],
)
def test_parse_errors_are_clear(spec: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_image_rule(spec)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_tokens_rejects_bad_input() -> None:
    rule = parse_image_rule("anthropic")
    for w, h in [(0, 10), (10, 0), (-5, 10)]:
        with pytest.raises(ValueError, match="positive"):
            rule.tokens(w, h)
    with pytest.raises(ValueError, match="detail"):
        rule.tokens(10, 10, "mid")
    with pytest.raises(ValueError, match="detail"):
        rule.worst_case("ultra")
    # Google's own levels: Gemini 3's rule prices them; to any other rule the image has no detail
    assert rule.tokens(1000, 800, "medium") == rule.tokens(1000, 800, "auto")
    gemini = parse_image_rule("gemini-fixed:gemini-3")
    assert [gemini.tokens(9, 9, d) for d in ("medium", "ultra_high")] == [560, 2240]


def test_every_constant_of_every_kind_has_an_explicit_check() -> None:
    # The config schema is written out by hand; a constant added to a kind without a check
    # would be rejected as unknown, and a check without a constant would accept a dead key.
    assert set(SCHEMA) == set(KINDS)
    for cls in KIND_CLASSES:
        assert set(SCHEMA[cls.kind]) == {f.name for f in fields(cls)}, cls.kind


@pytest.mark.parametrize(
    ("kind", "constant"),
    [(kind, constant) for kind in KINDS for constant in SCHEMA[kind] if constant != "variant"],
)
def test_every_constant_refuses_a_value_of_the_wrong_type(kind: str, constant: str) -> None:
    wrong: object = 5 if SCHEMA[kind][constant] is rule_constants.name else "five"
    with pytest.raises(ValueError, match=rf"^{kind}\.{constant} must be"):
        parse_image_rule({"kind": kind, constant: wrong})


# --------------------------------------------------------------------------------------------
# Worst cases


@pytest.mark.parametrize(
    ("spec", "detail", "worst"),
    [
        ("openai-tile:gpt-4o", "high", 85 + 8 * 170),
        ("openai-tile:gpt-4o", "auto", 1445),
        ("openai-tile:gpt-4o", "low", 85),
        ("openai-tile:gpt-4o-mini", "high", 2833 + 8 * 5667),
        ("model:gpt-5.4", "high", 3000),
        ("model:gpt-5.4", "low", 4916),  # the 2048 box (4096 patches) binds before 6144
        ("model:gpt-5.4", "original", 12000),
        ("model:gpt-5.5", "low", 308),  # a 512 box: 256 patches x 1.2
        ("model:gpt-5.6", "original", None),  # no box, no budget: unbounded
        ("model:gpt-5.6", "auto", None),
        ("model:gpt-5.6", "high", 3000),
        ("model:o4-mini", "auto", 2642),  # 1536 x 1.72
        ("anthropic", "auto", 1568),
        ("model:claude-opus-4-7", "auto", 4784),
        ("gemini-tile", "auto", None),
        ("gemini-fixed", "auto", 1120),
        ("deepseek-v4", "auto", 1024),
        ("deepseek-v4:exp", "auto", 384),
        ("qwen-vl", "auto", 16386),
        ("qwen-vl:qwen3", "auto", 16386),
        ("pixtral", "auto", 4160),
        ("pixtral:mistral-small-3", "auto", 3080),
        ("llama4", "auto", 2467),
        ("flat:1234", "high", 1234),
        ("text-only", "auto", 0),
    ],
)
def test_worst_cases(spec: str, detail: str, worst: int | None) -> None:
    assert parse_image_rule(spec).worst_case(detail) == worst


def _every_variant() -> list[ImageRule]:
    rules = [ImageRule(cls.kind, (("variant", v),)) for cls in KIND_CLASSES for v in cls.VARIANTS]
    return [*rules, parse_image_rule("flat:1500"), text_only()]


VARIANTS = _every_variant()
sides = st.integers(min_value=1, max_value=20_000)


def test_every_variant_builds_and_is_distinct() -> None:
    assert len(VARIANTS) == len(set(VARIANTS)) > 30


@settings(max_examples=400, deadline=None)
@given(
    rule=st.sampled_from(VARIANTS),
    width=sides,
    height=sides,
    detail=st.sampled_from(DETAILS),
)
def test_tokens_never_exceed_the_worst_case(
    rule: ImageRule, width: int, height: int, detail: str
) -> None:
    tokens = rule.tokens(width, height, detail)
    assert isinstance(tokens, int)
    assert tokens >= 0
    worst = rule.worst_case(detail)
    if worst is not None:
        assert tokens <= worst
    assert rule.tokens(width, height, detail) == tokens  # deterministic


@settings(max_examples=300, deadline=None)
@given(
    rule=st.sampled_from(
        [r for r in VARIANTS if r.kind not in ("deepseek-v4", "pixtral", "text-only")]
    ),
    width=sides,
    height=sides,
    detail=st.sampled_from(DETAILS),
)
def test_symmetric_rules_ignore_orientation(
    rule: ImageRule, width: int, height: int, detail: str
) -> None:
    # Every rule but DeepSeek's and Pixtral's (a separator per *row*) treats w and h alike.
    assert rule.tokens(width, height, detail) == rule.tokens(height, width, detail)


@settings(max_examples=300, deadline=None)
@given(
    w=st.integers(1, 1568),
    h=st.integers(1, 1568),
    dw=st.integers(0, 400),
    dh=st.integers(0, 400),
)
def test_monotone_where_no_rescaling_happens(w: int, h: int, dw: int, dh: int) -> None:
    """Below every box and limit the rules are plain counts, so a larger image never costs less.

    (Above them they are not monotone, and routefit does not pretend otherwise: a 4000x1000
    strip fitted into gpt-4o's 2048 box costs fewer tiles than a 2048x1000 image.)
    """
    w2, h2 = w + dw, h + dh
    anthropic = parse_image_rule("anthropic")
    if w2 * h2 <= 1568 * 750 and max(w2, h2) <= 1568:
        assert anthropic.tokens(w, h) <= anthropic.tokens(w2, h2)
    tile = parse_image_rule("openai-tile")
    if max(w2, h2) <= 2048 and min(w2, h2) <= 768:
        assert tile.tokens(w, h, "high") <= tile.tokens(w2, h2, "high")
    pixtral = parse_image_rule("pixtral")
    if max(w2, h2) <= 1024:
        assert pixtral.tokens(w, h) <= pixtral.tokens(w2, h2)
    patch = parse_image_rule("openai-patch:gpt-4.1-mini")
    if max(w2, h2) <= 2048:  # 64x64 = 4096 patches, under the 6144 budget
        assert patch.tokens(w, h) <= patch.tokens(w2, h2)


def test_openai_tile_is_not_monotone_above_its_box() -> None:
    tile = parse_image_rule("openai-tile")
    assert tile.tokens(4000, 1000, "high") < tile.tokens(2048, 1000, "high")


@settings(max_examples=200, deadline=None)
@given(w=st.integers(1, 12_000), h=st.integers(1, 12_000))
def test_deepseek_bound_holds_on_both_variants_and_every_pass_converges(w: int, h: int) -> None:
    v41 = parse_image_rule("deepseek-v4")
    exp = parse_image_rule("deepseek-v4:exp")
    assert 2 < v41.tokens(w, h) <= 1024
    assert 2 < exp.tokens(w, h) <= 384


# --------------------------------------------------------------------------------------------
# Images through the meter


def data_url(width: int, height: int, fmt: str = "PNG") -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, fmt)
    mime = {"PNG": "image/png", "JPEG": "image/jpeg"}[fmt]
    return f"data:{mime};base64," + base64.b64encode(buffer.getvalue()).decode()


def request_with(*parts: dict[str, object]) -> dict[str, object]:
    content = [{"type": "text", "text": "What is in this picture?"}, *parts]
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


def image_part(url: str, detail: str | None = None) -> dict[str, object]:
    image: dict[str, object] = {"url": url}
    if detail is not None:
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


GPT4O = Route(
    alias="gpt-4o",
    model="openai/gpt-4o",
    image_rule=default_image_rule("openai/gpt-4o", True),
    supports_vision=True,
)
TEXT_ONLY = Route(alias="text", model="openai/gpt-3.5-turbo", tokenizer="cl100k_base")
LIMITS = ImageLimits()


def test_vision_route_prices_a_data_url_image_by_its_rule() -> None:
    request = parse_request(request_with(image_part(data_url(1024, 1024), "high")))
    pressure = measure(request, GPT4O)
    (image,) = pressure.image_details
    assert (image.message, image.part, image.rule, image.detail) == (0, 1, "openai-tile", "high")
    assert (image.width, image.height, image.tokens, image.sized) == (1024, 1024, 765, True)
    assert image.placeholder is None
    assert pressure.images == 765
    assert pressure.exact
    text_only_pressure = measure(parse_request(request_with()), GPT4O)
    assert pressure.total - text_only_pressure.total == 765


def test_detail_low_on_a_vision_route() -> None:
    request = parse_request(request_with(image_part(data_url(4000, 3000, "JPEG"), "low")))
    (image,) = measure(request, GPT4O).image_details
    assert (image.width, image.height, image.tokens) == (4000, 3000, 85)


def test_text_only_route_prices_the_placeholder_as_text() -> None:
    url = data_url(640, 480)
    request = parse_request(request_with(image_part(url)))
    pressure = measure(request, TEXT_ONLY)
    (image,) = pressure.image_details
    info = probe(url, TEXT_ONLY.image_limits)
    assert info is not None
    expected = placeholder(info, url)
    assert image.placeholder == expected
    assert "640x480 png" in expected
    assert image.tokens == get_tokenizer("cl100k_base").count(expected) > 0
    assert (image.width, image.height, image.rule) == (640, 480, "text-only")
    assert pressure.images == image.tokens


def test_a_visual_rule_on_a_route_without_vision_is_reported_as_text() -> None:
    route = Route(alias="r", model="m", image_rule=parse_image_rule("anthropic"))
    url = data_url(64, 64)
    (image,) = measure(parse_request(request_with(image_part(url))), route).image_details
    assert (image.rule, image.placeholder) == ("text-only", placeholder(probe(url, LIMITS), url))


def test_unsized_url_image_is_priced_at_the_worst_case() -> None:
    url = "https://images.example.com/cat.png"
    pressure = measure(parse_request(request_with(image_part(url, "high"))), GPT4O)
    (image,) = pressure.image_details
    assert (image.tokens, image.sized, image.width, image.height) == (1445, False, None, None)
    assert not pressure.exact  # an estimate, and the meter says so
    low = measure(parse_request(request_with(image_part(url, "low"))), GPT4O)
    assert low.image_details[0].tokens == 85


def test_url_image_with_a_learnt_size_is_priced_by_its_rule() -> None:
    url = "https://images.example.com/cat.png"
    pressure = measure(parse_request(request_with(image_part(url))), GPT4O, {url: (512, 512)})
    (image,) = pressure.image_details
    assert (image.tokens, image.sized, image.width) == (255, True, 512)


def test_unbounded_rule_falls_back_to_the_routes_limit() -> None:
    route = Route(
        alias="gemini",
        model="gemini/gemini-2.5-pro",
        image_rule=default_image_rule("gemini/gemini-2.5-pro", True),
        supports_vision=True,
        image_limits=ImageLimits(max_image_tokens=7777),
    )
    url = "https://images.example.com/cat.png"
    (image,) = measure(parse_request(request_with(image_part(url))), route).image_details
    assert (image.rule, image.tokens, image.sized) == ("gemini-tile", 7777, False)


def test_text_only_route_url_placeholder() -> None:
    url = "https://user:secret@images.example.com/a/cat.png?sig=abc123"
    (image,) = measure(parse_request(request_with(image_part(url))), TEXT_ONLY).image_details
    assert image.placeholder == "[image omitted: https://images.example.com/a/cat.png]"
    assert "secret" not in image.placeholder and "sig" not in image.placeholder


def test_a_bad_image_is_a_client_error_naming_the_part() -> None:
    request = parse_request(request_with(image_part("data:image/png;base64,!!!!")))
    with pytest.raises(RequestError) as info:
        measure(request, GPT4O)
    assert info.value.param == "messages[0].content[1].image_url.url"
    assert "not valid base64" in info.value.message


def test_each_route_prices_the_same_image_its_own_way() -> None:
    request = parse_request(request_with(image_part(data_url(1920, 1080))))
    prices = {}
    for model in ("gpt-4o", "claude-opus-4-7", "deepseek/deepseek-chat", "gemini-3-pro"):
        route = Route(
            alias=model,
            model=model,
            image_rule=default_image_rule(model, True),
            supports_vision=True,
        )
        prices[model] = measure(request, route).images
    assert prices == {
        "gpt-4o": 1105,
        "claude-opus-4-7": 2765,
        "deepseek/deepseek-chat": 968,
        "gemini-3-pro": 1120,
    }
