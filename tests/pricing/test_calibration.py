"""Calibration math: neutral until it knows, converges conservatively, follows a change."""

from __future__ import annotations

import math
import random

import pytest
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

from dataclasses import replace  # noqa: E402

from feature_samples import INDEX as _I  # noqa: E402
from feature_samples import features as _features  # noqa: E402
from feature_samples import sample as _sample  # noqa: E402

from pricing.calibration import (  # noqa: E402
    FEATURES,
    _project,
    checkpoint_anchors,
    message_features,
    pressure_features,
)
from pricing.content import CLASSES, STATS  # noqa: E402
from pricing.meter import MessagePressure  # noqa: E402


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


def test_a_checkpoint_is_never_a_prefix_priced_under_the_step():
    """A route's fitted weight per request may be negative (the provider adds less than the
    meter's framing: range down to -64), so the head alone (tools, priming, the request) may be
    priced under 0. The first checkpoint is still the first multiple of the step above 0: a
    first message priced at 0 (or a few tokens) is no checkpoint — its share of the count was
    0, an anchor the lookup refused as absurd (seen on Gemini sessions), or a few tokens, an
    anchor that priced a new session from nearly nothing, without its interval."""
    from pricing.meter import Pressure

    counted = ("messages", "calls", "requests", *STATS)  # priced by the neutral weights at 0
    weights = [0.0 if k in counted else 1.0 for k in FEATURES]
    weights[_I["requests"]] = -10.0  # the head: 3 tokens of priming - 10 = -7
    correction = Correction(samples=50, weights=tuple(weights))
    first = MessagePressure(0, "user", 3, 4, 0, (3, 0, 0, 0, 0))  # priced -7 + 7 = 0
    rest = tuple(MessagePressure(i, "user", 400, 4, 0, (400, 0, 0, 0, 0)) for i in range(1, 8))
    p = Pressure("r", (first, *rest), tools=0, priming=3, image_details=(), exact=False)
    full = correction.price(pressure_features(p))
    anchors = checkpoint_anchors(p, 3000, correction)
    assert anchors and all(a.actual > 0 for _, a in anchors)
    step = max(512, full // 16)
    assert all(correction.price(pressure_features(p, n)) >= step for n, _ in anchors)
    for n, a in anchors:
        assert a.actual == 3000 * correction.price(pressure_features(p, n)) // full
    # and a prefix whose share of a count (here an absurd 2) rounds to none is not anchored
    few = checkpoint_anchors(p, 2, correction)
    assert [a.actual for _, a in few] == [1] * len(few)
    assert len(few) < len(anchors)


_COUNT = st.integers(0, 5000)
_PRESSURES = st.builds(
    MessagePressure,
    index=st.integers(0, 50),
    role=st.sampled_from(["user", "assistant", "tool"]),
    text=_COUNT,
    framing=st.integers(0, 40),
    images=_COUNT,
    classes=st.lists(_COUNT, min_size=len(CLASSES), max_size=len(CLASSES)).map(tuple),
    calls=st.integers(0, 4),
    stats=st.lists(_COUNT, min_size=len(STATS), max_size=len(STATS)).map(tuple),
)
_EIGHTHS = st.lists(st.integers(-16, 64), min_size=len(FEATURES), max_size=len(FEATURES))


@settings(max_examples=60, deadline=None)
@given(_EIGHTHS, _EIGHTHS, st.lists(_PRESSURES, max_size=40), st.booleans())
def test_running_prices_are_each_prefix_priced_whole(
    eighths: list[int], others: list[int], messages: list[MessagePressure], neutral: bool
) -> None:
    """The checkpoints' prefix prices (summed message by message) are what pricing each
    prefix's summed features would give — and again, from each message's kept price, and under
    other weights after it (a refit's: a price kept for the first weights is not theirs).
    Weights in eighths: both sums are exact in binary floating point."""
    head = [0] * len(FEATURES)
    head[_I["framing"]], head[_I["requests"]] = 7, 1
    for weights in (eighths, eighths, others):
        correction = Correction() if neutral else Correction(weights=tuple(e / 8 for e in weights))
        running, expected = head, []
        for mp in messages:
            running = [a + b for a, b in zip(running, _features_of(mp), strict=True)]
            expected.append(correction.price(running))
        assert correction.running_prices(head, messages) == expected


def _features_of(mp: MessagePressure) -> list[int]:
    """A message's features as a fresh copy would have them (none of its memos)."""
    return list(message_features(replace(mp)))


def test_a_prompts_kept_features_are_its_own_and_never_a_copys() -> None:
    """The whole prompt's features are kept on it after the first call; a prefix's are
    not, and a prompt made from it by ``replace`` (a cut) works out its own."""
    from dataclasses import replace

    from pricing.meter import MessagePressure, Pressure

    msgs = tuple(MessagePressure(i, "user", 10 * (i + 1), 4, 0) for i in range(5))
    p = Pressure("r", msgs, tools=2, priming=3, image_details=(), exact=True)
    whole = pressure_features(p)
    assert pressure_features(p) is whole
    assert pressure_features(p, 2) != whole
    assert pressure_features(p) is whole
    cut = replace(p, messages=msgs[:3])
    assert pressure_features(cut) == pressure_features(p, 3) != whole
    assert cut == replace(p, messages=msgs[:3])  # the memo is not part of equality


# -- per-character features: tokenizers that disagree inside a content class -------------------

import json  # noqa: E402
import re  # noqa: E402

from pricing.content import profile  # noqa: E402
from pricing.messages import parse_request  # noqa: E402
from pricing.meter import measure  # noqa: E402
from pricing.route import Route  # noqa: E402
from pricing.tokenizers import get_tokenizer  # noqa: E402

#: The most of each of ``STATS`` one character can count for: 1, but for ``wide`` (a character
#: of four UTF-8 bytes has two beyond its second).
MOST_PER_CHARACTER = (*(1,) * (len(STATS) - 1), 2)

_ROUTE = Route(alias="unknown", model="acme-7")  # o200k and OpenAI framing, inexact
_WORDS = "the cache keeps recent answers so a retry never reaches the backend twice".split()


def _unknown_count(text: str) -> int:
    """A tokenizer routefit does not ship, built from one it does by what real ones disagree
    on: indentation merges into one token, digits split one by one, and every character
    outside ASCII costs a token more. Its ratio to o200k depends on the mix inside a part,
    not only on the part's class."""
    merged = re.sub(r"[ \t]{2,}", " ", text)
    split = re.sub(r"(\d)", r" \1", merged)
    return get_tokenizer("o200k_base").count(split) + sum(ord(c) > 127 for c in text)


def _part(rng: random.Random) -> str:
    words = " ".join(rng.choices(_WORDS, k=rng.randint(5, 300)))
    rows = [{"id": rng.randint(1, 10**6), "name": rng.choice(_WORDS)} for _ in range(20)]
    kinds = [
        lambda: words,
        lambda: json.dumps(rows, indent=rng.choice([None, 2, 4])),
        lambda: "\n".join(f"    x_{i} = f({i}, {rng.random():.3f})" for i in range(30)),
        lambda: words + " " + "東京の天気は晴れです" * rng.randint(0, 20),
        lambda: "\n".join(f"2025-01-{d:02d} {rng.randint(0, 10**5)} ms" for d in range(1, 28)),
    ]
    return rng.choice(kinds)()


def _request(rng: random.Random) -> tuple[tuple[int, ...], int]:
    """(features as routefit measures them, the unknown provider's count)."""
    messages = [{"role": "user", "content": _part(rng)} for _ in range(rng.randint(1, 6))]
    pressure = measure(parse_request({"model": "unknown", "messages": messages}), _ROUTE)
    truth = sum(_unknown_count(m["content"]) for m in messages) + 6 * len(messages) + 5
    return pressure_features(pressure), truth


def test_a_tokenizer_that_disagrees_within_classes_is_learnt_within_3_percent():
    rng = random.Random(18)
    train = (_request(rng) for _ in range(60))  # 17 features: a few samples for each
    samples = [_sample(f, truth, i) for i, (f, truth) in enumerate(train)]
    learnt = fit_correction(samples, exact=False)
    errors = [(learnt.price(f) - truth) / truth for f, truth in (_request(rng) for _ in range(200))]
    assert min(errors) >= -0.01, min(errors)
    assert sorted(abs(e) for e in errors)[189] <= 0.03, sorted(abs(e) for e in errors)[189]
    w = dict(zip(FEATURES, learnt.vector, strict=True))
    assert w["digits"] > 0.2 and w["nonascii"] > 0.2  # what the class weights cannot carry


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=20_000), st.text(max_size=50))
def test_character_counts_never_exceed_the_length(text, tail):
    """Each count is at most the text's characters (twice them for ``wide``, the bytes beyond
    each character's second): ``pricing.bounds`` bounds a text's counts by that."""
    counts = profile(text)
    assert len(counts) == len(STATS)
    assert all(
        0 <= c <= most * len(text) for c, most in zip(counts, MOST_PER_CHARACTER, strict=True)
    )
    assert profile(text) == counts  # deterministic: the same text always costs the same
    if len(text) + len(tail) <= 2048:  # exact below the sample size: counts add up
        joined = profile(text + "\n" + tail)
        for stat in ("nonascii", "numbers"):  # a newline between them: no run of digits joins
            k = STATS.index(stat)
            assert joined[k] == counts[k] + profile(tail)[k]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 5000), min_size=len(FEATURES), max_size=len(FEATURES)),
            st.floats(0.3, 1.0),
        ),
        min_size=8,
        max_size=40,
    )
)
def test_an_exact_meter_is_never_priced_below_its_count(rows):
    """Whatever the provider reports, on an exact route every token weight stays >= 1 and every
    per-thing and per-character weight >= 0: the estimate never drops under the meter's count."""
    samples = []
    for i, (f, ratio) in enumerate(rows):
        f = list(f)
        f[_I["defaulted"]] = 0
        f[_I["requests"]] = 1
        raw = sum(x for j, x in enumerate(f) if FEATURES[j] not in _NOT_TOKENS)
        samples.append(_sample(tuple(f), max(1, int(raw * ratio)), i))
    learnt = fit_correction(samples, exact=True)
    for name, w in zip(FEATURES, learnt.vector, strict=True):
        assert w >= (0.0 if name in _NOT_TOKENS else 1.0), (name, w)
    for f, _ in rows:
        raw = sum(x for j, x in enumerate(f) if FEATURES[j] not in _NOT_TOKENS)
        assert learnt.price(f) >= raw


