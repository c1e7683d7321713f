"""Capped messages: never over the cap as rendered, tight, valid JSON, deterministic.

Every check prices the capped message with ``pricing.meter.measure_message`` — the same function
the fitter uses — on the message's real wire form, so a cut that is budgeted on anything else
(the raw slice, the text before escaping) fails here.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pricing.capped import (
    SMALL_CAP,
    SMALL_JSON_CAP,
    Capped,
    CapTooSmall,
    cap_message,
    cap_text,
    cappable,
    cut_text,
)
from pricing.framing import Framing, default_framing
from pricing.messages import ImagePart, Message, TextPart, message_wire, parse_message
from pricing.meter import measure_message
from pricing.route import Route
from pricing.tokenizers import get_tokenizer

OPENAI = Route(alias="gpt-4o", model="gpt-4o")
DEEPSEEK = Route(
    alias="deepseek-chat",
    model="deepseek-chat",
    tokenizer="deepseek",
    framing=default_framing("deepseek-chat", "deepseek"),
)
HEURISTIC = Route(
    alias="claude", model="claude-sonnet", tokenizer="heuristic:3.5", framing=Framing("generic")
)
ROUTES = [OPENAI, DEEPSEEK, HEURISTIC]
ROUTE_IDS = ["o200k-openai", "deepseek", "heuristic"]

MARKER = re.compile(r"\[\.\.\. (?:(\d+) (?:items?|keys?) \()?([\d,]+) tokens?\)? elided \.\.\.\]")
#: ``CAPPED_EXAMPLES=500 pytest ...`` for a deeper run than the default suite's.
EXAMPLES = int(os.environ.get("CAPPED_EXAMPLES", "12"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def tool(content: Any, **extra: Any) -> Message:
    return parse_message({"role": "tool", "tool_call_id": "call_1", "content": content, **extra}, 0)


def price(message: Message, route: Route) -> int:
    pressure, _ = measure_message(message, route)
    return pressure.text + pressure.framing


def fixed_cost(message: Message, route: Route) -> int:
    """The message's price beyond its text parts (framing, tool-call text)."""
    tok = get_tokenizer(route.tokenizer)
    return price(message, route) - sum(
        tok.count(p.text) for p in message.parts if isinstance(p, TextPart)
    )


def check(message: Message, cap: int, route: Route) -> Capped | None:
    """The contract of ``cap_message``, asserted on the rendered result."""
    before = price(message, route)
    budget = cap - fixed_cost(message, route)
    texts = sum(isinstance(p, TextPart) for p in message.parts)
    try:
        capped = cap_message(message, cap, route)
    except CapTooSmall as exc:
        assert before > cap and exc.minimum > cap
        assert budget < SMALL_CAP * texts, "only small caps may be too small for a marker"
        return None
    if before <= cap:
        assert capped is None
        return None
    assert capped is not None
    pressure, images = measure_message(capped.message, route)
    assert pressure.text + pressure.framing == capped.tokens <= cap
    small = {"text": SMALL_CAP, "json": SMALL_JSON_CAP, "parts": SMALL_JSON_CAP * texts}
    if budget >= small[capped.kind]:
        assert capped.tokens >= 0.9 * cap, (capped.tokens, cap)
    # The wire dict is the message: parsing it back gives the very parts that were priced.
    assert capped.message.wire is not None
    assert parse_message(dict(capped.message.wire), 0).parts == capped.message.parts
    # Images stay untouched, in place, priced as before.
    old = [(j, p) for j, p in enumerate(message.parts) if isinstance(p, ImagePart)]
    new = [(j, p) for j, p in enumerate(capped.message.parts) if isinstance(p, ImagePart)]
    assert old == new
    assert images == measure_message(message, route)[1]
    for key in ("role", "tool_call_id", "name"):
        assert capped.message.wire.get(key) == message_wire(message).get(key)
    if capped.kind == "json":
        json.loads(capped.message.wire["content"])
    assert capped.removed_tokens >= 0
    assert cap_message(message, cap, route) == capped  # deterministic
    return capped


