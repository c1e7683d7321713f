"""Image sizes from headers (placeholder until the image issue lands)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pricing.messages import RequestError
from pricing.route import ImageLimits

__all__ = ["ImageError", "ImageInfo", "placeholder", "probe"]


class ImageError(RequestError):
    """An image the client sent that cannot be priced (undecodable, too large, unsupported)."""


@dataclass(frozen=True, slots=True)
class ImageInfo:
    width: int
    height: int
    format: str
    digest: str


def probe(url: str, limits: ImageLimits) -> ImageInfo | None:
    return None


def placeholder(info: ImageInfo | None, url: str) -> str:
    if info is None:
        return f"[image omitted: {hashlib.sha256(url.encode()).hexdigest()[:8]}]"
    return f"[image omitted: {info.width}x{info.height} {info.format} sha256:{info.digest[:8]}]"
