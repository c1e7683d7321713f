"""The strategy protocol and the report's actions: every registered strategy is a policy name
and a report action; a rewrite re-prices only what it changed; a move is allowed per route; and
the readers (header, JSON, ``routefit fit``, the dashboard's log) show an action they never name.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_fit import IMAGES, route

from pricing.messages import Message, TextPart, parse_request
from pricing.meter import measure_messages
from proxy.cli import fit_table
from proxy.ui.data import ACTIONS, FitLog
from strategies.actions import Action, Actions, Label
from strategies.cap import CAP
from strategies.fit import Fit, FitReport, fit
from strategies.mask import MASK
from strategies.offload import OFFLOAD
from strategies.policy import STRATEGIES, FitPolicy, prompt_budget
from strategies.registry import NAMES
from strategies.registry import STRATEGIES as REGISTERED
from strategies.strategy import FitContext, FitState, Rewrite

TRIMMED = Label("trimmed", "messages", "trimmed", "message(s)")


def _context(r, policy: FitPolicy, messages) -> tuple[FitState, FitContext]:
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, None)

    def measure(ms):
        return measure_messages(ms, (), r)

    request = parse_request({"model": "test", "messages": messages})
    return FitState(request.messages, measure(request.messages)), FitContext(
        r, policy, budget, measure
    )


def test_every_registered_strategy_is_a_policy_name_and_a_report_action():
    assert STRATEGIES == NAMES == FitPolicy().strategies == tuple(s.name for s in REGISTERED)
    actions = [s.label.action for s in REGISTERED]
    assert len(set(actions)) == len(actions)
    report = FitReport("r", 100, 10, 10)
    assert list(report.actions) == actions == [a["name"] for a in ACTIONS]
    assert report.transparent and report.actions.header() == "none"
    assert list(report.as_dict()["actions"]) == actions
    with pytest.raises(ValueError, match="strategies must be a list drawn from"):
        FitPolicy.parse({"strategies": ["cap", "summarise"]})


def test_actions_are_summed_per_label_in_the_labels_order_zeros_kept():
    labels = [s.label for s in REGISTERED]
    masked, capped = labels[2], labels[0]
    actions = Actions.tally(
        labels, [Action(masked, 2, 30), Action(capped, 1, 500), Action(masked, 3, 40)]
    )
    assert [(a.name, a.count, a.tokens) for a in actions.values()] == [
        ("capped", 1, 500),
        ("offloaded_images", 0, 0),
        ("masked", 5, 70),
        ("elided_messages", 0, 0),
    ]
    assert actions.header() == "capped=1,masked=5"
    assert [a.name for a in actions.taken()] == ["capped", "masked"]
    assert actions["masked"].describe() == "masked 5 tool output(s), 70 tokens removed"
    with pytest.raises(KeyError):
        actions["summarised"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        actions.entries = ()  # type: ignore[misc]
    assert hash(FitReport("r", 1, 1, 1, actions)) == hash(FitReport("r", 1, 1, 1, actions))


def test_a_rewrite_that_changes_nothing_returns_the_state_it_was_given():
    state, context = _context(route(8000), FitPolicy(), [{"role": "user", "content": "hi"}])
    assert CAP.apply(state, context) is state


def test_a_rewrite_reprices_what_it_changed_and_records_its_action():
    calls = [{"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}]
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "log line value\n" * 2000},
        {"role": "user", "content": "and?"},
    ]
    state, context = _context(route(8000), FitPolicy(message_cap_tokens=200), messages)
    after = CAP.apply(state, context)
    assert after.messages[:2] == state.messages[:2] and after.messages[3] == state.messages[3]
    assert after.messages[2] != state.messages[2]
    assert after.pressure == context.measure(after.messages)
    assert after.pressure.messages[2].text < state.pressure.messages[2].text
    [action] = after.done
    assert action.label == CAP.label and action.count == 1 and action.tokens > 0
    assert after.moves == ()


def test_a_move_is_allowed_only_where_the_route_allows_it():
    messages = [{"role": "user", "content": "hi"}]
    text_only, context = _context(route(8000, vision=False), FitPolicy(), messages)
    assert OFFLOAD.apply(text_only, context) is text_only
    state, context = _context(route(8000), FitPolicy(), messages)
    moved = MASK.apply(OFFLOAD.apply(state, context), context)
    assert moved.moves == ("offload_images", "mask")
    assert moved.messages is state.messages and moved.done == ()


def test_a_rewrite_no_reader_names_is_shown_by_every_reader():
    def trim(state: FitState, context: FitContext) -> tuple[tuple[Message, ...], Action]:
        kept = (*state.messages[:-1], Message(role="user", parts=(TextPart("hi"),)))
        return kept, Action(TRIMMED, 2, 10)

    trimmer = Rewrite("trim", TRIMMED, trim)
    state, context = _context(route(8000), FitPolicy(), [{"role": "user", "content": "hello"}])
    after = trimmer.apply(state, context)
    labels = [*(s.label for s in REGISTERED), TRIMMED]
    report = FitReport("r", context.budget, 9, 8, Actions.tally(labels, after.done))
    assert not report.transparent
    assert report.actions.header() == "trimmed=2"
    assert report.as_dict()["actions"]["trimmed"] == {"messages": 2, "tokens_removed": 10}
    shown = fit_table(Fit({"messages": []}, after.messages, after.pressure, report), 1)
    assert "actions: trimmed=2" in shown
    assert "  trimmed 2 message(s), 10 tokens removed" in shown
    log = FitLog()
    log.record(report, now=1.0)
    assert log.entries[0]["actions"]["trimmed"] == {"count": 2, "tokens_removed": 10}


def test_a_fit_reports_adapted_images_under_the_offload_action():
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": IMAGES[1]}},
                ],
            }
        ]
    }
    report = fit(parse_request(body), route(8000, vision=False), FitPolicy()).report
    assert report.actions.header() == "offloaded_images=1"
    assert report.as_dict()["actions"]["offloaded_images"] == {"images": 1, "tokens_removed": 0}
