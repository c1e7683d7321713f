"""Counting a big text in pieces (``split_for_count``) gives exactly the count of the whole, for
every tokenizer routefit ships: the property the parallel count of a big new prompt rests on."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_byte_level import _hf_count

from pricing.byte_level import counter
from pricing.tokenizers import _Tiktoken, get_tokenizer, split_for_count

SHIPPED = ("o200k_base", "cl100k_base", "deepseek", "anthropic-legacy")

#: Fragments chosen to sit next to a cut in every way the pre-tokenizers care about: words,
#: contractions, digit runs, punctuation runs, whitespace runs and newlines, characters NFKC
#: changes (NBSP, "½", fullwidth, ligatures), combining marks, CJK and kana, emoji, added-token
#: look-alikes.
FRAGMENTS = [
    "a", "Word", "word", "ÉTÉ", "'s", "'LL", "12", "1234567", "3.14", ".", ",", "!?", "...", "/",
    "//", "-", "(", ")", "\"", " ", "  ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u2009",
    "½", "Ａ", "ﬁ", "\u0301", "e\u0301", "中文", "ひらがな", "カタカナ", "🙂", "<EOT>",
    "<|endoftext|>", "naïve", "Привет", "مرحبا", "_", "__init__", "$x", "#", "`code`",
]  # fmt: skip

texts = st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=80).map("".join)


def _encode(spec: str, text: str) -> int:
    tok = get_tokenizer(spec)
    if isinstance(tok, _Tiktoken):
        return tok._tally(text)  # the whole text at once, never split
    return len(tok._tok.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]


@pytest.mark.parametrize("spec", SHIPPED)
@settings(max_examples=300, deadline=None)
@given(text=texts, parts=st.integers(2, 9))
def test_pieces_add_up_to_the_whole(spec, text, parts):
    pieces = split_for_count(text, parts)
    assert "".join(pieces) == text
    assert all(pieces)
    assert sum(_encode(spec, p) for p in pieces) == _encode(spec, text)


@pytest.mark.parametrize("spec", SHIPPED)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_big_text_is_counted_exactly_however_it_is_counted(spec, seed):
    """Through the tokenizer's own count: long enough to take the parallel path (fragments
    mostly space-separated, as prose is: BPE is quadratic in the length of one piece)."""
    rnd = random.Random(seed)
    text = "".join(rnd.choice(FRAGMENTS) + rnd.choice(" \n ") for _ in range(12_000))
    assert len(text) >= 32 * 1024
    assert get_tokenizer(spec)._count(text) == _encode(spec, text)  # type: ignore[attr-defined]


def _cut_by_the_rule(text: str, parts: int) -> list[str]:
    """``split_for_count`` as its docstring states it: the k-th cut at the first space past the
    k-th step that follows printable ASCII."""
    step, out, start = len(text) // parts, [], 0
    for k in range(1, parts):
        found = re.compile(r"[!-~] ").search(text, max(start, k * step))
        if found is None:
            break
        out.append(text[start : found.start() + 1])
        start = found.start() + 1
    return [*out, text[start:]]


@settings(max_examples=500, deadline=None)
@given(
    text=st.lists(st.sampled_from([*FRAGMENTS, " " * 9, "x" + " " * 20]), max_size=120).map(
        "".join
    ),
    parts=st.integers(2, 12),
)
def test_the_cuts_are_the_rules(text, parts):
    """Found by jumping from space to space (and by the regex after a run of spaces), the cuts
    are the rule's: runs of spaces longer than the jumps tried, CJK with no space at all."""
    assert split_for_count(text, parts) == _cut_by_the_rule(text, parts)


def test_a_text_without_a_cut_stays_whole():
    assert split_for_count("x" * 100, 4) == ["x" * 100]
    assert split_for_count("a b", 1) == ["a b"]


@pytest.mark.parametrize("spec", ("o200k_base", "cl100k_base", "anthropic-legacy"))
@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_a_count_without_the_tokens_is_the_number_of_tokens(spec, text):
    """What every count goes through (``byte_level.counter``: tiktoken's rank buffer, not its
    list) against the tokens themselves — tiktoken's list, or Hugging Face's own tokens for the
    legacy Anthropic file (added tokens, NFKC) — on short texts and on 2 KB+ ones (``deepseek``
    is counted by Hugging Face)."""
    tok = get_tokenizer(spec)
    assert isinstance(tok, _Tiktoken)
    long = (text + "\n") * (2048 // (len(text) + 1) + 1)  # counted from the buffer
    for each in (text, long):
        truth = len(tok._enc.encode_ordinary(each)) if tok.bpe is None else _hf_count(each)
        assert tok._tally(each) == truth


def test_the_shipped_tiktoken_is_counted_from_its_buffer():
    """The fast path is the one taken with the tiktoken deploy/requirements.lock pins (0.14; one
    whose buffer no longer counts the probe right falls back to the list: the next test)."""
    enc = get_tokenizer("o200k_base")._enc  # type: ignore[attr-defined]
    assert counter(enc).__name__ == "by_size"


class _Core:
    def __init__(self, width: int) -> None:
        self.width = width

    def encode_to_tiktoken_buffer(self, text: str, allowed: set[str]) -> bytes:
        return b"\0" * (self.width * len(text.split()))


class _Encoding:
    def __init__(self, width: int) -> None:
        self._core_bpe = _Core(width)

    def encode_ordinary(self, text: str) -> list[int]:
        return list(range(len(text.split())))


def test_a_buffer_that_miscounts_the_probe_is_not_trusted():
    assert counter(_Encoding(4)).__name__ == "by_size"
    assert counter(_Encoding(8)).__name__ == "listed"
    assert counter(_Encoding(8))("a b c") == 3
