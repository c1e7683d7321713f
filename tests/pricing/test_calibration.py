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
    errors = sorted((learnt.price(s.vector) - s.actual) / s.actual for s in held_out)
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


# -- issue 18: defaulted parts, features, checkpoint anchors -----------------------------------

from pricing.calibration import (  # noqa: E402
    FEATURES,
    checkpoint_anchors,
    pressure_features,
)

_I = {name: i for i, name in enumerate(FEATURES)}


def _features(**parts: int) -> tuple[int, ...]:
    return tuple(parts.get(name, 0) for name in FEATURES)


def _sample(features: tuple[int, ...], actual: int, t: float) -> Sample:
    text = sum(features[: _I["framing"]])
    return Sample(
        "r",
        t,
        text,
        features[_I["framing"]],
        features[_I["images"]] + features[_I["defaulted"]],
        0,
        features[_I["messages"]],
        0,
        False,
        actual,
        0,
        features,
    )


def test_tokens_priced_by_default_never_move_the_other_factors():
    """The poisoning scenario: many requests whose images were priced by a default far from the
    truth, on an exact route; a plain prompt afterwards is still priced by the meter's count."""
    rng = random.Random(4)
    samples = []
    for i in range(40):
        prose = rng.randint(50, 3000)
        f = _features(prose=prose, framing=7, messages=1, defaulted=765)
        true_image = rng.choice([85, 765, 1105, 14_000])  # what the provider really counted
        samples.append(_sample(f, prose + 7 + true_image, i))
    learnt = fit_correction(samples, exact=True)
    assert learnt.text == 1.0 and learnt.framing == 1.0
    plain = _features(prose=8000, framing=7, messages=1)
    assert abs(learnt.price(plain) - 8007) / 8007 <= 0.03
    # ... and on an inexact route the text factors keep the prior rather than the images' error
    inexact = fit_correction(samples, exact=False)
    assert inexact.text <= CalibrationPolicy().prior_inexact


def test_content_classes_and_message_overhead_are_learnt_apart():
    """A tokenizer that counts code 1.3x, CJK 0.8x, prose 1.05x and adds 6 per message."""
    rates = {"prose": 1.05, "code": 1.3, "structured": 1.2, "script": 0.8, "numeric": 1.5}
    rng = random.Random(9)

    def truth(f: tuple[int, ...]) -> int:
        text = sum(f[_I[k]] * r for k, r in rates.items())
        return math.ceil(text + f[_I["framing"]] + 6 * f[_I["messages"]])

    def request() -> tuple[int, ...]:
        parts = {k: rng.choice([0, rng.randint(20, 3000)]) for k in rates}
        m = rng.randint(1, 30)
        return _features(**parts, framing=4 * m, messages=m)

    samples = [_sample(f, truth(f), i) for i, f in enumerate(request() for _ in range(30))]
    learnt = fit_correction(samples, exact=False)
    errors = [(learnt.price(f) - truth(f)) / truth(f) for f in (request() for _ in range(200))]
    assert min(errors) >= -0.01
    assert sorted(abs(e) for e in errors)[189] <= 0.03
    w = dict(zip(FEATURES, learnt.vector, strict=True))
    assert w["code"] > w["prose"] > w["script"]


def test_checkpoint_anchors_give_the_head_its_share_of_the_truth():
    from pricing.meter import MessagePressure, Pressure

    msgs = tuple(MessagePressure(i, "user", 400, 4, 0, (400, 0, 0, 0, 0)) for i in range(20))
    p = Pressure("r", msgs, tools=0, priming=3, image_details=(), exact=True)
    actual = 9000  # the provider counted more than the meter's 8083
    anchors = checkpoint_anchors(p, actual, Correction())
    assert anchors and all(0 < n < 20 for n, _ in anchors)
    for n, anchor in anchors:
        assert anchor.features == pressure_features(p, n)
        share = anchor.actual / actual
        assert abs(share - (pressure_features(p, n)[0] + 4 * n + 3) / p.total) < 0.01
    counts = [n for n, _ in anchors]
    assert counts == sorted(set(counts))
