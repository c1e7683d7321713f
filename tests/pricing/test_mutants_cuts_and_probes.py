"""What the mutation run of pricing/ let through in the request parser's errors, the cuts (plain,
JSON, per part) and the image probe (docs/mutation.md): a request error names its field and says
what is wrong, a JSON cut accounts for every element and keeps more head than tail, a message
whose wire carries no content gets its cut content, and a probe's refusals say what is wrong."""

from __future__ import annotations

import base64
import json
import re
import struct
from typing import Any

import pytest
from gpt4o_route import gpt4o_route

from pricing.capped import _cut_parts, cap_message, cut_text
from pricing.messages import Message, RequestError, TextPart, parse_message, parse_request
from pricing.probe import Header, ImageError, check_header, probe, read_header
from pricing.route import ImageLimits
from pricing.textcut import splice
from pricing.tokenizers import get_tokenizer

ITEMS_MARKER = re.compile(r"\[\.\.\. ([\d,]+) items? \([\d,]+ tokens?\) elided \.\.\.\]")


def body(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **extra}


# --- pricing/messages.py ---------------------------------------------------------------------


def test_a_body_that_is_not_an_object_is_refused_saying_so() -> None:
    with pytest.raises(RequestError) as refused:
        parse_request(["not", "an", "object"])
    assert refused.value.message == "the request body must be a JSON object"
    assert refused.value.param is None


@pytest.mark.parametrize("messages", [[], None, "hi"], ids=["empty", "missing", "a-string"])
def test_messages_that_are_not_a_non_empty_list_are_refused_saying_so(messages: Any) -> None:
    with pytest.raises(RequestError) as refused:
        parse_request({"model": "m", "messages": messages})
    assert refused.value.param == "messages"
    assert refused.value.message == "messages must be a non-empty list"


@pytest.mark.parametrize("kind", ["text", "refusal"])
def test_a_text_part_that_is_not_a_string_is_refused_naming_its_field(kind: str) -> None:
    content = [{"type": "text", "text": "ok"}, {"type": kind, kind: 42}]
    with pytest.raises(RequestError) as refused:
        parse_request(body({"role": "user", "content": content}))
    assert refused.value.param == f"messages[0].content[1].{kind}"
    assert refused.value.message == f"messages[0].content[1].{kind} must be a string"


def test_an_unknown_image_detail_is_refused_listing_the_details() -> None:
    image = {"url": "https://example.com/a.png", "detail": "ultra"}
    content = [{"type": "image_url", "image_url": image}]
    with pytest.raises(RequestError) as refused:
        parse_request(body({"role": "user", "content": content}))
    assert refused.value.param == "messages[0].content[0].image_url.detail"
    for detail in ("auto", "low", "high", "original"):
        assert repr(detail) in refused.value.message


@pytest.mark.parametrize(
    ("role", "shown"),
    [(None, "None"), (True, "True"), (7, "7"), (1.5, "1.5"), (["user"], "of type list")],
    ids=["none", "bool", "int", "float", "list"],
)
def test_a_bad_role_is_shown_by_its_value_when_it_is_a_scalar(role: Any, shown: str) -> None:
    """``_show``: a client's scalar appears as itself in the error; a container only by type."""
    with pytest.raises(RequestError) as refused:
        parse_request(body({"role": role, "content": "hi"}))
    assert refused.value.param == "messages[0].role"
    assert refused.value.message.startswith(f"messages[0].role {shown} is not one of [")


# --- pricing/capped.py -----------------------------------------------------------------------


def test_parts_that_fit_their_budget_come_back_uncut() -> None:
    """``_cut_parts``: each part gets its water-filled share; with room for every part the
    shares are the parts themselves and nothing is cut or reported removed."""
    tok = get_tokenizer("o200k_base")
    texts = ["a short caption", "\n".join(f"line {i}: all fine" for i in range(40))]
    costs = [tok.count(t) for t in texts]
    out, removed = _cut_parts(texts, costs, 2 * sum(costs) + 100, tok)
    assert out == texts
    assert removed == 0


def test_a_capped_message_whose_wire_has_no_content_gets_its_cut_content() -> None:
    """``_rebuild``: the capped message's wire dict keeps the client's other keys and carries
    the cut parts as its ``content`` (a message built with a wire dict holding no content)."""
    route = gpt4o_route()
    text = "\n".join(f"{i:05d} the build step printed this line" for i in range(600))
    message = Message("user", (TextPart(text),), name="ci", wire={"role": "user", "name": "ci"})
    capped = cap_message(message, 500, route)
    assert capped is not None
    wire = capped.message.wire
    assert wire is not None
    assert set(wire) == {"role", "name", "content"}
    assert parse_message(wire, 0).parts == capped.message.parts
    assert capped.message.parts != message.parts


