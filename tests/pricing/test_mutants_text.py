"""What the sampled mutation run of pricing/ let through in the request parser, the wire
renderer and the text and JSON cuts (docs/mutation.md): a request error names its field and
says what is wrong, a rendered message parses back to itself, a cut keeps lines and style, and
a capped message's parts share the budget as ``_cut_parts`` says."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest
from gpt4o_route import gpt4o_route

from pricing.capped import CapTooSmall, _cut_parts, cap_message
from pricing.jsoncut import Style, _Planner, detect_style, parse
from pricing.messages import (
    ImagePart,
    Message,
    RequestError,
    TextPart,
    message_wire,
    parse_message,
    parse_request,
    render_content,
)
from pricing.meter import measure_message
from pricing.textcut import _TOKEN_SNAP_AFTER, _TOKEN_SNAP_BEFORE, cut_points
from pricing.tokenizers import get_tokenizer

MARKER = re.compile(r"\[\.\.\. [\d,]+ tokens? elided \.\.\.\]")


def body(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **extra}


# --- pricing/messages.py ---------------------------------------------------------------------


def test_a_message_that_is_not_an_object_is_refused_naming_its_place() -> None:
    with pytest.raises(RequestError) as refused:
        parse_request(body({"role": "user", "content": "hi"}, "not a message"))
    assert refused.value.param == "messages[1]"
    assert "messages[1] must be an object" in str(refused.value)


def test_tool_calls_that_are_not_a_list_are_refused_saying_so() -> None:
    raw = {"role": "assistant", "content": None, "tool_calls": {"id": "c1"}}
    with pytest.raises(RequestError) as refused:
        parse_request(body(raw))
    assert refused.value.param == "messages[0].tool_calls"
    assert refused.value.message == "messages[0].tool_calls must be a list"
    assert str(refused.value) == refused.value.message


def test_an_image_url_given_as_a_bare_string_is_its_url() -> None:
    """The shorthand ``"image_url": "<url>"`` is read as ``{"url": "<url>"}``."""
    url = "https://example.com/cat.png"
    content = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": url}]
    [message] = parse_request(body({"role": "user", "content": content})).messages
    assert message.parts == (TextPart("what is this?"), ImagePart(url, "auto"))
    assert message.images == (ImagePart(url, "auto"),)


def test_legacy_functions_are_priced_as_tools() -> None:
    """``functions`` (the pre-``tools`` field) lists the schemas themselves; each one is a tool
    the request declares, priced like a ``tools[i].function``."""
    lookup = {"name": "lookup", "parameters": {"type": "object", "properties": {}}}
    search = {"name": "search", "description": "find things"}
    request = parse_request(body({"role": "user", "content": "hi"}, functions=[lookup, search]))
    assert request.tools == (lookup, search)


def test_a_stray_tool_call_id_outside_a_tool_message_is_ignored() -> None:
    """Only a tool message answers a call; the field elsewhere is forwarded (the wire dict is
    the client's) but ignored, whatever its type, so it is neither priced nor a 400."""
    for stray in ("call_1", 123):
        raw = {"role": "user", "content": "hello", "tool_call_id": stray}
        [message] = parse_request(body(raw)).messages
        assert message.tool_call_id is None
        assert message_wire(message)["tool_call_id"] == stray
        plain = parse_message({"role": "user", "content": "hello"}, 0)
        route = gpt4o_route()
        assert measure_message(message, route)[0] == measure_message(plain, route)[0]
    tool = parse_message({"role": "tool", "content": "42", "tool_call_id": "call_1"}, 0)
    assert tool.tool_call_id == "call_1"


def test_a_rendered_message_parses_back_to_the_same_parts_and_name() -> None:
    """A message built by routefit (no client wire dict) is rendered from its values; read back,
    the wire gives the same message: its name, its text and image parts in order."""
    parts = (
        TextPart("compare these"),
        ImagePart("https://example.com/a.png", "low"),
        TextPart("and"),
        ImagePart("data:image/png;base64,AAAA", "high"),
    )
    built = Message(role="user", parts=parts, name="alice")
    wire = message_wire(built)
    again = parse_message(wire, 0)
    assert (again.role, again.name, again.parts) == ("user", "alice", parts)


def test_keep_list_renders_one_wire_part_per_part() -> None:
    """``render_content(keep_list=True)``: re-parsing gives back the same parts, images
    included, each as a typed ``image_url`` part with its url and detail."""
    parts = (ImagePart("https://example.com/a.png", "low"), TextPart("caption"))
    rendered = render_content(parts, keep_list=True)
    assert isinstance(rendered, list)
    assert rendered[0] == {
        "type": "image_url",
        "image_url": {"url": "https://example.com/a.png", "detail": "low"},
    }
    assert parse_message({"role": "user", "content": rendered}, 0).parts == parts
    text_only = render_content((TextPart("a"), TextPart("b")), keep_list=True)
    assert parse_message({"role": "user", "content": text_only}, 0).parts == (
        TextPart("a"),
        TextPart("b"),
    )


# --- pricing/textcut.py ----------------------------------------------------------------------


def test_both_cut_points_land_on_line_starts_when_lines_are_near() -> None:
    """``cut_points``: each point moves to a line boundary within a 32nd of its kept part, so
    with lines shorter than that the kept head ends with a whole line and the kept tail starts
    with one (no line cut in half)."""
    tok = get_tokenizer("o200k_base")
    lines = [f"line {i:05d} ok" for i in range(4000)]  # 13 characters and a newline
    text = "\n".join(lines) + "\n"
    for kept in (2000, 4999, 12_345, 40_000):
        a, b = cut_points(text, tok, kept)
        assert 0 < a < b < len(text)
        assert text[a - 1] == "\n" and text[b - 1] == "\n"
        assert set(text[b:].splitlines()) <= set(lines)
        assert set(text[:a].splitlines()) <= set(lines)


# --- pricing/jsoncut.py ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "style"),
    [
        ('[1, 2, {"a":1, "b":2}]', Style(None, ", ", ":")),
        ('[1,2,{"a": 1,"b": 2}]', Style(None, ",", ": ")),
        ('{"a":[1,2], "b":3}', Style(None, ",", ":")),
        ('{"a": 1, "b": 2}', Style(None, ", ", ": ")),
    ],
)
def test_each_separator_is_read_from_the_document(text: str, style: Style) -> None:
    """``detect_style``: the item and key separators are the ones the document uses, each
    decided apart (a one-line document may space one and not the other)."""
    assert detect_style(text) == style


