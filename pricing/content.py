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

import re
from collections import Counter
from functools import lru_cache

__all__ = [
    "CLASSES",
    "CODE",
    "EXACT_UP_TO",
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
#: ``profile``'s counts are exact for a text up to this many characters, and beyond it its
#: sample's scaled to the text's length and rounded (each off by at most half a count).
EXACT_UP_TO = 3 * _SAMPLE
_STRUCT = frozenset('{}[]":,')
_CODE = frozenset(";(){}=<>_/*#|&$\\")

#: Character counts per part that tokenizers disagree on (``profile``), in this order.
STATS = (
    *("digits", "newlines", "indent", "tabs", "punct", "nonascii", "numbers"),
    *("hangul", "kana", "han", "cyrillic"),
    *("groups", "wide"),
)
#: Scripts counted on their own (``STATS``' four before ``groups``): a tokenizer may have a piece
#: for each kana and none for most Hangul syllables (three tokens each, by byte fallback: Mistral
#: v3's), which o200k's tokens and the count of characters outside ASCII cannot tell apart
#: (bench/REPORT.md, 4d). Counted by their UTF-8 bytes, at C speed: the lead bytes of
#: U+A000-D7FF (Hangul syllables, and the rare Yi and Vai beside them), of U+4000-9FFF (CJK
#: ideographs) and of U+0400-04FF (Cyrillic); kana by its first two bytes (U+3040-30FF).
_LEAD_OF = bytes(
    1 if 0xEA <= i <= 0xED else 2 if 0xE4 <= i <= 0xE9 else 3 if 0xD0 <= i <= 0xD3 else 0
    for i in range(256)
)  # each byte as the script it leads: 1 Hangul, 2 CJK ideographs, 3 Cyrillic, 0 none of them
_KANA = (b"\xe3\x81", b"\xe3\x82", b"\xe3\x83")
_DIGITS = b"0123456789"
_NUMBER = re.compile(rb"[0-9]+")
_PUNCT = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_LEADS = bytes(range(0xC0, 0x100))  # the first byte of each character outside ASCII
#: The first byte of each character of three or more UTF-8 bytes (``wide`` counts their bytes
#: beyond the second): every script of Asia but Hebrew's and Arabic's, most symbols and emoji. A
#: tokenizer with no piece for a character spends a token on each of its bytes (byte-level BPE;
#: SentencePiece's byte fallback), three or four where a two-byte one (Cyrillic, Greek, Arabic,
#: Hebrew) costs two: a count of characters outside ASCII alone cannot price both worst cases
#: (bench/REPORT.md, 4f).
_WIDE = bytes(range(0xE0, 0x100))
_WIDER = bytes(range(0xF0, 0x100))  # ... of four bytes (emoji, rare ideographs)


def _sample(text: str) -> str:
    if len(text) <= EXACT_UP_TO:
        return text
    mid = len(text) // 2
    return text[:_SAMPLE] + text[mid - _SAMPLE // 2 : mid + _SAMPLE // 2] + text[-_SAMPLE:]


def classify(text: str) -> int:
    """The class of a text (an index into ``CLASSES``); the empty text is prose."""
    s = _sample(text)
    n = len(s)
    if not n:
        return PROSE
    digits, space, struct, code, script, _ = _tally(s)
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
    alignment), tabs, ASCII punctuation, characters outside ASCII (UTF-8 lead bytes) and runs of
    digits (numbers), the characters of four scripts (``_scripts``), and the groups of up to
    three digits the meter's tokenizers split numbers into (groups), and the UTF-8 bytes of
    characters beyond their second (wide). Digits, numbers and groups
    together say how a tokenizer splits numbers, each scheme exactly: the meter counts a
    d-digit number as ⌈d/3⌉ tokens (its groups), so one token per digit is a token more a
    digit and one less a group, one per number a token more a number and one less a group.
    With digits and numbers alone, ⌈d/3⌉ was approximated by d/3 and a part per number, up to
    two thirds of a token off a number (bench/REPORT.md, 4e)."""
    s = _sample(text)
    if not s:
        return (0,) * len(STATS)
    b = s.encode("utf-8", "surrogatepass")
    n = len(b)
    digits = n - len(b.translate(None, _DIGITS))
    runs = _NUMBER.findall(b) if digits else ()  # a scan of the text: only where there are digits
    counts = (
        digits,
        b.count(b"\n"),
        b.count(b"  "),
        b.count(b"\t"),
        n - len(b.translate(None, _PUNCT)),
        n - len(b.translate(None, _LEADS)),
        len(runs),
        *(_scripts(b) if n > len(s) else (0, 0, 0, 0)),
        sum((len(run) + 2) // 3 for run in runs),
        _wide(b) if n > len(s) else 0,
    )
    if len(s) == len(text):
        return counts
    scale = len(text) / len(s)
    return tuple(round(c * scale) for c in counts)


def _wide(b: bytes) -> int:
    """The UTF-8 bytes of ``b``'s characters beyond their second: one for each character of
    three bytes, two for each of four."""
    n = len(b)
    return 2 * n - len(b.translate(None, _WIDE)) - len(b.translate(None, _WIDER))


def _scripts(b: bytes) -> tuple[int, int, int, int]:
    """Characters of Hangul, kana, CJK ideographs and Cyrillic in UTF-8 ``b``."""
    leads = b.translate(_LEAD_OF)
    return (leads.count(1), sum(b.count(pair) for pair in _KANA), leads.count(2), leads.count(3))


_DIGIT, _SPACE, _STRUCTURAL, _CODING, _SCRIPT, _OTHER = range(6)


@lru_cache(maxsize=65536)
def _kind(ch: str) -> int:
    """Which count one character adds to (the first that applies, in this order)."""
    if ch.isdigit():
        return _DIGIT
    if ch.isspace():
        return _SPACE
    if ch in _STRUCT:
        return _STRUCTURAL
    if ch in _CODE:
        return _CODING
    if ord(ch) > 0x24F and ch.isalpha():
        return _SCRIPT
    return _OTHER


#: Every ASCII byte translated to its kind (``_kind``), so an ASCII sample is tallied by C loops.
_ASCII_KINDS = bytes(_kind(chr(i)) if i < 128 else _OTHER for i in range(256))


def _tally(s: str) -> list[int]:
    """How many characters of ``s`` are of each kind, indexed by kind: a character-by-character
    loop in Python cost about a millisecond per sample, a third of a big prompt's pricing."""
    if s.isascii():
        kinds = s.encode("ascii").translate(_ASCII_KINDS)
        return [kinds.count(k) for k in range(_OTHER + 1)]
    tally = [0] * (_OTHER + 1)
    for ch, count in Counter(s).items():
        tally[_kind(ch)] += count
    return tally
