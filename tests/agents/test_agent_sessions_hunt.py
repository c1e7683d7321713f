"""The real agent CLIs in tool-using sessions that outgrow a small window, on their own wire's
route and on a translated one: Claude Code (Messages) on an Anthropic and on a chat route, Codex
(Responses) on a Responses and on an Anthropic route, Gemini CLI on a chat and on a Gemini route.

Every turn asks the simulator for tool calls (``call:NAME`` in the prompt), so the CLI runs its
tools and sends their results back: the request the model must answer is then a tool round, not
a user message. Fitting may cut anything older, but the provider must never refuse what routefit
forwarded (orphaned results, unanswered calls, role order), never see more than its window, and
never be asked a turn's question again because the tool round answering it was cut: an agent that
no longer sees what it just did repeats the calls, turn after turn. (On a route that has not
learnt yet, a longer session than these can still lose its newest tool round to the prior's
deliberate over-estimate, when the weights alone would keep it: a known open case, not tested here.)
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_clis import agent_cli, claude_env
from harness import claude_route, gateway_config, sim_route
from inprocess import InProcess, run_inprocess
from test_codex import _codex_home
from test_codex import _run as codex_run
from test_gemini_cli import SETTINGS, _gemini_route
from test_gemini_cli import _run as gemini_run

from proxy.sim.models import get_builtin, small_variant
from proxy.sim.server import SimServer, run_sim
from proxy.transports.provider_errors import account_figures_hidden, redact

TURNS = 5
#: About 3,200 tokens a turn: a small route is outgrown by the third turn.
NOTE = "Please remember this note for later: " + "river cloud tower field " * 800
#: Each CLI's own tools the simulator is asked to call (two a round for Codex and Gemini CLI).
CALLS = {"claude": "Glob,Grep", "codex": "exec_command,view_image", "gemini": "list_directory,glob"}
#: A window per CLI: its first request (system prompt and tools) fits with two turns beside it.
Stack = tuple[SimServer, InProcess]
WINDOWS = {"claude": 32_768, "codex": 16_000, "gemini": 16_000}
#: Each route's output limit. Codex sends no output cap: on its Anthropic route the translation
#: must send the room the fit left (at most 2,048), not the 4,096 it fell back to.
MAX_OUTPUT = {"claude": 2048, "codex": 2048, "gemini": 2048}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimServer, InProcess]]:
    """One simulator with a small model of each family, and a gateway with a native and a
    translated route per CLI (``<cli>-native``, ``<cli>-translated``)."""
    models = {
        (family, cli): replace(
            small_variant(get_builtin(family), WINDOWS[cli], 4096), name=f"{family}-{cli}"
        )
        for cli in WINDOWS
        for family in ("gpt-4o", "claude-sim", "gemini-sim")
    }
    keys = ["sk-sim", "sk-ant-sim", "sk-sim-google"]
    with run_sim(models=list(models.values()), api_keys=keys) as sim:
        routes = []
        for cli, window in WINDOWS.items():
            info = {"max_input_tokens": window, "max_output_tokens": MAX_OUTPUT[cli]}
            chat = models["gpt-4o", cli].name
            claude = models["claude-sim", cli].name
            gemini = models["gemini-sim", cli].name
            native, translated = {
                "claude": (claude_route(f"{cli}-native", sim.base_url, claude, **info), chat),
                "codex": (sim_route(f"{cli}-native", sim.base_url, chat, model_info=info), claude),
                "gemini": (_gemini_route(f"{cli}-native", sim.base_url, gemini, info), chat),
            }[cli]
            routes.append(native)
            if translated == claude:
                routes.append(claude_route(f"{cli}-translated", sim.base_url, claude, **info))
            else:
                routes.append(sim_route(f"{cli}-translated", sim.base_url, chat, model_info=info))
        path = tmp_path_factory.mktemp("sessions") / "routefit.yaml"
        with run_inprocess(gateway_config(path, routes), timeout=120) as gw:
            yield sim, gw


def _prompt(cli: str, turn: int, call: bool = True) -> str:
    ask = f"Please call:{CALLS[cli]} now." if call else "Nothing to run."
    return f"Turn {turn}. {ask} {NOTE}"


def _asked(seen: list[dict[str, Any]]) -> Counter[int]:
    """How many forwarded requests ended on each turn's own prompt: the model is asked a turn
    once; asked again, it was not shown the tool round that answered the first time."""
    asked: Counter[int] = Counter()
    for entry in seen:
        body = entry["body"]
        items = body.get("messages") or body.get("input") or body.get("contents") or []
        # Claude Code may send a system entry after its prompt: the question is the last
        # item of the conversation's own
        spoken = [i for i in items if i.get("role") not in ("system", "developer")]
        last = json.dumps(spoken[-1]) if spoken else ""
        answered = ("tool_result", "function_call_output", "functionResponse", '"tool"')
        if any(marker in last for marker in answered):
            continue
        asked.update(t for t in range(TURNS) if f"Turn {t}. " in last)
    return asked


def _shapes(seen: list[dict[str, Any]]) -> list[str]:
    """Each forwarded request's conversation in brief, for a failure's message."""
    out = []
    for entry in seen:
        body = entry["body"]
        items = body.get("messages") or body.get("input") or body.get("contents") or []
        out.append(" ".join(str(i.get("role", i.get("type")))[:4] for i in items))
        out.append(json.dumps(items[-1])[:150] if items else "")
    return out


def _check_provider_side(sim: SimServer, window: int) -> list[dict[str, Any]]:
    seen = [e for e in sim.requests() if not e["body"].get("response_format")]
    assert seen
    assert all(e["status"] == 200 for e in seen), [
        (e["path"], e["status"], e.get("error")) for e in seen if e["status"] != 200
    ]
    assert max(e["prompt_tokens"] for e in seen) <= window
    asked = _asked(seen)
    assert set(asked) == set(range(TURNS)), asked
    assert all(n == 1 for n in asked.values()), (asked, _shapes(seen))
    # the session outgrew the window: the last request no longer carries every turn's note
    assert json.dumps(seen[-1]["body"]).count(NOTE[:40]) < TURNS
    return seen


@pytest.mark.parametrize("side", ["native", "translated"])
def test_claude_code_tool_session(stack: Stack, tmp_path: Path, side: str) -> None:
    sim, gw = stack
    claude = agent_cli("claude")
    sim.reset()
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    env = {**claude_env(home, gw.base_url), "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "2048"}
    for turn in range(TURNS):
        cmd = [claude, "-p", _prompt("claude", turn), "--output-format", "json"]
        cmd += ["--model", f"claude-{side}", "--allowedTools", "Glob,Grep"]
        cmd += ["--continue"] if turn else []
        done = subprocess.run(cmd, env=env, cwd=project, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, (turn, done.stdout[-2000:], done.stderr[-2000:])
        assert json.loads(done.stdout)["is_error"] is False, done.stdout[-2000:]
    _check_provider_side(sim, WINDOWS["claude"])


@pytest.mark.parametrize("side", ["native", "translated"])
def test_codex_tool_session(stack: Stack, tmp_path: Path, side: str) -> None:
    sim, gw = stack
    codex = agent_cli("codex")
    sim.reset()
    home = _codex_home(tmp_path, gw.v1)
    config = home / "config.toml"
    config.write_text(config.read_text().replace('model = "small"', f'model = "codex-{side}"'))
    work = tmp_path / "work"
    work.mkdir()
    for turn in range(TURNS):
        prompt = f"Turn {turn}. please call:{CALLS['codex']} and remember {NOTE[37:]}"
        done = codex_run(codex, home, work, [prompt] if turn == 0 else ["resume", "--last", prompt])
        assert done.returncode == 0, f"turn {turn}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    _check_provider_side(sim, WINDOWS["codex"])


@pytest.mark.parametrize("side", ["native", "translated"])
def test_gemini_cli_tool_session(stack: Stack, tmp_path: Path, side: str) -> None:
    sim, gw = stack
    sim.reset()
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    (work / "notes.txt").write_text("hello\n")
    # Only the last turn runs tools: Gemini CLI 0.61 resumes a session whose turn ran tools with
    # each functionResponse twice, which Gemini (and the simulator, on either route) refuses.
    for turn in range(TURNS):
        resume = ["-r", "latest"] if turn else []
        prompt = _prompt("gemini", turn, call=turn == TURNS - 1)
        args = [*resume, "-m", f"gemini-{side}", "-p", prompt]
        done = gemini_run(gw, home, work, args)
        assert done.returncode == 0, (turn, done.stdout[-2000:], done.stderr[-3000:])
    _check_provider_side(sim, WINDOWS["gemini"])


def test_anthropics_overflow_message_keeps_the_prompt_count() -> None:
    """Only a rate limit's message loses its figures: Anthropic's "context limit: N + C > W"
    keeps N, which the client reads and the gateway's refit (``proxy.overflow.provider_count``)
    refits on (the first scrubbing read it as the shared account's figure and redacted it)."""
    text = "input length and `max_tokens` exceed context limit: 12008 + 4096 > 16000"
    assert redact(text) == text
    limited = "Rate limit reached: Limit 30000, Used 29000, Requested 1500"
    assert "30000" not in account_figures_hidden(limited)
    assert "1500" in account_figures_hidden(limited)


def test_an_uncapped_chat_request_near_an_anthropic_window_is_never_refused(stack: Stack) -> None:
    """A chat client with no output cap on an Anthropic route, its prompt near the window: the
    translation sent Anthropic's fallback cap (4,096), which the fit had not set aside, and the
    provider refused prompt + 4,096 (Codex's first turn on an Anthropic route exited 1). Now it
    is sent the room the fit left, and the provider takes it at once."""
    sim, gw = stack
    sim.reset()
    text = "river cloud tower field " * 3000
    answer = httpx.post(
        gw.v1 + "/chat/completions",
        json={"model": "codex-translated", "messages": [{"role": "user", "content": text}]},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    (served,) = sim.requests()
    assert served["status"] == 200
    assert served["prompt_tokens"] + served["body"]["max_tokens"] <= WINDOWS["codex"]
