"""Capped messages: an oversized message cut to a token cap, priced exactly as it will be sent.

The cap bounds what ``pricing.meter.measure_message`` charges for the capped message's text and
chat framing (``text + framing``); images are the image strategies' business and pass through
untouched and unpriced here. The price is taken on the real wire form of the cut — the marker,
the re-serialized JSON with its escaping, the per-message framing — never on the raw slice that
was kept: a cut budgeted on the raw slice and then wrapped or re-escaped comes out over budget.
So every candidate is rendered first and priced second, and the search steers by that price.

Invariant: ``text + framing`` of ``measure_message(capped.message)`` is at most the cap, and when
the content budget (cap minus framing) is at least ``SMALL_CAP`` tokens for text
(``SMALL_JSON_CAP`` for JSON) the cut keeps at least 90% of the cap. Same input, same bytes.
See docs/capping.md for the decisions behind the shapes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pricing import jsoncut
from pricing.framing import frame_message
from pricing.messages import Message, Part, TextPart, message_wire, render_content
from pricing.meter import measure_message
from pricing.route import Route
from pricing.textcut import Found, cut_points, elision_marker, search, splice
from pricing.tokenizers import Tokenizer, get_tokenizer

__all__ = [
    "SMALL_CAP",
    "SMALL_JSON_CAP",
    "CapTooSmall",
    "Capped",
    "TextCut",
    "cap_message",
    "cap_text",
    "cappable",
    "cut_text",
]

#: Content budgets (cap minus framing) below these are "small": the cut still never exceeds
#: the cap, but the 90% tightness promise starts here. Text is cut at any token and its marker
#: costs ~10 tokens; JSON is cut at element granularity and every part kept of an element brings
#: its own marker element (~15 tokens), so the price moves in steps of a few dozen tokens.
SMALL_CAP = 64
SMALL_JSON_CAP = 1024


class CapTooSmall(ValueError):
    """Even the smallest capped form (the framing plus a bare marker) does not fit the cap.

    ``minimum`` is the price of that smallest form, so capping at ``minimum`` succeeds; the
    caller decides what to do instead (drop the message, cap at the minimum, refuse).
    """

    def __init__(self, cap: int, minimum: int) -> None:
        super().__init__(
            f"a cap of {cap} tokens is below the {minimum} tokens the smallest capped form needs"
        )
        self.cap = cap
        self.minimum = minimum


@dataclass(frozen=True, slots=True)
class TextCut:
    """One text cut to a budget: the text to send, its tokens, the tokens its markers report."""

    text: str
    tokens: int
    removed_tokens: int
    kind: Literal["text", "json"]


@dataclass(frozen=True, slots=True)
class Capped:
    """A message cut to a cap, with its ``wire`` dict rendered (other wire keys kept as sent)."""

    message: Message
    #: ``text + framing`` of ``measure_message(message, route)``: at most the cap.
    tokens: int
    #: Content tokens the markers report as removed (an estimate: the middle is never tokenized).
    removed_tokens: int
    kind: Literal["text", "json", "parts"]


def cappable(message: Message, roles: frozenset[str]) -> bool:
    """Whether policy allows capping ``message`` (its role is listed) and it has text to cut."""
    return message.role in roles and any(isinstance(p, TextPart) and p.text for p in message.parts)


def cut_text(text: str, budget: int, tok: Tokenizer) -> TextCut | None:
    """``text`` cut so that ``tok.count`` of the result is at most ``budget``; None if it fits.

    JSON objects and arrays are cut structurally and stay valid JSON; anything else keeps its
    head and tail around a marker. Raises CapTooSmall when not even a bare marker fits.
    """
    total = tok.count(text)
    if total <= budget:
        return None
    if total <= 0 or not text:  # nothing to cut, and still over: the budget is negative
        raise CapTooSmall(budget, total)
    doc = jsoncut.parse(text)
    if doc is not None:
        try:
            found, cheapest = jsoncut.cut_json(doc, text, total, budget, tok)
        except RecursionError:  # nested deeper than Python recurses: cut it as text
            pass
        else:
            return _result(found, cheapest, budget, "json")
    found, cheapest = _cut_plain(text, total, budget, tok)
    return _result(found, cheapest, budget, "text")


def _result(
    found: Found | None, cheapest: int, budget: int, kind: Literal["text", "json"]
) -> TextCut:
    if found is None:
        raise CapTooSmall(budget, cheapest)
    return TextCut(found.text, found.tokens, found.removed, kind)


def _cut_plain(text: str, total: int, budget: int, tok: Tokenizer) -> tuple[Found | None, int]:
    """Head and tail around a marker; the search runs over the number of characters kept."""
    density = total / len(text)  # tokens per character, from the count the meter already made
    marker = tok.count(elision_marker(total - budget)) + 2  # and the newlines around it

    def render(kept: int, removed: int | None = None) -> tuple[str, int]:
        a, b = cut_points(text, tok, kept)
        n = round((b - a) * density) if removed is None else removed
        return splice(text[:a], elision_marker(n), text[b:]), n

    found, cheapest = search(
        render, math.floor((budget - marker) / density), len(text), budget, tok
    )
    if found is not None:
        # The marker priced the middle at the text's average density. The measured price says
        # how much was kept; when the two disagree by more than 1%, report what the price says.
        measured = max(0, total - (found.tokens - marker))
        if abs(measured - found.removed) > measured // 100 + 8:
            again, _ = render(found.kept, measured)
            price = tok.count(again)
            if price <= budget:
                found = Found(found.kept, again, price, measured, found.steps + 1)
    return found, cheapest


def cap_text(text: str, cap: int, route: Route, *, overhead: int = 0) -> str:
    """``text`` cut to fit ``cap - overhead`` tokens on ``route`` (unchanged when it fits)."""
    cut = cut_text(text, cap - overhead, get_tokenizer(route.tokenizer, route.scope))
    return text if cut is None else cut.text


def cap_message(message: Message, cap: int, route: Route) -> Capped | None:
    """``message`` cut so its text + framing price on ``route`` is at most ``cap``.

    None when it already fits. Text parts are cut; image parts stay in place, untouched.
    Raises CapTooSmall when the framing plus the smallest marker form exceeds the cap.
    """
    tok = get_tokenizer(route.tokenizer, route.scope)
    frame = frame_message(message, route.framing, tok, translated=route.translated)
    fixed = frame.text + frame.framing
    texts = [j for j, p in enumerate(message.parts) if isinstance(p, TextPart)]
    costs = [tok.count(_text(message.parts[j])) for j in texts]
    if fixed + sum(costs) <= cap:
        return None
    if not any(costs):
        raise CapTooSmall(cap, fixed + sum(costs))
    budget = cap - fixed
    kind: Literal["text", "json", "parts"]
    if _as_one_string(message):
        try:
            cut = cut_text(message.text, budget, tok)
        except CapTooSmall as exc:
            raise CapTooSmall(cap, fixed + exc.minimum) from None
        if cut is None:  # several text parts priced apart cost more than joined: it fits
            parts: tuple[Part, ...] = (TextPart(message.text),)
            removed = 0
            kind = "text"
        else:
            parts, removed, kind = (TextPart(cut.text),), cut.removed_tokens, cut.kind
    else:
        try:
            new_texts, removed = _cut_parts(
                [_text(message.parts[j]) for j in texts], costs, budget, tok
            )
        except CapTooSmall as exc:
            raise CapTooSmall(cap, fixed + exc.minimum) from None
        replaced = dict(zip(texts, new_texts, strict=True))
        parts = tuple(
            TextPart(replaced[j]) if j in replaced else p for j, p in enumerate(message.parts)
        )
        kind = "parts"
    capped = _rebuild(message, parts)
    pressure, _ = measure_message(capped, route)
    tokens = pressure.text + pressure.framing
    if tokens > cap:  # every part was priced as sent, so this would be a bug, not a bad input
        raise RuntimeError(f"capped message priced {tokens} tokens over its cap of {cap}")
    return Capped(capped, tokens, removed, kind)


def _text(part: Part) -> str:
    return part.text if isinstance(part, TextPart) else ""


def _as_one_string(message: Message) -> bool:
    """Whether the content goes on the wire as one string (so it is priced as one text)."""
    if message.wire is None:
        return not message.images
    return isinstance(message.wire.get("content"), str)


def _allot(costs: Sequence[int], budget: int, floors: Sequence[int]) -> list[int] | None:
    """Water-filling: parts below a common level keep everything, the larger ones get the level.

    Small parts (a caption, an instruction next to a screenshot) survive whole and the cut
    falls on the parts large enough to cause the overflow. No part gets less than its floor
    (what its bare marker costs); None when the floors alone exceed the budget.
    """
    if sum(floors) > budget:
        return None

    def allotments(level: int) -> list[int]:
        return [min(c, max(f, level)) for c, f in zip(costs, floors, strict=True)]

    lo, hi = 0, max(costs)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(allotments(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    allot = allotments(lo)
    spare = budget - sum(allot)
    for i, cost in enumerate(costs):  # less than one token per cut part: the first ones get it
        if spare and allot[i] < cost:
            allot[i] += 1
            spare -= 1
    return allot


def _cut_all(
    texts: Sequence[str], costs: Sequence[int], allot: Sequence[int], tok: Tokenizer
) -> list[TextCut | None]:
    return [
        cut_text(t, a, tok) if a < c else None for t, a, c in zip(texts, allot, costs, strict=True)
    ]


def _cut_parts(
    texts: Sequence[str], costs: Sequence[int], budget: int, tok: Tokenizer
) -> tuple[list[str], int]:
    """Each text part cut to its water-filled share; raises CapTooSmall with the floors' sum."""
    allot = _allot(costs, budget, [0] * len(costs))
    try:
        cuts = _cut_all(texts, costs, allot or [], tok) if allot else None
    except CapTooSmall:
        cuts = None
    if cuts is None:  # some share could not hold a marker: give every part at least that
        floors = [min(c, _minimum(t, tok)) for t, c in zip(texts, costs, strict=True)]
        allot = _allot(costs, budget, floors)
        if allot is None:
            raise CapTooSmall(budget, sum(floors))
        cuts = _cut_all(texts, costs, allot, tok)
    used = sum(c.tokens if c is not None else cost for c, cost in zip(cuts, costs, strict=True))
    slack = budget - used
    cut_ids = [i for i, c in enumerate(cuts) if c is not None]
    if cut_ids and slack > max(1, budget // 50):
        # The cuts landed under their shares; give what is left to the largest cut part.
        i = max(cut_ids, key=lambda k: (costs[k], -k))
        previous = cuts[i]
        if previous is not None:
            cuts[i] = cut_text(texts[i], previous.tokens + slack, tok) or previous
    out = [c.text if c is not None else t for c, t in zip(cuts, texts, strict=True)]
    return out, sum(c.removed_tokens for c in cuts if c is not None)


def _minimum(text: str, tok: Tokenizer) -> int:
    try:
        cut_text(text, 0, tok)
    except CapTooSmall as exc:
        return exc.minimum
    return 0  # only empty text fits in nothing


def _rebuild(message: Message, parts: tuple[Part, ...]) -> Message:
    """The capped message with its wire dict: the client's other keys (and part keys) kept."""
    original = message.wire
    if original is None:
        bare = replace(message, parts=parts, wire=None)
        return replace(bare, wire=dict(message_wire(bare)))
    wire = dict(original)
    content = original.get("content")
    if isinstance(content, str):
        wire["content"] = _text(parts[0])
    elif isinstance(content, list) and len(content) == len(parts):
        wire["content"] = [_wire_part(raw, p) for raw, p in zip(content, parts, strict=True)]
    else:
        wire["content"] = render_content(parts)
    return replace(message, parts=parts, wire=wire)


def _wire_part(raw: Any, part: Part) -> Any:
    if not isinstance(part, TextPart) or not isinstance(raw, Mapping):
        return raw
    key = raw.get("type", "text")
    if raw.get(key) == part.text:
        return raw
    return {**raw, key: part.text}
