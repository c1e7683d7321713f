"""Claude Code itself (a real subprocess), through routefit (in-process), against the simulator.

The README's one-line command, as written, against the README's config (it asks for a
32,000-token reply, twice the route's output limit: routefit clamps it). And on a 32k-window
route, a multi-turn ``claude -p`` / ``--continue`` session whose later turns no longer fit:
every turn must exit 0, routefit must show that it fitted, and the provider must never have seen an
overflow or Claude Code's own summarisation request (which it sends after a "prompt is too
long" answer).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import httpx
import yaml
from agent_clis import agent_cli, claude_env
from harness import gateway_config
from inprocess import run_inprocess

from proxy.sim.models import get_builtin, small_variant

ROOT = Path(__file__).resolve().parents[2]
WINDOW = 32_768
TURNS = 7
WORDS = "alpha beta gamma delta river stone cloud paper orange window seven quiet".split()


def _prompt(turn: int, rng: random.Random) -> str:
    notes = " ".join(rng.choice(WORDS) for _ in range(1500))
    return f"Turn {turn}: remember these notes. {notes} Reply briefly."


def _readme_command() -> str:
    """The README's Claude Code command, word for word (so the two cannot drift apart)."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"`(ANTHROPIC_BASE_URL=\S+ [^`]*\bclaude -p [^`]*)`", text)
    assert found, "README.md no longer shows the Claude Code command"
    return found[1]


def test_the_readme_claude_code_command_answers(tmp_path):
    claude = agent_cli("claude")
    command = _readme_command()
    assert "--model sim-gpt-4o" in command
    base = re.search(r"ANTHROPIC_BASE_URL=(\S+)", command)
    assert base
    # the README's config, as shipped, with its store in a scratch folder and no provider key
    data = yaml.safe_load((ROOT / "examples" / "routefit.yaml").read_text())
    data["routefit_settings"]["store_path"] = str(tmp_path / "routefit.sqlite3")
    config = tmp_path / "routefit.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    unset = {k: "" for k in os.environ if re.search(r"_API_KEY$", k)}
    with run_inprocess(config, env=unset, timeout=120) as gw:
        # the README's `claude` is the installed one; nothing else of ours is set
        path = os.path.dirname(claude) + os.pathsep + os.environ.get("PATH", "/usr/bin")
        env = claude_env(home, path=path)
        done = subprocess.run(
            ["bash", "-c", command.replace(base[1], gw.base_url)],
            env=env,
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert done.stdout.strip() and "API Error" not in done.stdout


def test_multi_turn_claude_code_session_is_fitted(sim, tmp_path):
    claude = agent_cli("claude")
    model = replace(small_variant(get_builtin("claude-sim"), WINDOW, 8192), name="claude-sim-32k")
    sim.state.add_model(model)
    sim.reset()
    route = {
        "model_name": "claude-small",
        "litellm_params": {
            "model": "anthropic/claude-sim-32k",
            "api_base": sim.base_url,
            "api_key": "sk-ant-sim",
        },
        "model_info": {"max_input_tokens": WINDOW, "max_output_tokens": 8192},
    }
    config = gateway_config(tmp_path / "routefit.yaml", [route])
    home = tmp_path / "home"
    project = tmp_path / "project"
    home.mkdir()
    project.mkdir()
    rng = random.Random(7)
    with run_inprocess(config) as gw:
        env = {**claude_env(home, gw.base_url), "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096"}
        for turn in range(TURNS):
            cmd = [claude, "-p", _prompt(turn, rng), "--output-format", "json"]
            cmd += ["--model", "claude-small"] + (["--continue"] if turn else [])
            done = subprocess.run(
                cmd, env=env, cwd=project, capture_output=True, text=True, timeout=90
            )
            assert done.returncode == 0, (turn, done.stdout[-2000:], done.stderr[-2000:])
            result = json.loads(done.stdout)
            assert result["is_error"] is False, result
        metrics = httpx.get(gw.base_url + "/metrics").text
    elided = re.search(
        r'routefit_fit_actions_total\{action="elided_messages",route="claude-small"\} (\S+)',
        metrics,
    )
    assert elided and float(elided[1]) > 0
    seen = sim.requests(path="/v1/messages")
    assert len(seen) >= TURNS
    assert all(entry["status"] == 200 for entry in seen)
    assert all(entry["prompt_tokens"] <= WINDOW for entry in seen)
    for entry in seen:
        text = json.dumps(entry["body"]["messages"][-1:])
        assert "summary of the conversation" not in text.lower()
    # the later, fitted turns read the provider's cache
    assert seen[-1]["cached_tokens"] > 0
