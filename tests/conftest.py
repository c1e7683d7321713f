"""Shared fixtures: a real Redis server, example paths.

Tests talk to real services. Redis: ``REDIS_URL`` when set (CI exports it), else 127.0.0.1:6379
when it answers, else a ``redis-server`` started on a free port for the session (the Debian
package ``redis-server`` is the one system prerequisite of the tests).

A shared server is someone else's: the session claims a database of its own on it (the first of
15..1 that is empty, claimed with ``SET NX`` so two sessions never share one), and empties it
at the end, so no test key is left behind and no stranger's key is touched.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from depth import PROFILE
from harness import PrivateRedis, redis_answers
from hypothesis import HealthCheck, settings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# Hypothesis profiles, chosen by ``HYPOTHESIS_PROFILE`` (or ``--hypothesis-profile``), else
# ``ci`` when ``CI`` is set (depth.PROFILE):
# * ``default``: the everyday run; each property sets its own budget.
# * ``ci``: .ci/run's; the properties that guard a known hiding place (``depth.examples``) search
#   with their deep budget, and a failure prints the blob that reproduces it.
# * ``mutation``: mutmut's (docs/mutation.md); derandomized, so a mutant's verdict does not
#   depend on luck, and without deadlines or a database, which mutated code would only confuse.
# No profile has a deadline: Hypothesis's default (200 ms an example) is a timing assertion, and
# on a loaded 2-core CI an example of a property that does real work (a fit, a parse of a session)
# outlives it though nothing is wrong; speed is bench/'s business. Properties that set their own
# settings inherit this.
settings.register_profile("default", deadline=None)
settings.register_profile("ci", print_blob=True, deadline=None)
settings.register_profile(
    "mutation",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.load_profile(PROFILE)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


_CLAIM = "routefit-tests:claimed"


def _claim_database(url: str) -> tuple[str, Any] | None:
    """(URL of an empty database this session now owns, its client), or None."""
    import redis

    base = url.rsplit("/", 1)[0] if url.count("/") > 2 else url.rstrip("/")
    token = uuid.uuid4().hex
    for db in range(15, 0, -1):
        client = redis.Redis.from_url(f"{base}/{db}")
        try:
            if client.set(_CLAIM, token, nx=True, ex=6 * 3600):
                if client.dbsize() == 1:
                    return f"{base}/{db}", client
                client.delete(_CLAIM)  # keys of someone else's: not ours to empty
        except redis.RedisError:
            pass
        client.close()
    return None


@contextmanager
def _own_database(url: str) -> Iterator[str]:
    claimed = _claim_database(url)
    if claimed is None:  # no free database (or SELECT refused): share, as before
        yield url
        return
    own, client = claimed
    try:
        yield own
    finally:
        client.flushdb()
        client.close()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL")
    if not url and redis_answers(6379):
        url = "redis://127.0.0.1:6379/0"
    if url:
        with _own_database(url) as own:
            yield own
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
