"""What the mutation run of pricing/ let through in calibration, content classes, tokenizer
specs and the meter (docs/mutation.md): the outlier filters' edges, the regime's 3% band,
two-message checkpoints, anchors decoded from JSON, the middle of a long text's sample, a
heuristic spec with two colons, the error listing the known tokenizers, the number of pieces a
text is split into for counting, and a memoised message counted once."""

from __future__ import annotations

import pytest
from feature_samples import INDEX as _I
from feature_samples import features as _features
from feature_samples import liars_window
from feature_samples import sample as _sample
from gpt4o_route import gpt4o_route

from pricing.calibration import (
    Anchor,
    CalibrationPolicy,
    Correction,
    anchored_estimate,
    checkpoint_anchors,
    fit_correction,
    pressure_features,
)
from pricing.content import NUMERIC, classify
from pricing.messages import parse_request
from pricing.meter import Memo, MessagePressure, Pressure, measure_messages
from pricing.tokenizers import (
    NAMED_TOKENIZERS,
    TokenizerError,
    count_cache_lookups,
    parse_tokenizer_spec,
    split_for_count,
)

# -- calibration -------------------------------------------------------------------------------


def test_an_honest_one_token_prompt_is_fitted_on_not_left_out() -> None:
    """A sample is left out only when it is more than ``outlier_band`` from what the others say
    it costs; a one-token prompt the provider counted as the meter did is no outlier."""
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    samples = [_sample(_features(prose=n), n, i) for i, n in enumerate(sizes)]
    learnt = fit_correction(samples, exact=True)
    assert learnt.samples == len(samples)
    assert all(learnt.price(s.vector) == s.actual for s in samples)


def test_a_class_the_meter_undercounts_in_a_minority_of_samples_is_learnt_not_dropped() -> None:
    """No sample lies: code costs twice the meter's count, prose what it counts. The first fit
    takes every sample within a wide band of the median actual/raw ratio, so the code samples
    (a fifth of the window) teach the code weight rather than being dropped as outliers."""
    samples = []
    for i in range(40):
        n = 200 + 37 * i
        if i % 5 == 4:
            samples.append(_sample(_features(code=n), 2 * n, i))
        else:
            samples.append(_sample(_features(prose=n), n, i))
    learnt = fit_correction(samples, exact=True)
    assert learnt.samples == len(samples)
    for s in samples:
        assert s.actual <= learnt.price(s.vector) <= 1.5 * s.actual


def test_a_rise_of_exactly_three_percent_is_not_a_new_model() -> None:
    """docs/calibration.md: the older samples are scaled up only when the newest ``min_samples``
    all sit *more than* 3% above their median ratio; at exactly 3% they keep their counts, and
    a median fit (quantile 0.5) prices the older prompts at their own count."""
    policy = CalibrationPolicy(quantile=0.5)
    older = [_sample(_features(prose=1000), 1000, i) for i in range(32)]
    newer = [_sample(_features(prose=1000), 1030, 32 + i) for i in range(policy.min_samples)]
    assert all(s.actual / s.raw == 1.03 for s in newer)  # exactly the band's edge
    learnt = fit_correction(older + newer, policy, exact=True)
    assert learnt.price(older[0].vector) < 1030


def test_a_few_lying_answers_cannot_raise_the_defaulted_image_weight_beyond_the_band() -> None:
    """``_leftover_weight``: image tokens priced by a default cost what the samples with them
    leave over; a few lying answers (at most ``outlier_share`` of those samples) cannot raise
    that beyond ``regime_band`` over the median (the honest 2 tokens per defaulted token)."""
    policy = CalibrationPolicy()
    window = liars_window(honest=2, lying=12)
    learnt = fit_correction(window, policy, exact=True)
    assert learnt.samples == len(window)  # the liars got past the outlier filter
    assert 2.0 <= learnt.vector[_I["defaulted"]] <= 2.0 * policy.regime_band


