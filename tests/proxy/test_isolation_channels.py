"""Channels between teams found by the tenancy audit (docs/security.md, "Isolation of
prompt-derived facts"), end to end through routefit in-process at the simulator.

``/metrics`` itself: with ``metrics_key`` set, only the scraper's key and the admin key read it.

The observable is deterministic, never a timing: ``routefit_count_cache_lookups_total{result}``
on ``/metrics`` read around each request (a miss is a text of 64+ characters counted because the
cache did not hold it for the team), as in ``test_isolation_e2e.py``. Each test runs both ways:
the same team's repeat hits (the memo still works), the other team's first request misses
exactly as the first team's did.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from harness import gateway_config, sim_route
from inprocess import InProcess, run_inprocess

KEY_A = "sk-a-" + uuid.uuid4().hex
KEY_B = "sk-b-" + uuid.uuid4().hex
WORDS = "the a of vault code door secret key report figure plan west river 17 2048 café".split()


@pytest.fixture(scope="module")
def gw(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    routes = [sim_route("embed", sim.base_url, "text-embedding-3-small")]
    teams = [{"id": "team-a", "keys": [KEY_A]}, {"id": "team-b", "keys": [KEY_B]}]
    config = gateway_config(tmp_path_factory.mktemp("tenancy") / "c.yaml", routes, teams=teams)
    with run_inprocess(config) as running:
        yield running


def secret_text() -> str:
    """~20 KB of prose no one sent before (under the embedding model's 8,192-token input)."""
    rng = random.Random(uuid.uuid4().int)
    return uuid.uuid4().hex + " " + " ".join(rng.choice(WORDS) for _ in range(4_000))


def lookups(gw: InProcess) -> dict[str, float]:
    text = httpx.get(gw.base_url + "/metrics", timeout=10).text
    found = re.findall(r'^routefit_count_cache_lookups_total\{result="(\w+)"\} (\S+)$', text, re.M)
    counted = {result: float(value) for result, value in found}
    return {"hit": counted.get("hit", 0.0), "miss": counted.get("miss", 0.0)}


def embed(gw: InProcess, key: str, text: str) -> dict[str, float]:
    """The count-cache lookups one embeddings request of ``key``'s team made."""
    before = lookups(gw)
    r = httpx.post(
        gw.v1 + "/embeddings",
        json={"model": "embed", "input": text},
        headers={"authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    after = lookups(gw)
    return {result: after[result] - before[result] for result in ("hit", "miss")}


def test_an_embedding_count_one_team_paid_for_never_serves_another(gw: InProcess) -> None:
    text = secret_text()
    first = embed(gw, KEY_A, text)
    assert first["miss"] >= 1 and first["hit"] == 0
    assert embed(gw, KEY_A, text) == {"hit": 1, "miss": 0}  # the memo still serves its team
    # team B guesses team A's text: counted afresh, exactly as A's first sending was
    assert embed(gw, KEY_B, text) == first
    assert embed(gw, KEY_B, text) == {"hit": 1, "miss": 0}


ADMIN = "sk-admin-" + uuid.uuid4().hex
SCRAPER = "sk-metrics-" + uuid.uuid4().hex


def test_metrics_answer_only_the_metrics_key_or_the_admin_key_once_one_is_set(
    sim: Any, tmp_path: Any
) -> None:
    """``/metrics`` reads per-route figures of every team's requests: with ``metrics_key`` set,
    a team's key (or none) reads nothing there; the scraper's key and the admin key do."""
    routes = [sim_route("gpt-4o", sim.base_url)]
    teams = [{"id": "team-a", "keys": [KEY_A]}]
    config = gateway_config(
        tmp_path / "c.yaml", routes, teams=teams, admin_key=ADMIN, metrics_key=SCRAPER
    )
    with run_inprocess(config) as gw:
        chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "count me"}]}
        sent = httpx.post(gw.v1 + "/chat/completions", json=chat, headers=_bearer(KEY_A))
        assert sent.status_code == 200, sent.text
        url = gw.base_url + "/metrics"
        anonymous = httpx.get(url)
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "metrics_key_required"
        assert "routefit_prompt_tokens" not in anonymous.text
        team = httpx.get(url, headers=_bearer(KEY_A))
        assert team.status_code == 403 and "routefit_prompt_tokens" not in team.text
        for key in (SCRAPER, ADMIN):
            scraped = httpx.get(url, headers=_bearer(key))
            assert scraped.status_code == 200
            assert 'routefit_prompt_tokens_actual_total{route="gpt-4o"}' in scraped.text


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}