_NOT_TOKENS = {"messages", "calls", "requests", *STATS}


def _honest(rng: random.Random, n: int) -> list[Sample]:
    """A route's honest samples: an unknown tokenizer (text x0.8-1.5, framing x1-2, 0-8 tokens
    per message), a little noise."""
    t, f, per = rng.uniform(0.8, 1.5), rng.uniform(1.0, 2.0), rng.uniform(0.0, 8.0)
    out = []
    for i in range(n):
        m = rng.randint(2, 60)
        text, framing = sum(rng.randint(5, 400) for _ in range(m)), 4 * m + 3
        noise = 1 + rng.uniform(-0.004, 0.004)
        out.append(
            sample(text, framing, 0, math.ceil((t * text + f * framing + per * m) * noise), i)
        )
    return out


def _lying_case(i: int) -> tuple[int, int, list[tuple[float, tuple[str, float]]], bool]:
    """The ``i``-th case of the property below, drawn as the strategy it replaced drew them:
    a seed, 10-200 honest samples, up to 50 lies (an absolute count up to 10^12, or a ratio up
    to 1,000, at any place) and whether they all come last."""
    rng = random.Random(f"lies-{i}")
    lies = []
    for _ in range(rng.randint(0, 50)):
        kind = ("absolute", float(rng.randint(1, 10**12)))
        if rng.random() < 0.5:
            kind = ("ratio", rng.uniform(0.0, 1000.0))
        lies.append((rng.random(), kind))
    return rng.randint(0, 2**32), rng.randint(10, 200), lies, rng.random() < 0.5


