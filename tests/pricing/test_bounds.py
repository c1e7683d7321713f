"""pricing.bounds: every cheap bound is a true upper bound on what the meter counts, for every
tokenizer kind routefit ships, for framing and tool schemas, for images by their rule, and after
any calibration correction; and a bounded fit is exactly the fit it stands for."""

from __future__ import annotations

import base64
import io
import itertools
import string
import unicodedata
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from media_files import b64, text_pdf, wav
from PIL import Image
from watched import watch

import pricing.bounds
from pricing.bounds import (
    Proof,
    bound_pressure,
    byte_level_bound,
    nfkd_bytes,
    text_bound,
    utf8_bytes,
)
from pricing.calibration import Correction
from pricing.content import profile
from pricing.framing import default_framing
from pricing.images import default_image_rule
from pricing.images.kinds import DETAILS
from pricing.messages import ImagePart, Message, TextPart, parse_request
from pricing.meter import Memo, measure, measure_message
from pricing.route import Route
from pricing.tokenizers import count_each, get_tokenizer
from strategies.fit import fit, fit_bounded
from strategies.policy import FitPolicy

SPECS = ["o200k_base", "cl100k_base", "deepseek", "anthropic-legacy", "heuristic:3.5"]
MODELS = {
    "o200k_base": "gpt-4o",
    "cl100k_base": "gpt-4",
    "deepseek": "deepseek-chat",
    "anthropic-legacy": "claude-sonnet-4-5",
    "heuristic:3.5": "mystery-1",
}
# Characters that stress each kind of bound: NFKC expansions ("½" → "1⁄2", "㍿" → four CJK
# characters, U+FDFA → 18 characters), combining marks, CJK, emoji, digits, whitespace runs,
# special-token look-alikes, and what byte-level merges love (repeated ASCII).
TRICKY = (
    "½㍿ﷺﬃ…ǅ\u0301\u0308e日本語テスト한국어🙂👩‍💻0123456789 \t\n\r  <|endoftext|><｜User｜>"
    "<EOT>aaaaaaaa====----....ĠĊ\u00a0\u2028\ufeff\U0001f600"
)
TEXTS = st.one_of(
    st.text(max_size=400),
    st.text(alphabet=st.sampled_from(TRICKY), max_size=400),
    st.lists(st.sampled_from(["the", " ", "token", "½", "㍿", "\n\n", "日本", "🙂", "12345"])).map(
        "".join
    ),
)


def route(spec: str, vision: bool = False) -> Route:
    model = MODELS[spec]
    return Route(
        alias="bounds",
        model=model,
        context_window=200_000,
        max_output_tokens=1024,
        tokenizer=spec,
        framing=default_framing(model, spec),
        image_rule=default_image_rule(model, vision),
        supports_vision=vision,
    )


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=300, deadline=None)
@given(text=TEXTS)
def test_the_text_bound_is_never_below_the_count(spec, text):
    bound = text_bound(spec)
    assert bound is not None
    assert get_tokenizer(spec).count(text) <= bound(text)


# Spaces before letters next to everything that could split them off or merge them away:
# other whitespace, digits, apostrophes, combining marks, CJK, case changes, special tokens.
SPACED = st.lists(
    st.sampled_from(
        [
            " ",
            "  ",
            "\t",
            "\n",
            " a",
            " Z",
            " q",
            "x",
            "Q",
            "'s",
            "'S",
            "1",
            "12 ",
            " 7",
            "é",
            "\u0301",
            "日本",
            " 日",
            "<|endoftext|>",
            "<｜User｜>",
            " <",
            "\u00a0",
            ".",
            "_",
            "🙂",
        ]
    ),
    max_size=120,
).map("".join)


@pytest.mark.parametrize("spec", ["o200k_base", "cl100k_base", "deepseek"])
@settings(max_examples=400, deadline=None)
@given(text=st.one_of(SPACED, TEXTS))
def test_a_space_before_a_letter_is_never_two_tokens(spec, text):
    assert get_tokenizer(spec).count(text) <= byte_level_bound(text) <= utf8_bytes(text)