# --- the raw-budgeted overshoot, reproduced and fixed -----------------------------------------


def seed_entry() -> dict[str, Any]:
    """103 short-field records, one of them larger than the whole budget."""
    items = [
        {
            "id": f"m{i}",
            "text": "t" * 90,
            "fact_type": "observation",
            "entities": [{"canonical": "X", "type": "product", "mentions": ["x"]}],
            "mentioned_at": "2026-09-17T00:00:00+00:00",
            "tags": ["a", "b"],
            "source_fact_ids": [f"s{i}"],
        }
        for i in range(103)
    ]
    items[0]["text"] = items[0]["text"] * 40
    return {"tool": "recall", "input": {}, "output": {"query": "q", "memories": items}}


def raw_budgeted_cut(entry: dict[str, Any], budget: int) -> str:
    """The naive approach: fit the *raw* serialized output to the budget, then wrap it and
    render the wrapper; nothing prices the rendered form."""
    tok = get_tokenizer("o200k_base")
    raw = json.dumps(entry["output"], indent=2)
    while (n := tok.count(raw)) > budget:
        raw = raw[: int(len(raw) * budget / n * 0.99)]
    return json.dumps({**entry, "output": {"truncated": True, "content": raw}}, indent=2)


def test_raw_budgeted_cut_renders_over_budget_and_routefit_does_not() -> None:
    tok = get_tokenizer("o200k_base")
    entry, budget = seed_entry(), 9830
    naive = tok.count(raw_budgeted_cut(entry, budget))
    assert naive > budget * 1.05  # the escaping of the wrapped slice is not free

    message = tool(json.dumps(entry, indent=2))
    capped = check(message, budget, OPENAI)
    assert capped is not None and capped.kind == "json"
    assert 0.9 * budget <= capped.tokens <= budget
    out = capped.message.wire["content"]
    assert out.startswith('{\n  "tool": "recall",')  # re-rendered in the original indent=2
    memories = json.loads(out)["output"]["memories"]
    original = entry["output"]["memories"]
    assert memories[0] == original[0] and memories[-1] == original[-1]  # both ends whole
    markers = [m for m in memories if isinstance(m, str)]
    assert len(markers) == 1 and MARKER.fullmatch(markers[0])  # one marker for the middle

    # With a budget below the oversized record alone, that record is kept in part: its text is
    # cut inside the JSON string, and the string's escaping is what gets priced.
    tok_first = tok.count(json.dumps(original[0], indent=2))
    capped = check(message, tok_first - 200, OPENAI)
    assert capped is not None and capped.kind == "json"
    first = json.loads(capped.message.wire["content"])["output"]["memories"][0]
    assert first["id"] == "m0" and MARKER.search(first["text"])


# --- plain text ------------------------------------------------------------------------------