def test_a_two_message_prompt_gets_a_checkpoint_at_its_first_message() -> None:
    """Checkpoints are the message boundaries where the corrected price crosses a multiple of
    the step: a first message of 600 tokens crosses 512, so the head it makes is anchored."""
    msgs = tuple(MessagePressure(i, "user", 600, 4, 0, (600, 0, 0, 0, 0)) for i in range(2))
    p = Pressure("r", msgs, tools=0, priming=3, image_details=(), exact=True)
    actual = 1300
    anchors = checkpoint_anchors(p, actual, Correction())
    assert [n for n, _ in anchors] == [1]
    anchor = anchors[0][1]
    assert anchor.features == pressure_features(p, 1)
    head, full = 3 + 604, 3 + 2 * 604
    assert anchor.actual == actual * head // full


def test_an_anchor_decoded_from_json_has_its_features_as_a_tuple() -> None:
    """The store decodes an anchor's features as a JSON list; the anchor keeps them as the
    tuple ``anchored_estimate`` compares, and prices the prompt that extends it by feature."""
    msgs = tuple(MessagePressure(i, "user", 100, 4, 0, (100, 0, 0, 0, 0)) for i in range(3))
    p = Pressure("r", msgs, tools=0, priming=3, image_details=(), exact=True)
    head = pressure_features(p, 2)
    anchor = Anchor(200, 11, 0, 250, list(head))  # type: ignore[arg-type]
    assert anchor.features == head and isinstance(anchor.features, tuple)
    assert anchored_estimate(anchor, p, Correction()) == 250 + 104


# -- content classes ---------------------------------------------------------------------------


def test_the_middle_of_a_long_text_is_in_its_sample() -> None:
    """Classification samples head, middle and tail: a long text whose middle third is a table
    of numbers has that table in its sample, however far it is from the text's first third."""
    text = "a" * 10_000 + "7" * 2048 + "a" * 10_000
    assert classify(text) == NUMERIC


# -- tokenizer specs and counting in pieces ----------------------------------------------------


def test_a_heuristic_spec_with_two_numbers_is_refused() -> None:
    """Everything after ``heuristic:`` is the number: ``heuristic:4:2`` is not one."""
    with pytest.raises(TokenizerError, match="needs a number"):
        parse_tokenizer_spec("heuristic:4:2")
    assert parse_tokenizer_spec("heuristic:4") == "heuristic:4"


def test_an_unknown_tokenizer_error_lists_the_known_ones() -> None:
    with pytest.raises(TokenizerError) as raised:
        parse_tokenizer_spec("gpt-9-tokenizer")
    message = str(raised.value)
    for name in (*NAMED_TOKENIZERS, "hf:PATH", "heuristic:CHARS_PER_TOKEN"):
        assert name in message


@pytest.mark.parametrize("parts", [2, 3, 4, 7])
def test_a_text_is_split_into_at_most_parts_pieces_of_about_equal_length(parts: int) -> None:
    text = "word " * 1000
    pieces = split_for_count(text, parts)
    assert "".join(pieces) == text
    assert len(pieces) == parts
    step = len(text) // parts
    assert all(abs(len(p) - step) <= 10 for p in pieces)


# -- the meter's memo --------------------------------------------------------------------------


def test_a_memoised_message_is_not_counted_again() -> None:
    """Memo: each message is priced once however many arrangements are measured; measuring the
    same messages again through it counts no text (the count cache sees no lookup)."""
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "a question long enough to be counted apart " * 4},
            {"role": "assistant", "content": "an answer long enough to be counted apart " * 4},
        ],
    }
    messages = parse_request(body).messages
    r, memo = gpt4o_route(alias="memo-once"), Memo()
    first = measure_messages(messages, (), r, memo=memo)
    before = count_cache_lookups()
    again = measure_messages(messages, (), r, memo=memo)
    assert count_cache_lookups() == before
    assert again == first