def _by_definition(text: str) -> int:
    """UTF-8 length less one per space followed by an ASCII letter, byte by byte."""
    data = text.encode("utf-8", "surrogatepass")
    letters = set(string.ascii_letters.encode())
    return len(data) - sum(1 for a, b in itertools.pairwise(data) if a == 32 and b in letters)


#: Long texts with spaces few (CJK runs, base64-like runs) or many, or few in one part and many
#: in another: the bound reads a long text one of two ways, by where its spaces are.
LONG = st.lists(
    st.tuples(
        st.sampled_from(["日本語の文章", "QUJDRA==", " a", " 日", "  x", "word ", " Z", "\n", " "]),
        st.integers(1, 400),
    ),
    min_size=1,
    max_size=12,
).map(lambda runs: "".join(piece * n for piece, n in runs))


@settings(max_examples=300, deadline=None)
@given(text=LONG)
def test_a_long_text_is_bounded_by_the_definition_however_its_spaces_lie(text):
    assert byte_level_bound(text) == _by_definition(text)


def test_a_tokenizer_file_of_unknown_kind_gets_no_bound(tmp_path):
    assert text_bound(f"hf:{tmp_path / 'tokenizer.json'}") is None


@given(text=st.text(alphabet=st.sampled_from(TRICKY), max_size=60))
def test_nfkd_bytes_bound_the_nfkc_of_every_split(text):
    # The legacy Anthropic tokenizer normalises the pieces between its added tokens one by
    # one: the bound must hold however the text is cut.
    for cut in range(len(text) + 1):
        pieces = (text[:cut], text[cut:])
        normalised = sum(utf8_bytes(unicodedata.normalize("NFKC", p)) for p in pieces)
        assert normalised <= nfkd_bytes(text)


def test_the_bounds_are_not_vacuous():
    # Fails if a bound degenerates into "always over budget" (the fast path would never run).
    text = "The quick brown fox jumps over the lazy dog. " * 200
    for spec in SPECS:
        bound = text_bound(spec)
        assert bound is not None
        assert bound(text) <= 5 * get_tokenizer(spec).count(text)


ROLES = st.sampled_from(["system", "user", "assistant", "tool", "developer"])


@st.composite
def requests(draw, images: bool = False) -> dict:
    messages: list[dict] = []
    for i in range(draw(st.integers(1, 6))):
        role = draw(ROLES)
        content: object = draw(TEXTS)
        if images and role == "user" and draw(st.booleans()):
            size = (draw(st.integers(1, 3000)), draw(st.integers(1, 3000)))
            detail = draw(st.sampled_from(sorted(DETAILS)))
            # a data URL (priced from its header) or a URL of unknown size (the rule's worst)
            url = png(*size) if draw(st.booleans()) else f"https://example.com/{i}.png"
            image: dict = {"type": "image_url", "image_url": {"url": url, "detail": detail}}
            kind = draw(st.integers(0, 5))
            if kind == 0:  # a PDF: its pages' pictures and its text
                image = {"type": "file", "file": {"file_data": draw(st.sampled_from(PDFS))}}
            elif kind == 1:  # audio: its length where it goes as audio, else its note
                audio = {"data": draw(st.sampled_from(CLIPS)), "format": "wav"}
                image = {"type": "input_audio", "input_audio": audio}
            content = [{"type": "text", "text": content}, image]
        message: dict = {"role": role, "content": content}
        if role == "assistant" and draw(st.booleans()):
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": draw(st.sampled_from(["run", "ls"])), "arguments": "{}"},
                }
            ]
            message["content"] = None
        if role == "tool":
            message["tool_call_id"] = f"call_{i}"
        if role == "user" and draw(st.booleans()):
            message["name"] = draw(st.sampled_from(["ada", "bob_½"]))
        messages.append(message)
    body: dict = {"model": "m", "messages": messages}
    if draw(st.booleans()):
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": "run",
                    "description": draw(TEXTS),
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "cmd": {"type": "string", "description": draw(TEXTS)},
                            "mode": {"type": "string", "enum": ["a", "½", draw(TEXTS)]},
                        },
                    },
                },
            }
        ]
    return body


