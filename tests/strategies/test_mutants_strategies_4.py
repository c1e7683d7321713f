"""What the fourth and fifth mutation samples of strategies/ let through (docs/mutation.md,
seeds 20261213 and 20261215), and their neighbours in the planner: a bounded fit proved only
when no image must be adapted, its report naming the route; the most the policy allows masks
and offloads every unprotected unit but the newest and prices the round a user message answers
whole; the prefix sums with a later verbatim head; the head giving way to a huge newest turn
only down to the low-water mark; the replay masking before it elides, and eliding at its
checkpoints to the low-water mark; each verbatim head starting where the masked conversation
ends; the pinned head never below the protected head; the report's elided tokens."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from gpt4o_route import gpt4o_route
from hypothesis import given
from hypothesis import strategies as st
from test_fit import png
from test_mutants_elide import units as unit_costs

from pricing.messages import ChatRequest, parse_request
from pricing.meter import measure
from pricing.route import ImageLimits
from strategies.elide import (
    Schedule,
    UnitCosts,
    _Sums,
    masked_by,
    pinned_head,
    plan,
    plan_max,
)
from strategies.fit import fit, fit_bounded
from strategies.policy import FitPolicy


def request(messages: list[dict[str, Any]]) -> ChatRequest:
    return parse_request({"model": "test", "messages": messages})


def _text(n: int, seed: int) -> str:
    return " ".join(f"fourth{(seed * 37 + i) % 97} sampled words" for i in range(n))


# -- fit_bounded: a bound proves only a request whose images all go as they are ----------------


def _with_images(k: int) -> ChatRequest:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "Compare these screenshots."}]
    parts += [{"type": "image_url", "image_url": {"url": png(40 + k, 30 + j, j)}} for j in range(k)]
    return request([{"role": "user", "content": parts}])


def test_a_bounded_fit_proves_images_the_route_takes_and_nothing_it_must_adapt() -> None:
    """``fit_bounded`` returns what ``fit`` would return, the client's body untouched, or None
    when images must be adapted (only the exact path knows which): images within a vision
    route's limit are proved; beyond the limit, or on a text-only route, nothing is."""
    req = _with_images(3)
    r = gpt4o_route(128_000, alias="vision-route")
    policy = FitPolicy()
    bounded = fit_bounded(req, r, policy)
    assert bounded is not None
    assert bounded.body == req.body and bounded.report.transparent
    assert bounded.report.route == "vision-route"  # the report names the route, as fit's
    assert bounded.estimate >= fit(req, r, policy).estimate
    # beyond the route's image limit fit offloads the oldest: the client's body is not it
    few = replace(r, image_limits=ImageLimits(max_images=2))
    assert fit(req, few, policy).report.actions["offloaded_images"].count > 0
    assert fit_bounded(req, few, policy) is None
    # a text-only route gets placeholders for every image
    assert fit_bounded(req, gpt4o_route(128_000, vision=False), policy) is None


# -- plan_max: every unprotected output masked and image offloaded, the newest unit as it is ---


def _unit(full: int, offloaded: int, masked: int | None, both: int | None) -> UnitCosts:
    return UnitCosts(full, offloaded, 1, fixed=False, user=False, masked=masked,
                     masked_offloaded=both)  # fmt: skip


def test_the_most_the_policy_allows_masks_and_offloads_everything_but_the_newest_unit() -> None:
    """``plan_max`` is the most the policy allows: every unprotected image offloaded and every
    unprotected output masked — up to the newest unit, which goes as it is."""
    system = UnitCosts(50, 50, 0, fixed=True, user=False)
    task = UnitCosts(30, 30, 0, fixed=True, user=True)
    older = [_unit(400, 300, 60, 20), _unit(500, 350, 80, 30), _unit(600, 450, 90, 40)]
    newest = _unit(700, 500, 100, 50)
    units = [system, task, *older, newest]
    kept = 50 + 30 + 700  # the fixed units and the newest, whole
    for offload, mask, priced in (
        (True, True, [20, 30, 40]),
        (True, False, [300, 350, 450]),
        (False, True, [60, 80, 90]),
        (False, False, [400, 500, 600]),
    ):
        p = plan_max(units, overhead=7, marker=15, offload=offload, elide=False, mask=mask, head=2)
        assert p.estimate == 7 + kept + sum(priced), (offload, mask)
        assert [p.masks(u) for u in range(2, 5)] == [mask] * 3
        assert not p.masks(5)


