"""What the twelfth fresh sample of pricing/'s mutants (120 mutants, seed 20261233,
docs/mutation.md) let through: a byte-level file whose added token is no string taken for
tiktoken, a route whose code costs 2.25× its prose never learning it, a neutral correction's
defaults adding an image token or taking images away, a message of several text parts that
fits once joined reported as capped with no kind, a text the tokenizer counts as nothing cut
against a negative budget, OpenAI's tools preamble subtracted, DeepSeek V4 solving a grid for
an image exactly at its budget, an empty JSON container cut as a string, and a long text
counted whole on two counting threads. The survivors judged equivalent are named in their
module's section."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from feature_samples import INDEX as _I
from feature_samples import features as _features
from feature_samples import sample as _sample
from gpt4o_route import gpt4o_route
from test_mutants_sample_j import _byte_level_file
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from pricing import byte_level, chunks, tokenizers
from pricing.calibration import CalibrationPolicy, Correction, Sample, fit_correction
from pricing.capped import CapTooSmall, cap_message, cut_text
from pricing.framing import default_framing, tools_tokens
from pricing.images.spec import parse_image_rule
from pricing.messages import Message, TextPart
from pricing.meter import measure_message
from pricing.tokenizers import _HuggingFace, get_tokenizer

# -- pricing/byte_level.py (_plain_added mutmut_4) ---------------------------------------------


@pytest.mark.parametrize("added", [{"id": 300, "content": 7.5}, "<EOT>", ["<EOT>"]])
def test_an_added_token_that_is_no_string_leaves_the_file_with_hugging_face(
    tmp_path: Path, added: object
) -> None:
    """``byte_level.load``: None unless the file is exactly a byte-level BPE whose added tokens
    Hugging Face finds in the raw text. An entry that is not a token with a string ``content``
    is no such token: the file stays with Hugging Face, whatever tiktoken could make of it."""
    path = _byte_level_file(tmp_path / "tokenizer.json", "a b", "b")
    assert byte_level.load(path, "premise") is not None  # the premise: without it, tiktoken's
    spec = json.loads(path.read_text(encoding="utf-8"))
    spec["added_tokens"] = [added]
    path.write_text(json.dumps(spec), encoding="utf-8")
    assert byte_level.load(path, "odd added token") is None


# -- pricing/calibration.py (_plausible mutmut_16, Correction.apply mutmut_2, mutmut_3;
#    _base mutmut_21, pressure_features mutmut_8: equivalent) ----------------------------------
# _base mutmut_21: every recency weight times 2^(1/half_life). The ridge term is the ridge
# times the weighted sums, so the whole normal system scales by that factor and its solution
# does not move; the weighted quantile compares cumulative weight with q × the total, which
# scales alike.
# pressure_features mutmut_8: ``strict=None``: ``total`` and ``message_features`` are both
# ``len(FEATURES)`` long (classes, six counts, ``stats or _NO_STATS``, unsized), always.


def test_a_class_that_costs_exactly_the_band_s_ratio_is_fitted() -> None:
    """docs/calibration.md § Untrusted samples: the first fit takes "the samples within 2.25×
    of the median actual/raw ratio". A route whose tokenizer counts code at 2.25× the meter
    (prose at 1×) has its code prompts at exactly 2.25× the median: within the band, so the
    fit sees them, prices them exactly, keeps them as inliers and learns code's weight —
    instead of leaving code unseen and pricing it as prose."""
    samples: list[Sample] = []
    for i in range(16):
        if i % 4 == 3:
            code = 400 + 40 * i
            samples.append(_sample(_features(code=code), code * 9 // 4, i))
        else:
            prose = 300 + 50 * i
            samples.append(_sample(_features(prose=prose), prose, i))
    assert {s.actual / s.raw for s in samples} == {1.0, 2.25}  # the premise: exactly the band
    assert CalibrationPolicy().regime_band ** 2 == 2.25
    correction = fit_correction(samples, CalibrationPolicy(), exact=True)
    assert correction.samples == len(samples)
    assert correction.vector[_I["prose"]] == pytest.approx(1.0, abs=0.011)
    assert correction.vector[_I["code"]] == pytest.approx(2.25, abs=0.011)


def test_a_neutral_correction_prices_plain_parts_as_the_meter_counted_them() -> None:
    """``_NEUTRAL``: "every token priced as the meter counted it". Parts not given are none
    (a prompt without images adds no image token), and image tokens add like the others."""
    neutral = Correction()
    assert neutral.neutral
    assert neutral.apply(100) == 100
    assert neutral.apply(100, 7) == 107
    assert neutral.apply(100, 7, 30) == 137
    assert neutral.apply(0, 0, 30) == 30


# -- pricing/capped.py (cap_message mutmut_51, cut_text mutmut_4; _cut_all mutmut_17:
#    equivalent) -----------------------------------------------------------------------------
# _cut_all mutmut_17: zip without ``strict``: its callers pass ``costs`` built one per text
# and ``allot`` from ``_allot``, one per cost, so the three are always the same length.


def test_parts_that_fit_once_joined_are_sent_whole_as_text() -> None:
    """A message sent as one string is priced as one text; its parts priced apart cost more
    (``h`` ``e`` ``l`` ``l`` ``o`` against ``hello``). When the joined text fits the cap it is
    sent whole — nothing removed — and docs/capping.md's ``kind`` is one of ``"text"``,
    ``"json"``, ``"parts"``: here ``"text"``, a plain text sent as one string."""
    route = gpt4o_route()
    parts = tuple(TextPart(c) for c in "hello")
    apart = Message("tool", parts, tool_call_id="c1")
    joined = Message("tool", (TextPart("hello"),), tool_call_id="c1")
    priced, _ = measure_message(joined, route)
    cap = priced.text + priced.framing
    over, _ = measure_message(apart, route)
    assert over.text + over.framing > cap  # the premise: priced apart, it is over the cap
    capped = cap_message(apart, cap, route)
    assert capped is not None
    assert (capped.message.text, capped.removed_tokens, capped.kind) == ("hello", 0, "text")
    assert capped.tokens == cap


def _whitespace_words() -> HFTokenizer:
    """A Hugging Face tokenizer of whole words split at whitespace (the whitespace itself is no
    token): one token per word."""
    tok = HFTokenizer(models.WordLevel({"[UNK]": 0, "word": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


@pytest.mark.parametrize("budget", [-1, -40])
def test_a_text_of_no_tokens_over_a_negative_budget_is_too_small_a_cap(budget: int) -> None:
    """``cut_text`` raises CapTooSmall "when not even a bare marker fits". A text an
    operator's tokenizer counts as no tokens at all (blanks, for a tokenizer that drops
    whitespace) has nothing to cut, and a negative budget cannot hold it: the smallest form
    is the text itself, 0 tokens."""
    tok = _HuggingFace("whitespace words", _whitespace_words())
    assert tok.count("   \n\t ") == 0  # the premise
    with pytest.raises(CapTooSmall) as refused:
        cut_text("   \n\t ", budget, tok)
    assert (refused.value.cap, refused.value.minimum) == (budget, 0)


# -- pricing/framing.py (tools_tokens mutmut_6) ------------------------------------------------

_WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "the city"}},
    },
}


@pytest.mark.parametrize("preamble", [1, 40, 350])
def test_an_openai_route_adds_its_tools_preamble_once(preamble: int) -> None:
    """docs/configuration.md: ``tools_preamble`` is "a system prompt the provider adds when
    tools are sent". On an OpenAI-family route too, it adds those tokens to the tools' price,
    once per request, however many tools are sent."""
    base = default_framing("gpt-4o", "o200k_base")
    assert base.family == "openai" and base.tools_preamble == 0
    framing = replace(base, tools_preamble=preamble)
    tok = get_tokenizer("o200k_base")
    for tools in ((_WEATHER,), (_WEATHER, {**_WEATHER, "name": "get_forecast"})):
        assert tools_tokens(tools, framing, tok) == tools_tokens(tools, base, tok) + preamble


# -- pricing/images/kinds.py (DeepSeekV4._pass mutmut_46) --------------------------------------


def test_deepseek_v4_keeps_a_padded_grid_of_exactly_its_budget() -> None:
    """docs/images.md § DeepSeek V4 (and the kind's docstring): pad to whole patches, count
    grid cells; only *over* budget is a smaller grid solved. 2996x560 is already 14-px
    patches: ⌈⌊2996/14⌋/3⌉ = ⌈214/3⌉ = 72 columns, ⌈40/3⌉ = 14 rows, 14·(72+1)+2 = 1,024
    tokens — V4.1's ``max_tokens`` exactly, so that grid is the price (and the next pass,
    on the same size, changes nothing)."""
    width, height = 2996, 560
    assert width % 14 == 0 and height % 14 == 0 and width * height >= 544 * 544
    cols, rows = -(-(width // 14) // 3), -(-(height // 14) // 3)
    assert (cols, rows) == (72, 14)
    assert rows * (cols + 1) + 2 == 1024
    assert parse_image_rule({"kind": "deepseek-v4"}).tokens(width, height) == 1024


# -- pricing/jsoncut.py (_Planner.plan mutmut_9; detect_style mutmut_19, mutmut_94 and
#    _Planner._clen mutmut_5: equivalent) ------------------------------------------------------
# detect_style mutmut_19: ``pos <= end``: at ``pos == end`` no alternative of ``_STYLE_TOKEN``
# matches an empty string, so the match is None and the loop breaks as before.
# detect_style mutmut_94: judged equivalent in an earlier sample (sample k's section): the
# whitespace after ':' sets ``key_sep`` itself, so the later ``previous == ":"`` never fires.
# _Planner._clen mutmut_5: a number always measured as ``len(self._enc(node))``: a JSON number's
# characters are ASCII digits, signs, '.', 'e' and 'E', none escaped, so its encoding is the
# number in quotes, ``len(node) + 2``, in either style.


@pytest.mark.parametrize("text", ["[]", "{}"])
def test_an_empty_container_over_its_budget_is_its_own_smallest_form(text: str) -> None:
    """``_Planner.plan``: "numbers, booleans, null and empty containers are atomic". An empty
    container has nothing to cut: over a budget of 0 tokens, the CapTooSmall it raises names
    its own price as the smallest form (docs/capping.md: ``minimum`` is that form's price),
    not the price of some marker written in its place."""
    tok = get_tokenizer("o200k_base")
    with pytest.raises(CapTooSmall) as refused:
        cut_text(text, 0, tok)
    assert refused.value.minimum == tok.count(text)


# -- pricing/probe.py (_fingerprint mutmut_24: equivalent) -------------------------------------
# ``"XXXX".join``: every piece after the first has a length fixed by the payload's length,
# which the first piece (``n:media type:``) states, so both joins are one-to-one on the pieces:
# the same URLs share a key either way. Only the key's bytes (the placeholder's 8 hex digits,
# an opaque label docs/images.md does not derive) change.

# -- pricing/textcut.py (search mutmut_38: equivalent) -----------------------------------------
# ``max(2, k_max + 2)``: both callers pass ``k_max >= 1`` (``_cut_plain`` the text's length,
# ``cut_json`` its tokens; ``cut_text`` refuses an empty text or none of its tokens first), so
# ``k_max + 2 >= 3`` wins either max.


# -- pricing/tokenizers.py (_HuggingFace._count mutmut_6; default_tokenizer mutmut_37:
#    equivalent) -----------------------------------------------------------------------------
# default_tokenizer mutmut_37: a name starting with "computer-use" then matches no later prefix
# (gpt-4, gpt-3.5, text-embedding, claude) and takes the fallback, which is o200k_base too.


class _Recording:
    """A Hugging Face tokenizer that notes every text it is asked to encode."""

    def __init__(self, inner: HFTokenizer) -> None:
        self.inner = inner
        self.seen: list[str] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> Any:
        self.seen.append(text)
        return self.inner.encode(text, add_special_tokens=add_special_tokens)


def test_a_long_text_is_counted_in_pieces_on_two_counting_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_SPLIT_ABOVE``: text this long to count at once "is shared out between ``_THREADS``
    threads" — on a two-core machine too, for a file where ``split_for_count`` holds. The
    pieces' counts add up to the whole's. (A text in one chunk, ``pricing.chunks``, as where
    the compiled chunker is missing: cut in fixed pieces; tests/pricing/test_chunks.py has the
    chunks.)"""
    monkeypatch.setattr(tokenizers, "_THREADS", 2)
    monkeypatch.setattr(chunks, "_compiled", lambda: None)
    recording = _Recording(_whitespace_words())
    tok = _HuggingFace("whitespace words", recording, splittable=True)
    text = "word " * 8_000
    assert len(text) >= tokenizers._SPLIT_ABOVE
    assert tok.count(text) == 8_000
    assert len(recording.seen) == 2
    assert sorted(recording.seen) == sorted(tokenizers.split_for_count(text, 2))
    assert all(len(piece) < len(text) for piece in recording.seen)
