"""A sample's guess of a long text (``Proof.sampled``): what a prompt near the window that no
cheap bound proves is let go on while it is counted (proxy.estimate, ``Estimate.sampled``).

A guess promises less than a bound, so what is tested is what it does promise: it is the same
for the same text, it never disturbs the exact count that follows it, it is the count when
the sample would be the whole text (counted once, and kept), and a request it lets go is one
the bounded fit reads through it alone."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from watched import watch

import pricing.bounds
from pricing.bounds import Proof, Sampled
from pricing.framing import default_framing
from pricing.images import default_image_rule
from pricing.messages import parse_request
from pricing.route import Route
from pricing.tokenizers import count_each, get_tokenizer, memoised
from strategies.output import bounded_output, sampled_output
from strategies.policy import FitPolicy

SPECS = ["o200k_base", "cl100k_base", "deepseek", "anthropic-legacy"]
MODELS = {
    "o200k_base": "gpt-4o",
    "cl100k_base": "gpt-4",
    "deepseek": "deepseek-chat",
    "anthropic-legacy": "claude-sonnet-4-5",
}
PARTS = ["the", " ", "token", "½", "日本", "🙂", "12345", "\n\n", "json", '{"a": 1}', "  ", "é"]


def route(spec: str, window: int = 200_000) -> Route:
    model = MODELS[spec]
    return Route(
        alias="sampled",
        model=model,
        context_window=window,
        max_output_tokens=1024,
        tokenizer=spec,
        framing=default_framing(model, spec),
        image_rule=default_image_rule(model, False),
    )


def text_of(seed: int, parts: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(PARTS) for _ in range(parts))


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), parts=st.integers(300, 6_000))
def test_a_guess_is_repeatable_and_leaves_the_exact_count_whole(spec, seed, parts):
    text = text_of(seed, parts)
    r = route(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pricing.bounds, "_PIECE", 256)  # many pieces from texts hypothesis can afford
        first, again = Proof(r), Proof(r)
        guess = first.sampled([text])
        assert isinstance(guess, Sampled)
        assert guess(text) == again.sampled([text])(text)  # same input, same guess
        assert guess("another text") == first("another text")  # the others at their bounds
        first.complete()
    tok = get_tokenizer(spec)
    exact = count_each(tok, [text])[0]
    assert first(text) == exact == tok.count(text)  # the sample took nothing from the count
    assert memoised(tok, text) in (None, exact)


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), parts=st.integers(300, 1_500))
def test_a_sample_of_every_piece_is_the_count(spec, seed, parts):
    # a sample that would read every piece counts the text as a proof does (and keeps it): no
    # ratio and no slack, the count itself (it was the count a little above, by the slack)
    text = text_of(seed, parts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pricing.bounds, "_SAMPLES", 10**6)  # every piece is in the sample
        guess = Proof(route(spec)).sampled([text])(text)
    count = get_tokenizer(spec).count(text)
    assert count <= guess <= max(count, 1.05 * count + 1)
    assert guess == count


def test_a_guess_lets_go_only_what_it_says_fits_and_proves_nothing():
    # Prose whose bytes are far over the budget but whose tokens are not: the bound alone proves
    # nothing, the sample's guess lets it go; the same prose twice as long is over the window,
    # and the guess says so.
    words = ["window", "provider", "usage", "prompt", "cache", "budget", "token", "turn"]
    rng = random.Random(7)
    text = " ".join(rng.choice(words) for _ in range(30_000))
    count = get_tokenizer("o200k_base").count(text)
    r = route("o200k_base", window=count + 4_000)
    policy = FitPolicy()
    fits = parse_request({"model": "m", "messages": [{"role": "user", "content": text}]})
    too_long = parse_request(
        {"model": "m", "messages": [{"role": "user", "content": text + " " + text}]}
    )
    assert bounded_output(fits, r, policy) is None  # no cheap bound proves it
    guessed = sampled_output(fits, r, policy, proof=Proof(r))
    assert guessed is not None and guessed.report.transparent
    assert guessed.estimate <= guessed.report.budget
    assert sampled_output(too_long, r, policy, proof=Proof(r)) is None
    assert sampled_output(fits, r, policy) is None  # no proof, nothing to sample with


@pytest.mark.parametrize("spec", SPECS)
def test_a_text_with_nowhere_to_cut_is_guessed_from_slices(spec):
    # CJK has no spaces: no cut where counts add up, so a proof has one piece of it, and a
    # sample of that piece would be a count of the whole. A guess samples slices cut anywhere.
    rng = random.Random(11)
    text = "".join(
        rng.choice("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要")
        for _ in range(60_000)
    )
    r = route(spec)
    bound = Proof(r)(text)
    proof = Proof(r)
    watched = watch(proof)
    guess = proof.sampled([text])(text)
    counted = [len(piece) for piece in watched.pieces]
    assert counted and max(counted) < len(text) // 4  # slices, not the whole text
    # each about a proof's piece of UTF-8 (3 bytes a character here), not of characters: a
    # sample counts what a sample of prose of as many bytes would
    assert max(counted) * 3 <= 2 * pricing.bounds._PIECE
    proof.tok = watched.real
    proof.complete()
    count = get_tokenizer(spec).count(text)
    assert guess < bound  # priced from a sample, not at its bound
    assert proof(text) == count  # and the exact count that follows is whole


@pytest.mark.parametrize("spec", SPECS)
def test_a_text_a_sample_would_read_whole_is_counted_once_and_kept(spec):
    # Six pieces or fewer (an agent's newest 20 KB tool output): a sample would read every one,
    # so it is counted as a proof counts, exactly, and kept — the proof and the exact fit after
    # it count nothing more (sampled, it was counted three times).
    text = text_of(5, 4_000)
    r = route(spec)
    proof = Proof(r)
    watched = watch(proof)
    guess = proof.sampled([text])(text)
    read = sum(map(len, watched.pieces))
    count = count_each(watched.real, [text])[0]
    assert guess == count == proof(text)  # the guess is the count
    assert not proof.tighten([text], 1)  # nothing left to count
    proof.complete()
    assert sum(map(len, watched.pieces)) == read <= len(text) + 1  # read once, and no more


def test_where_a_sample_reads_is_the_keys_one_piece_in_each_share():
    # A text of prose with one dense stretch: with the pieces at each share's middle, a client
    # could put dense text only where a sample does not read. Where each piece lies in its
    # share is drawn from the proof's key: the same key reads the same pieces, others others.
    words = "the route counts tokens window provider answer session history plan file".split()
    rng = random.Random(5)
    text = " ".join(rng.choice(words) for _ in range(60_000))
    r = route("o200k_base")
    reads: dict[bytes, list[tuple[str, ...]]] = {}
    for key in (b"", b"one key", b"another key", b"a third key"):
        for _ in range(2):
            proof = Proof(r, sample_key=key)
            watched = watch(proof)
            proof.sampled([text])
            reads.setdefault(key, []).append(tuple(watched.pieces))
    for key, (first, again) in reads.items():
        assert first == again, key  # the same key, the same pieces
    assert len({first for first, _ in reads.values()}) == len(reads)  # each key its own
    counted = reads[b""][0]
    offsets = [text.index(piece) for piece in counted]  # one piece a share, in order
    assert offsets == sorted(set(offsets)) and len(counted) >= pricing.bounds._SAMPLES


def halves(first: str, second: str, chars: int) -> str:
    """A text of two kinds, one after the other, ``chars`` characters of each."""
    return first[:chars] + " " + second[:chars]


_RNG = random.Random(3)
#: Words and numbers: four or five bytes a token, each 4 KB of it a little unlike the next.
PROSE = " ".join(
    _RNG.choice(["window", "cache", "the", "token"]) + str(_RNG.randrange(10 ** _RNG.randrange(4)))
    for _ in range(50_000)
)
#: Characters no merge joins far: about two of them a token, where prose has four or five.
DENSE = "".join(
    random.Random(4).choice("abcdefghijkmnopqrstuvwxyzABCDEFGH0123456789+/") for _ in range(240_000)
)


@pytest.mark.parametrize("key", [b"", b"one key", b"another key"])
def test_a_sample_of_one_kind_doubts_little_and_of_two_kinds_much(key):
    # Pieces of one kind of text differ by a few per cent: the guess's doubt is small. Half
    # prose and half dense text, each over several shares: pieces of both are read whatever
    # the key, they differ by half, and the doubt covers the count. (A scope of its own: no
    # count of these texts memoised by another case; a counted text is never sampled.)
    r = replace(route("o200k_base"), scope=b"doubt " + key)
    tok = get_tokenizer("o200k_base", b"the count")
    one = PROSE[:180_000]
    for text in (one, halves(PROSE, DENSE, 80_000), halves(DENSE, PROSE, 80_000)):
        proof = Proof(r, sample_key=key)
        guess = proof.sampled([text])(text)
        if text is one:
            assert 0 < proof.doubt <= 0.05
        else:
            assert proof.doubt >= 0.2
        assert guess * (1 + proof.doubt) >= tok.count(text)


def test_a_sample_that_cannot_doubt_doubts_all():
    # one piece says nothing of how pieces differ: the guess is let go on nothing but itself
    # only when no sample is read (the text counted whole: no doubt)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pricing.bounds, "_SAMPLES", 1)
        mp.setattr(pricing.bounds, "_SAMPLE_EVERY", 10**9)
        proof = Proof(replace(route("o200k_base"), scope=b"one piece"))
        proof.sampled([PROSE[:100_000]])
        assert proof.doubt >= 1.0
    proof = Proof(replace(route("o200k_base"), scope=b"one piece"))
    proof.sampled([PROSE[:10_000]])  # six pieces or fewer: counted whole
    assert proof.doubt == 0.0


@settings(max_examples=30, deadline=None)
@given(
    key=st.binary(min_size=16, max_size=16),
    share=st.floats(0.25, 0.75),
    size=st.integers(100_000, 300_000),
    start=st.integers(0, 1_000),
    prose_first=st.booleans(),
)
def test_the_doubt_of_a_text_of_two_kinds_covers_its_count(key, share, size, start, prose_first):
    # Each kind over at least a quarter of the text: whatever the key, the sample reads pieces
    # of both, and the guess raised by the doubt they show is never under the count (what lets
    # a guess go unheld: docs/architecture.md) — nor is the wider look's, at its own t
    first, second = (PROSE, DENSE) if prose_first else (DENSE, PROSE)
    cut = int(size * share)
    text = first[start : start + cut] + " " + second[start : start + size - cut]
    proof = Proof(replace(route("o200k_base"), scope=b"two kinds " + key))
    count = get_tokenizer("o200k_base", b"the count").count(text)
    guess = proof.sampled([text])(text)
    assert guess * (1 + proof.doubt) >= count
    wider = proof.widened()(text)
    assert wider * (1 + proof.doubt) >= count


@settings(max_examples=30, deadline=None)
@given(
    key=st.binary(min_size=16, max_size=16),
    odd=st.integers(2_000, 6_000),
    size=st.integers(150_000, 300_000),
    dense_first=st.booleans(),
)
def test_a_wider_look_doubts_one_odd_stretch_by_what_it_weighs(key, odd, size, dense_first):
    """A text of one kind with an odd stretch at one end (an agent's question after a
    document): when the first look reads a piece of the stretch, its few pieces doubt the
    whole text by a tenth or more; the wider look reads more of both and doubts it less —
    never under the count."""
    main, other = (DENSE, PROSE) if dense_first else (PROSE, DENSE)
    text = main[:size] + " " + other[:odd]
    proof = Proof(replace(route("o200k_base"), scope=b"odd " + key), sample_key=key)
    count = get_tokenizer("o200k_base", b"the count").count(text)
    proof.sampled([text])
    first = proof.doubt
    wider = proof.widened()(text)
    assert wider * (1 + proof.doubt) >= count
    event(f"the first look doubted it by a tenth or more: {first > 0.1}")
    if first > 0.1:
        assert proof.doubt < first / 2