_PNG: dict[tuple[int, int], str] = {}
PDFS = [f"data:application/pdf;base64,{b64(text_pdf(n, words=60, seed=n))}" for n in (1, 2)]
CLIPS = [b64(wav(s)) for s in (0.5, 12)] + [b64(bytes(range(256)) * 8)]  # the last unreadable


def png(width: int, height: int) -> str:
    # Only the header is read: a 1x1 PNG with the header rewritten to the wanted size would
    # not decode, so draw real (tiny-palette) images, cached by size.
    found = _PNG.get((width, height))
    if found is None:
        buf = io.BytesIO()
        Image.new("P", (width, height)).save(buf, "PNG")
        found = _PNG[(width, height)] = "data:image/png;base64," + base64.b64encode(
            buf.getvalue()
        ).decode("ascii")
    return found


FACTORS = st.floats(min_value=0.0, max_value=3.0, allow_nan=False)


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=requests(), text=FACTORS, framing=FACTORS)
def test_every_part_of_the_bound_is_above_the_meter(spec, body, text, framing):
    r = route(spec)
    request = parse_request(body)
    exact = measure(request, r)
    bound = bound_pressure(request.messages, request.tools, r)
    assert bound is not None
    assert not bound.exact
    for b, e in zip(bound.messages, exact.messages, strict=True):
        assert b.text >= e.text and b.framing >= e.framing and b.images >= e.images
    assert bound.tools >= exact.tools
    # calibrated: factors are multiplicative and never negative
    c = Correction(text=text, framing=framing, images=1.0)
    assert c.apply(bound.text, bound.framing, bound.images) >= c.apply(
        exact.text, exact.framing, exact.images
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=requests(images=True), images=FACTORS)
def test_images_are_bounded_by_their_rule(body, images):
    for spec, vision in (("o200k_base", True), ("anthropic-legacy", True)):
        r = route(spec, vision)
        request = parse_request(body)
        exact = measure(request, r)
        bound = bound_pressure(request.messages, request.tools, r)
        assert bound is not None
        assert bound.images >= exact.images
        for b, e in zip(bound.messages, exact.messages, strict=True):
            assert b.text >= e.text  # a PDF's text included
            assert all(bs >= es for bs, es in zip(b.stats, e.stats, strict=True))
        for b in bound.image_details:
            worst = r.image_rule.worst_case(b.detail)
            if b.rule == "document":  # a picture per page, each at that worst case
                assert worst is not None and b.tokens % worst == 0
                continue
            if b.rule == "audio":  # priced by its length, not by the image rule
                continue
            assert worst is None or b.tokens <= worst  # the rule's own bound holds too
        c = Correction(images=images)
        assert c.apply(0, 0, bound.images) >= c.apply(0, 0, exact.images)


def windowed(spec: str, window: int) -> Route:
    return Route(
        **{**{f: getattr(route(spec), f) for f in Route.__slots__}, "context_window": window}
    )


def assert_stands_for_the_exact_fit(bounded, request, r: Route, correction: Correction) -> None:
    """A bounded fit (when there is one) is the transparent exact fit, with an estimate above it."""
    if bounded is None:
        return
    exact = fit(request, r, FitPolicy(), correction)  # never a FitError: the bound fits
    assert exact.report.transparent
    assert exact.body is bounded.body == request.body
    assert exact.estimate <= bounded.estimate <= bounded.report.budget


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=requests(), window=st.integers(1_500, 40_000), spec=st.sampled_from(SPECS))
def test_a_bounded_fit_is_the_transparent_fit_it_stands_for(body, window, spec):
    r = windowed(spec, window)
    request = parse_request(body)
    correction = Correction(text=1.2, framing=1.1)
    bounded = fit_bounded(request, r, FitPolicy(), correction)
    assert_stands_for_the_exact_fit(bounded, request, r, correction)


