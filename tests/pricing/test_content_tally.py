"""pricing.content.classify counts characters with C-speed string methods (``_tally``); its counts
must be those of the straightforward character-by-character loop it replaced (kept here as the
reference), so every class decision, made once in ``classify``, sees the same numbers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.content import _CODE, _STRUCT, CODE, NUMERIC, PROSE, SCRIPT, STRUCTURED, classify
from pricing.content import _tally as tally


def reference(s: str) -> tuple[int, int, int, int, int]:
    """Digits, spaces, structure, code and other-script letters, one character at a time."""
    script = digits = space = struct = code = 0
    for ch in s:
        if ch.isdigit():
            digits += 1
        elif ch.isspace():
            space += 1
        elif ch in _STRUCT:
            struct += 1
        elif ch in _CODE:
            code += 1
        elif ord(ch) > 0x24F and ch.isalpha():
            script += 1
    return digits, space, struct, code, script


# Characters near every decision: ASCII of each kind, Unicode digits and spaces (¹ and ٣ are
# digits, U+2028 and U+00A0 spaces), letters either side of U+024F, CJK, marks, surrogates.
MIXED = (
    "aZ09 \t\n\x0b\x0c\r\x1c\x1f{}[]\":,;()=<>_/*#|&$\\.!?'-+~`@%^"
    "¹²٣߀\u00a0\u2028\u3000ɏɐÿĀ日本語한국어Ωж\u0301\u0308🙂\ud800\udfff"
)
TEXTS = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.sampled_from(MIXED), max_size=300),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=300),
    # over three samples long: the sampled head, middle and tail are what counts
    st.text(alphabet=st.sampled_from(MIXED), min_size=6200, max_size=7000),
    st.lists(st.sampled_from(['{"a": 1}', "\n    x = f(y);", " the", "東京", "42", "\n"])).map(
        "".join
    ),
)


@settings(max_examples=500, deadline=None)
@given(text=TEXTS)
def test_the_tally_is_the_character_loop(text: str) -> None:
    assert tuple(tally(text)[:5]) == reference(text)
    assert sum(tally(text)) == len(text)  # every character is of exactly one kind


def test_each_class_is_reached() -> None:
    texts = ["plain words here", "x = f(y); z = g(x);", '{"a": [1, 2]}', "東京都日本語", "1 2 3 4"]
    assert [classify(t) for t in texts] == [PROSE, CODE, STRUCTURED, SCRIPT, NUMERIC]