def log_text(lines: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    out = [
        f"2026-05-01T12:{i % 60:02d}:{(i * 7) % 60:02d}Z INFO [worker-{i % 8}] "
        f"req={rng.getrandbits(64):016x} GET /api/v1/items/{i} status=200 took={rng.random():.3f}s"
        for i in range(lines)
    ]
    return "\n".join(["$ make test", *out, "FAILED tests/test_x.py::test_y - KeyError: 'z'"])


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_plain_text_keeps_head_and_tail_around_one_marker(route: Route) -> None:
    text = log_text(3000)
    capped = check(tool(text), 2000, route)
    assert capped is not None and capped.kind == "text"
    out = capped.message.wire["content"]
    assert out.startswith("$ make test\n")
    assert out.endswith("FAILED tests/test_x.py::test_y - KeyError: 'z'")
    head, marker, tail = out.partition("\n[... ")
    assert marker and head.count("\n") > tail.count("\n") > 0  # about 60/40, line-aligned
    assert_marker_reports_the_middle(text, out, capped.removed_tokens, route)


def assert_marker_reports_the_middle(text: str, out: str, removed: int, route: Route) -> None:
    """The marker's number is the removed middle's token count, up to 2% (an estimate)."""
    (m,) = MARKER.finditer(out)
    reported = int(m.group(2).replace(",", ""))
    assert reported == removed
    head, tail = out[: m.start()], out[m.end() :]
    head = head if text.startswith(head) else head[:-1]  # the separator before the marker
    tail = tail if text.endswith(tail) else tail[1:]
    assert text.startswith(head) and text.endswith(tail)
    middle = get_tokenizer(route.tokenizer).count(text[len(head) : len(text) - len(tail)])
    assert abs(reported - middle) <= 0.02 * middle + 8, (reported, middle)


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_marker_counts_the_middle_even_when_density_varies(route: Route) -> None:
    """Emoji at the head, plain words in the middle, CJK at the tail: the average density says
    little about the middle, the measured price of the cut does."""
    text = "😀🚀🎉👩‍👩‍👧 " * 300 + "\n" + "plain words here " * 2000 + "\n" + "漢字のテスト" * 400
    capped = check(tool(text), 1500, route)
    assert capped is not None
    assert_marker_reports_the_middle(
        text, capped.message.wire["content"], capped.removed_tokens, route
    )


def test_cap_text_and_cut_text_agree() -> None:
    tok = get_tokenizer("o200k_base")
    text = log_text(500)
    cut = cut_text(text, 700, tok)
    assert cut is not None and cut.tokens == tok.count(cut.text) <= 700
    assert cap_text(text, 750, OPENAI, overhead=50) == cut.text
    assert cap_text("short", 10, OPENAI) == "short"
    assert cut_text("short", 10, tok) is None


def test_marker_alone_is_the_smallest_form_and_below_it_cap_too_small() -> None:
    message = tool(log_text(400))
    with pytest.raises(CapTooSmall) as info:
        cap_message(message, 8, OPENAI)
    minimum = info.value.minimum
    assert minimum > 8
    capped = cap_message(message, minimum, OPENAI)
    assert capped is not None and capped.tokens <= minimum
    assert MARKER.fullmatch(capped.message.wire["content"])


def test_a_message_with_nothing_to_cut_is_too_small() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "x" * 4000}}
    message = parse_message({"role": "assistant", "content": None, "tool_calls": [call]}, 0)
    with pytest.raises(CapTooSmall):
        cap_message(message, 100, OPENAI)
    assert cap_message(message, 10_000, OPENAI) is None


def test_cappable_follows_roles_and_needs_text() -> None:
    assert cappable(tool("x"), frozenset({"tool"}))
    assert not cappable(tool("x"), frozenset({"user"}))
    assert not cappable(tool(""), frozenset({"tool"}))
    system = parse_message({"role": "system", "content": "x"}, 0)
    assert not cappable(system, frozenset({"tool", "user"}))


# --- JSON ------------------------------------------------------------------------------------

STYLES: list[dict[str, Any]] = [
    {},
    {"indent": 2},
    {"indent": 4, "ensure_ascii": False},
    {"indent": "\t"},
    {"separators": (",", ":")},
    {"separators": (",", ":"), "ensure_ascii": False},
]


# no backslash in an id: mutmut hands ids to pytest.main, which finds none with a `\\t` in it
@pytest.mark.parametrize("style", STYLES, ids=[repr(s).replace("\\t", "<tab>") for s in STYLES])
def test_json_cut_keeps_the_original_style(style: dict[str, Any]) -> None:
    doc = {"rows": [{"id": i, "name": f"row é {i}", "ok": i % 2 == 0} for i in range(400)]}
    capped = check(tool(json.dumps(doc, **style)), 600, OPENAI)
    assert capped is not None and capped.kind == "json"
    out = capped.message.wire["content"]
    assert json.dumps(json.loads(out), **style) == out  # byte-for-byte the same style


