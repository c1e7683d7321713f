"""What the sampled mutation run of strategies/ let through in the planner's prefix sums
(docs/mutation.md, 2026-12-04): one unit's price agrees with the sums' price of the range it
adds, at the edges of the verbatim head and the masked range too."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strategies.elide import UnitCosts, _Sums


@st.composite
def units(draw: st.DrawFn, fixed: bool = False) -> list[UnitCosts]:
    """Unit costs with and without outputs; with ``fixed``, about one unit in six protected."""
    out = []
    for _ in range(draw(st.integers(1, 8))):
        full = draw(st.integers(10, 500))
        offloaded = draw(st.integers(1, full))
        outputs = draw(st.booleans())
        masked = draw(st.integers(1, full)) if outputs else None
        both = draw(st.integers(1, min(offloaded, masked))) if masked is not None else None
        protected = fixed and draw(st.integers(0, 5)) == 0
        out.append(
            UnitCosts(full, offloaded, 1, fixed=protected, user=False, masked=masked,
                      masked_offloaded=both)
        )  # fmt: skip
    return out


@given(units=units(), data=st.data())
def test_a_units_cost_is_what_it_adds_to_the_sums(
    units: list[UnitCosts], data: st.DataObject
) -> None:
    """``free(x, …)`` prices the units below x, outputs in ``[verbatim, mask)`` masked; ``cost``
    prices one unit under the same plan: adding unit u adds its cost."""
    sums = _Sums(units, overhead=0, marker=0)
    n = len(units)
    offload = data.draw(st.integers(0, n))
    mask = data.draw(st.integers(0, n))
    verbatim = data.draw(st.integers(0, n))
    for u in range(n):
        added = sums.free(u + 1, offload, mask, verbatim) - sums.free(u, offload, mask, verbatim)
        assert sums.cost(u, offload, mask, verbatim) == added


def test_the_first_unit_after_the_verbatim_head_is_masked() -> None:
    unit = UnitCosts(100, 100, 0, fixed=False, user=False, masked=10)
    sums = _Sums([unit, unit, unit], overhead=0, marker=0)
    # verbatim head [0, 1), masked range [1, 3): unit 0 whole, units 1 and 2 masked
    assert [sums.cost(u, 0, 3, verbatim=1) for u in range(3)] == [100, 10, 10]
