"""What the sampled mutation run of strategies/ let through in ``FitPolicy.parse``
(docs/mutation.md, 2026-12-04): every fraction knob is read as a number in its range, and a bad
value is refused by a message that names the knob."""

from __future__ import annotations

import pytest

from strategies.policy import FitPolicy

#: The fraction knobs (docs/configuration.md's policy table) and the least each may be, as
#: ``FitPolicy.parse`` states it in its refusals: the three that 0 turns off (pin, mask, verbatim
#: head) may be 0, the others at least 0.01; every one at most 1.
FRACTIONS = {
    "cap_fraction": 0.01,
    "low_water": 0.01,
    "checkpoint_quantum": 0.01,
    "pin_fraction": 0.0,
    "mask_water": 0.0,
    "verbatim_head": 0.0,
}


@pytest.mark.parametrize(("key", "least"), FRACTIONS.items())
def test_a_fraction_knob_is_read_as_a_number_within_its_range(key: str, least: float) -> None:
    for value in (least, 0.5, 1):
        parsed = getattr(FitPolicy.parse({key: value}), key)
        assert parsed == float(value) and isinstance(parsed, float)
    for bad in (least - 0.005, 1.01):
        with pytest.raises(ValueError, match=rf"^{key} must be between {least} and 1$"):
            FitPolicy.parse({key: bad})


@pytest.mark.parametrize("key", FRACTIONS)
@pytest.mark.parametrize("bad", ["0.5", True, None, [0.5]])
def test_a_fraction_knob_that_is_not_a_number_is_refused_by_name(key: str, bad: object) -> None:
    with pytest.raises(ValueError, match=rf"^{key} must be a number$"):
        FitPolicy.parse({key: bad})
