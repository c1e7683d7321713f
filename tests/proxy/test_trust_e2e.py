"""Trust, end to end through routefit (in-process) and the simulator (issue 30, items 3 and 4):

* **isolation** — an anchor (the provider's count of a prompt) is a fact about one team's
  prompt: another team sending the same prefix, in a dry run or for real, gets routefit's own
  estimate, never the first team's provider count;
* **an untrusted provider** — usage that is negative, fractional or absurdly large (the
  simulator's ``lie-usage`` fault) on the chat and Messages wires, streamed and not, is not
  learnt from, is counted and logged, and the team is charged routefit's estimate plus the
  output reservation; nothing raises, and the same prompt is served afterwards.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest
from harness import claude_route, gateway_config, sim_route
from inprocess import run_inprocess

ADMIN = "sk-admin-" + uuid.uuid4().hex
KEY_A = "sk-a-" + uuid.uuid4().hex
KEY_B = "sk-b-" + uuid.uuid4().hex
DAY = 10**12
MAX_TOKENS = 50


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    routes = [
        # the simulator's mystery-1: a tokenizer routefit does not know, so its own estimate
        # and the provider's count differ, and an anchor shows as the estimate snapping to it
        sim_route(
            "mystery",
            sim.base_url,
            "mystery-1",
            model_info={"max_input_tokens": 32768, "max_output_tokens": 4096},
        ),
        sim_route("liar-chat", sim.base_url, "gpt-4o"),
        claude_route("liar-claude", sim.base_url, "claude-sim"),
    ]
    quotas = {"tokens_per_day": DAY}
    config = gateway_config(
        tmp_path_factory.mktemp("trust") / "c.yaml",
        routes,
        admin_key=ADMIN,
        teams=[
            {"id": "team-a", "keys": [KEY_A], "quotas": quotas},
            {"id": "team-b", "keys": [KEY_B], "quotas": quotas},
        ],
    )
    with run_inprocess(config) as running:
        yield running


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def calibration(gw) -> dict[str, Any]:
    return dict(httpx.get(gw.base_url + "/routefit/calibration", headers=auth(ADMIN)).json())


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def samples(gw, alias: str) -> int:
    return int(calibration(gw)["routes"].get(alias, {}).get("samples", 0))


def used(gw, team: str) -> int:
    r = httpx.get(f"{gw.base_url}/routefit/teams/{team}/usage", headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    return int({w["name"]: w for w in r.json()["windows"]}["tokens_per_day"]["used"])


# -- isolation --------------------------------------------------------------------------------


def secret_prompt() -> list[dict[str, str]]:
    # words the meter and mystery-1 count differently (digits, accents, CJK)
    secret = f"The vault code is {uuid.uuid4().int % 10**8} and the door code {uuid.uuid4().int}."
    return [
        {"role": "system", "content": "You are team A's assistant. " + secret},
        {"role": "user", "content": "naïve café 東京 1999 42 " * 40},
    ]


def dry_run(gw, key: str, messages: list[dict[str, str]]) -> int:
    body = {"model": "mystery", "messages": messages, "max_tokens": MAX_TOKENS}
    r = httpx.post(gw.base_url + "/routefit/fit", json=body, headers=auth(key), timeout=30)
    assert r.status_code == 200, r.text
    return int(r.headers["x-routefit-prompt-tokens"])


def chat(gw, key: str, model: str, messages: list[dict[str, str]], **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": messages, "max_tokens": MAX_TOKENS, **extra}
    return httpx.post(gw.v1 + "/chat/completions", json=body, headers=auth(key), timeout=30)


def test_one_team_never_sees_anothers_anchor(gw):
    messages = secret_prompt()
    before = samples(gw, "mystery")
    r = chat(gw, KEY_A, "mystery", messages)
    assert r.status_code == 200, r.text
    truth = r.json()["usage"]["prompt_tokens"]
    assert wait_for(lambda: samples(gw, "mystery") > before)
    # Team A's own prompt is anchored: its estimate is the provider's count (the control that
    # shows an anchor is there to be leaked).
    assert dry_run(gw, KEY_A, messages) == truth
    # Team B sends the same prompt: routefit's own estimate, not A's provider count — in the
    # dry run, also for a prompt that extends it (a prefix anchor would snap the head) ...
    assert dry_run(gw, KEY_B, messages) != truth
    longer = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "?"}]
    assert dry_run(gw, KEY_B, longer) != dry_run(gw, KEY_A, longer)
    # ... and in the header of a real request.
    r = chat(gw, KEY_B, "mystery", messages)
    assert r.status_code == 200, r.text
    assert int(r.headers["x-routefit-prompt-tokens"]) != truth


def test_a_teams_anchor_serves_that_team(gw):
    """The scoping keeps anchors useful: a team's next turn starts from its own count."""
    messages = secret_prompt()
    r = chat(gw, KEY_B, "mystery", messages)
    assert r.status_code == 200, r.text
    truth = r.json()["usage"]["prompt_tokens"]
    assert wait_for(lambda: dry_run(gw, KEY_B, messages) == truth, timeout=5)