def test_json_markers_name_what_was_dropped() -> None:
    doc = {f"k{i}": list(range(i, i + 30)) for i in range(60)}
    doc["..."] = "a key that looks like the marker key"
    capped = check(tool(json.dumps(doc)), 500, OPENAI)
    assert capped is not None
    out = json.loads(capped.message.wire["content"])
    keys = list(out)
    assert keys[0] == "k0" and keys[-1] == "..."  # head and tail kept in order
    (marker_key,) = [k for k in keys if k.startswith("...") and k != "..."]
    assert marker_key == "...2"
    m = MARKER.fullmatch(out[marker_key])
    assert m is not None and int(m.group(1)) > 10
    array = json.loads(capped.message.wire["content"])
    assert all(isinstance(v, (list, str)) for v in array.values())


def test_json_numbers_and_duplicate_keys_survive_as_written() -> None:
    rows = ", ".join(
        f'{{"v": 1.10, "big": 1e400, "n": -0, "id": {i}, "id": "dup"}}' for i in range(300)
    )
    capped = check(tool(f'{{"rows": [{rows}]}}'), 400, OPENAI)
    assert capped is not None and capped.kind == "json"
    out = capped.message.wire["content"]
    assert '{"v": 1.10, "big": 1e400, "n": -0, "id": 0, "id": "dup"}' in out


def test_json_with_nan_is_cut_as_text() -> None:
    capped = check(tool(json.dumps([float("nan"), *range(3000)])), 300, OPENAI)
    assert capped is not None and capped.kind == "text"


def test_json_string_cut_prices_its_escaping() -> None:
    """One huge string inside JSON, dense with characters JSON must escape."""
    inner = json.dumps([{"q": 'say "hi"\n', "path": "C:\\x\\y"} for _ in range(3000)])
    content = json.dumps({"stdout": inner, "exit_code": 1})
    for route in ROUTES:
        capped = check(tool(content), 1500, route)
        assert capped is not None and capped.kind == "json"
        out = json.loads(capped.message.wire["content"])
        assert out["exit_code"] == 1 and MARKER.search(out["stdout"])
        assert out["stdout"].startswith(inner[:50]) and out["stdout"].endswith(inner[-50:])


# --- content parts ---------------------------------------------------------------------------


def test_parts_cut_the_large_text_and_keep_images_and_small_parts_in_place() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    caption = {"type": "text", "text": "What failed here?", "cache_control": {"type": "ephemeral"}}
    big = {"type": "text", "text": log_text(2000), "cache_control": {"type": "ephemeral"}}
    message = parse_message({"role": "user", "content": [caption, image, big, image]}, 0)
    capped = check(message, 1000, OPENAI)
    assert capped is not None and capped.kind == "parts"
    content = capped.message.wire["content"]
    assert content[0] is caption and content[1] is image and content[3] is image
    assert content[2]["cache_control"] == {"type": "ephemeral"}  # the part's own keys survive
    assert MARKER.search(content[2]["text"])


def test_parts_of_a_message_without_wire_are_rendered() -> None:
    message = Message(role="tool", parts=(TextPart(log_text(800)),), tool_call_id="c9")
    capped = check(message, 500, OPENAI)
    assert capped is not None
    assert capped.message.wire == {
        "role": "tool",
        "content": capped.message.text,
        "tool_call_id": "c9",
    }


# --- tokenizations ---------------------------------------------------------------------------


class CountingTokenizer:
    """The real tokenizer, with a log of what it was asked to tokenize."""

    def __init__(self, spec: str) -> None:
        self.inner = get_tokenizer(spec)
        self.name = self.inner.name
        self.counted: list[int] = []
        self.bounded: list[int] = []

    def count(self, text: str) -> int:
        self.counted.append(len(text))
        return self.inner.count(text)

    def boundaries(self, text: str) -> list[int]:
        self.bounded.append(len(text))
        return self.inner.boundaries(text)


