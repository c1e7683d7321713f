"""A live routefit (in-process) fed by the in-process simulator, with traffic that exercises what
the dashboard and Grafana show: calibration (a route whose tokenizer routefit does not know),
prefix anchors (a growing conversation), fitting (a small window), streaming, a team quota.

Needs the app wiring of proxy.local_provider, proxy.provider_keys and proxy.ui (see
docs/operations.md, "Dashboard"): ``sim://local`` routes, the dashboard routes, ``record``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness import gateway_config
from inprocess import InProcess, run_inprocess
from openai import OpenAI

ADMIN_KEY = "admin-ui-test-key"
TEAM_KEY = "team-ui-test-key"


@dataclass
class Traffic:
    gateway: InProcess
    #: Successful requests sent per route alias.
    sent: dict[str, int]


def _local(alias: str, model: str, **info: int) -> dict:
    entry: dict = {
        "model_name": alias,
        "litellm_params": {"model": f"openai/{model}", "api_base": "sim://local"},
    }
    if info:
        entry["model_info"] = info
    return entry


def _drive(client: OpenAI) -> dict[str, int]:
    sent = {"sim-gpt-4o": 0, "sim-mystery": 0, "sim-small": 0}
    history: list[dict] = [{"role": "system", "content": "You are terse."}]
    for turn in range(6):  # a growing conversation: anchors hit from the second turn on
        history.append({"role": "user", "content": f"turn {turn}: " + "tell me more " * 150})
        reply = client.chat.completions.create(model="sim-mystery", messages=history)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
        sent["sim-mystery"] += 1
    for turn in range(3):
        stream = client.chat.completions.create(
            model="sim-gpt-4o",
            messages=[{"role": "user", "content": f"stream {turn} " + "words " * 600}],
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        sent["sim-gpt-4o"] += 1
    long = [{"role": "user", "content": "the task"}]
    for turn in range(16):  # too long for an 8k window: fitting elides middle turns
        long.append({"role": "assistant", "content": f"step {turn} " + "output " * 700})
        long.append({"role": "user", "content": f"next {turn}"})
    raw = client.chat.completions.with_raw_response.create(
        model="sim-small", messages=long, max_tokens=256
    )
    assert raw.headers["x-routefit-actions"].startswith("elided_messages=")
    assert raw.parse().choices[0].message.content
    sent["sim-small"] += 1
    return sent


# Per module, not per session: an in-process app that outlived the ui tests would keep the test
# process logging at INFO (inprocess._Levels) under every later test.
@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traffic]:
    path = tmp_path_factory.mktemp("ui") / "routefit.yaml"
    routes = [
        _local("sim-gpt-4o", "gpt-4o"),
        _local("sim-mystery", "mystery-1", max_input_tokens=32768, max_output_tokens=4096),
        _local("sim-small", "gpt-4o-small", max_input_tokens=8192, max_output_tokens=4096),
    ]
    teams = [
        {
            "id": "search",
            "keys": [TEAM_KEY],
            "quotas": {"tokens_per_minute": 400_000, "tokens_per_day": 2_000_000},
        }
    ]
    gateway_config(path, routes, admin_key=ADMIN_KEY, teams=teams)
    with run_inprocess(Path(path)) as gateway:
        client = OpenAI(base_url=gateway.v1, api_key=TEAM_KEY, max_retries=0)
        yield Traffic(gateway, _drive(client))
