"""The message memo (``pricing.meter.MessageCache``): a conversation measured again as new
objects, as every request brings it, prices exactly as if measured for the first time."""

from __future__ import annotations

import json
from dataclasses import replace

from chat_conversations import conversations
from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.framing import Framing, default_framing
from pricing.messages import parse_request
from pricing.meter import MEASURED, MessageCache, measure
from pricing.route import Route

OPENAI = Route("gpt", "gpt-4o", tokenizer="o200k_base")
#: Same tokenizer, other framing: an entry of one must never price the other.
OTHER = replace(OPENAI, framing=Framing(family="other", per_message=9, per_name=4))
DEEPSEEK = Route(
    "ds",
    "deepseek/deepseek-chat",
    provider="deepseek",
    tokenizer="deepseek",
    framing=default_framing("deepseek-chat", "deepseek"),
)
LEGACY = Route("claude", "claude-sonnet-4-5", provider="anthropic", tokenizer="anthropic-legacy")


def fresh(messages: list[dict]):
    """The conversation as a new request parses it: new objects, same content."""
    return parse_request({"model": "m", "messages": json.loads(json.dumps(messages))})


@settings(max_examples=60, deadline=None)
@given(conversation=conversations(), route=st.sampled_from([OPENAI, OTHER, DEEPSEEK, LEGACY]))
def test_a_conversation_measured_again_prices_as_measured_afresh(conversation, route):
    MEASURED.clear()
    cold = measure(fresh(conversation), route)
    assert measure(fresh(conversation), route) == cold  # every message from the memo
    # the memo holding the same messages priced by the same tokenizer under another framing
    MEASURED.clear()
    measure(fresh(conversation), replace(route, framing=OTHER.framing))
    assert measure(fresh(conversation), route) == cold
    # the same messages inside a longer conversation
    longer = [*conversation, {"role": "user", "content": "and then?"}]
    MEASURED.clear()
    expected = measure(fresh(longer), route)
    MEASURED.clear()
    measure(fresh(conversation), route)
    assert measure(fresh(longer), route) == expected


def test_the_role_before_a_message_is_part_of_what_it_costs():
    # DeepSeek: a user message after tool outputs also closes their run (one more token)
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    words = {"role": "user", "content": "the same words"}
    after_tools = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        words,
    ]
    MEASURED.clear()
    first = measure(fresh(after_tools), DEEPSEEK).messages[2]
    alone = measure(fresh([words]), DEEPSEEK).messages[0]
    assert first.framing == alone.framing + 1
    MEASURED.clear()
    assert measure(fresh([words]), DEEPSEEK).messages[0] == alone


def test_messages_with_images_are_measured_every_time():
    url = "https://example.com/cat.png"  # unknown size: priced at the rule's worst case
    body = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    MEASURED.clear()
    measure(fresh(body), OPENAI)
    before = (MEASURED.hits, MEASURED.misses)
    measure(fresh(body), OPENAI)
    assert (MEASURED.hits, MEASURED.misses) == before  # never looked up


def test_the_memo_is_bounded_and_the_least_recently_used_goes_first():
    cache = MessageCache(maxsize=2)
    route = OPENAI
    pressure = measure(fresh([{"role": "user", "content": "x"}]), route).messages[0]
    keys = [
        MessageCache.key(m, None, MessageCache.prefix(route))
        for m in fresh([{"role": "user", "content": text} for text in ("a", "b", "c")]).messages
    ]
    assert all(k is not None for k in keys)
    a, b, c = (k for k in keys if k is not None)
    cache.put(a, pressure)
    cache.put(b, pressure)
    assert cache.get(a) is pressure  # a is now the most recent
    cache.put(c, pressure)
    assert cache.get(b) is None and cache.get(a) is pressure and cache.get(c) is pressure
