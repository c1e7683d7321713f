"""What the sixth mutation sample of strategies/ let through (docs/mutation.md, 40 mutants at
bc2b084): the round a user message answers protected with it; a request the rewrites brought
to exactly the budget sent as they left it; the most a policy without masking allows masking
nothing, not even a tool round that opens the conversation; a plan's price, unit by unit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpt4o_route import gpt4o_route
from hypothesis import given
from hypothesis import strategies as st
from test_mutants_elide import units as unit_costs

from pricing.calibration import Correction
from pricing.messages import ChatRequest, parse_request
from strategies.elide import UnitCosts, _Sums, masked_by, plan_max
from strategies.moves import Job, fit_moves
from strategies.policy import FitPolicy
from strategies.strategy import FitState
from strategies.units import answered_round, group_units, protected_units
from strategies.units import answered_rounds as rounds_answered


def request(messages: list[dict[str, Any]]) -> ChatRequest:
    return parse_request({"model": "test", "messages": messages})


def _text(n: int, seed: int) -> str:
    return " ".join(f"sixth{(seed * 31 + i) % 89} sampled words" for i in range(n))


def _call(call_id: str) -> dict[str, Any]:
    function = {"name": "read_file", "arguments": "{}"}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}]}  # fmt: skip


def _result(call_id: str, words: int, seed: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": _text(words, seed)}


def answered_rounds(words: int, last: str) -> list[dict[str, Any]]:
    """A task, two tool rounds whose outputs are ``words`` words each, and a user message
    ``last`` answering the second round."""
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Read the files."},
        _call("a"),
        _result("a", words, 1),
        {"role": "assistant", "content": "Read them."},
        _call("b"),
        _result("b", words, 2),
        {"role": "user", "content": last},
    ]


# -- units.answered_rounds (answers_tool_round's mutmut_10): the round a user message answers ------


def test_a_user_message_after_a_tool_round_protects_that_round() -> None:
    """docs/fitting.md: the newest unit is protected and, when it is a user message right after
    a tool round, so is that round (the results the user is answering); a user message after
    plain text, or the first unit, answers no round."""
    messages = request(answered_rounds(20, "Now the other one.")).messages
    units = group_units(messages)
    assert [(u.start, u.end) for u in units] == [(0, 1), (1, 2), (2, 4), (4, 5), (5, 7), (7, 8)]
    assert rounds_answered(messages, units) == [None] * 5 + [4]
    # the system prompt, the task, the newest unit and the round it answers; not the older round
    assert protected_units(messages, units) == {0, 1, 4, 5}
    # after plain text the newest user message protects nothing more
    plain = request([*(m.wire for m in messages[:5]), {"role": "user", "content": "Thanks."}])
    plain_units = group_units(plain.messages)
    assert answered_round(plain.messages, plain_units) is None
    assert protected_units(plain.messages, plain_units) == {0, 1, 4}


# -- moves.fit_moves (mutmut_4): a request the rewrites fit exactly goes as it is ---------------


def test_a_request_priced_at_exactly_the_budget_is_sent_as_it_is() -> None:
    """``fit_moves``: when the rewrites alone bring the prompt to the budget ("fits" is
    ``estimate <= budget``, docs/fitting.md), nothing is masked or elided. Under a calibrated
    correction the planner's per-unit prices round up above the whole prompt's, so a planner
    run at exactly the budget would mask an output the request does not need masked."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Task: " + _text(20, 1)},
    ]
    for k in range(4):
        messages += [_call(f"c{k}"), _result(f"c{k}", 300, k)]
    messages.append({"role": "user", "content": "Go on."})
    req = request(messages)
    route = gpt4o_route(128_000)
    policy = FitPolicy()
    correction = Correction(text=1.137, framing=1.29)
    probe = Job(req, route, policy, correction, None, 10**9)
    pressure = probe.measure(req.messages)
    exact = probe.estimate(pressure)
    job = Job(req, route, policy, correction, None, exact)
    state = FitState(req.messages, pressure, moves=("mask", "elide"))
    estimate, fitted = fit_moves(job, state, final=True)
    assert fitted is not None
    assert estimate == fitted.estimate == exact
    assert fitted.body == req.body
    assert not any(a.count for a in fitted.report.actions.values())


