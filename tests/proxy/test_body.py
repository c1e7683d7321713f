"""A JSON body read for routefit to write back (``proxy.body._decode``): refused when it is
nested deeper than orjson writes, whichever way that is found out — by walking a body of long
strings (writing it would escape every quote of a session's JSON tool outputs), by writing any
other."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from watched import watch_writes

import proxy.body
from proxy.body import _MAX_DEPTH, _decode
from proxy.errors import ProxyError

#: A tool's JSON output, as a session carries it: every quote and newline an escape.
OUTPUT = "".join(f'{{\n  "id": {i},\n  "name": "item \\"{i}\\""\n}}\n' for i in range(600))


def nested(depth: int, leaf: str = "1") -> str:
    """JSON text ``depth`` objects and arrays deep (alternating), as text."""
    opens = "".join('{"a": ' if i % 2 == 0 else "[" for i in range(depth))
    closes = "".join("}" if i % 2 == 0 else "]" for i in reversed(range(depth)))
    return opens + leaf + closes


def body(depth: int, outputs: int) -> bytes:
    """A session's body: ``outputs`` long tool outputs and, in one field, a value ``depth``
    deep (the body and its list of messages are two levels more)."""
    messages = [
        {"role": "tool", "tool_call_id": f"c{i}", "content": OUTPUT} for i in range(outputs)
    ]
    text = json.dumps({"model": "m", "messages": messages, "metadata": "__DEEP__"})
    return text.replace('"__DEEP__"', nested(depth)).encode()


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(_MAX_DEPTH - 6, _MAX_DEPTH + 4), outputs=st.sampled_from([0, 1, 40]))
def test_a_body_is_refused_exactly_when_orjson_cannot_write_it_back(depth, outputs):
    raw = body(depth, outputs)
    try:
        orjson.dumps(orjson.loads(raw))
        writable = True
    except TypeError:
        writable = False
    if writable:
        assert _decode(raw) == orjson.loads(raw)
    else:
        with pytest.raises(ProxyError) as refused:
            _decode(raw)
        assert refused.value.status == 400 and "nested more than" in refused.value.message


def test_a_body_of_long_strings_is_walked_not_written(monkeypatch):
    writes = watch_writes(monkeypatch, proxy.body)
    raw = body(10, 40)  # ~600 KB: a few hundred objects and arrays
    assert len(raw) > 500_000
    _decode(raw)
    assert writes.wrote == 0
    with pytest.raises(ProxyError):
        _decode(body(_MAX_DEPTH, 40))  # too deep, found by the walk
    assert writes.wrote == 0


def test_a_body_of_many_small_objects_is_written_not_walked(monkeypatch):
    writes = watch_writes(monkeypatch, proxy.body)
    for text in ("x", 'a "quoted" word'):  # few escapes, or many in many small objects
        parts = [{"type": "text", "text": text} for _ in range(20_000)]
        _decode(orjson.dumps({"model": "m", "messages": [{"role": "user", "content": parts}]}))
    assert writes.wrote == 2

    for scalar in (b'"just a string"', b"12", orjson.dumps('a "quoted" word\n' * 20_000)):
        assert _decode(scalar) == orjson.loads(scalar)  # JSON, nothing nested: the wire refuses it