# The same 60 cases every run: a uniform search finds about one case in 1,500 where a lie inside
# the outlier band tips weights that trade places (docs/calibration.md, "Not always"), a limit the
# docs state. Drawn by hypothesis, even derandomized, the cases changed with what else a worker
# had imported (its pool of the code's constants), and one such draw found a 0.988 in a run of
# a few test files (at dc053fa too): seeded here, what the property guards (a lie moving the fit
# beyond its band) does not flake with the company it runs in.
@pytest.mark.parametrize("case", range(60))
def test_a_few_lying_answers_cannot_move_the_correction_beyond_its_bound(case):
    """Up to 20% of the samples lying — any counts, anywhere, or all newest — and every honest
    request is priced within [0.99, 1.5] x what the honest samples alone give
    (docs/calibration.md, "Untrusted samples")."""
    seed, n, lies, at_the_end = _lying_case(case)
    rng = random.Random(seed)
    honest = _honest(rng, n)
    mixed = list(honest)
    for where, (kind, value) in lies[: n // 4]:  # n // 4 liars among n + n // 4: 20%
        told = rng.choice(honest)
        actual = int(value) if kind == "absolute" else int(told.actual * value)
        liar = Sample(**{**_fields(told), "actual": max(1, actual)})
        mixed.insert(len(mixed) if at_the_end else int(where * len(mixed)), liar)
    truthful = fit_correction(honest, exact=False)
    told = fit_correction(mixed, exact=False)
    for s in honest:
        ratio = told.price(s.vector) / truthful.price(s.vector)
        assert 0.99 <= ratio <= 1.5 * 1.01, (ratio, s)


def _fields(s: Sample) -> dict:
    return {name: getattr(s, name) for name in Sample.__slots__}


def test_an_image_of_unknown_size_is_never_priced_below_the_worst_case():
    """URL images of unknown size are priced at the rule's most for one image; when the ones
    seen so far were small, the next may still be the largest (issue 31: 25% under on a route
    whose unknown images had been learnt to be small)."""
    from pricing.calibration import FEATURES, UNSIZED

    rng = random.Random(3)
    worst = 1105  # the rule's most for one image
    samples = []
    for i in range(60):
        v = [0] * len(FEATURES)
        v[0] = rng.randint(200, 3000)  # prose
        v[FEATURES.index("framing")] = 7
        v[FEATURES.index("messages")] = 1
        v[FEATURES.index("requests")] = 1
        images = rng.randint(1, 3)
        v[UNSIZED] = images * worst
        small = sum(rng.randint(85, 300) for _ in range(images))  # what the provider counted
        samples.append(
            Sample("r", i, v[0], 7, v[UNSIZED], images, 1, 0, False, v[0] + 7 + small, 0, tuple(v))
        )
    learnt = fit_correction(samples, exact=True)
    assert learnt.vector[UNSIZED] >= 1.0
    one = [0] * len(FEATURES)
    one[UNSIZED] = worst
    assert learnt.price(one) >= worst


def test_a_new_route_is_priced_above_any_tokenizer_of_the_stated_family():
    """Before a route whose meter is not exact has learnt, its prior over-estimates every
    tokenizer of the family docs/calibration.md states (per token kind x0.75-1.25 of o200k or
    cl100k, or numbers one token a digit; up to 8 tokens a message, 12 a tool call, 8 of
    priming): the family's dearest corners on both bases, and tokenizers drawn at random, with
    the simulator's counting rules as the provider. Without the prior's digit weight the corner
    that splits numbers digit by digit is 10% under."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    import accuracy_heldout as heldout

    from pricing.calibration import fit_correction
    from pricing.messages import parse_request
    from pricing.meter import measure
    from proxy.sim.counting import openai_prompt
    from proxy.sim.models import SimModel

    route = heldout._routes().route("mystery-2").route
    prior = fit_correction((), CalibrationPolicy(), exact=False)
    rng = random.Random(31)
    (_, most), _, messages, calls, priming = heldout.FAMILIES["stated"]
    kinds = ("word", "punct", "script", "space")
    corners = [
        SimModel(f"corner-{base}-{digit}", context_window=32_768, max_output=4096, tokenizer=base,
                 class_rates=",".join([*(f"{k}={most}" for k in kinds), f"digit={digit}"]),
                 per_message=messages, per_tool_call=calls, priming=priming)
        for base in ("o200k_base", "cl100k_base")
        for digit in (most, 0)  # digits at their most, or one token each
    ]  # fmt: skip
    drawn = [heldout.random_tokenizer(rng, i) for i in range(4)]
    for sim in [*corners, *drawn]:
        for body in heldout._bodies(6, seed=rng.randrange(10**6)):
            actual = len(openai_prompt(body, sim, heldout._picture).tokens)
            estimate = prior.price_pressure(measure(parse_request(body), route))
            assert estimate >= actual * 0.99, (sim.class_rates, estimate, actual)


def _numbers_part(rng: random.Random) -> str:
    """Text with numbers of every length: ids, amounts, timestamps, versions, bare digits."""
    words = " ".join(rng.choices(_WORDS, k=rng.randint(5, 200)))
    number = lambda: str(rng.randint(0, 10 ** rng.randint(1, 9)))  # noqa: E731
    kinds = [
        lambda: words,
        lambda: " ".join(f"{w} {number()}" for w in rng.choices(_WORDS, k=rng.randint(10, 120))),
        lambda: json.dumps([{"id": number(), "v": number()} for _ in range(rng.randint(2, 30))]),
        lambda: "\n".join(f"{number()}.{number()}.{number()} {number()}ms" for _ in range(20)),
    ]
    return rng.choice(kinds)()


def _split_numbers(rng: random.Random, per_digit: bool) -> tuple[tuple[int, ...], int]:
    """(features, count) of a tokenizer routefit does not ship that splits numbers its own way:
    one token per digit, or one per number however long, where o200k (the meter's) splits them
    in groups of three (a 9-digit id: 3 tokens there, 9 or 1 here); 4 tokens a message."""
    messages = [{"role": "user", "content": _numbers_part(rng)} for _ in range(rng.randint(1, 4))]
    pressure = measure(parse_request({"model": "unknown", "messages": messages}), _ROUTE)
    o200k = get_tokenizer("o200k_base")
    truth = 4 * len(messages) + 3
    for m in messages:
        numbers = re.findall(r"\d+", m["content"])
        groups = sum(-(-len(n) // 3) for n in numbers)
        theirs = sum(len(n) for n in numbers) if per_digit else len(numbers)
        truth += o200k.count(m["content"]) - groups + theirs
    return pressure_features(pressure), truth


@pytest.mark.parametrize("per_digit", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_how_a_tokenizer_splits_numbers_is_learnt(per_digit, seed):
    """Digits alone cannot say how numbers split: one token per digit, per group of three and
    per number differ by a part per number, not per digit. With the count of numbers (runs of
    digits) a feature of its own, the fit finds the direction: per digit, digits dearer and
    numbers cheaper; per number, the reverse (issue 31: the held-out unknown tokenizers'
    worst under-estimates were numbers-heavy requests; bench/REPORT.md 4c)."""
    rng = random.Random(seed)
    train = (_split_numbers(rng, per_digit) for _ in range(40))
    samples = [_sample(f, truth, i) for i, (f, truth) in enumerate(train)]
    learnt = fit_correction(samples, exact=False)
    # What 20 ids of nine digits cost beyond 20 of one, per id: 8 tokens on a tokenizer that
    # splits them digit by digit, none on one that takes a number whole; the meter says 2.
    nine, one = (_numbers_features(_ids(d, 20)) for d in (9, 1))
    extra = (learnt.price(nine) - learnt.price(one)) / 20
    assert extra > 5 if per_digit else extra < 1, extra


def _ids(digits: int, n: int, rng: random.Random | None = None) -> str:
    """A JSON list of ``n`` rows, each with an id of ``digits`` digits."""
    rng = rng or random.Random(digits)
    low = 10 ** (digits - 1) if digits > 1 else 0
    return json.dumps([{"id": str(rng.randint(low, 10**digits - 1)), "v": "x"} for _ in range(n)])


def _numbers_features(text: str) -> tuple[int, ...]:
    body = {"model": "unknown", "messages": [{"role": "user", "content": text}]}
    return pressure_features(measure(parse_request(body), _ROUTE))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_short_numbers_are_priced_by_their_groups(seed):
    """A tokenizer that takes each number whole costs a token a number where the meter spends a
    token per group of up to three digits. With digits and numbers alone a group was
    approximated by a third of a digit and a part per number, so rows of two-digit ids came out
    2.7-3.5% under their count; with the groups counted (``groups``, the meter's own digit
    tokens) the fit can say it exactly, and they are priced nearer their count."""
    rng = random.Random(seed)
    train = (_split_numbers(rng, False) for _ in range(40))
    samples = [_sample(f, truth, i) for i, (f, truth) in enumerate(train)]
    text = _ids(2, 30, rng)
    numbers = re.findall(r"\d+", text)
    truth = 7 + get_tokenizer("o200k_base").count(text) - sum(-(-len(n) // 3) for n in numbers)
    truth += len(numbers)
    features = _numbers_features(text)
    errors = {}
    for model in ("features", "scripts"):
        policy = CalibrationPolicy(model=model, interval=0.0)
        learnt = fit_correction(samples, policy, exact=False)
        seen = _project(features, model)
        errors[model] = learnt.price(seen) / truth - 1
    assert abs(errors["features"]) < abs(errors["scripts"]), errors
    assert errors["features"] >= -0.015, errors


def test_samples_recorded_before_numbers_were_counted_keep_their_features():
    """A sample stored before ``numbers`` existed (seven features fewer: numbers, the four
    scripts, the groups and the wide characters; unsized images last) reads with no numbers and
    its unsized image tokens where they belong, not shifted into numbers."""
    from pricing.calibration import NUMBERS, UNSIZED

    old = tuple(range(1, len(FEATURES) - 6))  # every old feature distinct, unsized last
    s = Sample("r", 0.0, 1, 1, 0, 0, 1, 1, False, 10, 0, old)
    assert s.vector[NUMBERS] == 0
    assert s.vector[UNSIZED] == old[-1]
    assert s.vector[:NUMBERS] == old[:NUMBERS]
    assert len(s.vector) == len(FEATURES)


def test_samples_recorded_before_scripts_were_counted_keep_their_features():
    """A sample stored before the four scripts' counts existed (nor the groups, nor the wide
    characters; unsized images last) reads with none of them, its numbers and unsized image
    tokens where they were."""
    from pricing.calibration import NUMBERS, UNSIZED

    old = tuple(range(1, len(FEATURES) - 5))
    s = Sample("r", 0.0, 1, 1, 0, 0, 1, 1, False, 10, 0, old)
    assert s.vector[: NUMBERS + 1] == old[: NUMBERS + 1]
    assert [s.vector[FEATURES.index(k)] for k in ("hangul", "kana", "han", "cyrillic")] == [0] * 4
    assert s.vector[FEATURES.index("groups")] == 0
    assert s.vector[FEATURES.index("wide")] == 0
    assert s.vector[UNSIZED] == old[-1]


def test_samples_recorded_before_groups_were_counted_keep_their_features():
    """A sample stored with the scripts' counts and without the groups (nor the wide
    characters; unsized images last) reads with neither, every other count where it was."""
    from pricing.calibration import GROUPS, UNSIZED, WIDE

    old = tuple(range(1, len(FEATURES) - 1))
    s = Sample("r", 0.0, 1, 1, 0, 0, 1, 1, False, 10, 0, old)
    assert s.vector[:GROUPS] == old[:GROUPS]
    assert s.vector[GROUPS] == s.vector[WIDE] == 0
    assert s.vector[UNSIZED] == old[-1]
    assert len(s.vector) == len(FEATURES)


def test_samples_recorded_before_wide_characters_were_counted_keep_their_features():
    """A sample stored with the groups and without the wide characters' count (unsized images
    last) reads with none of them, every other count where it was."""
    from pricing.calibration import UNSIZED, WIDE

    old = tuple(range(1, len(FEATURES)))
    s = Sample("r", 0.0, 1, 1, 0, 0, 1, 1, False, 10, 0, old)
    assert s.vector[:WIDE] == old[:WIDE]
    assert s.vector[WIDE] == 0
    assert s.vector[UNSIZED] == old[-1]
    assert len(s.vector) == len(FEATURES)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text("0123456789", min_size=1, max_size=40), min_size=1, max_size=8))
def test_groups_are_the_meters_tokens_of_digits(runs):
    """``groups`` counts what o200k makes of a text's digits (up to three at a time, from each
    run's start): a run of digits alone is that many tokens."""
    from pricing.calibration import GROUPS

    text = " x ".join(runs)
    assert profile(text)[GROUPS - FEATURES.index("digits")] == sum(
        get_tokenizer("o200k_base").count(run) for run in runs
    )


