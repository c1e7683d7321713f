"""Structural cuts of JSON content: the capped document stays valid JSON in its original style.

A model reading a tool's JSON output reads structure: a cut through the middle of the text
leaves it half an object and a marker where a bracket should be. So JSON is cut by dropping
whole elements from the middle of the containers that are too big (a marker element says how
many and roughly how many tokens), descending into an element only when it alone is too big, and
cutting inside a string only as the last resort. The result is re-serialized in the style the
original was written in (indented or one-line, its separators, ASCII escaping), because that
style is what the tokens were counted on.

Costs: element sizes come from the C JSON encoder (compact lengths, scaled to tokens by the
whole document's measured density), so planning a cut never tokenizes; rendering a candidate is
one Python walk of what is kept, with unchanged subtrees rendered once and reused; the search in
``pricing.textcut`` prices each rendered candidate with the real tokenizer.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

from pricing.textcut import HEAD_SHARE, Found, cut_points, elision_marker, search, splice
from pricing.tokenizers import Tokenizer

__all__ = ["OBJECT_MARKER_KEY", "Style", "cut_json", "detect_style", "parse"]

#: Key of the entry that stands for the keys dropped from an object ("...", "...2" if taken).
OBJECT_MARKER_KEY = "..."

# Below this many estimated tokens an element is not worth descending into: its own brackets
# and marker would use most of it.
_MIN_PARTIAL = 16.0
# Containers this narrow, this close to where sizing starts, are sized from their children.
_SUM_WIDTH = 16
_SUM_DEPTH = 3
_CONTAINER_START = re.compile(r"[ \t\r\n]*[\[{]")
_STYLE_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]|[ \t\r\n]+|[^\[\]{},:"\s]+')
_STYLE_SCAN_CHARS = 1 << 16


class _Obj(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs: order and duplicate keys survive the round trip."""

    __slots__ = ()


class _Num(str):
    """A JSON number exactly as written: ``1.10`` stays ``1.10`` and ``1e400`` stays finite."""

    __slots__ = ()


class _CutArray(list[Any]):
    """An array the planner built (never memoised: it is not part of the original document)."""

    __slots__ = ()


class _CutObj(_Obj):
    __slots__ = ()


_SURROGATE = re.compile("[\ud800-\udfff]")


def _encode_unicode(s: str) -> str:
    """JSON string with non-ASCII kept as is, except lone surrogates (escaped text can carry
    them; raw, they are not valid UTF-8 and a tokenizer may reject them)."""
    if s.isascii() or _SURROGATE.search(s) is None:
        return encode_basestring(s)
    return encode_basestring_ascii(s)


def _encoder(style: Style) -> Callable[[str], str]:
    return encode_basestring_ascii if style.ascii else _encode_unicode


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(text: str) -> list[Any] | None:
    """The document when ``text`` is a JSON object or array; None otherwise (a scalar is text)."""
    if _CONTAINER_START.match(text) is None:
        return None
    try:
        doc = json.loads(
            text,
            object_pairs_hook=_Obj,
            parse_float=_Num,
            parse_int=_Num,
            parse_constant=_reject_constant,
        )
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, list) else None


@dataclass(frozen=True, slots=True)
class Style:
    """How a document was written: re-serializing in the same style keeps the token density."""

    #: The indent unit ("  ", "\t", ...) of a multi-line document; None for one line.
    indent: str | None = None
    item_sep: str = ","
    key_sep: str = ":"
    #: Non-ASCII written as \\uXXXX escapes (Python's json.dumps default).
    ascii: bool = False


def detect_style(text: str) -> Style:
    """The style of the first containers and separators of ``text`` (a bounded scan)."""
    ascii_only = text.isascii() and "\\u" in text
    indent: str | None = None
    item_sep: str | None = None
    key_sep: str | None = None
    decided_indent = False
    previous = ""
    pos, end = 0, min(len(text), _STYLE_SCAN_CHARS)
    while pos < end and not (decided_indent and item_sep is not None and key_sep is not None):
        m = _STYLE_TOKEN.match(text, pos, end)
        if m is None:
            break
        token, pos = m.group(), m.end()
        white = token.isspace()
        if previous in ("[", "{") and not decided_indent:
            if white and "\n" in token:
                indent = token.rsplit("\n", 1)[1]
                item_sep = ","
                decided_indent = True
            elif token not in ("]", "}"):
                decided_indent = True
        elif previous == "," and item_sep is None:
            item_sep = "," + token if white and "\n" not in token else ","
        elif previous == ":" and key_sep is None:
            key_sep = ":" + token if white and "\n" not in token else ":"
        if not white:
            previous = token
        elif previous in ("[", "{", ",", ":"):
            previous = " "  # the whitespace after a separator has been seen
    if item_sep is None:
        item_sep = ","
    if key_sep is None:
        key_sep = ": " if indent is not None or item_sep == ", " else ":"
    return Style(indent, item_sep, key_sep, ascii_only)


