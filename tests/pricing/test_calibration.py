"""Calibration math: neutral until it knows, converges conservatively, follows a change."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.calibration import (
    Anchor,
    CalibrationPolicy,
    Correction,
    Sample,
    anchored,
    fit_correction,
)


def sample(text: int, framing: int, images: int, actual: int, t: float = 0.0) -> Sample:
    return Sample(
        "r",
        t,
        text,
        framing,
        images,
        int(images > 0),
        framing // 4 + 1,
        text + framing + images,
        False,
        actual,
    )


def skewed_truth(text: int, framing: int, images: int, rng: random.Random) -> int:
    """A provider whose tokenizer is ~11% larger, adds per-message tokens and prices images
    at 1.4x, with a little noise — a route routefit has no tokenizer for."""
    noise = rng.uniform(-0.004, 0.004)
    return math.ceil((1.11 * text + 1.75 * framing + 1.4 * images) * (1 + noise))


def synthetic(n: int, seed: int, with_images: bool = True) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        messages = rng.randint(2, 120)
        text = sum(rng.randint(5, 400) for _ in range(messages))
        framing = 4 * messages + 3
        images = rng.choice([0, 0, 0, 765, 1530]) if with_images else 0
        out.append(sample(text, framing, images, skewed_truth(text, framing, images, rng), i))
    return out


def test_neutral_until_enough_samples():
    assert fit_correction(synthetic(7, 1)) == Correction()
    assert not fit_correction(synthetic(8, 1)).neutral


def test_converges_conservatively_on_a_skewed_route():
    learnt = fit_correction(synthetic(40, 2))
    held_out = synthetic(300, 3)
    errors = sorted(
        (learnt.price(s.vector) - s.actual) / s.actual for s in held_out
    )
    p95_abs = sorted(abs(e) for e in errors)[int(0.95 * len(errors))]
    assert p95_abs <= 0.03, p95_abs
    assert errors[0] >= -0.01, errors[0]  # underestimates no worse than 1%
    raw_errors = sorted((s.raw - s.actual) / s.actual for s in held_out)
    assert raw_errors[len(raw_errors) // 2] < -0.08  # the raw meter really was wrong


def test_follows_a_change_of_model_behind_the_alias():
    rng = random.Random(4)
    old = synthetic(120, 5, with_images=False)
    new = []
    for i in range(12):
        text, framing = rng.randint(500, 5000), rng.randint(10, 200)
        new.append(sample(text, framing, 0, math.ceil(1.35 * (text + framing)), 200 + i))
    learnt = fit_correction(old + new)
    for s in new:
        assert learnt.price(s.vector) >= s.actual * 0.99


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 10**6),
            st.integers(0, 10**4),
            st.integers(0, 10**5),
            st.integers(1, 10**7),
        ),
        min_size=8,
        max_size=60,
    )
)
def test_factors_are_clamped_and_quantised(rows):
    policy = CalibrationPolicy()
    c = fit_correction([sample(*r) for r in rows], policy)
    for f in (c.text, c.framing, c.images):
        assert policy.low <= f <= policy.high
        assert abs(f / policy.step - round(f / policy.step)) < 1e-6
    # same input, same output
    assert fit_correction([sample(*r) for r in rows], policy) == c


def test_anchored_estimate_is_truth_plus_corrected_increment():
    anchor = Anchor(text=9000, framing=400, images=765, actual=11000)
    c = Correction(text=1.1, framing=1.5, images=1.0)
    assert anchored(anchor, 9000, 400, 765, c) == 11000
    assert anchored(anchor, 10000, 420, 765, c) == 11000 + math.ceil(1000 * 1.1 + 20 * 1.5)


def test_an_exact_meter_is_never_corrected_below_itself():
    # Samples where the provider counted a little less than the (exact) meter, as when a
    # provider renders a tool call more compactly than the meter's approximation of it.
    rng = random.Random(8)
    samples = []
    for i in range(40):
        text, framing = rng.randint(100, 3000), rng.randint(10, 80)
        samples.append(sample(text, framing, 0, int((text + framing) * 0.97), i))
    exact = fit_correction(samples, exact=True)
    assert exact.text >= 1.0 and exact.framing >= 1.0
    assert fit_correction(samples, exact=False).text < 1.0
