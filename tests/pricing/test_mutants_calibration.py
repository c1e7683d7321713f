"""What the sampled mutation run of pricing/ let through (docs/mutation.md, 2026-12-04): the
calibration policy's least sample count, and a request that names no model."""

from __future__ import annotations

import pytest

from pricing.calibration import CalibrationPolicy
from pricing.messages import parse_request


def test_a_calibration_policy_may_learn_from_a_single_sample() -> None:
    """The policy's rule: at least one sample, and a window that holds them."""
    assert CalibrationPolicy(min_samples=1, window=1).min_samples == 1
    with pytest.raises(ValueError):
        CalibrationPolicy(min_samples=0)
    with pytest.raises(ValueError):
        CalibrationPolicy(min_samples=5, window=4)


def test_a_request_without_a_model_has_an_empty_model_name() -> None:
    request = parse_request({"messages": [{"role": "user", "content": "hi"}]})
    assert request.model == ""
