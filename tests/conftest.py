"""Shared fixtures: a real Redis server, example paths.

Tests talk to real services. Redis: ``REDIS_URL`` when set (CI exports it), else 127.0.0.1:6379
when it answers, else a ``redis-server`` started on a free port for the session (the Debian
package ``redis-server`` is the one system prerequisite of the tests).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import PrivateRedis, redis_answers

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    if redis_answers(6379):
        yield "redis://127.0.0.1:6379/0"
        return
    try:
        server = PrivateRedis()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    server.start()
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture(scope="session")
def example_config() -> Path:
    return EXAMPLES / "routefit.yaml"


# The provider simulator (proxy/sim): a session-wide server and a per-test reset view of it.
# Redis Cluster and Sentinel, started once per run by the first test that needs them.
from cluster_fixtures import redis_cluster, redis_sentinel  # noqa: E402, F401
from sim_fixtures import fresh_sim, sim  # noqa: E402, F401
