"""A long text's UTF-8, kept by identity (``pricing.utf8``): always the text's own bytes, never
those of a text that came before, however many texts pass through it."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pricing import utf8 as kept
from pricing.utf8 import utf8


@settings(max_examples=200, deadline=None)
@given(text=st.text(), times=st.integers(1, 40_000))
def test_a_text_is_its_own_utf8(text, times):
    long = (text or "é") * (times if len(text) < 64 else 1)
    assert utf8(long) == long.encode("utf-8", "surrogatepass")
    assert utf8(long) == long.encode("utf-8", "surrogatepass")  # kept or not, the same


def test_texts_made_one_after_another_each_get_their_own_bytes():
    """Each text is dropped before the next is made, so the next may be given the same
    address: what is kept must be found by the text itself, not by where it was."""
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choice("日本語 aé\ud800") for _ in range(20_000))
        assert utf8(text) == text.encode("utf-8", "surrogatepass")
        del text


def test_what_is_kept_stays_within_its_budget():
    texts = ["中" * 40_000 + str(i) for i in range(100)]  # 120 KB each, 12 MB in all
    for text in texts:
        utf8(text)
    assert sum(len(data) for _, data in kept._kept.values()) <= kept._KEPT_BYTES
    assert kept._kept[id(texts[-1])][0] is texts[-1]  # the newest is kept
