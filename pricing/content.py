"""Content classes: which kind of text a part is, so calibration can learn per kind.

Tokenizers disagree most by content: one splits digits one by one, another merges runs of
whitespace or indentation, CJK and other scripts cost anywhere from a third of a token to two
tokens per character, and JSON punctuation merges differently from prose. A route whose tokenizer
routefit does not know therefore has no single ratio to the one routefit counts with; it has one
per kind of text. The classes are deliberately few and coarse, so that each gets enough samples.

Classification looks at a bounded sample of the text (head, middle and tail), so it costs the
same for a 500 kB tool output as for a line.

Within a class, tokenizers still disagree on a few kinds of characters, whatever their share of
the part: how runs of whitespace merge (newlines, indentation by spaces or tabs), how digits
split (one by one, in threes, in runs), how punctuation merges with its neighbours, and what a
character outside ASCII costs. ``profile`` counts those characters per part (``STATS``), so
calibration can give each its own weight, tokens per character, next to the per-class token
weights: JSON with and without indentation, or prose with a few CJK words, are then priced by
what they contain rather than by their class alone. The counts are taken with C-speed string
methods on the same bounded sample and scaled to the text's length: exact up to a few kB,
an estimate beyond, and deterministic either way (the same text always gets the same profile).
"""

from __future__ import annotations

__all__ = [
    "CLASSES",
    "CODE",
    "NUMERIC",
    "PROSE",
    "SCRIPT",
    "STATS",
    "STRUCTURED",
    "classify",
    "profile",
]

CLASSES = ("prose", "code", "structured", "script", "numeric")
PROSE, CODE, STRUCTURED, SCRIPT, NUMERIC = range(len(CLASSES))

_SAMPLE = 2048
_STRUCT = frozenset('{}[]":,')
_CODE = frozenset(";(){}=<>_/*#|&$\\")

#: Character counts per part that tokenizers disagree on (``profile``), in this order.
STATS = ("digits", "newlines", "indent", "tabs", "punct", "nonascii")
_DIGITS = b"0123456789"
_PUNCT = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_LEADS = bytes(range(0xC0, 0x100))  # the first byte of each character outside ASCII


def _sample(text: str) -> str:
    if len(text) <= 3 * _SAMPLE:
        return text
    mid = len(text) // 2
    return text[:_SAMPLE] + text[mid - _SAMPLE // 2 : mid + _SAMPLE // 2] + text[-_SAMPLE:]


def classify(text: str) -> int:
    """The class of a text (an index into ``CLASSES``); the empty text is prose."""
    s = _sample(text)
    n = len(s)
    if not n:
        return PROSE
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
    if script > 0.25 * n:
        return SCRIPT
    head = s.lstrip()[:1]
    if (head in ("{", "[") and struct > 0.06 * n) or struct > 0.12 * n:
        return STRUCTURED
    if digits + space > 0.5 * n or digits > 0.25 * n:
        return NUMERIC
    lines = s.count("\n") + 1
    indented = s.count("\n ") + s.count("\n\t")
    if code > 0.04 * n or (lines >= 4 and indented > 0.3 * lines):
        return CODE
    return PROSE


def profile(text: str) -> tuple[int, ...]:
    """Counts of ``STATS`` in a text: digits, newlines, pairs of spaces (indentation and
    alignment), tabs, ASCII punctuation and characters outside ASCII (UTF-8 lead bytes)."""
    s = _sample(text)
    if not s:
        return (0,) * len(STATS)
    b = s.encode("utf-8", "surrogatepass")
    n = len(b)
    counts = (
        n - len(b.translate(None, _DIGITS)),
        b.count(b"\n"),
        b.count(b"  "),
        b.count(b"\t"),
        n - len(b.translate(None, _PUNCT)),
        n - len(b.translate(None, _LEADS)),
    )
    if len(s) == len(text):
        return counts
    scale = len(text) / len(s)
    return tuple(round(c * scale) for c in counts)
