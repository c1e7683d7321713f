"""Calibration math: from the meter's raw estimate to the estimate routefit acts on.

(The sample-fitting math lands with the calibration issue; fitting already takes a Correction.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Correction"]


@dataclass(frozen=True, slots=True)
class Correction:
    """Multiplicative factors per part of the raw estimate; neutral is 1.0."""

    text: float = 1.0  # text + framing
    images: float = 1.0

    def apply(self, text: int, images: int = 0) -> int:
        if self.text == 1.0 and self.images == 1.0:
            return text + images
        return math.ceil(text * self.text + images * self.images)
