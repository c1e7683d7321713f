"""What the sampled mutation run of pricing/ let through in capping's water-filling
(docs/mutation.md, 2026-12-04): the allotments use the whole budget, never more."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pricing.capped import _allot


@given(
    parts=st.lists(st.tuples(st.integers(1, 400), st.integers(0, 20)), min_size=1, max_size=8),
    share=st.floats(0.0, 1.0),
)
def test_water_filling_hands_out_the_whole_budget_and_no_more(
    parts: list[tuple[int, int]], share: float
) -> None:
    """``_allot``'s rule (its docstring): parts below a common level keep everything, the others
    get the level, no part less than its floor; the spare tokens (fewer than one per cut part)
    go one each to the first cut parts. So between the floors and the whole, the allotments
    add up to the budget exactly."""
    costs = [max(c, f) for c, f in parts]
    floors = [f for _, f in parts]
    low, high = sum(floors), sum(costs)
    budget = low + round(share * (high - low))
    allot = _allot(costs, budget, floors)
    assert allot is not None
    assert sum(allot) == budget
    assert all(f <= a <= c for a, c, f in zip(allot, costs, floors, strict=True))


def test_two_spare_tokens_go_to_the_first_two_cut_parts() -> None:
    # three parts of 10, budget 20: the level is 6 (18 tokens), the 2 spare go one each
    assert _allot([10, 10, 10], 20, [1, 1, 1]) == [7, 7, 6]
    # budget 19: one spare, to the first part only
    assert _allot([10, 10, 10], 19, [1, 1, 1]) == [7, 6, 6]
