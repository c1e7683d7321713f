"""Two real ``routefit serve`` replicas sharing only a Redis (issue 29): a deployment that
failed through replica A is cooling down for replica B, whose first request goes straight to the
healthy deployment without touching the failing provider.

The failing deployment is a real HTTP server on loopback (tests/fake_provider.py) answering a
500 or a 401 to everything; the healthy one is the provider simulator. The in-process twin of
this test (tests/proxy/test_routing_e2e.py) shares the store between two apps in one process;
this one is what only processes show: two interpreters, two sockets, one Redis.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fake_provider import FakeProvider, fake_provider
from harness import Running, gateway_config, run_routefit, sim_route

CHAT = {"model": "chat", "max_tokens": 20, "messages": [{"role": "user", "content": "Say hello."}]}


def failing_deployment(provider: FakeProvider, ident: str) -> dict:
    """Ranked first (all but surely, under simple-shuffle) by its weight."""
    return {
        "model_name": "chat",
        "litellm_params": {
            "model": "openai/gpt-4o",
            "api_base": f"{provider.url}/v1",
            "api_key": "sk-fake-provider-key",
            "weight": 1_000_000,
        },
        "model_info": {"id": ident},
    }


@contextlib.contextmanager
def two_replicas(path: Path) -> Iterator[tuple[Running, Running]]:
    with run_routefit(path, timeout=90) as a, run_routefit(path, timeout=90) as b:
        yield a, b


def post(gw: Running) -> httpx.Response:
    return httpx.post(f"{gw.v1}/chat/completions", json=CHAT, timeout=30)


@pytest.mark.parametrize(("status", "fails_to_cool"), [(500, 2), (401, 1)])
def test_a_deployment_cooled_down_through_one_replica_is_skipped_by_the_other(
    sim, tmp_path, redis_url, status: int, fails_to_cool: int
):
    """``allowed_fails: 1``: two 500s cool the deployment down (a refused key, at once);
    ``cooldown_time`` is long enough to outlast the test."""
    ids = uuid.uuid4().hex[:8]  # fresh deployment ids: no health left by an earlier run
    bad, good = f"bad-{ids}", f"good-{ids}"
    with fake_provider(status) as provider:
        path = gateway_config(
            tmp_path / "routefit.yaml",
            [
                failing_deployment(provider, bad),
                sim_route("chat", sim.base_url, "gpt-4o", model_info={"id": good}),
            ],
            redis_url=redis_url,
        )
        data = path.read_text()
        path.write_text(data + "router_settings:\n  allowed_fails: 1\n  cooldown_time: 300\n")
        with two_replicas(path) as (a, b):
            through_a = [post(a) for _ in range(fails_to_cool)]
            hits_after_a = provider.hits
            first_on_b = post(b)
            b_log = b.log()
    for answer in through_a:
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-routefit-deployment"] == good
        assert answer.headers["x-routefit-attempts"] == "2"  # the failing one was tried first
    assert hits_after_a == fails_to_cool
    assert first_on_b.status_code == 200, first_on_b.text
    assert first_on_b.headers["x-routefit-deployment"] == good
    assert first_on_b.headers["x-routefit-attempts"] == "1"
    assert provider.hits == fails_to_cool  # nothing from B reached the failing provider
    assert f"on {bad}" not in b_log, b_log
