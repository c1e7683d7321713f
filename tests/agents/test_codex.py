"""Codex CLI itself (a subprocess), through routefit (in-process), to the simulator, small window.

Codex sends its whole history every turn (``store: false``, no ``previous_response_id``) and
gives up on ``context_length_exceeded`` ("Codex ran out of room in the model's context window",
exit 1). On a route whose window the conversation outgrows, every turn must still exit 0, and
the simulator must never have seen a prompt larger than its window.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import httpx
import pytest
from agent_clis import agent_cli
from harness import gateway_config, sim_route
from inprocess import run_inprocess
from PIL import Image

from proxy.sim.models import get_builtin, small_variant
from proxy.sim.server import run_sim

WINDOW = 24_000
TURNS = 6
#: About 4,000 tokens a turn: the conversation outgrows the window by the fourth turn.
NOTE = "Please remember this note for later: " + "river cloud tower field " * 1000


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    model = small_variant(get_builtin("gpt-4o"), window=WINDOW, max_output=4096)
    with run_sim(models=[model]) as sim:
        info = {"max_input_tokens": WINDOW, "max_output_tokens": 2048}
        route = sim_route("small", sim.base_url, model.name, model_info=info)
        vision = sim_route(
            "small-vision", sim.base_url, model.name, model_info={**info, "supports_vision": True}
        )
        path = tmp_path_factory.mktemp("codex") / "routefit.yaml"
        config = gateway_config(path, [route, vision])
        with run_inprocess(config) as gw:
            yield sim, gw


def _codex_home(tmp: Path, base_url: str) -> Path:
    home = tmp / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "small"\n'
        'model_provider = "local"\n'
        "[model_providers.local]\n"
        'name = "local"\n'
        f'base_url = "{base_url}"\n'
        'wire_api = "responses"\n'
        'env_key = "ROUTEFIT_TEST_KEY"\n'
    )
    return home


def _run(codex: str, home: Path, work: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "CODEX_HOME": str(home),
        "ROUTEFIT_TEST_KEY": "sk-test",
        "NO_COLOR": "1",
    }
    offline = ["--disable", "plugins", "-c", "analytics.enabled=false"]
    offline += ["-c", "otel.metrics_exporter=none"]
    return subprocess.run(
        [codex, "exec", *offline, "--skip-git-repo-check", *args],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_codex_turns_all_succeed_on_a_window_they_outgrow(stack, tmp_path):
    sim, gw = stack
    codex = agent_cli("codex")
    home = _codex_home(tmp_path, gw.v1)
    work = tmp_path / "work"
    work.mkdir()
    sim.reset()
    actions = []
    for turn in range(TURNS):
        prompt = f"Turn {turn}. {NOTE}"
        args = [prompt] if turn == 0 else ["resume", "--last", prompt]
        done = _run(codex, home, work, args)
        assert done.returncode == 0, f"turn {turn}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        metrics = httpx.get(gw.base_url + "/metrics").text
        actions.append(metrics)
    seen = sim.requests(path="/v1/responses")
    assert len(seen) >= TURNS
    assert all(r["status"] == 200 for r in seen), [r["status"] for r in seen]
    assert max(r["prompt_tokens"] for r in seen) <= WINDOW
    # Codex sends its whole history: without fitting, the last turns would not fit.
    assert 'routefit_fit_actions_total{action="elided_messages"' in actions[-1]
    sent = seen[-1]["body"]
    assert sent["store"] is False and sent["stream"] is True
    assert sent["input"][0]["role"] == "developer"
    # every turn priced at or above the provider's count (Codex's tools: nested schemas, a
    # namespace of functions, web search)
    served = [s for s in _served(gw) if s["route"] == "small"]
    assert len(served) >= TURNS
    assert all(s["prompt_estimate"] >= s["prompt_tokens"] for s in served), served


def test_an_image_codex_attaches_is_priced_by_the_routes_rule(stack, tmp_path):
    """``codex exec -i shot.png`` sends the picture as an ``input_image`` data URL: it reaches
    the provider as Codex sent it, priced by gpt-4o's tile rule at or above the provider's
    count."""
    sim, gw = stack
    codex = agent_cli("codex")
    home = _codex_home(tmp_path, gw.v1)
    (home / "config.toml").write_text(
        (home / "config.toml").read_text().replace('model = "small"', 'model = "small-vision"')
    )
    work = tmp_path / "work"
    work.mkdir()
    Image.frombytes("RGB", (1200, 800), random.Random(3).randbytes(1200 * 800 * 3)).save(
        work / "shot.png"
    )
    sim.reset()
    done = _run(codex, home, work, ["--image=shot.png", "Describe the picture in one line."])
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    (turn,) = sim.requests(path="/v1/responses")
    assert turn["status"] == 200
    images = [
        part["image_url"]
        for item in turn["body"]["input"]
        if isinstance(item.get("content"), list)
        for part in item["content"]
        if part.get("type") == "input_image"
    ]
    assert len(images) == 1 and images[0].startswith("data:image/png;base64,")
    served = [s for s in _served(gw) if s["route"] == "small-vision"]
    assert served[-1]["prompt_tokens"] == turn["prompt_tokens"]
    assert served[-1]["prompt_estimate"] >= turn["prompt_tokens"]


def _served(gw) -> list[dict]:
    """routefit's request log (its access lines) of the requests it served, oldest first."""
    return [
        json.loads(line.split("routefit.access: ", 1)[1])
        for line in gw.log().splitlines()
        if '"kind":"serve"' in line
    ]