class _Writer:
    """Serializes a (cut) document in a style; subtrees kept whole are rendered once per cut."""

    __slots__ = ("_enc", "_memo", "_style")

    def __init__(self, style: Style) -> None:
        self._style = style
        self._enc = _encoder(style)
        self._memo: dict[int, str] = {}

    def render(self, node: Any) -> str:
        out: list[str] = []
        self._emit(node, 0, out)
        return "".join(out)

    def _emit(self, node: Any, depth: int, out: list[str]) -> None:
        kind = type(node)
        if kind is _CutArray or kind is _CutObj:
            self._container(node, depth, out, self._emit)
        elif kind is list or kind is _Obj:
            # An original container in the output is kept whole (the planner copies what it
            # cuts), so its text is the same in every candidate: render it once.
            text = self._memo.get(id(node))
            if text is None:
                sub: list[str] = []
                self._container(node, depth, sub, self._plain)
                text = self._memo[id(node)] = "".join(sub)
            out.append(text)
        else:
            self._plain(node, depth, out)

    def _plain(self, node: Any, depth: int, out: list[str]) -> None:
        if isinstance(node, str):
            out.append(node if type(node) is _Num else self._enc(node))
        elif isinstance(node, list):
            self._container(node, depth, out, self._plain)
        else:
            out.append("null" if node is None else "true" if node is True else "false")

    def _container(
        self,
        node: list[Any],
        depth: int,
        out: list[str],
        emit: Callable[[Any, int, list[str]], None],
    ) -> None:
        is_obj = isinstance(node, _Obj)
        close = "}" if is_obj else "]"
        if not node:
            out.append("{}" if is_obj else "[]")
            return
        style = self._style
        if style.indent is None:
            lead, sep, end = "", style.item_sep, ""
        else:
            lead = "\n" + style.indent * (depth + 1)
            sep, end = "," + lead, "\n" + style.indent * depth
        out.append(("{" if is_obj else "[") + lead)
        enc, key_sep = self._enc, style.key_sep
        for i, child in enumerate(node):
            if i:
                out.append(sep)
            if is_obj:
                out.append(enc(child[0]) + key_sep)
                emit(child[1], depth + 1, out)
            else:
                emit(child, depth + 1, out)
        out.append(end + close)


