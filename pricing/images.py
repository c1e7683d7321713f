"""Image-token rules (placeholder: only text-only and flat until the image issue lands)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ImageRule", "default_image_rule", "parse_image_rule", "text_only"]


@dataclass(frozen=True, slots=True)
class ImageRule:
    kind: str
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def visual(self) -> bool:
        return self.kind != "text-only"

    def tokens(self, width: int, height: int, detail: str = "auto") -> int:
        return int(dict(self.params).get("tokens", 0))

    def worst_case(self, detail: str = "auto") -> int | None:
        return int(dict(self.params).get("tokens", 0))


def text_only() -> ImageRule:
    return ImageRule("text-only")


def parse_image_rule(spec: Any) -> ImageRule:
    if spec == "text-only":
        return text_only()
    if isinstance(spec, str) and spec.startswith("flat:"):
        return ImageRule("flat", (("tokens", int(spec[5:])),))
    raise ValueError(f"unknown image rule {spec!r}")


def default_image_rule(model: str, supports_vision: bool) -> ImageRule:
    return ImageRule("flat", (("tokens", 1500),)) if supports_vision else text_only()
