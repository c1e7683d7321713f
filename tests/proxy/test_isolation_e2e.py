"""Isolation of prompt-derived facts, end to end through routefit in-process (issue 30, item 3).

A memo of something derived from a prompt (a text's token count, an image's size) answers
faster than computing it, so a memo shared by two teams lets one time its own request to learn
whether the other sent a text or an image first. Each memo serves a team only what that team
sent itself. The observables here are deterministic, never a timing:

* the token-count cache: ``routefit_count_cache_lookups_total{result}`` on ``/metrics``, read
  around each request (a miss is a text counted because the cache did not hold it for the team);
* fetched image sizes: the image host's own log of the fetches it served.

Each test runs both ways: the same team's repeat must hit (the memo still works), the other
team's first request must miss exactly as the first team's did.
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
from inprocess import run_inprocess
from test_fetch import Server

KEY_A = "sk-a-" + uuid.uuid4().hex
KEY_B = "sk-b-" + uuid.uuid4().hex
MAX_TOKENS = 16
WORDS = "the a of vault code door secret key report figure plan west river 17 2048 café".split()


@pytest.fixture(scope="module")
def images() -> Iterator[Server]:
    server = Server()
    server.thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


@pytest.fixture(scope="module")
def gw(sim, images, tmp_path_factory):
    fetch = {"allow_hosts": ["127.0.0.1"], "allow_private": True}
    routes = [
        sim_route("chat", sim.base_url, "gpt-4o"),
        sim_route("vision", sim.base_url, "gpt-4o", image_fetch=fetch),
    ]
    teams = [{"id": "team-a", "keys": [KEY_A]}, {"id": "team-b", "keys": [KEY_B]}]
    config = gateway_config(tmp_path_factory.mktemp("isolation") / "c.yaml", routes, teams=teams)
    with run_inprocess(config) as running:
        yield running


def big_text() -> str:
    """~100 KB of prose no one sent before (the size where a count-cache hit is ~500x faster
    than counting)."""
    rng = random.Random(uuid.uuid4().int)
    return uuid.uuid4().hex + " " + " ".join(rng.choice(WORDS) for _ in range(20_000))


def lookups(gw) -> dict[str, float]:
    """Count-cache lookups (``hit``, ``miss``) and message-memo hits (``memo``): a repeated
    message is priced from the memo without looking its text up again."""
    text = httpx.get(gw.base_url + "/metrics").text
    found = re.findall(r'^routefit_count_cache_lookups_total\{result="(\w+)"\} (\S+)$', text, re.M)
    memo = re.findall(r'^routefit_message_memo_lookups_total\{result="hit"\} (\S+)$', text, re.M)
    return {**{result: float(value) for result, value in found}, "memo": float(memo[0])}


def chat(gw, key: str, text: str) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": text}]}
    r = httpx.post(
        gw.v1 + "/chat/completions",
        json={**body, "max_tokens": MAX_TOKENS},
        headers={"authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text


def dry_run(gw, key: str, text: str) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": text}]}
    r = httpx.post(
        gw.base_url + "/routefit/fit",
        json={**body, "max_tokens": MAX_TOKENS},
        headers={"authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text


def count_tokens(gw, key: str, text: str) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": text}]}
    r = httpx.post(
        gw.v1 + "/messages/count_tokens", json=body, headers={"x-api-key": key}, timeout=60
    )
    assert r.status_code == 200, r.text


def delta(gw, send: Any, key: str, text: str) -> dict[str, float]:
    """How many count-cache hits and misses one request made."""
    before = lookups(gw)
    send(gw, key, text)
    after = lookups(gw)
    return {result: after[result] - before[result] for result in ("hit", "miss", "memo")}


# A real request (a body this big is proved to fit by a bound and counted while it is
# forwarded), the free dry run, and the free Anthropic count_tokens: each surface a team could
# time.
SURFACES = [chat, dry_run, count_tokens]


@pytest.mark.parametrize("send", SURFACES, ids=lambda f: f.__name__)
def test_a_count_one_team_paid_for_never_serves_another(gw, send):
    text = big_text()
    first = delta(gw, send, KEY_A, text)
    assert first["miss"] >= 1, first  # team A's text was counted
    again = delta(gw, send, KEY_A, text)
    # the same team's repeat is served from a memo, the count cache's or the whole message's
    # (what keeps a long conversation cheap)
    assert again["miss"] == 0 and again["hit"] + again["memo"] >= 1, again
    # team B sending the very same text counts it afresh, exactly as team A's first did, and
    # finds no message of A's
    other = delta(gw, send, KEY_B, text)
    assert other["miss"] == first["miss"] and other["memo"] == first["memo"], (first, other)
    # ... and from then on B has its own entries
    other_again = delta(gw, send, KEY_B, text)
    assert other_again["miss"] == 0 and other_again["hit"] + other_again["memo"] >= 1


def test_an_image_size_one_team_fetched_is_fetched_again_for_another(gw, images):
    path = f"/cat.png?{uuid.uuid4().hex}"
    url = images.url(path)
    content = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]

    def send(key: str) -> int:
        """Fetches the image host served for this request."""
        before = images.paths().count(path)
        body = {"model": "vision", "messages": [{"role": "user", "content": content}]}
        r = httpx.post(
            gw.base_url + "/routefit/fit",
            json={**body, "max_tokens": MAX_TOKENS},
            headers={"authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        return images.paths().count(path) - before

    # the host logs a request before it answers, and routefit answers after the fetch ended
    assert send(KEY_A) == 1
    assert send(KEY_A) == 0  # the team's own size is cached
    assert send(KEY_B) == 1  # the other team's request fetches it itself
    assert send(KEY_B) == 0
