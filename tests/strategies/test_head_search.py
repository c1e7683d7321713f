"""The replay's search for a head that gives way (``strategies.elide._Replay.give_way``).

Each new user turn restores the pinned head, and when the turn does not fit the head gives way a
unit at a time. When no head can fit — a request whose tools alone are over the budget — that
walk went down the whole head on every user turn: 3,000 messages and 3,000 tools on an 8k route
took 15 s of CPU to refuse, one request stalling every team's. ``_Sums.least`` bounds the price
of every head in a range at once, so the walk is skipped when it cannot end above the floor.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strategies import elide
from strategies.elide import Schedule, UnitCosts, _Sums, plan

SCHEDULES = [
    Schedule(("offload_images", "mask", "elide"), 0.6, 0.05, 1, 0.5, 0.7, 0.3),
    Schedule(("mask", "elide"), 0.8, 0.1, 1, 0.3, 0.0, 0.0),
    Schedule(("elide",), 0.7, 0.05, 1, 0.4),
]


@st.composite
def conversations(draw: st.DrawFn, size: int = 30) -> list[UnitCosts]:
    """Units as a conversation has them: a protected system and first user message, then
    user turns, assistant replies and tool rounds, with and without images and outputs."""
    out = [
        UnitCosts(draw(st.integers(5, 300)), 5, 0, fixed=True, user=False),
        UnitCosts(draw(st.integers(5, 300)), 5, 0, fixed=True, user=True),
    ]
    for _ in range(draw(st.integers(1, size))):
        full = draw(st.integers(1, 900))
        user = draw(st.booleans())
        images = draw(st.integers(0, 2))
        offloaded = draw(st.integers(1, full)) if images else full
        outputs = not user and draw(st.booleans())
        masked = draw(st.integers(1, full)) if outputs else None
        both = min(masked, offloaded) if masked is not None else None
        answers = user and draw(st.booleans())
        out.append(UnitCosts(full, offloaded, images, fixed=False, user=user, answers=answers,
                             masked=masked, masked_offloaded=both))  # fmt: skip
    return out


@given(units=conversations(), data=st.data())
def test_the_least_price_is_at_most_every_heads_price(
    units: list[UnitCosts], data: st.DataObject
) -> None:
    n = len(units)
    sums = _Sums(
        units, overhead=data.draw(st.integers(0, 50)), marker=data.draw(st.integers(0, 40))
    )
    e = data.draw(st.integers(2, n))
    lo = data.draw(st.integers(0, e - 1))
    hi = data.draw(st.integers(lo, e - 1))
    cut = data.draw(st.integers(lo, e))
    offload, mask = data.draw(st.integers(0, e)), data.draw(st.integers(0, e))
    vstart = data.draw(st.integers(0, e))
    verbatim = data.draw(st.integers(vstart, e))
    least = sums.least(e, (lo, hi), offload, cut, (mask, verbatim, vstart))
    prices = [sums.estimate(e, h, offload, cut, mask, verbatim, vstart) for h in range(lo, hi + 1)]
    assert least <= min(prices)


@given(
    units=conversations(size=60),
    budget=st.integers(200, 6000),
    overhead=st.integers(0, 3000),
    schedule=st.sampled_from(SCHEDULES),
)
def test_skipping_the_walk_changes_no_plan(
    units: list[UnitCosts], budget: int, overhead: int, schedule: Schedule
) -> None:
    def planned() -> elide.Plan:
        return plan(units, overhead=overhead, budget=budget, marker=12, schedule=schedule)

    skipped = planned()
    original = elide._Replay._least
    elide._Replay._least = lambda self, e, shortest: -1  # type: ignore[method-assign]
    try:
        walked = planned()
    finally:
        elide._Replay._least = original  # type: ignore[method-assign]
    assert skipped == walked


def test_tools_over_the_budget_cost_a_bounded_number_of_prices_per_unit(monkeypatch) -> None:
    """1,200 short turns behind tools that alone overflow: the replay prices each prefix a
    bounded number of times, not once per unit of the head on every user turn."""
    units = [
        UnitCosts(20, 20, 0, fixed=True, user=False),
        UnitCosts(8, 8, 0, fixed=True, user=True),
    ]
    for i in range(1200):
        units.append(UnitCosts(8, 8, 0, fixed=False, user=i % 2 == 0))
    calls = 0
    price = _Sums.estimate

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return price(self, *args, **kwargs)

    monkeypatch.setattr(_Sums, "estimate", counted)
    schedule = Schedule(("mask", "elide"), 0.8, 0.05, 1, 0.5, 0.0, 0.0)
    plan(units, overhead=9000, budget=8000, marker=12, schedule=schedule)
    assert calls <= 20 * len(units), calls
