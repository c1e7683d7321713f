"""Charging on every exit, through routefit (in-process) and the simulator, on all three wires: a
client that reads the first events of a stream and hangs up is still charged the prompt the
provider billed (its own count when the stream stated one, else routefit's estimate) plus the
output relayed so far — never 0 — and a non-streamed request whose client leaves while the
provider works is charged its prompt too."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import orjson
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess

ADMIN = "sk-admin-" + uuid.uuid4().hex
KEY = "sk-charged-" + uuid.uuid4().hex
TEAM = "charged-" + uuid.uuid4().hex[:8]
#: A prompt big enough that "charged the prompt" and "charged a few output tokens" differ.
PROMPT = " ".join(f"word{i} of a long prompt" for i in range(400))
MAX_TOKENS = 300


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory) -> Iterator:
    routes = [
        sim_route("gpt-4o", sim.base_url),
        {
            "model_name": "claude",
            "litellm_params": {
                "model": "anthropic/claude-sim",
                "api_base": sim.base_url,
                "api_key": "sk-ant-sim",
            },
        },
    ]
    config = gateway_config(
        tmp_path_factory.mktemp("charging") / "c.yaml",
        routes,
        admin_key=ADMIN,
        teams=[{"id": TEAM, "keys": [KEY], "quotas": {"tokens_per_day": 10**10}}],
    )
    with run_inprocess(config) as running:
        yield running


def used(gw) -> int:
    r = httpx.get(
        f"{gw.base_url}/routefit/teams/{TEAM}/usage", headers={"authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 200, r.text
    return int({w["name"]: w for w in r.json()["windows"]}["tokens_per_day"]["used"])


def settled(gw, held: int, timeout: float = 10.0) -> int:
    """The day's usage once the hung-up request's reservation (``held``) was settled."""
    deadline = time.monotonic() + timeout
    while (now := used(gw)) == held and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


CASES = {
    "chat": (
        "/v1/chat/completions",
        {
            "model": "gpt-4o",
            "stream": True,
            "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": PROMPT}],
        },
    ),
    "messages": (
        "/v1/messages",
        {
            "model": "claude",
            "stream": True,
            "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": PROMPT}],
        },
    ),
    "responses": (
        "/v1/responses",
        {"model": "gpt-4o", "stream": True, "max_output_tokens": MAX_TOKENS, "input": PROMPT},
    ),
}


def hang_up_after(gw, path: str, body: dict, events: int) -> tuple[int, int, list[bytes]]:
    """(routefit's prompt estimate, the usage held while streaming, the events read) of a
    stream whose client closes the connection after reading ``events`` events."""
    seen: list[bytes] = []
    headers = {"authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"}
    with httpx.stream("POST", gw.base_url + path, json=body, headers=headers, timeout=30) as r:
        assert r.status_code == 200, r.read()
        estimate = int(r.headers["x-routefit-prompt-tokens"])
        lines = r.iter_lines()
        while len(seen) < events:
            line = next(lines)
            if line.startswith("data:"):
                seen.append(line[5:].strip().encode())
        held = used(gw)
    return estimate, held, seen


@pytest.mark.parametrize("wire", list(CASES))
def test_a_client_that_hangs_up_is_charged_the_prompt(gw, fresh_sim, wire):
    fresh_sim.state.config.chunk_delay = 0.2  # the stream outlives the client
    path, body = CASES[wire]
    before = used(gw)
    estimate, held, seen = hang_up_after(gw, path, body, events=3)
    assert held - before >= estimate + MAX_TOKENS  # reserved while it streamed
    after = settled(gw, held)
    charged = after - before
    assert after != held, "the hung-up stream was never settled"
    prompt = estimate
    if wire == "messages":  # Anthropic states the prompt's count up front: it is what is billed
        start = orjson.loads(seen[0])
        assert start["type"] == "message_start"
        prompt = start["message"]["usage"]["input_tokens"]
        assert prompt > 0
    # at least the prompt; and settled, so far below the output reservation it held
    assert prompt <= charged < prompt + MAX_TOKENS
    assert charged > 0


def test_a_finished_stream_is_charged_the_providers_usage_once(gw, fresh_sim):
    before = used(gw)
    path, body = CASES["chat"]
    body = {**body, "stream_options": {"include_usage": True}}
    headers = {"authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", gw.base_url + path, json=body, headers=headers, timeout=30) as r:
        data = [line[5:].strip() for line in r.iter_lines() if line.startswith("data:")]
    usage = orjson.loads(data[-2])["usage"]
    expected = before + usage["prompt_tokens"] + usage["completion_tokens"]
    deadline = time.monotonic() + 10
    while used(gw) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert used(gw) == expected


def test_a_non_streamed_request_whose_client_leaves_is_charged_its_prompt(gw, fresh_sim):
    fresh_sim.inject("delay:5")  # the answer is seconds away when the client gives up
    before = used(gw)
    body = {**CASES["chat"][1], "stream": False}

    def give_up() -> None:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                gw.v1 + "/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {KEY}"},
                timeout=httpx.Timeout(30, read=1.5),
            )

    client = threading.Thread(target=give_up)
    client.start()
    deadline = time.monotonic() + 10
    while (held := used(gw)) == before and time.monotonic() < deadline:
        time.sleep(0.02)
    client.join()
    charged = settled(gw, held) - before
    # the reservation was the prompt estimate + the output reserve; what stays is the prompt
    assert charged == held - before - MAX_TOKENS
    assert charged > 0
