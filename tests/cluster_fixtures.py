"""Session-wide Redis Cluster (3 masters + 3 replicas) and Sentinel (1 master, 1 replica,
3 sentinels) for the store contract and the multi-replica tests; started on first use, once per
test run, torn down at the end. Imported by tests/conftest.py so every test module shares them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import LocalRedisCluster, LocalSentinel


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalRedisCluster]:
    try:
        cluster = LocalRedisCluster(masters=3, node_timeout_ms=1000)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[LocalSentinel]:
    try:
        setup = LocalSentinel(master_name="routefit", down_after_ms=1000)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        setup.start()
        yield setup
    finally:
        setup.close()