from script_sentences import SCRIPTS as _SCRIPTS  # noqa: E402
from script_sentences import WHITESPACE as _WHITESPACE  # noqa: E402
from script_sentences import script_bodies as _script_bodies  # noqa: E402


@pytest.mark.parametrize("script", sorted(_SCRIPTS))
def test_a_new_route_is_priced_above_real_tokenizers_in_every_script(script):
    """A real tokenizer may have few pieces for a script the meter's o200k reads in a token or
    two, and spend up to a token per UTF-8 byte: Claude's legacy BPE, DeepSeek's and GPT-3's
    p50k, as the simulator counts them. A new inexact route's prior prices each at or above
    its count in every script, whichever meter prices the route (o200k, cl100k, Claude's
    legacy BPE, or characters: ``heuristic:4``); before it priced each character outside
    ASCII (``prior_nonascii``), Claude's legacy tokenizer counted Devanagari at 3x the prior's
    price on an o200k route and Thai at 2.7x; before it priced the bytes of wide characters
    (``prior_wide``), p50k counted Hangul at 1.26x it, and at 1.52x on a Claude route (1.12x
    on ``heuristic:4`` before the byte worst case). A meter that itself spends more on scripts
    adds less: a Claude route's prior stays within 2.6x of its own tokenizer's count."""
    for meter, tokenizer, estimate, actual in _priors_and_counts(_SCRIPTS[script]):
        assert estimate >= actual, (meter, tokenizer, estimate, actual)
        if meter == tokenizer == "anthropic-legacy":
            assert estimate <= 2.6 * actual, (estimate, actual)