def test_a_bounded_fit_declines_what_only_the_exact_path_decides():
    r = route("o200k_base")
    big = parse_request({"model": "m", "messages": [{"role": "user", "content": "x " * 300_000}]})
    assert fit_bounded(big, r, FitPolicy()) is None  # over budget by the bound
    image = {"type": "image_url", "image_url": {"url": png(8, 8)}}
    text_only = parse_request({"model": "m", "messages": [{"role": "user", "content": [image]}]})
    assert fit_bounded(text_only, r, FitPolicy()) is None  # the image becomes a placeholder


# -- proofs tightened by counting texts in part ------------------------------------------------

PROSE = st.lists(
    st.sampled_from(
        ["the", " ", "token", " window", "½", "㍿", "\n\n", "日本", "🙂", "12345", ". "]
    ),
    min_size=50,
    max_size=400,
).map("".join)


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.one_of(PROSE, TEXTS), min_size=1, max_size=4), need=st.integers(1, 900))
def test_a_tightened_bound_is_never_below_the_count(spec, texts, need):
    tok = get_tokenizer(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pricing.bounds, "_PIECE", 64)  # many pieces from short texts
        mp.setattr(pricing.bounds, "_SHORTEST", 1)
        proof = Proof(route(spec))
        while True:
            for text in texts:
                assert count_each(tok, [text])[0] <= proof(text)
            if not proof.tighten(texts, need):
                break
        proof.complete()
    for text in texts:
        exact = count_each(tok, [text])[0]  # counted afresh, never from the memo
        assert proof(text) == exact == tok.count(text)  # the memo holds the whole count


def test_a_proof_counts_only_what_it_needs():
    # Prose has several bytes a token: a prompt whose bytes are over the budget by a fifth is
    # proved by counting part of it, and a bound that is not tightened proves nothing.
    text = " ".join(f"word{i % 97} and prose" for i in range(8_000))
    request = parse_request({"model": "m", "messages": [{"role": "user", "content": text}]})
    spec = "o200k_base"
    window = int(utf8_bytes(text) / 1.2)
    r = windowed(spec, window)
    assert fit_bounded(request, r, FitPolicy()) is None
    proof = Proof(r)
    bounded = fit_bounded(request, r, FitPolicy(), proof=proof)
    assert bounded is not None
    exact = fit(request, r, FitPolicy())
    assert exact.estimate <= bounded.estimate <= bounded.report.budget
    # less than half the text was counted: more than half of what counting could save is left
    count = get_tokenizer(spec).count(text)
    assert proof(text) - count > (utf8_bytes(text) - count) / 2


def test_a_proof_that_may_not_count_takes_only_what_the_memo_holds():
    """The event loop's first pass (``Proof.may_count`` false): a text no one counted keeps its
    byte bound and nothing is counted; once a proof counted it, the next one that may not count
    takes its chunks' counts from the team's memo and proves the same prompt with a new head."""
    body = " ".join(f"{i * 7919 % 100_003} words of prose {i}" for i in range(3_000))
    r = replace(windowed("o200k_base", 200_000), scope=b"team-may-not-count")
    request = lambda head: parse_request(  # noqa: E731
        {"model": "m", "messages": [{"role": "user", "content": head + body}]}
    )
    first = request("first: ")
    shy = Proof(r)
    shy.may_count = False
    text = first.messages[0].parts[0].text
    assert not shy.tighten([text], 1)
    assert shy(text) == byte_level_bound(text)  # nothing counted, nothing tightened
    counted = Proof(r)
    assert counted.tighten([text], shy(text) - count_each(get_tokenizer("o200k_base"), [text])[0])
    counted.complete()  # every chunk memoised, as a request's exact count leaves them
    second = request("second: ")
    shy = Proof(r)
    shy.may_count = False
    text = second.messages[0].parts[0].text
    assert shy.tighten([text], 1)
    exact = count_each(get_tokenizer("o200k_base"), [text])[0]
    assert exact <= shy(text) < (exact + byte_level_bound(text)) / 2  # the memo's counts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=requests(),
    window=st.integers(300, 40_000),
    spec=st.sampled_from(SPECS),
    weight=st.floats(0.5, 2.0),
)
def test_a_tightened_fit_is_the_transparent_fit_it_stands_for(body, window, spec, weight):
    r = windowed(spec, window)
    request = parse_request(body)
    correction = Correction(text=weight, framing=1.1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pricing.bounds, "_PIECE", 64)
        mp.setattr(pricing.bounds, "_SHORTEST", 1)
        bounded = fit_bounded(request, r, FitPolicy(), correction, proof=Proof(r))
    assert_stands_for_the_exact_fit(bounded, request, r, correction)


