"""Content classes: which kind of text a part is, so calibration can learn per kind.

Tokenizers disagree most by content: one splits digits one by one, another merges runs of
whitespace or indentation, CJK and other scripts cost anywhere from a third of a token to two
tokens per character, and JSON punctuation merges differently from prose. A route whose tokenizer
routefit does not know therefore has no single ratio to the one routefit counts with; it has one
per kind of text. The classes are deliberately few and coarse, so that each gets enough samples.

Classification looks at a bounded sample of the text (head, middle and tail), so it costs the
same for a 500 kB tool output as for a line.
"""

from __future__ import annotations

__all__ = ["CLASSES", "CODE", "NUMERIC", "PROSE", "SCRIPT", "STRUCTURED", "classify"]

CLASSES = ("prose", "code", "structured", "script", "numeric")
PROSE, CODE, STRUCTURED, SCRIPT, NUMERIC = range(len(CLASSES))

_SAMPLE = 2048
_STRUCT = frozenset('{}[]":,')
_CODE = frozenset(";(){}=<>_/*#|&$\\")


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