# -- elide.plan_max (mutmut_34): no masking allowed, no output masked ---------------------------


def test_the_most_a_policy_without_masking_allows_masks_nothing() -> None:
    """``plan_max(mask=False)`` masks no unit, the first one included (a conversation may open
    with a tool round before the task), and prices each unprotected unit whole."""
    opening = UnitCosts(400, 400, 0, fixed=False, user=False, masked=40, masked_offloaded=40)
    task = UnitCosts(30, 30, 0, fixed=True, user=True)
    middle = UnitCosts(500, 500, 0, fixed=False, user=False, masked=50, masked_offloaded=50)
    newest = UnitCosts(20, 20, 0, fixed=False, user=True)
    units = [opening, task, middle, newest]
    p = plan_max(units, overhead=7, marker=15, offload=False, elide=False, mask=False, head=2)
    assert not any(p.masks(u) for u in range(len(units)))
    assert p.estimate == 7 + 400 + 30 + 500 + 20
    masked = plan_max(units, overhead=7, marker=15, offload=False, elide=False, mask=True, head=2)
    assert [masked.masks(u) for u in range(len(units))] == [True, True, True, False]
    assert masked.estimate == 7 + 40 + 30 + 50 + 20


# -- elide._Sums.estimate (mutmut_58): what a plan's price keeps and what its markers stand for --


@given(units=unit_costs(fixed=True), data=st.data())
def test_a_plans_price_is_what_it_keeps_plus_a_marker_per_run_it_may_elide(
    units: list[UnitCosts], data: st.DataObject
) -> None:
    """``_Sums.estimate`` (the price the planner compares plans by, docs/fitting.md): the
    overhead, every unit of the prefix that stays — protected units, the newest unit with the
    round it answers and the latest user message whole, the others under the plan's offload and
    masking — and, when the elided range ``[head, cut)`` removes anything, one marker for it plus
    one for each unit that stays inside it (each may split the range). A unit that stays inside
    the range is never counted as elided. Unit by unit, against the prefix sums."""
    n = len(units)
    flags = data.draw(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=n, max_size=n))
    units = [replace(u, user=user, answers=answers and i >= 1)
             for i, (u, (user, answers)) in enumerate(zip(units, flags, strict=True))]  # fmt: skip
    overhead, marker = data.draw(st.integers(0, 50)), data.draw(st.integers(0, 40))
    sums = _Sums(units, overhead=overhead, marker=marker)
    e = data.draw(st.integers(1, n))
    head = data.draw(st.integers(0, e))
    cut = data.draw(st.integers(head, n))
    offload, mask = data.draw(st.integers(0, n)), data.draw(st.integers(0, n))
    vstart = data.draw(st.integers(0, n))
    verbatim = data.draw(st.integers(vstart, n))
    users = [u for u in range(e) if units[u].user]
    whole = {e - 1, *users[-1:], *([e - 2] if units[e - 1].answers else [])}

    def price(u: int) -> int:
        unit = units[u]
        hidden = masked_by(u, mask, verbatim, vstart)
        if u < offload:
            both = unit.offloaded if unit.masked_offloaded is None else unit.masked_offloaded
            return both if hidden else unit.offloaded
        masked = unit.full if unit.masked is None else unit.masked
        return masked if hidden else unit.full

    kept = elided = stay_inside = 0
    for u in range(e):
        stays = units[u].fixed or u in whole
        if stays:
            kept += units[u].full
            stay_inside += head <= u < min(cut, e)
        elif head <= u < min(cut, e):
            elided += price(u)
        else:
            kept += price(u)
    expected = overhead + kept + (marker * (1 + stay_inside) if elided else 0)
    assert sums.estimate(e, head, offload, cut, mask, verbatim, vstart) == expected
