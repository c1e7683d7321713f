"""Calibration: from the meter's raw estimate to the estimate routefit acts on.

The meter is exact only where the provider publishes its rules; elsewhere (Claude, Gemini, a
tokenizer routefit does not know, undocumented tool rendering) it is a good approximation with a
route-specific bias. Every completed request tells the truth (``usage.prompt_tokens``), and this
module turns those samples into a ``Correction``:

1. **A model of the bias.** actual ≈ a·text + b·framing + c·images, fitted by least squares on
   the route's recent samples with a ridge pull towards 1 (the meter's own opinion), so a
   tokenizer that is 11% larger *and* adds 3 tokens per message is captured by two factors
   rather than smeared into one ratio that is wrong for long and for short prompts alike.
2. **Conservative.** An underestimate means an overflow at the provider; an overestimate only
   means a little unused window. The fitted model is scaled by an upper quantile of
   actual / predicted over the window, so at most ~(1 − quantile) of requests are underestimated
   and by little.
3. **Never below an exact meter**: on a route whose meter follows the provider's published
   rules, a factor is never below 1 (what the meter does not know can only add tokens).
4. **Cautious until it knows**: fewer than ``min_samples`` samples → factors of 1 on a route
   whose meter is exact, a conservative prior (1.1 on text and framing) on one that is not.
5. **Quick to follow a change** (a new model version behind the same alias): when the newest
   samples disagree consistently with the older ones, the older ones are dropped.
6. **Clamped** to a sane range, and **quantised** (0.5% steps, rounded up) so that a factor does
   not jitter between requests: fitting's cut points are computed on calibrated prices, and a
   factor that moved every request would move them too.

Prefix anchors: for the exact prompt that was sent, the provider's count is the truth. A later
request that extends it is estimated as ``anchor.actual + correction(now − anchor)``, so a
multi-turn session carries only the new turns' uncertainty.

Pure math over plain values; samples and anchors live in the store (``proxy.store``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

__all__ = ["Anchor", "CalibrationPolicy", "Correction", "Sample", "anchored", "fit_correction"]


@dataclass(frozen=True, slots=True)
class Correction:
    """Multiplicative factors per part of the raw estimate; neutral is 1.0."""

    text: float = 1.0
    framing: float = 1.0
    images: float = 1.0
    #: Samples the factors were fitted on (0 = neutral).
    samples: int = 0

    @property
    def neutral(self) -> bool:
        return self.text == self.framing == self.images == 1.0

    def apply(self, text: int, framing: int = 0, images: int = 0) -> int:
        if self.neutral:
            return text + framing + images
        return math.ceil(text * self.text + framing * self.framing + images * self.images)


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

    text: int  # the meter's raw parts for that prompt
    framing: int
    images: int
    actual: int  # provider's prompt tokens for it


@dataclass(frozen=True, slots=True)
class CalibrationPolicy:
    min_samples: int = 8
    window: int = 200
    quantile: float = 0.95
    ridge: float = 0.001
    low: float = 0.5
    high: float = 3.0
    step: float = 0.005
    #: Before a route whose meter is not exact has ``min_samples`` samples, its text and framing
    #: are scaled by this prior (closed tokenizers mostly count more than the ones available
    #: offline; erring high costs a little window, erring low costs an overflow).
    prior_inexact: float = 1.1

    def __post_init__(self) -> None:
        if self.min_samples < 1 or self.window < self.min_samples:
            raise ValueError("calibration needs min_samples >= 1 and window >= min_samples")
        if not 0.5 <= self.quantile <= 1.0:
            raise ValueError("calibration quantile must be between 0.5 and 1")
        if not 0 < self.low <= 1.0 <= self.high:
            raise ValueError("calibration needs 0 < low <= 1 <= high")


def anchored(anchor: Anchor, text: int, framing: int, images: int, correction: Correction) -> int:
    """Estimate of a prompt that extends ``anchor``'s: its truth plus the corrected increment."""
    delta = correction.apply(
        max(0, text - anchor.text), max(0, framing - anchor.framing), max(0, images - anchor.images)
    )
    return anchor.actual + delta


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting for a small dense system."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def _regime(samples: Sequence[Sample], min_samples: int) -> Sequence[Sample]:
    """Drop the older samples when the newest ones consistently disagree with them."""
    if len(samples) < 2 * min_samples:
        return samples
    recent, older = samples[-min_samples:], samples[:-min_samples]
    old_ratio = median(s.actual / s.raw for s in older)
    ratios = [s.actual / s.raw for s in recent]
    above = all(r > old_ratio * 1.03 for r in ratios)
    below = all(r < old_ratio * 0.97 for r in ratios)
    return recent if above or below else samples


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    lo = math.floor(position)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


def _round_up(value: float, step: float) -> float:
    return round(math.ceil(value / step - 1e-9) * step, 6)


def fit_correction(
    samples: Sequence[Sample], policy: CalibrationPolicy | None = None, exact: bool = True
) -> Correction:
    """The route's correction from its samples (oldest first).

    ``exact``: whether the route's meter follows the provider's published rules; an inexact
    route without enough samples gets the policy's conservative prior instead of neutral.
    """
    policy = policy or CalibrationPolicy()
    recent = list(samples)[-policy.window :]
    usable = [s for s in recent if s.raw > 0 and s.actual > 0]
    if len(usable) < policy.min_samples:
        if exact:
            return Correction()
        return Correction(text=policy.prior_inexact, framing=policy.prior_inexact)
    usable = list(_regime(usable, policy.min_samples))
    rows = [(float(s.text), float(s.framing), float(s.images)) for s in usable]
    # Ridge towards 1 for each part, scaled by that part's typical size, so a part the samples
    # say little about (no images seen yet) keeps the meter's own opinion.
    lam = [policy.ridge * (sum(r[j] ** 2 for r in rows) + len(rows)) for j in range(3)]
    ata = [
        [sum(r[i] * r[j] for r in rows) + (lam[i] if i == j else 0.0) for j in range(3)]
        for i in range(3)
    ]
    atb = [
        sum(r[i] * s.actual for r, s in zip(rows, usable, strict=True)) + lam[i] for i in range(3)
    ]
    solved = _solve(ata, atb) or [1.0, 1.0, 1.0]
    factors = [min(policy.high, max(policy.low, f)) for f in solved]
    predicted = [sum(f * x for f, x in zip(factors, r, strict=True)) for r in rows]
    ratios = [s.actual / p for s, p in zip(usable, predicted, strict=True) if p > 0]
    scale_up = _quantile(ratios, policy.quantile) if ratios else 1.0
    # A part no sample contained (no images seen yet) keeps the meter's own opinion: neither
    # the fit nor the conservative scale-up says anything about it.
    seen = [any(r[j] for r in rows) for j in range(3)]
    # An exact meter counts what it knows exactly; what it does not know (tool-call rendering)
    # can only add tokens. Its factors are never below 1.
    low = max(policy.low, 1.0) if exact else policy.low
    text, framing, images = (
        min(policy.high, max(low, _round_up(f * scale_up, policy.step))) if known else 1.0
        for f, known in zip(factors, seen, strict=True)
    )
    return Correction(text=text, framing=framing, images=images, samples=len(usable))