def test_the_round_the_newest_user_message_answers_is_priced_as_it_goes() -> None:
    """A user message right after a tool round protects that round (docs/fitting.md): it goes
    as it is, so the most aggressive plan prices it whole, not masked or offloaded."""
    system = UnitCosts(50, 50, 0, fixed=True, user=False)
    task = UnitCosts(30, 30, 0, fixed=True, user=True)
    old = _unit(400, 300, 60, 20)
    answered = _unit(500, 350, 80, 30)
    reply = UnitCosts(40, 40, 0, fixed=False, user=True, answers=True)
    units = [system, task, old, answered, reply]
    for offload, mask, priced in ((True, True, 20), (False, True, 60), (True, False, 300)):
        p = plan_max(units, overhead=7, marker=15, offload=offload, elide=False, mask=mask, head=2)
        assert p.estimate == 7 + 50 + 30 + priced + 500 + 40, (offload, mask)


# -- _Sums.free: the masked conversation before a later verbatim head --------------------------


@given(units=unit_costs(fixed=True), data=st.data())
def test_the_sums_price_every_prefix_as_its_units_under_any_masking(
    units: list[UnitCosts], data: st.DataObject
) -> None:
    """``free(x, …)`` is the price of the unprotected units below x, images before ``offload``
    offloaded and outputs masked outside the verbatim head ``[vstart, verbatim)`` and before
    ``mask`` (``masked_by``): unit by unit, whatever the head's start."""
    sums = _Sums(units, overhead=0, marker=0)
    n = len(units)
    offload = data.draw(st.integers(0, n))
    mask = data.draw(st.integers(0, n))
    vstart = data.draw(st.integers(0, n))
    verbatim = data.draw(st.integers(vstart, n))
    for x in range(n + 1):
        expected = 0
        for u in range(x):
            unit = units[u]
            if unit.fixed:
                continue
            masked = unit.full if unit.masked is None else unit.masked
            both = unit.offloaded if unit.masked_offloaded is None else unit.masked_offloaded
            hidden = masked_by(u, mask, verbatim, vstart)
            if u < offload:
                expected += both if hidden else unit.offloaded
            else:
                expected += masked if hidden else unit.full
        assert sums.free(x, offload, mask, verbatim, vstart) == expected


# -- _Replay.give_way: the head gives way to the newest turn, to the low-water mark ------------


def test_the_head_gives_way_to_a_huge_newest_turn_only_as_far_as_the_low_water_mark() -> None:
    """The newest turn does not fit beside the pinned head: the replay shortens the head to a
    prefix of itself (still cached), down to the protected head — to the low-water mark, and
    no further (docs/fitting.md, "The head gives way to the newest turn")."""
    budget, marker = 1_000, 15
    system = UnitCosts(20, 20, 0, fixed=True, user=False)
    task = UnitCosts(20, 20, 0, fixed=True, user=True)
    words = [UnitCosts(80, 80, 0, fixed=False, user=False) for _ in range(10)]
    ask = UnitCosts(20, 20, 0, fixed=False, user=True)
    huge = UnitCosts(300, 300, 0, fixed=False, user=False, masked=30)
    units = [system, task, *words, ask, huge]
    schedule = Schedule(("mask", "elide"), 0.95, 0.05, 1, 0.9, 0.0, 0.0)
    p = plan(units, overhead=0, budget=budget, marker=marker, schedule=schedule)
    assert p.cut == 12  # elision stops at the newest turn: the ask and its huge answer stay

    def price(head: int) -> int:  # the head [0, head), one marker for [head, 12), the turn
        return 20 + 20 + 80 * (head - 2) + marker + 20 + 300

    assert price(12) > budget  # the pinned head (everything before the turn) leaves no room
    low = max(h for h in range(2, 13) if price(h) <= 0.95 * budget)
    assert 2 < low < 12
    assert p.head == low and p.estimate == price(low)


# -- the replay's mask points: outputs are masked before any unit is elided -------------------