# -- an untrusted provider ------------------------------------------------------------------


def lie_next(sim, model: str, value: str) -> None:
    rule = {"fault": f"lie-usage:{value}", "model": model, "count": 1}
    httpx.post(sim.url("/sim/faults"), json={"faults": [rule]}).raise_for_status()


def ask(gw, alias: str, wire: str, stream: bool, content: str) -> tuple[int, int]:
    """(routefit's estimate from the header, the prompt count the client was told)."""
    messages = [{"role": "user", "content": content}]
    if wire == "chat":
        url, body = gw.v1 + "/chat/completions", {"model": alias, "messages": messages}
        if stream:
            body["stream_options"] = {"include_usage": True}
    else:
        url, body = gw.v1 + "/messages", {"model": alias, "messages": messages}
    body.update(max_tokens=MAX_TOKENS, stream=stream)
    with httpx.stream("POST", url, json=body, headers=auth(KEY_A), timeout=30) as r:
        text = r.read().decode()
        assert r.status_code == 200, text
        estimate = int(r.headers["x-routefit-prompt-tokens"])
    return estimate, told_prompt(text, wire, stream)


def told_prompt(text: str, wire: str, stream: bool) -> int:
    if not stream:
        usage = json.loads(text)["usage"]
        return int(usage.get("prompt_tokens", usage.get("input_tokens", 0)))
    seen = 0
    for line in text.splitlines():
        if not line.startswith("data: {"):
            continue
        obj = json.loads(line[6:])
        usage = obj.get("usage") or (obj.get("message") or {}).get("usage") or {}
        value = usage.get("prompt_tokens", usage.get("input_tokens"))
        if value is not None:
            seen = value
    return seen


WIRES = [
    ("liar-chat", "gpt-4o", "chat", False),
    ("liar-chat", "gpt-4o", "chat", True),
    ("liar-claude", "claude-sim", "messages", False),
    ("liar-claude", "claude-sim", "messages", True),
]
LIES = ["-5", "1e12", "12.5", "1e30", "1e19"]


@pytest.mark.parametrize(("alias", "model", "wire", "stream"), WIRES)
def test_lying_usage_is_not_learnt_and_the_estimate_is_charged(gw, sim, alias, model, wire, stream):
    before = calibration(gw)
    rejected = before.get("samples_rejected", 0)
    learnt = samples(gw, alias)
    content = f"How many tokens is this prompt, really? {uuid.uuid4().hex}"
    for n, lie in enumerate(LIES, 1):
        spent = used(gw, "team-a")
        lie_next(sim, model, lie)
        estimate, _ = ask(gw, alias, wire, stream, content)
        # charged routefit's estimate plus the output reservation (max_tokens), once settled
        assert wait_for(lambda s=spent, e=estimate: used(gw, "team-a") == s + e + MAX_TOKENS), (
            used(gw, "team-a") - spent,
            estimate,
        )
        assert wait_for(lambda r=rejected + n: calibration(gw).get("samples_rejected", 0) == r)
    # nothing was learnt from the lies: no sample, no anchor (the same prompt, answered
    # honestly now, is estimated by routefit, then learnt)
    estimate, told = ask(gw, alias, wire, stream, content)
    assert 0 < estimate < 10 * told
    assert wait_for(lambda: samples(gw, alias) == learnt + 1)
    assert "provider usage rejected" in gw.log()
    assert "Traceback" not in gw.log()
    metrics = httpx.get(gw.base_url + "/metrics", headers=auth(ADMIN)).text
    assert 'routefit_calibration_samples_total{outcome="rejected"}' in metrics