def big_json(records: int) -> str:
    rows = [
        {
            "ts": f"2026-05-01T12:00:{i % 60:02d}Z",
            "level": "INFO" if i % 7 else "WARN",
            "msg": f'GET "/api/v1/items/{i}" -> 200\n',
            "tags": ["http", f"w{i % 8}"],
            "latency_ms": round(i * 0.37, 2),
        }
        for i in range(records)
    ]
    return json.dumps({"results": rows, "count": records}, indent=2)


@pytest.mark.parametrize("kind", ["text", "json"])
def test_a_megabyte_is_tokenized_once_and_the_cut_a_logarithmic_number_of_times(kind: str) -> None:
    text = log_text(9000, seed=7) if kind == "text" else big_json(5500)
    assert len(text) > 900_000
    tok = CountingTokenizer("o200k_base")
    cut = cut_text(text, 8000, tok)
    assert cut is not None and cut.kind == kind and 7200 <= cut.tokens <= 8000
    whole = [n for n in tok.counted if n == len(text)]
    assert whole == [len(text)]  # priced once (the meter's memoised count in the gateway)
    assert sum(tok.bounded) < len(text) // 10  # boundaries only near the two ends
    candidates = [n for n in tok.counted if 200 < n < len(text)]
    total = get_tokenizer("o200k_base").count(text)
    assert len(candidates) <= 3 + (total + 2).bit_length()
    assert len(candidates) <= 4  # and in practice a couple of steps land


# --- properties ------------------------------------------------------------------------------

ESCAPES = st.sampled_from(list('"\\\n\t\r\x00\x01\x1f\u2028/é中😀 ab'))
SHORT = st.text(ESCAPES | st.characters(codec="utf-8"), max_size=12)
SCALAR = (
    SHORT
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.none()
)
RECORD = st.fixed_dictionaries(
    {"id": st.integers(0, 10**6), "t": SHORT, "tags": st.lists(SHORT, max_size=3), "v": SCALAR}
)
NESTED = st.recursive(
    SCALAR,
    lambda children: st.lists(children, max_size=8) | st.dictionaries(SHORT, children, max_size=8),
    max_leaves=60,
)
CAPS = st.one_of(st.integers(0, 80), st.floats(0.02, 0.98))


def cap_for(message: Message, route: Route, drawn: float) -> int:
    """A drawn cap: a small absolute one, or a fraction of the message's price."""
    return int(drawn) if isinstance(drawn, int) else max(1, int(price(message, route) * drawn))


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@PROPERTY
@given(
    rows=st.lists(RECORD, min_size=20, max_size=90),
    style=st.sampled_from(STYLES),
    drawn=CAPS,
)
def test_dense_json_records(
    route: Route, rows: list[Any], style: dict[str, Any], drawn: float
) -> None:
    message = tool(json.dumps({"ok": True, "rows": rows}, **style))
    capped = check(message, cap_for(message, route, drawn), route)
    if capped is not None:
        assert capped.kind == "json"


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@PROPERTY
@given(
    docs=st.lists(NESTED, min_size=1, max_size=12),
    style=st.sampled_from(STYLES),
    drawn=CAPS,
)
def test_nested_json(route: Route, docs: list[Any], style: dict[str, Any], drawn: float) -> None:
    message = tool(json.dumps({"docs": docs, "more": {"deep": docs[::-1]}}, **style))
    capped = check(message, cap_for(message, route, drawn), route)
    if capped is not None:
        assert capped.kind == "json"