def _priors_and_counts(text: str) -> list[tuple[str, str, int, int]]:
    """(meter, tokenizer, the prior's price, the count) of ``text``'s bodies on a new inexact
    route priced by each meter (a heuristic one, counting characters, among them), counted by
    each of three real tokenizers."""
    from proxy.sim.counting import openai_prompt
    from proxy.sim.models import SimModel

    out = []
    for meter in ("o200k_base", "cl100k_base", "anthropic-legacy", "heuristic:4"):
        route = Route(alias="unknown", model="acme-7", tokenizer=meter)
        prior = fit_correction((), CalibrationPolicy(), exact=False, meter=meter)
        for tokenizer in ("anthropic-legacy", "deepseek", "p50k_base"):
            sim = SimModel("real", context_window=32_768, max_output=4096, tokenizer=tokenizer)
            for body in _script_bodies(text):
                actual = len(openai_prompt(body, sim, None).tokens)
                estimate = prior.price_pressure(measure(parse_request(body), route))
                out.append((meter, tokenizer, estimate, actual))
    return out


@pytest.mark.parametrize("kind", sorted(_WHITESPACE))
def test_a_new_route_is_priced_above_real_tokenizers_on_runs_of_whitespace(kind):
    """o200k reads a run of tabs, of newlines or of spaces in a token or two; GPT-3's p50k
    spends a token on each tab and on most newlines. Before the prior priced newlines, tabs
    and pairs of spaces (``prior_newlines``, ``prior_tabs``, ``prior_indent``), p50k counted
    tab-indented lines at 1.51x the prior's price and blank lines at 1.70x on an o200k route;
    Claude's legacy BPE blank lines at 1.02x. Now each is priced at or above its count on
    every meter."""
    for meter, tokenizer, estimate, actual in _priors_and_counts(_WHITESPACE[kind]):
        assert estimate >= actual, (meter, tokenizer, estimate, actual)


