"""The newest tool output goes as much of itself as fits, not as a mask (issue 31).

An agent that is shown only "output masked" for the call it made a moment ago has nothing to go
on but to call it again. When masking the newest turn's outputs (oldest first) makes the prompt
fit with room to spare, the last one masked is capped to that room in its rendered form instead
(``strategies.moves._squeezed``). Property: whenever the newest output still goes masked, its
smallest capped form would not have fit."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_fit import route
from test_mask import words

from pricing.capped import CapTooSmall, cap_message
from pricing.messages import message_wire, parse_request
from pricing.meter import measure
from pricing.route import Route
from strategies.fit import FitError, fit
from strategies.mask import MASK_PREFIX
from strategies.policy import FitPolicy


def _session(system: int, older: list[int], output: int, latest: int) -> list[dict]:
    """A task, older rounds, the latest user message, then one call and its (big) output."""
    messages: list[dict] = [
        {"role": "system", "content": "You are an agent. " + words(system, 1)},
        {"role": "user", "content": "Task: " + words(20, 2)},
    ]
    for n, size in enumerate(older):
        call = {
            "id": f"old{n}",
            "type": "function",
            "function": {"name": "read", "arguments": "{}"},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"old{n}", "content": words(size, n)})
    messages.append({"role": "user", "content": "Now: " + words(latest, 3)})
    call = {"id": "new", "type": "function", "function": {"name": "pytest", "arguments": "{}"}}
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    messages.append({"role": "tool", "tool_call_id": "new", "content": words(output, 4)})
    return messages


def _sent(messages: list[dict], window: int) -> tuple[list[dict], int] | None:
    body = {"model": "t", "messages": copy.deepcopy(messages), "max_tokens": 256}
    try:
        fitted = fit(parse_request(body), route(window), FitPolicy())
    except FitError:
        return None
    return fitted.body["messages"], fitted.report.budget


def _smallest_capped(original: dict, window: int) -> dict:
    message = parse_request({"model": "t", "messages": [original]}).messages[0]
    try:
        cap_message(message, 1, route(window))
    except CapTooSmall as exc:
        capped = cap_message(message, exc.minimum, route(window))
        assert capped is not None
        return message_wire(capped.message)
    raise AssertionError("a one-token cap fitted a tool output")


def test_the_newest_output_is_capped_to_the_room_its_mask_left() -> None:
    """A big system prompt and a test run's output on a small route: masking the output leaves
    ~300 tokens free, and those go to the output's head and tail, not to nothing."""
    messages = _session(system=1500, older=[900], output=3000, latest=10)
    sent = _sent(messages, 3000)
    assert sent is not None
    out, _ = sent
    newest = out[-1]
    assert newest["tool_call_id"] == "new"
    assert not newest["content"].startswith(MASK_PREFIX)
    assert newest["content"].startswith(messages[-1]["content"][:200])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    system=st.integers(0, 2000),
    older=st.lists(st.sampled_from([5, 60, 300, 1200]), max_size=5),
    output=st.integers(50, 4000),
    latest=st.integers(1, 300),
    window=st.integers(700, 6000),
)
def test_the_newest_output_goes_masked_only_when_no_capped_form_fits(
    system: int, older: list[int], output: int, latest: int, window: int
) -> None:
    messages = _session(system, older, output, latest)
    sent = _sent(messages, window)
    if sent is None:
        return
    out, budget = sent
    newest = out[-1]
    if newest.get("tool_call_id") != "new" or not str(newest["content"]).startswith(MASK_PREFIX):
        return
    r = route(window)
    smallest = _smallest_capped(messages[-1], window)
    # a capped form no dearer than the mask says no more than it does
    assume(_price([smallest], r) > _price([newest], r))
    assert _price([*out[:-1], smallest], r) > budget


def _price(messages: list[dict], r: Route) -> int:
    return measure(parse_request({"model": "t", "messages": messages}), r).total


def test_a_squeezed_output_the_cap_strategy_capped_is_counted_once() -> None:
    """Both tool outputs are over the cap strategy's cap and are capped (2); the newest is then
    capped again to the room its mask left: still one capped message, not a third."""
    messages = _session(system=1500, older=[900], output=3000, latest=10)
    body = {"model": "t", "messages": copy.deepcopy(messages), "max_tokens": 256}
    fitted = fit(parse_request(body), route(3000), FitPolicy())
    assert not fitted.body["messages"][-1]["content"].startswith(MASK_PREFIX)  # squeezed
    tools = sum(m["role"] == "tool" for m in messages)
    assert fitted.report.actions["capped"].count <= tools
