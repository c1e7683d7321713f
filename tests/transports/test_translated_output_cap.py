"""A translated request with no output cap reaches its provider with the cap the fit left room
for, not the translation's default. Anthropic needs ``max_tokens``; without one from the
client, the chat→Messages translation sent the model map's output limit (4,096 when the map
does not know the model, 64,000 for Claude Sonnet 4.5), while the fit had set aside only the
route's reservation: a prompt that fitted routefit's budget failed the provider's check of
prompt + max_tokens against its window (found running Codex on a 16k Anthropic route). Every
client wire on the route is checked: chat, Responses and Gemini clients all reach it through
the chat translation."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import claude_route, gateway_config
from inprocess import InProcess, run_inprocess

from proxy.sim.models import get_builtin, small_variant
from proxy.sim.server import SimServer, run_sim

WINDOW = 16_000
ROUTE_OUTPUT = 2_048  # the route's output limit, below the 4,096 the translation fell back to
TEXT = "river cloud tower field "


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[InProcess, SimServer]]:
    model = replace(small_variant(get_builtin("claude-sim"), WINDOW, 4096), name="claude-16k")
    with run_sim(models=[model]) as sim:
        route = claude_route(
            "c",
            sim.base_url,
            model.name,
            max_input_tokens=WINDOW,
            max_output_tokens=ROUTE_OUTPUT,
        )
        config = gateway_config(Path(tempfile.mkdtemp()) / "r.yaml", [route])
        with run_inprocess(config) as gw:
            yield gw, sim


def _request(wire: str, text: str) -> tuple[str, dict[str, Any]]:
    if wire == "chat":
        return "/v1/chat/completions", {
            "model": "c",
            "messages": [{"role": "user", "content": text}],
        }
    if wire == "responses":
        return "/v1/responses", {"model": "c", "input": text, "store": False}
    return "/v1beta/models/c:generateContent", {
        "contents": [{"role": "user", "parts": [{"text": text}]}]
    }


@pytest.mark.parametrize("wire", ["chat", "responses", "gemini"])
def test_an_uncapped_request_near_the_window_is_sent_with_the_room_it_has(
    served: tuple[InProcess, SimServer], wire: str
) -> None:
    gw, sim = served
    path, body = _request(wire, TEXT * 3_150)  # ~12.6k tokens: fits beside 2,048, not 4,096
    r = httpx.post(gw.base_url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    seen = sim.requests(1)[0]
    assert seen["status"] == 200
    cap = seen["body"]["max_tokens"]
    assert cap <= ROUTE_OUTPUT
    assert seen["prompt_tokens"] + cap <= WINDOW


def test_a_short_uncapped_request_may_write_up_to_the_routes_limit(
    served: tuple[InProcess, SimServer],
) -> None:
    """Room is not rationed: with the prompt far from the window the cap is the route's limit,
    as long an answer as the model may write."""
    gw, sim = served
    path, body = _request("chat", "Say hello.")
    r = httpx.post(gw.base_url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert sim.requests(1)[0]["body"]["max_tokens"] == ROUTE_OUTPUT


def test_a_clients_own_cap_is_kept(served: tuple[InProcess, SimServer]) -> None:
    gw, sim = served
    path, body = _request("chat", "Say hello.")
    r = httpx.post(gw.base_url + path, json={**body, "max_tokens": 100}, timeout=60)
    assert r.status_code == 200, r.text
    assert sim.requests(1)[0]["body"]["max_tokens"] == 100