def test_a_count_no_sample_had_is_priced_as_the_prior_prices_it():
    """A route whose samples were all English has not shown what a character outside ASCII
    costs it: the fitted weight stays the prior's, not the meter's neutral 0, so its first
    Hangul request is not priced as if Hangul cost what o200k counts."""
    from pricing.calibration import FEATURES

    rng = random.Random(5)
    rows = []
    for i in range(40):
        text = " ".join(rng.choices(_WORDS, k=rng.randint(20, 400)))
        messages = [{"role": "user", "content": text}]
        pressure = measure(parse_request({"model": "m", "messages": messages}), _ROUTE)
        truth = math.ceil(1.1 * get_tokenizer("o200k_base").count(text)) + 7
        rows.append(_sample(pressure_features(pressure), truth, i))
    learnt = fit_correction(rows, exact=False)
    w = dict(zip(FEATURES, learnt.vector, strict=True))
    assert w["nonascii"] == CalibrationPolicy().prior_nonascii
    assert w["digits"] == CalibrationPolicy().prior_digits
    english = dict(zip(FEATURES, fit_correction(rows, exact=True).vector, strict=True))
    assert english["nonascii"] == 0  # an exact meter's prior is its own count


_HANGUL = "서울의 날씨는 맑습니다 금요일까지 회의 자료를 확인해 주세요"
_KANA = "とうきょうは はれです かいぎの しりょうを きんようびまでに かくにんしてください"


def _scripts_sample(rng: random.Random) -> tuple[tuple[int, ...], int]:
    """(features, count) of a request mixing English, Hangul and kana in random shares, on a
    tokenizer with a piece for each kana but none for Hangul syllables (three tokens each, by
    byte fallback, as Mistral v3's SentencePiece spends them), o200k's count for the rest."""
    parts = [
        " ".join(rng.choices(_WORDS, k=rng.randint(0, 120))),
        " ".join([_HANGUL] * rng.randint(0, 6)),
        " ".join([_KANA] * rng.randint(0, 6)),
    ]
    rng.shuffle(parts)
    text = " ".join(p for p in parts if p) or "hello"
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    pressure = measure(parse_request(body), _ROUTE)
    hangul = sum(1 for ch in text if "\uac00" <= ch <= "\ud7af")
    kana = sum(1 for ch in text if "\u3040" <= ch <= "\u30ff")
    rest = get_tokenizer("o200k_base").count(re.sub("[\uac00-\ud7af\u3040-\u30ff]", "", text))
    return pressure_features(pressure), rest + 3 * hangul + kana + 7


