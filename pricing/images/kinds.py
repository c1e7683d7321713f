"""The rule kinds: one frozen dataclass of constants per image-pricing algorithm.

Each kind has two methods: ``price`` (tokens for a width x height image at a detail level) and
``bound`` (the most any image can cost at that level, or None when the rule has no upper bound).
``VARIANTS`` names the published presets of a kind; every figure in them, with its public
source, is in docs/images.md (one section per kind). The constants are validated where they are
loaded from config (``pricing.images.constants``); ``__post_init__`` checks only the relations
between constants that no single field's type can express.

Everything here is pure integer/float arithmetic: no I/O, no image decoding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar, TypeAlias

#: What an image costs on a vision route routefit has no rule for: the ``flat`` rule's default.
#: A stand-in, not a worst case (none exists: Gemini 2's tiles and gpt-5.6 at auto have no
#: bound, gpt-4o-mini's is 48,169): above the default-detail maxima of the 1,5xx-token families
#: (Claude 1568, gpt-4o 1445, Gemini 3 1120, DeepSeek V4.1 1024), below the others'; calibration
#: fits its weight within [0.05, 50], which reaches every bounded maximum. Each family's maximum
#: and why no higher figure: docs/images.md § Defaults by model name.
UNKNOWN_VISION_TOKENS = 1600

#: The kinds of Google's models: their provider counts a PDF's pages as pictures (no text
#: apart) and takes audio and video inline (``pricing.documents``, ``pricing.recordings``).
GOOGLE_KINDS = frozenset({"gemini-tile", "gemini-fixed"})

#: The ``detail`` values an OpenAI-style image part may carry.
DETAILS = ("auto", "low", "high", "original")
#: Google's media_resolution levels that no OpenAI detail names (a Gemini client may set them
#: on a part or the whole request: ``proxy.wires.gemini_parse``). Google's fixed-price rule
#: prices them; to every other rule the image is one sent with no detail, as a translation
#: sends it (``pricing.images.rule.ImageRule``).
GOOGLE_LEVELS = ("medium", "ultra_high")

Scalar: TypeAlias = int | float | bool | str | None

# --------------------------------------------------------------------------------------------
# Shared geometry


def _fit_box(width: int, height: int, box: int | None) -> tuple[int, int]:
    """Scale down (never up) so both sides fit in ``box``; floor to whole pixels, at least 1."""
    longest = max(width, height)
    if box is None or longest <= box:
        return width, height
    return max(1, width * box // longest), max(1, height * box // longest)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------------------------
# Rule kinds. Each is a frozen dataclass of constants with two methods: ``price`` (tokens for a
# width x height image at a detail level) and ``bound`` (the most any image can cost at that
# level, or None when the rule has no upper bound). ``VARIANTS`` names published presets.


@dataclass(frozen=True, slots=True)
class TextOnly:
    """No visual tokens: the image is replaced on the wire by placeholder text (priced as text)."""

    kind: ClassVar[str] = "text-only"
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {}

    def price(self, width: int, height: int, detail: str) -> int:
        return 0

    def bound(self, detail: str) -> int | None:
        return 0


@dataclass(frozen=True, slots=True)
class Flat:
    """A fixed price per image, for routes whose provider publishes no rule."""

    kind: ClassVar[str] = "flat"
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {}
    tokens: int = UNKNOWN_VISION_TOKENS

    def price(self, width: int, height: int, detail: str) -> int:
        return self.tokens

    def bound(self, detail: str) -> int | None:
        return self.tokens


@dataclass(frozen=True, slots=True)
class OpenAITile:
    """OpenAI's 512-px tile rule (gpt-4o, gpt-4.1, gpt-4.5, o1/o3, gpt-5, gpt-5.1).

    ``low`` costs ``base``. Otherwise: fit in ``max_dim``², then bring a short side over
    ``short_side`` down to it, and pay ``base + tile`` per 512-px tile. The current docs never
    enlarge a smaller short side; older docs (and libraries copied from them) always scaled the
    short side to 768, enlarging small images (512² → 765 instead of 255). That older reading is
    kept as ``upscale_short_side: true`` but is not the default: besides contradicting the
    current docs it has no upper bound (a 10x2048 strip would become 768x157286), which would
    make routefit refuse valid requests as overflows. See docs/images.md.
    """

    kind: ClassVar[str] = "openai-tile"
    # docs/images.md § OpenAI tiles
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {
        "gpt-4o": {"base": 85, "tile": 170},  # also gpt-4.1, gpt-4.5
        "gpt-4o-mini": {"base": 2833, "tile": 5667},
        "o1": {"base": 75, "tile": 150},  # also o3
        "gpt-5": {"base": 70, "tile": 140},  # also gpt-5.1
        "computer-use-preview": {"base": 65, "tile": 129},
    }
    variant: str = "gpt-4o"
    base: int = 85
    tile: int = 170
    max_dim: int = 2048
    short_side: int = 768
    tile_size: int = 512
    upscale_short_side: bool = False

    def _resized(self, width: int, height: int) -> tuple[int, int]:
        width, height = _fit_box(width, height, self.max_dim)
        short = min(width, height)
        if short > self.short_side or (self.upscale_short_side and short < self.short_side):
            width = max(1, width * self.short_side // short)
            height = max(1, height * self.short_side // short)
        return width, height

    def price(self, width: int, height: int, detail: str) -> int:
        if detail == "low":
            return self.base
        width, height = self._resized(width, height)
        tiles = _ceil_div(width, self.tile_size) * _ceil_div(height, self.tile_size)
        return self.base + self.tile * tiles

    def bound(self, detail: str) -> int | None:
        if detail == "low":
            return self.base
        if self.upscale_short_side:
            return None  # enlarging a thin strip's short side makes its long side unbounded
        short = min(self.short_side, self.max_dim)
        tiles = _ceil_div(short, self.tile_size) * _ceil_div(self.max_dim, self.tile_size)
        return self.base + self.tile * tiles

    def __post_init__(self) -> None:
        if min(self.max_dim, self.short_side, self.tile_size) < 1:
            raise ValueError("openai-tile max_dim, short_side and tile_size must be positive")


#: Box (max dimension; None = no box) and patch budget (None = none) per detail level.
_Level = tuple[int | None, int | None]


def _patch_levels(low: _Level, high: _Level, auto: _Level, original: _Level) -> dict[str, Scalar]:
    out: dict[str, Scalar] = {}
    for name, (box, budget) in (
        ("low", low),
        ("high", high),
        ("auto", auto),
        ("original", original),
    ):
        out[f"{name}_max_dim"] = box
        out[f"{name}_patch_budget"] = budget
    return out


def _patch_uniform(box: int, budget: int) -> dict[str, Scalar]:
    return _patch_levels((box, budget), (box, budget), (box, budget), (box, budget))


# docs/images.md § OpenAI patches (box / budget per detail level, current docs)
_GPT_5_4 = _patch_levels((2048, 6144), (2048, 2500), (2048, 2500), (6000, 10000))
_GPT_5_5 = _patch_levels((512, None), (2048, 2500), (6000, 10000), (6000, 10000))
_GPT_5_6 = _patch_levels((512, None), (2048, 2500), (None, None), (None, None))
_OLDER_PATCH = _patch_uniform(2048, 1536)


@dataclass(frozen=True, slots=True)
class OpenAIPatch:
    """OpenAI's 32-px patch rule (gpt-4.1-mini/nano, o4-mini, gpt-5-mini/nano, gpt-5.2+).

    Per detail level: fit in the level's box, count 32-px patches, and when they exceed the
    level's budget shrink the image so its patch grid fits (the docs' two-step scale: the ideal
    factor, then down to whole patches on the tighter axis); pay ⌈patches x multiplier⌉.

    The shrink is computed in exact integers: with s = √(32²·B/(w·h)), w·s/32 = √(B·w/h), so
    the floors the docs take are integer square roots. Where the current and an earlier version
    of the docs disagree, the variant named after the model carries the conservative figure and
    ``@current-docs`` / ``@earlier-docs`` variants carry the other.
    """

    kind: ClassVar[str] = "openai-patch"
    # docs/images.md § OpenAI patches; § Where sources disagree for the @-variants
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {
        "gpt-5.6": {"multiplier": 1.2, **_GPT_5_6},
        "gpt-5.5": {"multiplier": 1.2, **_GPT_5_5},
        "gpt-5.4": {"multiplier": 1.2, **_GPT_5_4},
        "gpt-5.4-mini": {"multiplier": 1.62, **_GPT_5_4},  # earlier docs; current 1.2
        "gpt-5.4-mini@current-docs": {"multiplier": 1.2, **_GPT_5_4},
        "gpt-5.4-nano": {"multiplier": 2.46, **_GPT_5_4},  # earlier docs; current 1.2
        "gpt-5.4-nano@current-docs": {"multiplier": 1.2, **_GPT_5_4},
        "gpt-5.2": {"multiplier": 1.2, **_patch_uniform(2048, 6144)},
        "gpt-4.1-mini": {"multiplier": 1.62, **_patch_uniform(2048, 6144)},  # current docs
        "gpt-4.1-mini@earlier-docs": {"multiplier": 1.62, **_patch_uniform(2048, 1536)},
        "gpt-4.1-nano": {"multiplier": 2.46, **_OLDER_PATCH},
        "o4-mini": {"multiplier": 1.72, **_OLDER_PATCH},
        "gpt-5-mini": {"multiplier": 1.62, **_OLDER_PATCH},  # earlier docs; current 1.2
        "gpt-5-mini@current-docs": {"multiplier": 1.2, **_OLDER_PATCH},
        "gpt-5-nano": {"multiplier": 2.46, **_OLDER_PATCH},  # earlier docs; current 1.5
        "gpt-5-nano@current-docs": {"multiplier": 1.5, **_OLDER_PATCH},
    }
    variant: str = "gpt-4.1-mini"
    multiplier: float = 1.62
    patch: int = 32
    low_max_dim: int | None = 2048
    low_patch_budget: int | None = 6144
    high_max_dim: int | None = 2048
    high_patch_budget: int | None = 6144
    auto_max_dim: int | None = 2048
    auto_patch_budget: int | None = 6144
    original_max_dim: int | None = 2048
    original_patch_budget: int | None = 6144

    def _level(self, detail: str) -> _Level:
        box: int | None = getattr(self, f"{detail}_max_dim")
        budget: int | None = getattr(self, f"{detail}_patch_budget")
        return box, budget

    def patches(self, width: int, height: int, detail: str) -> int:
        """Patches the image occupies at ``detail`` (the published vectors are in patches)."""
        box, budget = self._level(detail)
        w, h = _fit_box(width, height, box)
        p = self.patch
        count = _ceil_div(w, p) * _ceil_div(h, p)
        if budget is None or count <= budget:
            return count
        # Whole patches per axis at the ideal scale: ⌊w·s/p⌋ = ⌊√(B·w/h)⌋ (and likewise for h).
        cols = math.isqrt(budget * w // h)
        rows = math.isqrt(budget * h // w)
        # Keep the axis whose ratio ⌊x⌋/x is smaller: cols/√(Bw/h) < rows/√(Bh/w) ⟺ cols·h < rows·w.
        if cols * h <= rows * w:
            w, h = p * cols, p * cols * h // w
        else:
            w, h = p * rows * w // h, p * rows
        return _ceil_div(max(w, 1), p) * _ceil_div(max(h, 1), p)

    def _times_multiplier(self, patches: int) -> int:
        # Exactly, on the decimal the operator wrote: 2500 x 1.2 must be 3000, not 3000.0000001.
        # (fractions, and the decimal module it brings, only where a rule has a multiplier.)
        from fractions import Fraction

        return math.ceil(patches * Fraction(repr(self.multiplier)))

    def price(self, width: int, height: int, detail: str) -> int:
        return self._times_multiplier(self.patches(width, height, detail))

    def bound(self, detail: str) -> int | None:
        box, budget = self._level(detail)
        most = None if box is None else _ceil_div(box, self.patch) ** 2
        if budget is not None:
            most = budget if most is None else min(most, budget)
        return None if most is None else self._times_multiplier(most)

    def __post_init__(self) -> None:
        if self.multiplier <= 0 or self.patch < 1:
            raise ValueError("openai-patch multiplier and patch must be positive")
        for level in DETAILS:
            box, budget = self._level(level)
            if (box is not None and box < 1) or (budget is not None and budget < 1):
                raise ValueError(f"openai-patch {level} max_dim and patch_budget must be positive")


@dataclass(frozen=True, slots=True)
class Anthropic:
    """Claude: ⌈w·h/750⌉ after scaling down to fit both the edge limit and the token limit.

    The docs call the figure approximate (the encoder pads to 28 px); the count is rounded up
    and guaranteed never to exceed ``token_limit``.
    """

    kind: ClassVar[str] = "anthropic"
    # docs/images.md § Anthropic
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {
        "claude": {"max_edge": 1568, "token_limit": 1568},
        "claude-opus-4-7": {"max_edge": 2576, "token_limit": 4784},
    }
    variant: str = "claude"
    max_edge: int = 1568
    token_limit: int = 1568
    pixels_per_token: int = 750

    def price(self, width: int, height: int, detail: str) -> int:
        per, longest = self.pixels_per_token, max(width, height)
        # s = min(1, edge/longest, √(limit·per/(w·h))), each side floored, in exact integers:
        # float products land a pixel short of a whole result (1568/2502·2502 = 1567.99…).
        area = self.token_limit * per  # the token limit binds when (w·h)·edge² > area·longest²
        if width * height * self.max_edge**2 > area * longest**2 and width * height > area:
            # ⌊w·√(area/(w·h))⌋ = ⌊√(area·w/h)⌋ = isqrt(⌊area·w/h⌋), likewise for h
            width, height = math.isqrt(area * width // height), math.isqrt(area * height // width)
        elif longest > self.max_edge:
            width, height = width * self.max_edge // longest, height * self.max_edge // longest
        width, height = max(1, width), max(1, height)
        # A side raised to 1 pixel may leave the product over the limit: trim the longer side.
        while _ceil_div(width * height, per) > self.token_limit and max(width, height) > 1:
            if width >= height:
                width -= 1
            else:
                height -= 1
        return _ceil_div(width * height, per)

    def bound(self, detail: str) -> int | None:
        return min(self.token_limit, _ceil_div(self.max_edge**2, self.pixels_per_token))

    def __post_init__(self) -> None:
        if min(self.max_edge, self.token_limit, self.pixels_per_token) < 1:
            raise ValueError("anthropic constants must be positive")


@dataclass(frozen=True, slots=True)
class GeminiTile:
    """Gemini 2.x without media_resolution: 258 per crop tile, small images one tile.

    No upper bound: the tile count grows with the image (the crop unit is capped at 768 px).
    """

    kind: ClassVar[str] = "gemini-tile"
    # docs/images.md § Gemini tiles
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {"gemini-2": {}}
    variant: str = "gemini-2"
    small_side: int = 384
    tile_tokens: int = 258
    crop_divisor: float = 1.5
    min_crop: int = 256
    max_crop: int = 768

    def price(self, width: int, height: int, detail: str) -> int:
        if width <= self.small_side and height <= self.small_side:
            return self.tile_tokens
        unit = math.floor(min(width, height) / self.crop_divisor)
        unit = min(self.max_crop, max(self.min_crop, unit))
        return self.tile_tokens * _ceil_div(width, unit) * _ceil_div(height, unit)

    def bound(self, detail: str) -> int | None:
        return None

    def __post_init__(self) -> None:
        if self.crop_divisor <= 0 or not 1 <= self.min_crop <= self.max_crop:
            raise ValueError("gemini-tile needs crop_divisor > 0 and 1 <= min_crop <= max_crop")


_MEDIA_LEVELS = ("low", "medium", "high", "ultra_high")


@dataclass(frozen=True, slots=True)
class GeminiFixed:
    """A fixed price per media_resolution level (Gemini 3 per image; Gemini 2.5 per request).

    ``detail: low`` / ``high`` select those levels (litellm maps them to media_resolution), and
    a Gemini client's ``medium`` / ``ultra_high`` (``GOOGLE_LEVELS``) theirs; ``auto`` and
    ``original`` send no level, so the model's default applies.
    """

    kind: ClassVar[str] = "gemini-fixed"
    # docs/images.md § Gemini fixed levels
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {
        "gemini-3": {"low": 280, "medium": 560, "high": 1120, "ultra_high": 2240},
        "gemini-2.5": {"low": 64, "medium": 256, "high": 256, "ultra_high": 256},
    }
    variant: str = "gemini-3"
    low: int = 280
    medium: int = 560
    high: int = 1120
    ultra_high: int = 2240
    default_level: str = "high"

    def _level(self, detail: str) -> str:
        return detail if detail in _MEDIA_LEVELS else self.default_level

    def price(self, width: int, height: int, detail: str) -> int:
        tokens: int = getattr(self, self._level(detail))
        return tokens

    def bound(self, detail: str) -> int | None:
        return self.price(1, 1, detail)

    def __post_init__(self) -> None:
        if self.default_level not in _MEDIA_LEVELS:
            raise ValueError(f"gemini-fixed default_level must be one of {list(_MEDIA_LEVELS)}")


@dataclass(frozen=True, slots=True)
class _Grid:
    """One DeepSeek projection: the pixel size sent to the encoder, its grid and its price."""

    width: int
    height: int
    cols: int
    rows: int
    tokens: int


@dataclass(frozen=True, slots=True)
class DeepSeekV4:
    """DeepSeek's published V4 vision calculator (14-px patches, 3:1 downsampling).

    One pass: clamp the width (exp), scale small images up to ``min_pixels``, pad to whole
    patches, count grid cells; over budget, solve the largest aspect-preserving grid (stepping
    the budget down until it fits). Passes repeat on their own output until it stops changing.

    The arithmetic deliberately follows the calculator's IEEE-double operation order rather
    than exact rationals: a published vector (exp 4921x353 → 289) depends on 353·(252/353)/14
    evaluating to 17.999…, so "exact" arithmetic would disagree with the provider's own tool.

    ``variant: v4.1`` is the current API; ``variant: exp`` the retired V4-Flash-Vision-Exp
    (width ≤ 8·height, rows paired, and a worst-case pad-to-4 of +3 tokens).
    """

    kind: ClassVar[str] = "deepseek-v4"
    # docs/images.md § DeepSeek V4
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {
        "v4.1": {"max_tokens": 1024, "min_pixels": 544 * 544},
        "exp": {
            "max_tokens": 384,
            "min_pixels": 384 * 384,
            "max_width_ratio": 8,
            "paired_rows": True,
            "pad_to": 4,
        },
    }
    variant: str = "v4.1"
    max_tokens: int = 1024
    min_pixels: int = 544 * 544
    max_width_ratio: int | None = None
    paired_rows: bool = False
    pad_to: int = 1
    patch: int = 14
    downsample: int = 3
    max_passes: int = 10

    @property
    def _pad(self) -> int:
        return self.pad_to - 1

    def _cells(self, pixels: int) -> int:
        return _ceil_div(pixels // self.patch, self.downsample)

    def _grid_tokens(self, cols: int, rows: int) -> int:
        tokens = rows * (cols + 1) + 2  # a separator closes every row; two framing tokens
        if self.paired_rows:
            if rows % 2:
                tokens += cols + 1
            if _ceil_div(rows, 2) * (cols + 1) % 2:
                tokens += 2
        return tokens

    def _grid(self, width: int, height: int) -> _Grid:
        cols, rows = self._cells(width), self._cells(height)
        return _Grid(width, height, cols, rows, self._grid_tokens(cols, rows))

    def _solve(self, width: int, height: int, budget: int) -> _Grid:
        """The largest grid within ``budget`` tokens keeping the aspect ratio of width x height."""
        cell = self.patch * self.downsample
        min_rows = 2 if self.paired_rows else 1
        aspect = height / width
        ideal_cols = math.sqrt((budget - 2) / aspect + 0.25) - 0.5
        ideal_rows = ideal_cols * aspect
        if ideal_cols < 1:
            rows = (budget - 2) // 2
            if self.paired_rows:
                rows -= rows % 2
            return self._grid(cell, max(1, rows) * cell)
        if ideal_rows < min_rows:
            cols = (budget - 2) // min_rows - 1
            return self._grid(max(1, cols) * cell, min_rows * cell)
        cols, rows = math.trunc(ideal_cols), math.trunc(ideal_rows)
        if self.paired_rows:
            rows -= rows % 2
        scale = min(cols * cell / width, rows * cell / height)
        new_width = math.trunc(width * scale / self.patch) * self.patch
        new_height = math.trunc(height * scale / self.patch) * self.patch
        return self._grid(max(self.patch, new_width), max(self.patch, new_height))

    def _pass(self, width: int, height: int) -> _Grid:
        if self.max_width_ratio is not None and width > height * self.max_width_ratio:
            width = height * self.max_width_ratio
        if width * height < self.min_pixels:
            scale = math.sqrt(self.min_pixels / (width * height))
            width, height = max(1, math.trunc(width * scale)), max(1, math.trunc(height * scale))
        padded = self._grid(
            _ceil_div(width, self.patch) * self.patch, _ceil_div(height, self.patch) * self.patch
        )
        budget = self.max_tokens - self._pad
        result = padded
        if result.tokens > budget:
            step = budget
            result = self._solve(width, height, step)
            while result.tokens > budget and step > 3:
                step -= 1
                result = self._solve(width, height, step)
        return replace(result, tokens=result.tokens + self._pad)

    def price(self, width: int, height: int, detail: str) -> int:
        result = self._pass(width, height)
        for _ in range(self.max_passes - 1):
            again = self._pass(result.width, result.height)
            if again == result:
                return result.tokens
            result = again
        # Not converged (never seen with the published constants): the last pass, capped.
        return min(result.tokens, self.max_tokens)

    def bound(self, detail: str) -> int | None:
        return self.max_tokens

    def __post_init__(self) -> None:
        if self.max_tokens < 8 + self._pad or self.pad_to < 1:
            raise ValueError("deepseek-v4 needs max_tokens >= 8 + pad and pad_to >= 1")
        if min(self.patch, self.downsample, self.max_passes) < 1:
            raise ValueError("deepseek-v4 patch, downsample and max_passes must be positive")
        if self.max_width_ratio is not None and self.max_width_ratio < 1:
            raise ValueError("deepseek-v4 max_width_ratio must be positive")


@dataclass(frozen=True, slots=True)
class QwenVL:
    """Qwen-VL's ``smart_resize``: each side to a multiple of ``factor``, area within bounds.

    tokens = (H/f)·(W/f) + ``wrappers`` (vision start/end). Qwen rejects aspect ratios over
    200; such an image is priced at the rule's bound (the provider will refuse it anyway, and
    pricing never crashes on an image it can size).
    """

    kind: ClassVar[str] = "qwen-vl"
    # docs/images.md § Qwen-VL
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {
        "qwen2.5": {"factor": 28, "min_pixels": 3136, "max_pixels": 12_845_056},
        # What many hosts configure for Qwen2/2.5 (1280 tokens); not the default (fewer tokens).
        "qwen2.5-hosted": {"factor": 28, "min_pixels": 3136, "max_pixels": 1280 * 28 * 28},
        "qwen3": {"factor": 32, "min_pixels": 65_536, "max_pixels": 16_777_216},
    }
    variant: str = "qwen2.5"
    factor: int = 28
    min_pixels: int = 3136
    max_pixels: int = 12_845_056
    max_aspect: int = 200
    wrappers: int = 2

    def _resize(self, width: int, height: int) -> tuple[int, int]:
        f = self.factor
        h_bar = max(f, round(height / f) * f)
        w_bar = max(f, round(width / f) * f)
        if h_bar * w_bar > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h_bar = max(f, math.floor(height / beta / f) * f)
            w_bar = max(f, math.floor(width / beta / f) * f)
        elif h_bar * w_bar < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h_bar = math.ceil(height * beta / f) * f
            w_bar = math.ceil(width * beta / f) * f
        return w_bar, h_bar

    def price(self, width: int, height: int, detail: str) -> int:
        if max(width, height) > self.max_aspect * min(width, height):
            return self.max_pixels // self.factor**2 + self.wrappers
        w_bar, h_bar = self._resize(width, height)
        return (w_bar // self.factor) * (h_bar // self.factor) + self.wrappers

    def bound(self, detail: str) -> int | None:
        return self.max_pixels // self.factor**2 + self.wrappers

    def __post_init__(self) -> None:
        if self.factor < 1 or not 1 <= self.min_pixels < self.max_pixels or self.max_aspect < 1:
            raise ValueError("qwen-vl needs factor >= 1, 1 <= min_pixels < max_pixels")


@dataclass(frozen=True, slots=True)
class Pixtral:
    """Mistral's Pixtral encoder: a token per (patch x merge) cell plus a break token per row."""

    kind: ClassVar[str] = "pixtral"
    # docs/images.md § Pixtral
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {
        "pixtral-12b": {"patch": 16, "merge": 1, "max_image_size": 1024},
        "mistral-small-3": {"patch": 14, "merge": 2, "max_image_size": 1540},
    }
    variant: str = "pixtral-12b"
    patch: int = 16
    merge: int = 1
    max_image_size: int = 1024

    def _cells(self, pixels: int) -> int:
        return (pixels - 1) // (self.patch * self.merge) + 1

    def price(self, width: int, height: int, detail: str) -> int:
        ratio = max(width / self.max_image_size, height / self.max_image_size)
        if ratio > 1:
            width, height = max(1, round(width / ratio)), max(1, round(height / ratio))
        cols, rows = self._cells(width), self._cells(height)
        return cols * rows + rows

    def bound(self, detail: str) -> int | None:
        most = self._cells(self.max_image_size)
        return most * most + most

    def __post_init__(self) -> None:
        if min(self.patch, self.merge, self.max_image_size) < 1:
            raise ValueError("pixtral constants must be positive")