CJK = st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF)
EMOJI = st.sampled_from(["😀", "👩‍👩‍👧", "👍🏽", "🇫🇷", "❤️", "\u200d", "\ufe0f"])
WHITESPACE = st.sampled_from([" " * 40, "\n" * 12, "\t\t", "  \n  ", "\r\n"])
TEXTISH = st.lists(
    st.text(CJK, min_size=1, max_size=40)
    | st.lists(EMOJI, min_size=1, max_size=20).map("".join)
    | WHITESPACE
    | st.text(st.characters(codec="utf-8"), max_size=30),
    min_size=5,
    max_size=40,
)


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@PROPERTY
@given(pieces=TEXTISH, repeat=st.integers(1, 30), drawn=CAPS)
def test_cjk_emoji_and_whitespace_text(
    route: Route, pieces: list[str], repeat: int, drawn: float
) -> None:
    text = "".join(f"{p}{i}" for i in range(repeat) for p in pieces)
    message = tool(text)
    check(message, cap_for(message, route, drawn), route)


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@settings(max_examples=max(4, EXAMPLES // 4), deadline=None)
@given(seed=st.integers(0, 2**32), drawn=CAPS, wrap=st.booleans())
def test_one_blob_longer_than_the_cap(route: Route, seed: int, drawn: float, wrap: bool) -> None:
    """50k characters without a space: tokens come from inside one pre-token."""
    blob = base64.b64encode(random.Random(seed).randbytes(37_500)).decode()
    message = tool(json.dumps({"blob": blob}) if wrap else blob)
    capped = check(message, cap_for(message, route, drawn), route)
    if capped is not None and wrap:
        assert capped.kind == "json"


IMAGE = st.builds(
    lambda n, detail: {
        "type": "image_url",
        "image_url": {"url": f"https://example.com/{n}.png", "detail": detail},
    },
    st.integers(0, 99),
    st.sampled_from(["auto", "low", "high"]),
)


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@PROPERTY
@given(
    texts=st.lists(
        st.builds(
            lambda rows, n: json.dumps(rows) if n % 2 else log_text(n),
            st.lists(RECORD),
            st.integers(0, 300),
        ),
        min_size=1,
        max_size=4,
    ),
    images=st.lists(IMAGE, max_size=3),
    order=st.randoms(use_true_random=False),
    drawn=CAPS,
)
def test_content_parts_with_images(
    route: Route, texts: list[str], images: list[dict[str, Any]], order: random.Random, drawn: float
) -> None:
    parts: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts] + images
    order.shuffle(parts)
    message = parse_message({"role": "user", "content": parts}, 0)
    capped = check(message, cap_for(message, route, drawn), route)
    if capped is not None:
        assert capped.kind == "parts"
        for old, new in zip(parts, capped.message.wire["content"], strict=True):
            assert (old is new) if old["type"] == "image_url" else new["type"] == "text"


def _same_bytes(make: Callable[[], Capped | None]) -> None:
    first, second = make(), make()
    assert first is not None and second is not None
    assert json.dumps(first.message.wire) == json.dumps(second.message.wire)


def test_same_input_same_bytes_across_routes() -> None:
    content = json.dumps(seed_entry())
    for route in ROUTES:
        _same_bytes(lambda route=route: cap_message(tool(content), 3000, route))


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_lone_surrogates_stay_escaped(route: Route) -> None:
    """Escaped lone surrogates are legal JSON text; written raw they would not be UTF-8."""
    rows = ", ".join(f'"row {i} \\udc00 é"' for i in range(2000))
    capped = check(tool(f'["é", "\\ud800x", {rows}]'), 600, route)
    assert capped is not None and capped.kind == "json"
    capped.message.wire["content"].encode("utf-8")  # no lone surrogate on the wire


def test_deeply_nested_json_is_still_capped() -> None:
    """Deeper than Python recursion goes: parsed or not, the cut must hold."""
    for depth in (400, 5000):
        content = "[" * depth + json.dumps(list(range(4000))) + "]" * depth
        capped = check(tool(content), 700, OPENAI)
        assert capped is not None
