"""Keys of long texts (``pricing.digest``): a message's memo key and its anchors' prefix keys
digest a long text apart instead of writing it out as JSON again, and still tell every two
different messages apart and find the same message again."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from watched import watch_writes

import pricing.digest
import pricing.meter
import proxy.calibrator
from pricing.digest import DIGEST_ABOVE, long_digest, text_key, value_digest
from pricing.messages import parse_request
from pricing.meter import MessageCache
from pricing.route import Route
from proxy.calibrator import prefix_keys

ROUTE = Route("gpt", "gpt-4o", tokenizer="o200k_base")
#: A tool's JSON output: every quote and newline an escape when written as JSON.
RECORD = '{\n  "id": %d,\n  "name": "item \\"%d\\"",\n  "tags": ["a", "b"]\n}\n'
LONG = "".join(RECORD % (i, i) for i in range(400))


def messages(content: str, arguments: str = "{}") -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": arguments}}
    return [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": content},
    ]


def parsed(msgs: list[dict[str, Any]]):
    """As a new request brings them: new objects, the same content."""
    return parse_request({"model": "m", "messages": json.loads(json.dumps(msgs))}).messages


def memo_keys(msgs: list[dict[str, Any]]) -> list[bytes | None]:
    prefix = MessageCache.prefix(ROUTE)
    out, prev = [], None
    for m in parsed(msgs):
        out.append(MessageCache.key(m, prev, prefix))
        prev = m.role
    return out


def anchor_keys(msgs: list[dict[str, Any]]) -> list[bytes]:
    ms = parsed(msgs)
    return prefix_keys("r", "gpt-4o", None, msgs, "team", [m.long for m in ms])


def test_a_long_text_is_keyed_by_its_digest_and_never_written_out(monkeypatch):
    assert len(LONG) > DIGEST_ABOVE
    writes = watch_writes(monkeypatch, pricing.meter, pricing.digest, proxy.calibrator)
    for keys in (memo_keys(messages(LONG)), anchor_keys(messages(LONG, arguments=LONG))):
        assert all(keys)
    assert 0 < writes.longest < 1_000  # the keys' JSON, never the 20 KB text's


@pytest.mark.parametrize("keys", [memo_keys, anchor_keys])
def test_the_same_long_text_has_the_same_key_and_another_text_another(keys):
    same = keys(messages(LONG))
    assert keys(messages(LONG)) == same  # the next turn finds it
    one_more = LONG[: len(LONG) // 2] + "X" + LONG[len(LONG) // 2 + 1 :]
    assert keys(messages(one_more))[2] != same[2]
    assert keys(messages(LONG, arguments=LONG))[1] != same[1]  # the call's arguments count
    assert keys(messages(LONG))[:2] == keys(messages("short"))[:2]  # a prefix keeps its key
    # a text that reads as the long one's digest is not the long text
    digest = pricing.digest._text_digest(LONG)
    for forged in (digest, json.dumps([digest]), ""):
        assert keys(messages(forged))[2] != same[2]


def test_a_key_tells_where_a_long_string_was_and_what_else_was_there():
    a = {"role": "user", "content": [{"type": "text", "text": LONG}, {"type": "text", "text": ""}]}
    b = {"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": LONG}]}
    c = {"role": "user", "content": [{"type": "text", "text": LONG}, {"type": "text", "text": "x"}]}
    keys = {long_digest(v, sort_keys=True) for v in (a, b, c)}
    assert len(keys) == 3
    # nor is a value keyed whole the same as one keyed with its long strings apart
    assert long_digest(a) != value_digest(a)
    # a short text is its own key; a long one a list, which no text field ever holds
    assert text_key("x" * DIGEST_ABOVE) == "x" * DIGEST_ABOVE
    assert isinstance(text_key("x" * (DIGEST_ABOVE + 1)), list)
    shuffled = {"content": a["content"], "role": "user"}
    assert long_digest(shuffled, sort_keys=True) == long_digest(a, sort_keys=True)


#: Values a message's wire form is made of, with strings on both sides of the threshold (of a
#: few letters, so that two drawn alike now and then).
VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.integers(0, 2),
        st.text('a"', max_size=2),
        st.builds(
            lambda n, c: c * n,
            st.integers(DIGEST_ABOVE - 1, DIGEST_ABOVE + 1),
            st.sampled_from('a"'),
        ),
    ),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("ab"), inner, max_size=2)
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(VALUES, VALUES)
def test_two_values_share_a_key_only_when_they_are_equal(a, b):
    equal = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert (long_digest(a, True) == long_digest(b, True)) == equal
    assert long_digest(a, True) == long_digest(json.loads(json.dumps(a)), True)


def test_a_long_text_beside_a_large_object_is_keyed_whole_and_alike_every_time():
    # a client's large object beside a long text: written whole by orjson (a walk in Python
    # costs ten times more a part), the same way for the same value
    value = {"content": LONG, "input": {f"k{i}": [i, {"v": i}] for i in range(1_000)}}
    assert long_digest(value, True) == value_digest(value, True)
    assert long_digest(value, True) == long_digest(json.loads(json.dumps(value)), True)
    small = {"content": LONG, "input": {"k": 1}}
    assert long_digest(small, True) != value_digest(small, True)  # a few parts: walked