def test_which_script_a_tokenizer_lacks_is_learnt():
    """Hangul and kana are both three UTF-8 bytes and a token or so in o200k, so neither o200k's
    count nor the count of characters outside ASCII can say that a tokenizer spends three tokens
    on one and one on the other; the count per script can. Fitted on 60 mixed requests, the
    next all-Hangul and all-kana requests are priced within 3% above their count and never
    under; without the scripts' counts (``model="numbers"``) Hangul is priced 13% under its
    count and kana nearly three times over. (The real case: bench/REPORT.md 4d, a Mistral v3
    stream's worst request.)"""
    rng = random.Random(11)
    samples = [_sample(*_scripts_sample(rng), i) for i in range(60)]
    probes = []
    for text in (" ".join([_HANGUL] * 8), " ".join([_KANA] * 8)):
        body = {"model": "m", "messages": [{"role": "user", "content": text}]}
        hangul = sum(1 for ch in text if "\uac00" <= ch <= "\ud7af")
        kana = sum(1 for ch in text if "\u3040" <= ch <= "\u30ff")
        rest = get_tokenizer("o200k_base").count(re.sub("[\uac00-\ud7af\u3040-\u30ff]", "", text))
        probes.append((measure(parse_request(body), _ROUTE), rest + 3 * hangul + kana + 7))
    learnt = fit_correction(samples, exact=False)
    for pressure, truth in probes:
        error = learnt.price_pressure(pressure) / truth - 1
        assert 0 <= error <= 0.03, error
    blind = fit_correction(samples, CalibrationPolicy(model="numbers"), exact=False)
    errors = [blind.price_pressure(p) / truth - 1 for p, truth in probes]
    assert errors[0] < -0.10 and errors[1] > 0.5, errors


# -- the interval: a request unlike the window (issue 31 item 5) --------------------------------


def _scripts_count(text: str) -> int:
    """Hangul three tokens a syllable, kana one, o200k's count for the rest (as above)."""
    hangul = sum(1 for ch in text if "\uac00" <= ch <= "\ud7af")
    kana = sum(1 for ch in text if "\u3040" <= ch <= "\u30ff")
    rest = get_tokenizer("o200k_base").count(re.sub("[\uac00-\ud7af\u3040-\u30ff]", "", text))
    return rest + 3 * hangul + kana + 7


def _scripts_request(text: str) -> tuple[object, int]:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return measure(parse_request(body), _ROUTE), _scripts_count(text)


@pytest.mark.parametrize("seed", [3, 7])
def test_a_request_unlike_the_window_is_priced_with_its_doubt(seed):
    """Every sample had Hangul and kana together, one sentence of each: the fit cannot tell
    what each costs (three tokens a Hangul syllable, one a kana), and the ridge splits it
    between them. Without the interval an all-Hangul request is priced over 30% under its
    count; with it, the doubt along that direction — the prior's spread, since the samples
    never pinned it down — prices it above its count, while requests like the window's cost
    about what they did."""
    rng = random.Random(seed)
    samples = []
    for i in range(40):
        both = " ".join([_HANGUL + " " + _KANA] * rng.randint(0, 3))
        text = " ".join(rng.choices(_WORDS, k=rng.randint(20, 200))) + " " + both
        pressure, truth = _scripts_request(text)
        samples.append(_sample(pressure_features(pressure), truth, i))
    doubting = fit_correction(samples, exact=False)
    sure = fit_correction(samples, CalibrationPolicy(interval=0.0), exact=False)
    hangul, truth = _scripts_request(" ".join([_HANGUL] * 8))
    assert sure.price_request(hangul) < 0.7 * truth
    assert doubting.price_request(hangul) >= truth
    for _ in range(5):
        words = " ".join(rng.choices(_WORDS, k=rng.randint(20, 200)))
        like, count = _scripts_request(words + " " + _HANGUL + " " + _KANA)
        assert count <= doubting.price_request(like) <= 1.03 * count
        assert doubting.price_request(like) - sure.price_request(like) <= 0.01 * count


def test_an_exact_meter_has_no_interval():
    """An exact meter follows the provider's published rules: what its fit leaves is noise,
    not doubt about a tokenizer, and its requests are priced by their weights alone."""
    samples = synthetic(60, 9)
    assert fit_correction(samples, exact=True).interval == ()
    assert fit_correction(samples, exact=False).interval != ()
    assert fit_correction(samples, CalibrationPolicy(interval=0.0), exact=False).interval == ()


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(
        st.lists(st.floats(-3, 3), min_size=len(FEATURES), max_size=len(FEATURES)),
        min_size=1,
        max_size=4,
    ),
    features=st.lists(st.integers(0, 5000), min_size=len(FEATURES), max_size=len(FEATURES)),
    less=st.lists(st.floats(0, 1), min_size=len(FEATURES), max_size=len(FEATURES)),
    scale=st.floats(0.5, 3.0),
    below=st.lists(st.floats(-2.0, 0.0), min_size=len(FEATURES), max_size=len(FEATURES)),
)
def test_the_interval_adds_its_margin_to_the_request_and_bounds_any_request_its_bound_bounds(
    rows, features, less, scale, below
):
    """``for_request`` prices the request at its weights' price plus the margin (a factor on
    every weight), never below the weights' own price (weights that price a request at nothing
    or less are not scaled: that would lower it); ``scaled`` scales the margin with the weights;
    ``interval_bound`` is above the margin of any request a bound of these features stands
    for: the same but where a bound may be above the meter (text in each class, framing,
    image tokens), anything from none to the bound there."""
    from pricing.calibration import _LOOSE

    low = Correction(samples=30, weights=tuple(below), interval=tuple(tuple(r) for r in rows))
    assert low.for_request(features).price(features) >= low.price(features)
    weights = tuple(1.0 + 0.1 * (j % 4) for j in range(len(FEATURES)))
    c = Correction(samples=30, weights=weights, interval=tuple(tuple(r) for r in rows))
    plain = sum(w * x for w, x in zip(weights, features, strict=True))
    margin = c.margin(features)
    priced = c.for_request(features).price(features)
    assert priced >= math.ceil(plain - 1e-9)
    assert priced <= math.ceil(plain + margin + 1e-6)
    assert c.scaled(scale).margin(features) == pytest.approx(scale * margin, rel=1e-9, abs=1e-9)
    pairs = enumerate(zip(features, less, strict=True))
    smaller = [int(x * f) if j in _LOOSE else x for j, (x, f) in pairs]
    assert c.interval_bound(features) >= c.margin(smaller) - 1e-6
    assert c.interval_bound(features) >= margin - 1e-6


