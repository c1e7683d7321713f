"""pytest fixtures for the simulator. Import them into a conftest or test module::

    from sim_fixtures import sim, fresh_sim  # noqa: F401

``sim``        session-scoped: one simulator with every built-in model, no API key required.
``fresh_sim``  function-scoped: that same simulator, reset (request log, faults, caches,
               counters, config) before the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.sim.server import SimServer, run_sim
from proxy.sim.state import SimConfig

__all__ = ["fresh_sim", "sim"]


@pytest.fixture(scope="session")
def sim() -> Iterator[SimServer]:
    with run_sim() as server:
        yield server


@pytest.fixture
def fresh_sim(sim: SimServer) -> SimServer:
    sim.reset()
    sim.state.config.__dict__.update(SimConfig().__dict__)
    return sim