def test_the_replay_masks_old_outputs_before_it_elides_anything() -> None:
    """Masking runs before elision (the default order): when a prefix of the session
    overflows, every output older than its newest unit is masked at once (``mask_water`` 0),
    the head's outputs verbatim up to ``verbatim_head``; the mask point then stays while the
    prefix fits, and nothing is elided."""
    budget = 1_000
    system = UnitCosts(20, 20, 0, fixed=True, user=False)
    task = UnitCosts(20, 20, 0, fixed=True, user=True)
    rounds = [UnitCosts(100, 100, 0, fixed=False, user=False, masked=10) for _ in range(11)]
    units = [system, task, *rounds]
    n = len(units)
    # the first prefix over the budget is [0, 12): its newest unit, 11, goes whole
    assert sum(u.full for u in units[:11]) <= budget < sum(u.full for u in units[:12])
    for head, verbatim in ((0.0, 0), (0.25, 4)):
        schedule = Schedule(("mask", "elide"), 0.95, 0.05, 1, 0.9, 0.0, head)
        p = plan(units, overhead=0, budget=budget, marker=15, schedule=schedule)
        assert p.cut == p.head  # nothing elided
        assert p.verbatim == verbatim  # the head: whole units within head × budget
        assert [p.masks(u) for u in range(2, n)] == [verbatim <= u < 11 for u in range(2, n)]
        kept = verbatim - 2 if verbatim else 0
        assert p.estimate == 40 + 100 * kept + 10 * (9 - kept) + 200 <= budget


def test_a_unit_is_masked_before_the_mask_point_outside_the_verbatim_head() -> None:
    """``masked_by``: before the mask point, and not in ``[vstart, verbatim)``."""
    assert [masked_by(u, 8, 5, 2) for u in range(10)] == [
        True, True, False, False, False, True, True, True, False, False,
    ]  # fmt: skip
    assert [masked_by(u, 4, 0, 0) for u in range(6)] == [True] * 4 + [False] * 2


# -- the verbatim head: masked for good, the next one where the masked conversation ends -------


def _session(rounds: int, masked: int) -> list[UnitCosts]:
    system = UnitCosts(20, 20, 0, fixed=True, user=False)
    task = UnitCosts(20, 20, 0, fixed=True, user=True)
    return [system, task] + [
        UnitCosts(100 + (i * 37) % 50, 100, 0, fixed=False, user=False, masked=masked + (i % 3) * 5)
        for i in range(rounds)
    ]


def test_each_verbatim_head_starts_where_the_masked_conversation_ends() -> None:
    """docs/fitting.md, "The verbatim head": masking starts after a head of whole units up to
    ``verbatim_head × budget``; when the rest is masked and the prompt still overflows, the
    head is masked too, for good, and the next head starts where the masked conversation
    ends, its outputs verbatim until the masked conversation and they reach the mark again.
    Replayed request by request: an output once masked stays masked, and each plan's
    ``settled`` is the masking the previous request had."""
    budget = 1_000
    for masked, fraction in ((10, 0.7), (10, 0.6), (15, 0.8)):
        units = _session(60, masked)
        schedule = Schedule(("mask", "elide"), 0.95, 0.05, 1, 0.9, 0.0, fraction)
        limit = fraction * budget
        starts: set[int] = set()
        before = None
        for e in range(3, len(units) + 1):
            p = plan(units[:e], overhead=0, budget=budget, marker=15, schedule=schedule)
            assert 0 <= p.vstart <= p.verbatim <= e - 1
            # before the head: masked, every unprotected unit (the task and system stay fixed)
            assert all(p.masks(u) for u in range(2, p.vstart))
            # the head: the masked conversation before it and its whole units within the mark
            weight = sum(u.full if u.fixed or u.masked is None else u.masked
                         for u in units[: p.vstart])  # fmt: skip
            inside = weight + sum(u.full for u in units[p.vstart : p.verbatim])
            assert inside <= limit or p.verbatim == p.vstart
            if p.verbatim < e - 1:  # the next unit would take it over the mark
                assert inside + units[p.verbatim].full > limit
            if before is not None:
                # an output once masked never comes back; settled is the previous request's
                assert all(p.masks(u) for u in range(e - 2) if before.masks(u))
                assert [masked_by(u, *p.settled) for u in range(e - 2)] == [
                    before.masks(u) for u in range(e - 2)
                ]
            starts.add(p.vstart)
            before = p
        assert len(starts - {0}) >= 2  # heads masked more than once: each followed by another