def test_a_proof_near_the_window_bounds_the_pieces_it_leaves_not_those_it_counts():
    """A prompt near the window is counted nearly whole: the pieces it counts are bounded as the
    text's bound less the few it leaves (bounds add up at the cuts), not one by one."""
    text = " ".join(f"word{i % 97} and prose" for i in range(40_000))
    request = parse_request({"model": "m", "messages": [{"role": "user", "content": text}]})
    (count,) = count_each(get_tokenizer("o200k_base"), [text])  # not memoised
    # a team of its own: no chunk of this text counted before (another test's text shares some)
    r = replace(windowed("o200k_base", int(count * 1.15)), scope=b"near the window")
    proof = Proof(r)
    bounded: list[int] = []
    cheap = proof.bound
    assert cheap is not None
    proof.bound = lambda t: bounded.append(len(t)) or cheap(t)
    assert fit_bounded(request, r, FitPolicy(), proof=proof) is not None
    pieces = len(text) // pricing.bounds._PIECE
    assert sum(bounded) < len(text) * 1.25  # the text once, and a few of its pieces again
    assert len(bounded) < pieces / 4


def test_a_text_counted_before_is_its_own_bound():
    r = route("o200k_base")
    text = " ".join(f"again{i}" for i in range(3_000))
    count = get_tokenizer("o200k_base").count(text)  # memoised, as a retried prompt's is
    proof = Proof(r)
    assert proof(text) == count < utf8_bytes(text)
    assert not proof.tighten([text], 1)  # nothing left to count
    assert proof(text) == count


# -- a bound under a fitted correction: every feature weighed ----------------------------------


@st.composite
def fitted_corrections(draw: st.DrawFn) -> Correction:
    """A correction as ``fit_correction`` may leave it on a route it learnt: a weight per content
    class, framing, per message, per tool call, per request, per character feature and for
    images priced by a default, each within the ranges the fit clamps it to — and on a route
    whose meter is not exact, the interval a request's estimate adds (any rows: a norm)."""
    from pricing.calibration import FEATURES

    ranges = {
        "framing": (0.5, 3.0),
        "messages": (-4.0, 50.0),
        "calls": (-4.0, 50.0),
        "images": (0.5, 3.0),
        "defaulted": (0.05, 50.0),
        "requests": (-64.0, 1024.0),
        "unsized": (1.0, 50.0),
    }
    weights = []
    for name in FEATURES:
        low, high = ranges.get(name, (-2.0, 4.0) if name not in CLASS_NAMES else (0.5, 3.0))
        weights.append(draw(st.floats(low, high, allow_nan=False)))
    row = st.lists(st.floats(-2.0, 2.0), min_size=len(FEATURES), max_size=len(FEATURES))
    interval = tuple(tuple(r) for r in draw(st.lists(row, max_size=3)))
    return Correction(samples=30, weights=tuple(weights), interval=interval)


CLASS_NAMES = ("prose", "code", "structured", "script", "numeric")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=requests(images=True),
    window=st.integers(300, 40_000),
    spec=st.sampled_from(SPECS),
    correction=fitted_corrections(),
    counted=st.booleans(),
)
def test_a_bound_under_a_fitted_correction_is_never_below_the_exact_estimate(
    body, window, spec, correction, counted
):
    r = replace(route(spec, vision=True), context_window=window)
    request = parse_request(body)
    if counted:  # texts counted before (a retried prompt): the proof takes their counts
        measure(request, r)
    bounded = fit_bounded(request, r, FitPolicy(), correction, proof=Proof(r))
    assert_stands_for_the_exact_fit(bounded, request, r, correction)


