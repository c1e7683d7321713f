"""routefit in process before the simulator, as the tests of the fit's proofs (a bound, a
sample's guess) drive it: a route with the simulator's gpt-4o window (``exact``) and one that
tells routefit 12k (``tight``), one whose provider refuses past its 8k window (``small``), one
team without limits; and what those tests read back (the
proofs' metrics, a route's calibration report)."""

from __future__ import annotations

import contextlib
import random
import string
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess

TEAM_KEY = "sk-team-bounded-0123456789abcdef"
ADMIN_KEY = "sk-admin-bounded-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@contextlib.contextmanager
def serving(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    routes = [
        sim_route("exact", sim.base_url, "gpt-4o"),
        # 12k window: a 40 KB prompt of ~9k tokens fits exactly, but its bound (bytes) does not
        sim_route(
            "tight",
            sim.base_url,
            "gpt-4o",
            model_info={"max_input_tokens": 12_000, "max_output_tokens": 1024},
        ),
        # the simulator's gpt-4 takes 8,192 tokens and refuses more, as OpenAI does
        sim_route("small", sim.base_url, "gpt-4"),
    ]
    teams = [{"id": "bounded", "keys": [TEAM_KEY], "quotas": {"tokens_per_day": 10**10}}]
    config = gateway_config(
        tmp_path_factory.mktemp("b") / "c.yaml", routes, teams=teams, admin_key=ADMIN_KEY
    )
    with run_inprocess(config) as running:
        yield running


def route_report(gw: Any, alias: str, samples: int) -> dict[str, Any]:
    """The route's calibration report once it holds ``samples`` samples (or after 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        report = (
            httpx.get(gw.base_url + "/routefit/calibration", headers=ADMIN)
            .json()["routes"]
            .get(alias, {})
        )
        if report.get("samples", 0) >= samples or time.monotonic() > deadline:
            return dict(report)
        time.sleep(0.05)


def metric(gw: Any, name: str, alias: str, label: str = "") -> float:
    for line in httpx.get(gw.base_url + "/metrics", headers=ADMIN).text.splitlines():
        if line.startswith(name) and f'route="{alias}"' in line and label in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def proofs(gw: Any, alias: str, proof: str) -> float:
    """How many requests to ``alias`` went on ``proof`` (``routefit_fit_proofs_total``)."""
    return metric(gw, "routefit_fit_proofs_total", alias, f'proof="{proof}"')


WORDS = "window provider usage prompt cache budget token turn agent session tool".split()


def prose(seed: int, words: int) -> str:
    """New text: words with numbers, none of it sent before under another seed."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(words))


def dense(seed: int, chars: int) -> str:
    """New text of letters, digits and signs in no order: about two characters a token, where
    ``prose`` has three or four."""
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits + "+/") for _ in range(chars))


def chat(
    gw: Any, alias: str, messages: list[dict[str, Any]], stream: bool = False
) -> tuple[dict[str, str], int]:
    """(the answer's headers, the provider's prompt count in the answer the client got),
    through the openai SDK as the team."""
    client = openai.OpenAI(base_url=gw.v1, api_key=TEAM_KEY, max_retries=0, timeout=60)
    if not stream:
        raw = client.chat.completions.with_raw_response.create(
            model=alias, messages=messages, max_tokens=16
        )
        return dict(raw.headers), raw.parse().usage.prompt_tokens
    raw = client.chat.completions.with_raw_response.create(
        model=alias,
        messages=messages,
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in raw.parse() if chunk.usage is not None][-1]
    return dict(raw.headers), usage.prompt_tokens
