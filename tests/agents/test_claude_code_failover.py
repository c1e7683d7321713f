"""Claude Code (a real subprocess) through routefit (in process) on a model whose first-ranked
deployment is overloaded (issue 29): a real HTTP server on loopback answering Anthropic's 529 to
everything, beside the provider simulator. The CLI's turn must succeed as if nothing failed —
routefit fails over before the CLI sees an error, so Claude Code's own retry-and-wait on 529 never
starts — and the overloaded deployment must really have been tried.
"""

from __future__ import annotations

import json
import re
import subprocess

import httpx
from agent_clis import agent_cli, claude_env
from fake_provider import fake_provider
from harness import gateway_config
from inprocess import run_inprocess


def test_claude_code_turn_succeeds_through_an_overloaded_primary(sim, tmp_path):
    claude = agent_cli("claude")
    sim.reset()
    with fake_provider(529) as overloaded:
        models = [
            {
                "model_name": "claude-routed",
                "litellm_params": {
                    "model": "anthropic/claude-sonnet-4-5",
                    "api_base": overloaded.url,
                    "api_key": "sk-ant-overloaded",
                    "weight": 1_000_000,  # ranked first, all but surely
                },
                "model_info": {"id": "overloaded"},
            },
            {
                "model_name": "claude-routed",
                "litellm_params": {
                    "model": "anthropic/claude-sonnet-4-5",
                    "api_base": sim.base_url,
                    "api_key": "sk-ant-sim",
                },
                "model_info": {"id": "healthy"},
            },
        ]
        config = gateway_config(tmp_path / "routefit.yaml", models)
        home, project = tmp_path / "home", tmp_path / "project"
        home.mkdir()
        project.mkdir()
        with run_inprocess(config, timeout=60, access_log=True) as gw:
            env = claude_env(home, gw.base_url)
            cmd = [claude, "-p", "Say hello.", "--output-format", "json"]
            cmd += ["--model", "claude-routed"]
            done = subprocess.run(
                cmd, env=env, cwd=project, capture_output=True, text=True, timeout=120
            )
            metrics = httpx.get(gw.base_url + "/metrics").text
            log = gw.log()
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert json.loads(done.stdout)["is_error"] is False, done.stdout[-2000:]
    # the overloaded deployment was tried (and answered 529) before the healthy one answered
    assert overloaded.hits >= 1
    assert all(path.startswith("/v1/messages") for path in overloaded.paths)
    tried = re.search(
        r'routefit_deployment_attempts_total\{[^}]*deployment="overloaded"[^}]*outcome="server"'
        r"[^}]*\} (\S+)",
        metrics,
    )
    assert tried and float(tried[1]) == overloaded.hits, metrics
    # and Claude Code never saw the 529: every answer routefit gave it was a 200
    to_cli = re.findall(r'"POST /v1/messages[^"]*" (\d{3})', log)
    assert to_cli and set(to_cli) == {"200"}, log
    answered = sim.requests(path="/v1/messages")
    assert answered and all(entry["status"] == 200 for entry in answered)
