"""Fixtures the proxy's tests share beyond one module."""

from __future__ import annotations

import pytest

import proxy.estimate


@pytest.fixture
def every_guess_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every sample's guess a close call (``proxy.estimate.CLOSE_CALL`` at 1), its answer held
    until the count proves it: for the tests of that hold. A guess its doubt leaves under the
    budget goes unheld (tests/proxy/test_unheld_guess_e2e.py)."""
    monkeypatch.setattr(proxy.estimate, "CLOSE_CALL", 1.0)
