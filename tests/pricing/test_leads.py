"""A message's lead (``Message.lead``: the words a translation to chat writes before its text,
for a field chat has no twin for, such as a failed tool result's ``is_error``) is priced on a
route priced for a translated leg (``Route.translated``) and nowhere else, alike by the meter,
the bounds and the capper; and the memo of measured messages never serves one leg's price to
the other, nor a led message's to the same message without its lead.

The gateway-level checks (what is sent, what the estimate is, a provider that counts it) are in
tests/wires/test_tool_error_priced.py."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bounds import SPECS, TEXTS, route

from pricing.bounds import bound_pressure
from pricing.capped import CapTooSmall, cap_message
from pricing.messages import Message, TextPart, lead_text, led_text
from pricing.meter import measure_message, measure_messages
from pricing.tokenizers import get_tokenizer

LEAD = "[tool error]"


def result(text: str, lead: str = LEAD) -> Message:
    """A tool result of ``text`` (no part when it is empty), led by ``lead``."""
    parts = (TextPart(text),) if text else ()
    return Message("tool", parts, tool_call_id="call_1", lead=lead)


def test_the_lead_is_written_before_the_text_or_alone() -> None:
    assert led_text(result("exit 2")) == "[tool error] exit 2"
    assert led_text(result("")) == "[tool error]"
    assert led_text(result("exit 2", lead="")) == "exit 2"
    assert lead_text(result("exit 2")) == "[tool error] "


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS)
def test_a_lead_is_priced_on_a_translated_leg_only(spec: str, text: str) -> None:
    native = route(spec)
    translated = replace(native, translated=True)
    led, bare = result(text), result(text, lead="")
    tok = get_tokenizer(spec)
    on_native, _ = measure_message(led, native)
    on_translated, _ = measure_message(led, translated)
    assert on_native == measure_message(bare, native)[0]
    assert on_translated.text == on_native.text + tok.count(lead_text(led))
    assert on_translated.framing == on_native.framing
    assert measure_message(bare, translated)[0] == on_native


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TEXTS, min_size=1, max_size=4))
def test_the_bound_prices_a_lead_as_the_meter_does_or_above(spec: str, texts: list[str]) -> None:
    """A bound is never below the meter (``pricing.bounds``), its lead included: a bound that
    left the lead out could prove a request fits that the exact fit would cut."""
    # a scope of its own: a message the meter measured is its own bound (its memoised price)
    r = replace(route(spec), translated=True, scope=os.urandom(8))
    led = [result(t) for t in texts]
    bare = [result(t, lead="") for t in texts]
    bound, bound_bare = bound_pressure(led, (), r), bound_pressure(bare, (), r)
    exact, exact_bare = measure_messages(led, (), r), measure_messages(bare, (), r)
    assert bound is not None and bound_bare is not None
    for b, e in zip(bound.messages, exact.messages, strict=True):
        assert b.text >= e.text and b.framing >= e.framing
    for b, bb, e, eb in zip(
        bound.messages, bound_bare.messages, exact.messages, exact_bare.messages, strict=True
    ):
        assert b.text - bb.text >= e.text - eb.text > 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(min_size=200, max_size=3_000), cap=st.integers(30, 300))
def test_a_led_message_capped_renders_within_its_cap(text: str, cap: int) -> None:
    """The cut leaves room for the lead: the message as a translation sends it (its lead, then
    the cut) is priced within the cap (docs/capping.md's invariant, on a translated leg). The
    gateway's test counts what is sent (tests/wires/test_tool_error_priced.py)."""
    r = replace(route("o200k_base"), translated=True)
    try:
        capped = cap_message(result(text), cap, r)
    except CapTooSmall:  # not even a bare marker fits
        return
    if capped is None:
        return
    assert capped.message.lead == LEAD  # the rewrite keeps the lead
    priced, _ = measure_message(capped.message, r)
    assert capped.tokens == priced.text + priced.framing <= cap
    unled, _ = measure_message(replace(capped.message, lead=""), r)
    assert priced.text > unled.text  # the lead is in what was held to the cap


def test_the_memo_keeps_each_leg_and_each_lead_apart() -> None:
    """The memo (``MessageCache``) keys a message's price by its lead and the route's leg: the
    same result measured first unled, then led, then on the other leg, is priced each time
    for what it is."""
    native = route("o200k_base")
    translated = replace(native, translated=True)
    text = "exit 2: no such file or directory (memo)"
    seen = [
        measure_messages([message], (), r).messages[0].text
        for message, r in [
            (result(text, lead=""), translated),
            (result(text), translated),
            (result(text), native),
            (result(text), translated),
        ]
    ]
    marker = get_tokenizer("o200k_base").count(lead_text(result(text)))
    assert seen == [seen[0], seen[0] + marker, seen[0], seen[0] + marker]