def test_a_pdfs_text_features_are_carried_once_whatever_parts_follow() -> None:
    """A PDF's text features go into its message's bound as counted, once: an image after it
    adds none of them (the bound carries its texts' per-character counts as the meter has them,
    plus what its PDFs carry)."""
    r = route("o200k_base", vision=True)
    message = Message("user", (TextPart("ab1\t"), ImagePart(PDFS[0]), ImagePart(png(64, 64))))
    exact = measure_message(message, r)[0]
    bound = bound_pressure([message], [], r)
    assert bound is not None
    (pdf,) = [d for d in bound.image_details if d.rule == "document"]
    assert bound.messages[0].stats == tuple(
        c + s for c, s in zip(profile("ab1\t"), pdf.text_stats, strict=True)
    )
    assert bound.messages[0].stats == exact.stats


@pytest.mark.parametrize("spec", ["anthropic-legacy", "o200k_base", "heuristic:3.5"])
def test_a_bound_prices_no_character_its_texts_do_not_have(spec) -> None:
    """A learnt route whose samples never had a tab keeps its prior's weight for one, and a wide
    interval about it; a bound that took every character as the dearest kind (each a tab) put
    an 8k-token prompt of prose at 227k tokens on a Claude route, so no bound ever proved one
    there. The bound carries the counts the meter has (none of tabs here), and proves a prose
    prompt at a third of the window or less, priced at or above its exact estimate."""
    from pricing.calibration import FEATURES

    weights = [1.0 if name in CLASS_NAMES or name == "framing" else 0.0 for name in FEATURES]
    weights[FEATURES.index("tabs")] = 4.0  # the dearest kind of character, never seen
    tab_doubt = tuple(2.0 if name == "tabs" else 0.01 for name in FEATURES)
    correction = Correction(samples=30, weights=tuple(weights), interval=(tab_doubt,))
    prose = " ".join(f"a few words of plain prose about item {i}." for i in range(4_000))
    request = parse_request({"model": "m", "messages": [{"role": "user", "content": prose}]})
    r = replace(route(spec), context_window=len(prose))  # 3.5 to 4.5 characters a token
    bounded = fit_bounded(request, r, FitPolicy(), correction, proof=Proof(r))
    assert bounded is not None
    assert_stands_for_the_exact_fit(bounded, request, r, correction)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=requests(images=True), spec=st.sampled_from(SPECS))
def test_the_meters_own_weights_price_a_bound_alike_without_its_classes_and_counts(body, spec):
    """The meter's own weights price every class alike and no per-character count: a bound
    made without them (``described=False``, a few byte scans of each text saved, and a loop
    over a sample of each text outside ASCII) is priced as the described one."""
    from strategies.fit import _bound_estimate

    r = route(spec, vision=True)
    request = parse_request(body)
    plain = bound_pressure(request.messages, request.tools, r, described=False)
    described = bound_pressure(request.messages, request.tools, r)
    if plain is None or described is None:
        assert plain is described is None
        return
    assert _bound_estimate(plain, Correction()) == _bound_estimate(described, Correction())


def test_a_proof_counts_none_of_what_the_message_memo_priced():
    # An agent's session over its window, its earlier turns priced the turn before: the proof
    # that fails for it counts (in part) the newest tool output alone, never the old ones,
    # whose messages the memo prices exactly — counting them changed no price, and a session
    # counted its old outputs every turn until the proof gave up.
    def output(i: int) -> str:
        return " ".join(f'{{"row": {i}, "word{j % 89}": "{j * 7 % 1000}"}}' for j in range(2_500))

    def session(n: int) -> list[dict]:
        msgs: list[dict] = [{"role": "user", "content": "go"}]
        for i in range(n):
            call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            msgs += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": output(i)},
            ]
        return msgs

    r = replace(windowed("o200k_base", 40_000), scope=b"team-memo-proof")
    fit(parse_request({"model": "m", "messages": session(5)}), r, FitPolicy())
    request = parse_request({"model": "m", "messages": session(6)})
    new = output(5)
    proof, memo = Proof(r), Memo()
    watched = watch(proof)
    assert fit_bounded(request, r, FitPolicy(), proof=proof, memo=memo) is None
    assert watched.pieces and all(piece in new for piece in watched.pieces)