@dataclass(frozen=True, slots=True)
class Llama4:
    """Llama 4: the best-fitting canvas of ≤ ``max_tiles`` 336-px tiles, plus a global view.

    The canvas is chosen as Meta's processor does: the smallest upscale that fits, else the
    largest downscale, ties to the smallest canvas. Each tile
    costs ``tile_tokens`` plus one separator; a one-tile canvas sends only the global view
    (``<|image_start|>``, ``<|image|>``, 144 patches, ``<|image_end|>`` = 147).
    """

    kind: ClassVar[str] = "llama4"
    # docs/images.md § Llama 4
    VARIANTS: ClassVar[Mapping[str, Mapping[str, Scalar]]] = {"llama-4": {}}
    variant: str = "llama-4"
    tile: int = 336
    max_tiles: int = 16
    tile_tokens: int = 144
    separator_tokens: int = 1
    global_tokens: int = 147

    def canvas(self, width: int, height: int) -> tuple[int, int]:
        """(rows, cols) of tiles chosen for the image."""
        tile = self.tile
        best: tuple[tuple[int, float], int, tuple[int, int]] | None = None
        for rows in range(1, self.max_tiles + 1):
            for cols in range(1, self.max_tiles // rows + 1):
                # Each scale is one correctly rounded quotient of small integers, so equal
                # ratios compare equal and distinct ones never collide: floats are exact here.
                scale = min(rows * tile / height, cols * tile / width)
                # The smallest upscale, else the largest downscale; then the smallest canvas.
                rank = (0, scale) if scale >= 1 else (1, -scale)
                candidate = (rank, rows * cols, (rows, cols))
                if best is None or candidate[:2] < best[:2]:
                    best = candidate
        assert best is not None
        return best[2]

    def price(self, width: int, height: int, detail: str) -> int:
        rows, cols = self.canvas(width, height)
        tiles = rows * cols
        per_tile = self.tile_tokens + self.separator_tokens
        return self.global_tokens + (tiles * per_tile if tiles > 1 else 0)

    def bound(self, detail: str) -> int | None:
        return self.global_tokens + self.max_tiles * (self.tile_tokens + self.separator_tokens)

    def __post_init__(self) -> None:
        if min(self.tile, self.max_tiles) < 1:
            raise ValueError("llama4 tile and max_tiles must be positive")


RuleConstants: TypeAlias = (
    TextOnly
    | Flat
    | OpenAITile
    | OpenAIPatch
    | Anthropic
    | GeminiTile
    | GeminiFixed
    | DeepSeekV4
    | QwenVL
    | Pixtral
    | Llama4
)

#: Every kind, in the order config errors list them.
KIND_CLASSES: tuple[type[RuleConstants], ...] = (
    OpenAITile,
    OpenAIPatch,
    Anthropic,
    GeminiTile,
    GeminiFixed,
    DeepSeekV4,
    QwenVL,
    Pixtral,
    Llama4,
    Flat,
    TextOnly,
)
BY_KIND: Mapping[str, type[RuleConstants]] = {cls.kind: cls for cls in KIND_CLASSES}

#: Every rule kind config may name.
KINDS: tuple[str, ...] = tuple(BY_KIND)
