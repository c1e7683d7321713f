"""``ImageRule``: a route's image rule as one frozen, hashable, comparable value.

The value is what routes carry and caches key on; the algorithms are in
``pricing.images.kinds`` and the validation of config constants in ``pricing.images.constants``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from pricing.images.constants import build, params_of
from pricing.images.kinds import DETAILS, GOOGLE_LEVELS, RuleConstants, Scalar

__all__ = ["ImageRule", "text_only"]


@lru_cache(maxsize=65_536)
def _price(constants: RuleConstants, width: int, height: int, detail: str) -> int:
    return constants.price(width, height, detail)


@dataclass(frozen=True, slots=True)
class ImageRule:
    """A route's image rule: a kind and its constants, as one hashable, comparable value.

    ``params`` is normalised on construction to every constant of the kind, in declaration
    order, so two rules that price identically compare equal however they were spelled
    (``ImageRule("flat", (("tokens", 1500),)) == parse_image_rule("flat:1500")``).
    """

    kind: str
    params: tuple[tuple[str, Scalar], ...] = ()
    _constants: RuleConstants = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        constants = build(self.kind, dict(self.params))
        object.__setattr__(self, "_constants", constants)
        object.__setattr__(self, "params", params_of(constants))

    @property
    def visual(self) -> bool:
        """Whether the route sees pixels (False: the image is sent as placeholder text)."""
        return self.kind != "text-only"

    @property
    def variant(self) -> str | None:
        """The named preset the constants started from (None for flat and text-only)."""
        value = dict(self.params).get("variant")
        return value if isinstance(value, str) else None

    def tokens(
        self, width: int, height: int, detail: str = "auto", *, transposed: bool = False
    ) -> int:
        """Visual tokens for a width x height image at ``detail``; whole tokens, never negative.

        ``transposed``: the image may reach the model turned a quarter (an EXIF orientation of
        5-8, applied by some providers' decoders and not by others): the larger of both
        orientations, since DeepSeek's and Pixtral's grids (a token closing every row; DeepSeek
        clamps the width alone) price a picture and its quarter turn differently."""
        if isinstance(width, bool) or isinstance(height, bool) or min(width, height) < 1:
            raise ValueError(f"image size must be positive integers, got {width}x{height}")
        level = self._detail(detail)
        upright = _price(self._constants, int(width), int(height), level)
        if not transposed or width == height:
            return upright
        return max(upright, _price(self._constants, int(height), int(width), level))

    def worst_case(self, detail: str = "auto") -> int | None:
        """The most any image can cost at ``detail``; None when the rule has no upper bound."""
        return self._constants.bound(self._detail(detail))

    def _detail(self, detail: str) -> str:
        """``detail`` as this rule reads it: a Google level no OpenAI detail names is Google's
        fixed-price rule's to price, and to any other an image sent with no detail."""
        if detail in DETAILS:
            return detail
        if detail in GOOGLE_LEVELS:
            return detail if self.kind == "gemini-fixed" else "auto"
        raise ValueError(f"detail must be one of {[*DETAILS, *GOOGLE_LEVELS]}, got {detail!r}")

    def spec(self) -> dict[str, Scalar]:
        """The rule as a config mapping (``parse_image_rule(rule.spec()) == rule``)."""
        return {"kind": self.kind, **dict(self.params)}

    def __str__(self) -> str:
        if self.kind == "flat":
            return f"flat:{dict(self.params)['tokens']}"
        return self.kind if self.variant is None else f"{self.kind}:{self.variant}"


def text_only() -> ImageRule:
    """The rule of a route that takes no images."""
    return ImageRule("text-only")
