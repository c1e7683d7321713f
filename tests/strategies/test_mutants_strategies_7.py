"""What the eighth mutation sample of strategies/ let through (docs/mutation.md, 60 mutants,
seed 20261231, at a0a1c50): the message cap is the budget's fraction rounded down; a request
with no previous one settles no masking; the replay offloads only the oldest images it must;
the head never gives way below the protected head; a request adapted to its route reports the
estimate before the fit; a route that does not see pixels gets no image, whichever of vision
and a visual rule it lacks; an output that opens the conversation is masked as priced there;
a bound proves a fit beside the clamped reservation."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from gpt4o_route import gpt4o_route
from test_fit import png
from test_mutants_strategies_2 import deepseek_framed
from test_mutants_strategies_5 import _call, _text, request

from pricing.calibration import Correction
from pricing.images import ImageRule, default_image_rule, text_only
from pricing.messages import parse_request
from pricing.meter import measure, measure_messages
from strategies.cap import cap_limit
from strategies.elide import Plan, Schedule, UnitCosts, masked_by, plan
from strategies.fit import fit
from strategies.mask import MASK_PREFIX
from strategies.offload import offload_images
from strategies.output import bounded_output, fit_output
from strategies.policy import FitPolicy, output_limit


def _shown(t: int) -> dict[str, Any]:
    """A user message showing picture ``t`` (1024×1024: hundreds of tokens as an image, a few
    dozen as its placeholder)."""
    image = {"type": "image_url", "image_url": {"url": png(1024, 1024, 80 + t)}}
    return {"role": "user", "content": [{"type": "text", "text": f"Look at picture {t}."}, image]}


#: A schedule like the default policy's: every move, in the default order.
_DEFAULT = Schedule(("offload_images", "mask", "elide"), 0.95, 0.05, 4, 0.9, 0.0, 0.7)


# -- cap.cap_limit (mutmut_6): the cap is the budget's fraction, in whole tokens ---------------


@pytest.mark.parametrize("fraction", [0.01, 0.15, 0.5, 1.0])
def test_the_message_cap_is_the_budgets_fraction_rounded_down_and_never_nothing(
    fraction: float,
) -> None:
    """docs/fitting.md: without ``message_cap_tokens`` the cap is ``cap_fraction`` of the
    budget (15% by default) in whole tokens — rounded down, so a message is never let through
    at more than its share — and never below one token (a cap of nothing would cap every
    output to nothing). A tiny budget's cap is one token, not more than its share."""
    policy = FitPolicy(cap_fraction=fraction)
    for budget in range(400):
        cap = cap_limit(policy, budget)
        share = fraction * budget
        assert 1 <= cap <= max(1.0, share)
        assert cap > share - 1


# -- elide.plan (mutmut_16): a request with no previous one settles no masking ----------------


def _masked_rounds(rounds: int) -> list[UnitCosts]:
    system = UnitCosts(20, 20, 0, fixed=True, user=False)
    task = UnitCosts(20, 20, 0, fixed=True, user=True)
    outputs = [
        UnitCosts(100 + (i * 29) % 40, 100, 0, fixed=False, user=False, masked=12)
        for i in range(rounds)
    ]
    return [system, task, *outputs]


def test_a_request_with_no_previous_one_settles_no_masking() -> None:
    """``Plan.settled`` is the masking (``mask``, ``verbatim``, ``vstart``) of the session's
    previous request: the replay at ``plan``'s ``previous`` units. A request with none
    (``previous`` 0: no assistant message yet, ``moves._previous_request``) settles
    what an empty conversation's plan has — nothing masked, no verbatim head — and, like every
    masking the replay reaches, a verbatim head ``[vstart, verbatim)`` that starts no later
    than it ends; for the previous request the masking is that request's own."""
    units = _masked_rounds(20)
    budget = 1_000
    assert sum(u.full for u in units) > budget  # the replay masks: its own masking is not empty

    def planned(us: list[UnitCosts], previous: int | None = None) -> Plan:
        return plan(us, overhead=0, budget=budget, marker=15, schedule=_DEFAULT, previous=previous)

    whole = planned(units)
    assert whole.mask > 0 and whole.verbatim > whole.vstart
    empty = planned([])
    assert planned(units, previous=0).settled == (empty.mask, empty.verbatim, empty.vstart)
    for previous in range(len(units) + 1):
        mask, verbatim, vstart = planned(units, previous).settled
        assert 0 <= vstart <= verbatim
        assert mask <= max(previous - 1, 0)  # the previous request's newest unit stays whole
    # by default the previous request is all but the newest unit, and its masking is its own
    before = planned(units[:-1])
    assert [masked_by(u, *whole.settled) for u in range(len(units) - 2)] == [
        before.masks(u) for u in range(len(units) - 2)
    ]


