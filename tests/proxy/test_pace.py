"""The pace of optional work (``proxy.pace``): a share of the time, by each piece's own cost."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.pace import Pace


def test_work_waits_out_its_share_of_the_time() -> None:
    now = [0.0]
    pace = Pace(0.25, clock=lambda: now[0])
    assert pace.take()  # the first piece: nothing before it
    now[0] = 1.0
    pace.done(0.5)  # half a second of work: two seconds (0.5 / 0.25) before the next
    now[0] = 2.9
    assert not pace.take()
    now[0] = 3.0
    assert pace.take()


def test_a_piece_under_way_is_reckoned_at_the_last_ones_cost() -> None:
    now = [0.0]
    pace = Pace(0.5, clock=lambda: now[0])
    assert pace.take()
    pace.done(1.0)
    now[0] = 2.0
    assert pace.take()  # under way, reckoned at 1 s: nothing else for 2 s
    now[0] = 3.0
    assert not pace.take()
    pace.done(0.1)  # it cost less than the last: the next waits what it cost, not 2 s
    now[0] = 3.19
    assert not pace.take()
    now[0] = 3.2
    assert pace.take()


def test_a_share_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Pace(0.0)


@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 0.5)), max_size=60))
def test_taken_work_never_exceeds_its_share(steps: list[tuple[float, float]]) -> None:
    """However requests come (a gap, then the work's cost), the work taken costs at most the
    share of the time it spans, plus the last piece."""
    now = [0.0]
    pace = Pace(0.25, clock=lambda: now[0])
    spent, last = 0.0, 0.0
    for gap, cost in steps:
        now[0] += gap
        if pace.take():
            now[0] += cost
            pace.done(cost)
            spent += cost
            last = cost
    assert spent <= 0.25 * now[0] + last + 1e-9