def test_a_narrow_containers_size_is_its_compact_encoding_length() -> None:
    """``_Planner._clen`` (its docstring): the length the C encoder writes compactly, pairs as
    2-arrays and numbers quoted. A narrow container near the top is summed from its children
    instead of encoded; the sum must be that same length."""
    tok = get_tokenizer("o200k_base")
    text = '{"name": "lookup", "n": 12, "ok": true, "tags": {"x": "y", "z": null}, "v": [1, 2]}'
    doc = parse(text)
    assert doc is not None
    planner = _Planner(doc, detect_style(text), tok, tok.count(text))
    for node in (doc, doc[3][1], doc[4][1]):
        assert planner._clen(node) == len(json.dumps(node, separators=(",", ":")))


# --- pricing/capped.py -----------------------------------------------------------------------


def log_lines(lines: int, tag: str) -> str:
    return "\n".join(f"{tag} {i:06d} worker={i % 7} status=ok bytes={i * 37}" for i in range(lines))


def test_capping_parts_at_the_reported_minimum_succeeds() -> None:
    """``CapTooSmall.minimum`` is the price of the smallest capped form, "so capping at
    ``minimum`` succeeds": for text parts of very different sizes too, whose bare markers cost
    different amounts (an even split of the minimum leaves the larger marker short)."""
    route = gpt4o_route()
    content = [
        {"type": "text", "text": log_lines(40, "small")},
        {"type": "text", "text": log_lines(4000, "large")},
    ]
    message = parse_message({"role": "user", "content": content}, 0)
    with pytest.raises(CapTooSmall) as refused:
        cap_message(message, 10, route)
    minimum = refused.value.minimum
    capped = cap_message(message, minimum, route)
    assert capped is not None and capped.kind == "parts"
    assert capped.tokens <= minimum
    assert all(MARKER.fullmatch(p.text) for p in capped.message.parts if isinstance(p, TextPart))


def test_what_the_cuts_leave_goes_to_the_largest_part_wherever_it_stands() -> None:
    """``_cut_parts``: JSON is cut at element granularity, so cuts land under their shares;
    what is left goes to the largest cut part, whichever place it has in the message. So the
    parts' order does not change how each is cut, and the larger part keeps no less."""
    tok = get_tokenizer("o200k_base")
    large = json.dumps([int("7" * 40) + i for i in range(120)])  # long numbers: never cut
    small = json.dumps([int("3" * 40) + i for i in range(60)])
    costs = [tok.count(large), tok.count(small)]
    for budget in (300, 400, 500, 600):
        first, _ = _cut_parts([large, small], costs, budget, tok)
        last, _ = _cut_parts([small, large], costs[::-1], budget, tok)
        assert first == last[::-1]
        assert sum(tok.count(t) for t in first) <= budget
        assert tok.count(first[0]) >= tok.count(first[1])


class Windows:
    """The real tokenizer, with a log of the texts it was asked for token starts of."""

    def __init__(self, spec: str) -> None:
        self.inner = get_tokenizer(spec)
        self.name = self.inner.name
        self.asked: list[str] = []

    def count(self, text: str) -> int:
        return self.inner.count(text)

    def prefetch(self, texts: Sequence[str]) -> None:
        self.inner.prefetch(texts)

    def boundaries(self, text: str) -> list[int]:
        self.asked.append(text)
        return self.inner.boundaries(text)


def test_a_cut_point_without_a_line_nearby_tokenizes_only_a_few_dozen_characters() -> None:
    """textcut's design (its module docstring): the original is never tokenized again by a cut;
    a point with no line boundary nearby snaps to a token start found by tokenizing the few
    dozen characters around it (``_TOKEN_SNAP_BEFORE`` on the side it may move to, and
    ``_TOKEN_SNAP_AFTER`` on the other), whichever way it moves."""
    window = _TOKEN_SNAP_BEFORE + _TOKEN_SNAP_AFTER
    text = " ".join(f"word{i}" for i in range(20_000))  # one line: no line boundary anywhere
    starts = set(get_tokenizer("o200k_base").boundaries(text))
    for kept in (1000, 7777, 50_000):
        tok = Windows("o200k_base")
        a, b = cut_points(text, tok, kept)
        assert 0 < a < b < len(text)
        assert len(tok.asked) == 2  # one window per point
        assert all(len(asked) <= window for asked in tok.asked)
        assert a in starts and b in starts  # no token is cut in half
