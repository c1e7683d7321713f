"""Calibration: from the meter's raw estimate to the estimate routefit acts on.

Pure math over plain values; the samples and anchors themselves live in the store
(``proxy.store``). See docs/calibration.md for the reasoning behind each choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Anchor", "Correction", "Sample"]


@dataclass(frozen=True, slots=True)
class Correction:
    """Multiplicative factors per part of the raw estimate; neutral is 1.0."""

    text: float = 1.0  # text + framing
    images: float = 1.0

    def apply(self, text: int, images: int = 0) -> int:
        if self.text == 1.0 and self.images == 1.0:
            return text + images
        return math.ceil(text * self.text + images * self.images)


@dataclass(frozen=True, slots=True)
class Sample:
    """One completed request: what routefit estimated and what the provider counted."""

    route: str
    time: float  # unix seconds
    text: int  # raw estimate parts of the prompt as sent
    framing: int
    images: int
    image_count: int
    message_count: int
    estimate: int  # the estimate routefit acted on (calibrated / anchored)
    anchored: bool
    actual: int  # provider's prompt tokens, normalised
    cached: int = 0

    @property
    def raw(self) -> int:
        return self.text + self.framing + self.images


@dataclass(frozen=True, slots=True)
class Anchor:
    """The provider's count for one exact prompt (message list + tools) routefit sent."""

    raw: int  # the meter's raw estimate of that prompt
    text: int  # of which text + framing
    actual: int  # provider's prompt tokens for it