# --- pricing/jsoncut.py ----------------------------------------------------------------------


def numbers(n: int) -> list[int]:
    return [10**30 + 7 * i for i in range(n)]  # long numbers: atomic, never cut inside


@pytest.mark.parametrize("budget", [120, 200, 320, 480])
def test_a_cut_array_accounts_for_every_element(budget: int) -> None:
    """A JSON cut keeps whole elements from each end and one marker says how many it dropped:
    kept plus dropped is the original count, and the kept ones are its head and its tail."""
    tok = get_tokenizer("o200k_base")
    original = numbers(200)
    cut = cut_text(json.dumps(original), budget, tok)
    assert cut is not None and cut.kind == "json" and cut.tokens <= budget
    doc = json.loads(cut.text)
    [at] = [k for k, v in enumerate(doc) if isinstance(v, str)]
    match = ITEMS_MARKER.fullmatch(doc[at])
    assert match is not None
    head, tail = doc[:at], doc[at + 1 :]
    assert len(head) + len(tail) + int(match.group(1).replace(",", "")) == len(original)
    assert head == original[: len(head)]
    assert tail == original[len(original) - len(tail) :]


@pytest.mark.parametrize("budget", [200, 320, 480, 800])
def test_a_cut_array_keeps_more_of_its_head_than_of_its_tail(budget: int) -> None:
    """docs/capping.md: elements are kept whole from each end, 60% of the share from the head,
    40% from the tail; with elements of one size the head keeps at least as many."""
    tok = get_tokenizer("o200k_base")
    cut = cut_text(json.dumps(numbers(300)), budget, tok)
    assert cut is not None and cut.kind == "json"
    doc = json.loads(cut.text)
    [at] = [k for k, v in enumerate(doc) if isinstance(v, str)]
    head, tail = at, len(doc) - at - 1
    assert tail >= 1
    assert head >= tail


# --- pricing/textcut.py ----------------------------------------------------------------------


@pytest.mark.parametrize("sep", [" ", "\n"])
def test_a_marker_before_a_line_break_gets_no_separator_of_its_own(sep: str) -> None:
    """``splice``: the marker is set apart by ``sep`` only where it would glue onto a word; a
    tail that starts a new line is apart already."""
    assert splice("head", "[m]", "\ntail", sep) == f"head{sep}[m]\ntail"
    assert splice("head\n", "[m]", "tail", sep) == f"head\n[m]{sep}tail"


# --- pricing/probe.py ------------------------------------------------------------------------


def jpeg(*segments: bytes) -> bytes:
    return b"\xff\xd8" + b"".join(segments)


def test_a_jpeg_whose_scan_comes_before_any_frame_is_refused_as_corrupt() -> None:
    raw = jpeg(b"\xff\xe0\x00\x04ab", b"\xff\xda\x00\x08")
    with pytest.raises(ImageError) as refused:
        read_header(raw)
    assert str(refused.value) == "corrupt JPEG: no frame header before the image data"


def test_a_jpeg_segment_shorter_than_its_length_field_is_refused_as_corrupt() -> None:
    raw = jpeg(b"\xff\xe0\x00\x01", b"\x00" * 16)
    with pytest.raises(ImageError) as refused:
        read_header(raw)
    assert str(refused.value) == "corrupt JPEG: bad segment length"


def test_an_image_of_exactly_the_pixel_limit_is_accepted() -> None:
    """docs/images.md: declared pixels *over* ``max_image_pixels`` are refused; at the limit,
    the image is sized from its header."""
    limits = ImageLimits(max_image_pixels=640 * 480)
    check_header(Header("jpeg", 640, 480), limits)
    frame = b"\xff\xc0\x00\x11\x08" + struct.pack(">HH", 480, 640) + b"\x03" + b"\x00" * 9
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg(frame) + b"\x00" * 32).decode()
    info = probe(url, limits, scope=b"exactly-at-the-limit")
    assert info is not None and (info.width, info.height) == (640, 480)
    with pytest.raises(ImageError):
        check_header(Header("jpeg", 641, 480), limits)