def test_what_gives_way_when_nothing_fits():
    """A prior gives way to the meter's own count, a learnt route's interval to its weights
    alone; weights without an interval are all that is known, and nothing gives way."""
    n = len(FEATURES)
    prior = fit_correction((), exact=False)
    assert prior.provisional and prior.surer() == Correction()
    doubting = Correction(samples=30, weights=(1.1,) * n, interval=((0.5,) * n,))
    sure = doubting.surer()
    assert sure is not None and sure.interval == () and sure.vector == doubting.vector
    assert sure.surer() is None
    assert Correction().surer() is None
    # a learnt route's price of what no sample had goes last, to the meter's own (none)
    han = FEATURES.index("han")
    guessing = Correction(samples=30, weights=(1.1,) * n, interval=((0.5,) * n,), unseen=(han,))
    sure = guessing.surer()
    assert sure is not None and sure.unseen == (han,) and sure.interval == ()
    surest = sure.surer()
    assert surest is not None and surest.vector[han] == 0.0 and surest.unseen == ()
    assert [w for j, w in enumerate(surest.vector) if j != han] == [1.1] * (n - 1)
    assert surest.surer() is None
    # scaled by an anchor that found it low: still a guess about those counts
    assert guessing.scaled(1.2).unseen == (han,)


def test_a_learnt_route_knows_which_counts_no_sample_had():
    """Samples of ASCII prose: the per-character counts outside ASCII keep the prior's price,
    and the correction says they are a guess (``unseen``); the counts the samples had do not."""
    rng = random.Random(9)
    samples = []
    for i in range(20):
        f = _features(prose=rng.randint(300, 900), punct=rng.randint(5, 40), requests=1)
        samples.append(_sample(f, round(1.1 * f[0]), i))
    c = fit_correction(samples, exact=False, meter="anthropic-legacy")
    assert not c.provisional
    assert FEATURES.index("nonascii") in c.unseen and FEATURES.index("punct") not in c.unseen
    assert all(c.vector[j] for j in c.unseen)


def test_a_weight_held_at_its_bound_lets_the_others_refit():
    """A provider whose every tool call costs 8 tokens less (its meter over-counts calls): the
    fit wants a call's weight at -8, its range holds it at -4, and the weights it traded
    against — a message's (nearly every message beyond the first has a call) and a
    request's — are fitted again beside the bound, so the window's requests are priced by
    what the samples say. Clamped alone, the call weight left a message's at its unclamped
    partner's value, and requests were priced up to 11% off their counts."""
    rng = random.Random(5)
    samples = []
    for i in range(60):
        messages = rng.randint(2, 20)
        calls = max(0, messages - 1 + rng.choice((-1, 0, 1)))
        prose = rng.randint(300, 1000)
        truth = prose + 4 * messages - 8 * calls
        f = _features(prose=prose, messages=messages, calls=calls, requests=1)
        samples.append(_sample(f, truth, i))
    c = fit_correction(samples, exact=False)
    assert c.weights[FEATURES.index("calls")] <= -3.9  # at its bound (scaled up, held again)
    for s in samples:
        assert abs(c.price(s.vector) - s.actual) <= 0.05 * s.actual, s


def test_the_interval_doubts_a_direction_as_much_as_its_samples_miss():
    """Two kinds of text, each alone in half the window, the same sizes: the provider's counts
    of prose wobble by 4%, of code by 0.4%. Each sample's own residual goes into the weights'
    covariance (the sandwich form), so a prose request is priced with the doubt prose's
    samples showed and a code request with code's — where one residual for all priced both
    with the same margin."""
    samples = []
    for i in range(60):
        size = 200 + 20 * (i // 2)
        noisy = i % 2 == 0
        wobble = (0.04 if noisy else 0.004) * (1 if (i // 2) % 2 else -1)
        kind = "prose" if noisy else "code"
        samples.append(
            _sample(_features(**{kind: size}, requests=1), round(size * (1 + wobble)), i)
        )
    c = fit_correction(samples, exact=False)
    prose = c.margin(_features(prose=500, requests=1))
    code = c.margin(_features(code=500, requests=1))
    assert prose > 3 * code > 0