# -- pinned_head: the protected head, extended to pin_fraction ---------------------------------


def test_the_pinned_head_is_at_least_the_protected_head() -> None:
    """``pinned_head``: the protected head (everything up to and including the first user
    message), extended to ``pin_fraction × budget`` — with ``pin_fraction`` 0 (drop-oldest)
    the protected head alone, never less."""
    system = UnitCosts(20, 20, 0, fixed=True, user=False)
    words = UnitCosts(30, 30, 0, fixed=False, user=False)
    task = UnitCosts(40, 40, 0, fixed=True, user=True)
    rest = [UnitCosts(100, 100, 0, fixed=False, user=False) for _ in range(5)]
    units = [system, words, task, *rest]
    assert pinned_head(units, 1_000, 0.0) == 3
    assert pinned_head(units, 1_000, 0.3) == 5  # 90 + 200 ≤ 300 < 90 + 300
    assert pinned_head(units, 1_000, 1.0) == len(units) - 1  # never the newest unit


# -- the report: elided messages and the tokens they took --------------------------------------


def test_the_report_counts_the_elided_messages_and_their_tokens_as_the_marker_says() -> None:
    """The report's ``elided_messages`` counts the messages elided and the tokens removed with
    them (docs/fitting.md, "Report"), the figures the one marker standing in for them shows."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Task: summarise the logs."}]
    for t in range(12):
        messages.append({"role": "assistant", "content": _text(60, t)})
        messages.append({"role": "user", "content": f"Step {t}: " + _text(20, t + 50)})
    r = gpt4o_route(window=2_000, max_output=256)
    req = parse_request({"model": "t", "messages": messages})
    fitted = fit(req, r, FitPolicy(pin_fraction=0))
    out = fitted.body["messages"]
    markers = [m["content"] for m in out if str(m["content"]).startswith("[routefit: ")]
    assert len(markers) == 1
    found = re.fullmatch(r"\[routefit: ([\d,]+) earlier messages \(([\d,]+) tokens\).*", markers[0])
    assert found is not None
    count, tokens = (int(g.replace(",", "")) for g in found.groups())
    elided = fitted.report.actions["elided_messages"]
    assert (elided.count, elided.tokens) == (count, tokens)
    assert count == len(messages) - (len(out) - 1) and tokens > 0
    # the tokens of the messages that went, each priced where it stood
    prices = measure(req, r).messages
    gone = [i for i, m in enumerate(messages) if m not in out]
    assert len(gone) == count and tokens == sum(prices[i].total for i in gone)


# -- the replay's elision: cut in the replay, each jump to the low-water mark ------------------


def test_the_replay_elides_a_conversation_masking_cannot_shrink_and_jumps_to_low_water() -> None:
    """In the default order (offload, mask, elide) a conversation of words alone overflows
    with nothing to mask: the replay elides from the middle at its checkpoints, and each jump
    lands at the low-water mark (docs/fitting.md, "Hysteresis without state"), the cut staying
    put between jumps while the prefix fits."""
    budget = 1_000
    units = [
        UnitCosts(20, 20, 0, fixed=True, user=False),
        UnitCosts(20, 20, 0, fixed=True, user=True),
    ]
    for t in range(30):
        units.append(UnitCosts(50 + t % 7, 50 + t % 7, 0, fixed=False, user=False))
        units.append(UnitCosts(30, 30, 0, fixed=False, user=True))
    # a pinned head of half the budget: the newest turn always fits in the room it leaves
    schedule = Schedule(("offload_images", "mask", "elide"), 0.95, 0.05, 1, 0.5, 0.0, 0.7)
    cuts: list[int] = []
    jumps = 0
    for e in range(3, len(units) + 1):
        p = plan(units[:e], overhead=0, budget=budget, marker=15, schedule=schedule)
        assert p.estimate <= budget
        if p.cut > p.head and (not cuts or p.cut != cuts[-1]):  # a jump: to low water
            assert p.estimate <= 0.95 * budget
            jumps += 1
        cuts.append(p.cut)
    assert cuts[-1] > p.head  # the middle elided, in the replay
    assert jumps > 1