# -- elide._Replay.__init__ (mutmut_92): the replay offloads the oldest images, as few as it must


def test_the_replay_offloads_only_the_oldest_images_the_budget_needs() -> None:
    """docs/fitting.md: images are replaced oldest first, in steps of ``image_offload_step``,
    at offload points the replay moves only when a prefix overflows and then to the low-water
    mark; images of protected units stay. When one step (the oldest image) brings the prompt
    to the mark, the two newer images go as they came — not every unprotected image."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Task: describe pictures."}]
    for t in range(3):
        messages += [{"role": "assistant", "content": "Send one."}, _shown(t)]
    messages += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks."}]
    req = request(messages)
    r = gpt4o_route(128_000)
    whole = measure(req, r).total
    policy = FitPolicy(  # without an image head (tests/strategies/test_offload_edges.py has it)
        max_prompt_tokens=whole - 300,
        strategies=("offload_images",),
        image_offload_step=1,
        image_head=0.0,
    )
    # the oldest image alone offloaded is enough, to the low-water mark
    oldest = list(req.messages)
    oldest[2] = offload_images(oldest[2], r)
    assert measure_messages(oldest, req.tools, r).total <= policy.low_water * (whole - 300)
    fitted = fit(req, r, policy)
    assert fitted.estimate <= fitted.report.budget
    sent = fitted.body["messages"]
    assert sent[2]["content"][1]["text"].startswith("[image omitted")
    assert sent[4] == messages[4] and sent[6] == messages[6]
    assert fitted.report.actions["offloaded_images"].count == 1


# -- elide._Replay.give_way (mutmut_16): never below the protected head ------------------------


def test_the_head_never_gives_way_below_the_protected_head() -> None:
    """docs/fitting.md, "The head gives way to the newest turn": the replay shortens the head
    down to the protected head — everything up to and including the first user message — and
    no further (short of the newest unit, which the head never holds). When the task is the
    newest unit, the words before it are that protected head: the replay elides none of them,
    however far the prompt overflows, and its plan is the whole conversation at its price, for
    the caller to try harder (``plan_max``, then the last resort)."""
    budget = 1_000
    system = UnitCosts(20, 20, 0, fixed=True, user=False)
    opening = [UnitCosts(n, n, 0, fixed=False, user=False) for n in (500, 600)]
    task = UnitCosts(20, 20, 0, fixed=True, user=True)
    units = [system, *opening, task]
    assert sum(u.full for u in units) > budget
    for order in (("mask", "elide"), _DEFAULT.order):
        schedule = replace(_DEFAULT, order=order)
        p = plan(units, overhead=0, budget=budget, marker=15, schedule=schedule)
        assert p.head == p.cut == len(units) - 1  # nothing in [head, cut): nothing elided
        assert p.estimate == sum(u.full for u in units)


# -- fit.fit (mutmut_69, mutmut_73): an adapted request's estimate before the fit ---------------


def test_a_request_adapted_to_a_text_only_route_reports_its_estimate_before_the_fit() -> None:
    """On a text-only route every image goes as its placeholder, whatever the budget
    (``moves.adapt``; the estimate before the fit is taken after them). When that is all the
    fit does, the report's ``estimate_before`` is the request's estimate — the meter prices an
    image on such a route as its placeholder text — and, nothing removed, its estimate after."""
    req = request([{"role": "user", "content": "Task: describe it."}, _shown(0)])
    r = gpt4o_route(128_000, vision=False)
    fitted = fit(req, r, FitPolicy())
    report = fitted.report
    assert report.actions["offloaded_images"].count == 1
    expected = Correction().price_pressure(measure(req, r))
    assert report.estimate_before == expected
    assert report.estimate_after == fitted.estimate == expected


# -- moves.adapt (mutmut_6): no pixels without both vision and a visual rule -------------------


@pytest.mark.parametrize(
    ("vision", "rule"),
    [(False, default_image_rule("gpt-4o", True)), (True, text_only())],
    ids=["visual-rule-without-vision", "vision-with-text-only-rule"],
)
def test_a_route_that_does_not_see_pixels_gets_every_image_as_its_placeholder(
    vision: bool, rule: ImageRule
) -> None:
    """A route sees pixels only when it supports vision *and* its image rule is visual; a
    config may give a route without vision a visual rule, or a vision route ``text-only``, and
    the meter then prices every image as its placeholder text (``pricing.meter.price_image``).
    The fit sends what it priced: every image as its placeholder, whatever the budget."""
    req = request([{"role": "user", "content": "Task: describe it."}, _shown(1)])
    r = replace(gpt4o_route(128_000), supports_vision=vision, image_rule=rule)
    fitted = fit(req, r, FitPolicy())
    parts = [p for m in fitted.body["messages"] if isinstance(m["content"], list)
             for p in m["content"]]  # fmt: skip
    assert [p["type"] for p in parts] == ["text", "text"]
    assert parts[1]["text"].startswith("[image omitted")
    assert fitted.report.actions["offloaded_images"].count == 1
    assert fitted.estimate == measure(parse_request(dict(fitted.body)), r).total


# -- moves.Job._masked (mutmut_20): an output that opens the conversation ----------------------


def test_an_output_that_opens_the_conversation_is_masked_as_priced_there() -> None:
    """A conversation may open with a tool output whose call is gone (a client that trimmed
    its history; ``group_units`` keeps such an orphan a unit of its own, unprotected). Masked,
    it is priced where it is sent — first, after no message — so the tokens the report says
    masking removed are the prompt's fall. On DeepSeek's template an output after another is
    joined by a newline (two tokens on this tokenizer), where an output after none opens the
    run: priced as if it followed another output, the report would be off by that."""
    messages = [
        {"role": "tool", "tool_call_id": "trimmed", "content": _text(300, 1)},
        {"role": "user", "content": "Go on with the task."},
        _call("c1"),
        {"role": "tool", "tool_call_id": "c1", "content": _text(50, 2)},
    ]
    req = request(messages)
    r = deepseek_framed("heuristic:0.5", 1_000_000)
    whole = measure(req, r).total
    fitted = fit(req, r, FitPolicy(max_prompt_tokens=whole - 100, strategies=("mask",)))
    report = fitted.report
    masked = report.actions["masked"]
    assert masked.count == 1
    sent = fitted.body["messages"]
    assert sent[0]["tool_call_id"] == "trimmed" and sent[0]["content"].startswith(MASK_PREFIX)
    assert sent[1:] == messages[1:]
    assert report.estimate_before == whole
    assert report.estimate_before - report.estimate_after == masked.tokens
    assert report.estimate_after == measure(parse_request(dict(fitted.body)), r).total


# -- output.bounded_output (mutmut_22): a bound proves the fit, with the reservation ------------


def test_a_bound_that_proves_a_fit_carries_the_clamped_reservation() -> None:
    """``bounded_output`` is ``fit_bounded`` with the reservation on its report: a small request
    whose bound is under the budget is proved transparent — the client's body, at a bound of
    the exact estimate — beside the reservation the exact path (``fit_output``) reports: the
    client's cap clamped to the route's limit, never shrunk."""
    req = parse_request(
        {
            "model": "t",
            "messages": [{"role": "user", "content": "Task: " + _text(40, 3)}],
            "max_tokens": 32_000,
        }
    )
    r = gpt4o_route(128_000, max_output=16_384)
    policy = FitPolicy()
    bounded = bounded_output(req, r, policy)
    exact = fit_output(req, r, policy)
    assert bounded is not None
    assert bounded.report.transparent and bounded.body is req.body
    limit = output_limit(r.max_output_tokens, policy, 32_000)
    assert bounded.report.output == exact.report.output == limit
    assert limit.sent == 16_384
    assert exact.estimate <= bounded.estimate <= bounded.report.budget
