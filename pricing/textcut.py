"""Cutting the middle out of a long text, and the bounded search that fits a cut to a budget.

Shared by plain-text and JSON capping (``pricing.capped``, ``pricing.jsoncut``). Two costs rule
the design. Tokenizing is the expensive step (counting a megabyte takes ~100 ms, mapping it to
token offsets several times that), so the original is never tokenized again by a cut: cut points
are proposed in characters from the text's known density, then snapped to a line start or, in
text without one nearby, to a token start found by tokenizing a few dozen characters around the
point. And a cut is only as good as the price of what is actually sent, so every candidate is
priced as rendered, and the search steers by that measured price, never by the arithmetic that
proposed the candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pricing.tokenizers import Tokenizer

__all__ = ["HEAD_SHARE", "Found", "cut_points", "elision_marker", "search", "splice"]

#: Share of the kept text taken from the start; the rest comes from the end. Tool outputs put
#: the command and its context first and the error that matters last, so both ends are kept and
#: the head gets a little more because it says what the output is.
HEAD_SHARE = 0.6

# A cut moves to a line boundary this close: a 32nd of the kept part, at most this many
# characters (so the step it adds to the price stays small next to the budget).
_LINE_SNAP_CHARS = 256
# Around a cut point without a line boundary, this much text is tokenized to find a token start;
# the first few characters of that window may start mid-token, so starts there are not trusted.
_TOKEN_SNAP_BEFORE = 48
_TOKEN_SNAP_AFTER = 16
_UNTRUSTED = 8
# Proportional steps before the search falls back to plain bisection.
_PROPORTIONAL_STEPS = 3


def elision_marker(tokens: int, what: str = "") -> str:
    """``[... 12,345 tokens elided ...]``; ``what`` names dropped items, e.g. ``57 items``."""
    unit = "token" if tokens == 1 else "tokens"
    if what:
        return f"[... {what} ({tokens:,} {unit}) elided ...]"
    return f"[... {tokens:,} {unit} elided ...]"


def splice(head: str, marker: str, tail: str, sep: str = "\n") -> str:
    """Head, marker and tail; the marker is set apart (by ``sep``) so it never glues onto a word.

    Text with lines gets the marker on a line of its own; a one-line string inside JSON gets
    spaces, which cost less than an escaped newline and keep it one line.
    """
    before = "" if not head or head[-1] in (sep, "\n") else sep
    after = "" if not tail or tail[0] in (sep, "\n") else sep
    return f"{head}{before}{marker}{after}{tail}"


def _token_start(text: str, tok: Tokenizer, at: int, forward: bool) -> int:
    """The token start nearest ``at`` (at or before it, or at or after it if ``forward``)."""
    lo = max(0, at - (_TOKEN_SNAP_AFTER if forward else _TOKEN_SNAP_BEFORE))
    hi = min(len(text), at + (_TOKEN_SNAP_BEFORE if forward else _TOKEN_SNAP_AFTER))
    best = at
    for start in tok.boundaries(text[lo:hi]):
        if start < _UNTRUSTED and lo > 0:
            continue
        pos = lo + start
        if forward and pos >= at:
            return pos
        if not forward:
            if pos > at:
                break
            best = pos
    return best


def cut_points(text: str, tok: Tokenizer, kept: int) -> tuple[int, int]:
    """Offsets ``(a, b)``: keep ``text[:a]`` and ``text[b:]``, about ``kept`` characters in all.

    Each point moves to the nearest line boundary inside the kept part when one is close, else
    to a token start, so no line is cut in half when lines exist and no token ever is.
    """
    n = len(text)
    head = min(n, max(0, round(kept * HEAD_SHARE)))
    a = head
    if 0 < a < n:
        j = text.rfind("\n", a - min(_LINE_SNAP_CHARS, a // 32), a)
        a = j + 1 if j >= 0 else _token_start(text, tok, a, forward=False)
    b = max(a, n - max(0, kept - head))
    if a < b < n and text[b - 1] != "\n":
        j = text.find("\n", b, b + min(_LINE_SNAP_CHARS, (n - b) // 32))
        b = j + 1 if j >= 0 else _token_start(text, tok, b, forward=True)
    return a, max(a, b)


@dataclass(frozen=True, slots=True)
class Found:
    """The chosen candidate: its parameter, text, measured tokens, and removed tokens reported."""

    kept: int
    text: str
    tokens: int
    removed: int
    #: Candidates priced by the tokenizer on the way (each one a rendered cut, never the original).
    steps: int


def search(
    render: Callable[[int], tuple[str, int]],
    k0: int,
    k_max: int,
    budget: int,
    tok: Tokenizer,
) -> tuple[Found | None, int]:
    """The largest kept size ``k`` in ``[0, k_max]`` whose rendered cut fits ``budget``.

    ``render(k)`` returns the cut's text and the tokens its markers report. Steps are
    proportional to the measured overshoot (or undershoot) first — a cut's price is nearly linear
    in what it keeps, so one or two steps usually land — then bisection over the bracket, so the
    number of tokenizations is at most a few plus log2 of the bracket. Stops as soon as a
    candidate fits within 2% of the budget. Returns the best fit (None if even ``k = 0`` is over)
    and the smallest price seen (what the minimal form costs when nothing fits).
    """
    tol = max(1, budget // 50)
    target = budget - tol // 2
    best: Found | None = None
    lo, hi = -1, k_max + 1
    k = max(0, min(k0, k_max))
    cheapest = math.inf
    steps = 0
    limit = _PROPORTIONAL_STEPS + max(1, k_max + 2).bit_length()
    while steps < limit:
        text, removed = render(k)
        price = tok.count(text)
        steps += 1
        cheapest = min(cheapest, price)
        if price <= budget:
            if k > lo:
                lo, best = k, Found(k, text, price, removed, steps)
            if price >= budget - tol or k >= k_max:
                break
        else:
            hi = min(hi, k)
        if hi - lo <= 1:
            break
        if steps < _PROPORTIONAL_STEPS:
            guess = k + math.floor((target - price) * max(k, 1) / max(price, 1))
            k = max(lo + 1, min(guess, hi - 1))
        else:
            k = (lo + hi) // 2
    if best is not None:
        best = Found(best.kept, best.text, best.tokens, best.removed, steps)
    return best, int(cheapest)