class _Planner:
    """Chooses what to keep of a document for a budget in estimated tokens.

    Estimates are compact-JSON lengths from the C encoder scaled by the document's density
    (its measured tokens over its compact length); the search corrects their bias by measuring
    each rendered candidate, so they only need to be consistent, not exact.
    """

    __slots__ = ("_enc", "_len", "_rho", "_style", "_tok")

    def __init__(self, root: list[Any], style: Style, tok: Tokenizer, tokens: int) -> None:
        self._style = style
        self._tok = tok
        self._enc = _encoder(style)
        self._len: dict[int, int] = {}
        self._rho = tokens / max(1, self._clen(root))

    def _clen(self, node: Any, depth: int = _SUM_DEPTH) -> int:
        """Length of ``node`` as the C encoder writes it compactly (pairs as 2-arrays, numbers
        quoted: a consistent measure, calibrated to tokens by the document's own density).

        A narrow container near the top is summed from its children, so the wide container
        holding the bulk of a document is encoded once, not once per level above it.
        """
        if isinstance(node, str):
            return len(node) + 2 if type(node) is _Num else len(self._enc(node))
        if not isinstance(node, list):
            return 4 if node is not False else 5
        key = id(node)
        n = self._len.get(key)
        if n is None:
            if not node:
                n = 2
            elif len(node) <= _SUM_WIDTH and depth > 0:
                if isinstance(node, _Obj):
                    n = sum(len(self._enc(k)) + self._clen(v, depth - 1) + 3 for k, v in node)
                else:
                    n = sum(self._clen(v, depth - 1) for v in node)
                n += len(node) + 1
            else:
                n = len(
                    json.dumps(
                        node,
                        ensure_ascii=self._style.ascii,
                        separators=(",", ":"),
                        check_circular=False,
                    )
                )
            self._len[key] = n
        return n

    def est(self, node: Any) -> float:
        return self._rho * self._clen(node)

    def plan(self, node: Any, budget: float) -> tuple[Any, int]:
        """(kept version of ``node``, tokens its new markers report as removed)."""
        if self.est(node) <= budget:
            return node, 0
        if isinstance(node, list) and node:
            return self._container(node, budget)
        if isinstance(node, str) and type(node) is not _Num:
            return self._string(node, budget)
        return node, 0  # numbers, booleans, null and empty containers are atomic

    def _string(self, s: str, budget: float) -> tuple[Any, int]:
        """A string cut inside the JSON: escaping is in the estimate, the search measures it."""
        rho = self._rho
        whole = self.est(s)
        per_char = whole / max(1, len(s))  # estimated tokens per raw character, escapes included
        marker = rho * (len(elision_marker(round(whole))) + 2)
        kept = math.floor((budget - 2 * rho - marker) / per_char)
        if kept <= 0:
            return elision_marker(round(whole)), round(whole)
        a, b = cut_points(s, self._tok, kept)
        if b <= a:
            return s, 0
        removed = max(1, round((b - a) * per_char))
        sep = "\n" if "\n" in s else " "
        return splice(s[:a], elision_marker(removed), s[b:], sep), removed

    def _container(self, node: list[Any], budget: float) -> tuple[Any, int]:
        is_obj = isinstance(node, _Obj)
        rho, n = self._rho, len(node)
        costs: dict[int, float] = {}

        def cost(i: int) -> float:
            c = costs.get(i)
            if c is None:
                child = node[i]
                if is_obj:
                    c = rho * (len(self._enc(child[0])) + 2) + self.est(child[1])
                else:
                    c = rho + self.est(child)
                costs[i] = c
            return c

        def value(i: int) -> Any:
            return node[i][1] if is_obj else node[i]

        def cuttable(i: int) -> bool:
            v = value(i)
            return (isinstance(v, list) and bool(v)) or (isinstance(v, str) and type(v) is not _Num)

        whole = self.est(node)
        unit = "keys" if is_obj else "items"
        marker_cost = rho * (len(elision_marker(round(whole), f"{n} {unit}")) + 3)
        if is_obj:
            marker_cost += rho * (len(OBJECT_MARKER_KEY) + 4)
        avail = budget - 2 * rho - marker_cost

        # Whole elements from each end within its share; the first element that does not fit
        # is kept in part with what is left of that share. So the kept size grows smoothly with
        # the budget (an element grows from a part to whole, then the next one starts), which is
        # what lets the search land close under the cap. A leftover too small for a part (or an
        # element that cannot be cut) goes to the other end.
        head_budget = avail * HEAD_SHARE
        i, used = 0, 0.0
        while i < n and used + cost(i) <= head_budget:
            used += cost(i)
            i += 1
        head_left = head_budget - used
        head_part = i < n and cuttable(i) and head_left >= _MIN_PARTIAL
        tail_budget = avail - head_budget + (0.0 if head_part else max(0.0, head_left))
        floor = i + 1 if head_part else i
        j, tail_used = n, 0.0
        while j > floor and tail_used + cost(j - 1) <= tail_budget:
            tail_used += cost(j - 1)
            j -= 1
        tail_left = tail_budget - tail_used
        tail_part = j > floor and cuttable(j - 1) and tail_left >= _MIN_PARTIAL
        dropped = list(range(floor, j - 1 if tail_part else j))
        spare = 0.0 if dropped else marker_cost
        if head_part and not tail_part:
            head_left += max(0.0, tail_left)

        claimed = 0
        out: list[Any] = [node[k] for k in range(i)]
        if head_part:
            element, removed = self._part(node, i, head_left + spare, cost)
            out.append(element)
            claimed += removed
            spare = 0.0
        if dropped:
            kept = [*range(floor), *range(j - 1 if tail_part else j, n)]
            removed = self._dropped_tokens(dropped, kept, cost, whole)
            claimed += removed
            label = f"{len(dropped)} {unit[:-1] if len(dropped) == 1 else unit}"
            text = elision_marker(removed, label)
            out.append((self._marker_key(node, kept), text) if is_obj else text)
        if tail_part:
            element, removed = self._part(node, j - 1, tail_left + spare, cost)
            out.append(element)
            claimed += removed
        out.extend(node[k] for k in range(j, n))
        return (_CutObj(out) if is_obj else _CutArray(out)), claimed

    def _part(
        self, node: list[Any], k: int, budget: float, cost: Callable[[int], float]
    ) -> tuple[Any, int]:
        """Element ``k`` of ``node`` kept in part within ``budget`` (its key, if any, whole)."""
        if isinstance(node, _Obj):
            key, value = node[k]
            kept, removed = self.plan(value, budget - (cost(k) - self.est(value)))
            return (key, kept), removed
        return self.plan(node[k], budget - (cost(k) - self.est(node[k])))

    def _dropped_tokens(
        self, dropped: list[int], kept: list[int], cost: Callable[[int], float], whole: float
    ) -> int:
        """Estimated tokens of the dropped elements, without sizing a long middle one by one."""
        if len(dropped) <= 64:
            return max(1, round(sum(cost(k) for k in dropped)))
        rest = whole - 2 * self._rho - sum(cost(k) for k in kept)
        return max(len(dropped), round(rest))

    @staticmethod
    def _marker_key(node: list[Any], kept: list[int]) -> str:
        taken = {node[k][0] for k in kept}
        key, n = OBJECT_MARKER_KEY, 1
        while key in taken:
            n += 1
            key = f"{OBJECT_MARKER_KEY}{n}"
        return key


def cut_json(
    doc: list[Any], text: str, tokens: int, budget: int, tok: Tokenizer
) -> tuple[Found | None, int]:
    """Cut the parsed ``doc`` (of ``text``, priced ``tokens``) to ``budget``; see ``search``."""
    style = detect_style(text)
    planner = _Planner(doc, style, tok, tokens)
    writer = _Writer(style)

    def render(k: int) -> tuple[str, int]:
        node, removed = planner.plan(doc, k)
        return writer.render(node), removed

    return search(render, budget - budget // 32, tokens, budget, tok)
