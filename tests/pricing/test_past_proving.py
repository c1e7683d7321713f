"""A text too long for its bound to prove anything is bounded by its UTF-8 length
(``pricing.bounds.Proof.past``, ``strategies.fit.past_proving``): never below its count, and
never where the byte-level bound would have proved the request — whatever the route's window,
its correction's weights, and what of the text the team counted before."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sampled_guess import route as sampled_route

from pricing.bounds import Proof, byte_level_bound, utf8_bytes
from pricing.calibration import FEATURES, Correction
from pricing.content import CLASSES
from pricing.messages import parse_request
from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from strategies.fit import fit, past_proving
from strategies.output import bounded_output
from strategies.policy import FitPolicy

#: Scripts whose bytes a token covers differently: words, CJK, digits, JSON, runs of spaces.
PARTS = ["the ", "token ", "window ", "日本語", "12345", '{"a": [1, 2]}', "\n", "    ", "é"]
POLICY = FitPolicy()


def route(window: int) -> Route:
    """An OpenAI route of this window, a team of its own: what it counted is its alone."""
    return replace(sampled_route("o200k_base", window), scope=uuid.uuid4().bytes)


@st.composite
def corrections(draw: st.DrawFn) -> Correction:
    """Weights as a route may learn them: text of each class dearer or cheaper than the meter
    counts it (down to nothing), the other features anywhere, some below 0."""
    text = [draw(st.floats(0.0, 3.0)) for _ in CLASSES]
    rest = [draw(st.floats(-0.5, 2.0)) for _ in FEATURES[len(CLASSES) :]]
    return Correction(weights=(*text, *rest), samples=50)


def body(seed: int, parts: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(PARTS) for _ in range(parts))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    parts=st.integers(2_000, 9_000),
    at=st.one_of(st.integers(300, 1_300), st.integers(300, 550)),  # (often near half: past)
    correction=st.one_of(st.just(Correction()), corrections()),
    seen=st.sampled_from([0.0, 0.5, 0.8, 1.0]),
)
def test_a_text_past_proving_loses_no_proof_and_never_bounds_below_its_count(
    seed, parts, at, correction, seen
):
    """``at``: per mille of the text's UTF-8 length that its budget buys at the correction's
    least price of text — from half of it (the least its bound can be) to all of it and more,
    where the bound, the count and the length each fit or overflow. ``seen``: the share of the
    text the team counted before."""
    text = "A new head.\n" + body(seed, parts)
    least = correction.least_text or 1.0
    r = route(int(utf8_bytes(text) * at / 1000 * least) + 2_048)
    if seen:  # this share of it the team counted before, behind another head: chunks it knows
        known = body(seed, parts)
        get_tokenizer("o200k_base", r.scope).count(
            "Another head.\n" + known[: int(len(known) * seen)]
        )
    request = parse_request({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]})
    past = past_proving(request, r, POLICY, correction)
    key = b"k" * 16

    def proved(limit: int | None, may_count: bool) -> int | None:
        proof = Proof(r, key, limit)
        proof.may_count = may_count
        fitted = bounded_output(request, r, POLICY, correction, proof=proof, memo=None)
        return None if fitted is None else fitted.estimate

    # without counting (the first pass, on the event loop): the same proofs exactly
    assert (proved(past, False) is None) == (proved(None, False) is None)
    for may_count in (False, True):
        found = proved(past, may_count)
        if found is not None:  # what a bound proves fits as it is, at no more than the bound
            assert fit(request, r, POLICY, correction).estimate <= found


def test_a_text_past_proving_is_bounded_by_its_length_and_counted_in_pieces_of_it():
    """What a proof reads of such a text: its UTF-8 length, not its bound; counted to its end,
    its count."""
    text = body(3, 40_000)
    r = route(8_192)
    past = utf8_bytes(text) - 1
    proof = Proof(r, b"", past)
    assert proof(text) == utf8_bytes(text) > byte_level_bound(text)
    assert proof.tighten([text], utf8_bytes(text) // 2)
    assert get_tokenizer("o200k_base").count(text) <= proof(text) < utf8_bytes(text) // 2 + 1
    proof.complete()
    assert proof(text) == get_tokenizer("o200k_base").count(text)
    other = body(4, 40_000)
    shorter = Proof(r, b"", utf8_bytes(other))  # not past it: the byte-level bound
    assert shorter(other) == byte_level_bound(other)


def test_a_text_past_proving_that_the_team_mostly_counted_is_bounded_as_tightly_as_before():
    """Its known chunks enter at their counts, and the new ones at their byte-level bound, not
    their length: together they may be under a budget the whole text's length is far over."""
    known = body(5, 40_000)
    r = route(8_192)
    get_tokenizer("o200k_base", r.scope).count("Another head.\n" + known[: len(known) * 4 // 5])
    text = "A new head.\n" + known
    bounds = []
    for past in (None, 1_000):  # never past proving; past it from 1 KB
        proof = Proof(r, b"", past)
        proof.may_count = False  # the memo's counts only
        assert proof.tighten([text], proof(text))
        bounds.append(proof(text))
    assert bounds[0] == bounds[1] < byte_level_bound(text)


def test_text_that_may_cost_nothing_is_never_past_proving():
    request = parse_request({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    free = Correction(weights=tuple(0.0 if i < len(CLASSES) else 1.0 for i in range(len(FEATURES))))
    assert past_proving(request, route(8_192), POLICY, free) is None
    past = past_proving(request, route(8_192), POLICY)  # twice the budget, at weight 1
    assert past is not None and past < 2 * 8_192
    assert past_proving(request, route(8_192), POLICY, Correction(text=0.5)) == 2 * past


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    parts=st.integers(8_000, 20_000),
    key=st.binary(min_size=16, max_size=16),
)
def test_a_sample_reread_for_the_bound_is_the_sample_the_bound_would_have_taken(seed, parts, key):
    """The same pieces, the same counts; read against their bound, the guess and its doubt are
    those of a proof that never took the text to be past proving."""
    text = body(seed, parts)
    r = route(8_192)
    loose = Proof(r, key, 1_000)
    first = loose.sampled([text])
    assert loose.rereadable
    assert first(text) <= utf8_bytes(text)
    again = loose.reread()
    tight = Proof(r, key)
    guess = tight.sampled([text])
    assert not tight.rereadable
    assert again(text) == guess(text)
    assert loose.doubt == tight.doubt
