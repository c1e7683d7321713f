"""Gemini CLI itself, through ``routefit serve``, against the simulator: on chat routes (every
Gemini request translated to chat and back) and on native Gemini routes (``gemini/`` models: the
simulator's own Gemini wire receives the CLI's requests in Gemini's wire, fitted when they must be).

Setup as a new user would (issue 33): a scratch ``HOME`` whose ``.gemini/settings.json`` selects
API-key auth, ``GEMINI_API_KEY``, ``GOOGLE_GEMINI_BASE_URL`` pointing at routefit and
``GEMINI_CLI_TRUST_WORKSPACE``. Without ``-m`` the CLI first asks its model router's classifier
(``gemini-3.5-flash-lite:generateContent``, for a JSON answer of a schema) which model to use,
then streams the turn from that one (``:streamGenerateContent?alt=sse``); routefit maps the CLI's
model names to routes by config, like any alias. On a route the session outgrows, every turn
must exit 0 and the provider must never see more than its window: the CLI sizes its own
compression by its own table of Gemini windows (a million tokens), so the fitting is routefit's.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_clis import agent_cli
from harness import Running, gateway_config, run_routefit, sim_route
from media_files import heic, text_pdf, video

from proxy.sim.completion import WORDS
from proxy.sim.models import get_builtin, small_variant
from proxy.sim.server import SimServer, run_sim

WINDOW = 24_000
TURNS = 6
#: About 4,000 tokens a turn: the session outgrows the window by its fourth turn.
NOTE = "Please remember this note for later: " + "river cloud tower field " * 1000
#: The model names Gemini CLI 0.61.0 asks for: its router's classifier, the flash and pro
#: models it routes to, and its defaults.
CLI_MODELS = (
    "gemini-3.5-flash-lite",
    "gemini-3.1-flash-lite",
    "gemini-3.8-flash",
    "gemini-3.5-flash",
    "gemini-3-flash-preview",
    "gemini-3.1-pro-preview",
    "gemini-3-pro-preview",
    "gemini-2.5-pro",
    "gemini-2.5-flash",
)
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimServer, Running]]:
    model = replace(small_variant(get_builtin("gpt-4o"), WINDOW, 4096), name="gpt-4o-24k")
    info = {"max_input_tokens": WINDOW, "max_output_tokens": 2048}
    with run_sim(models=[model]) as sim:
        routes = [sim_route(name, sim.base_url, model.name, model_info=info) for name in CLI_MODELS]
        routes.append(sim_route("small", sim.base_url, model.name, model_info=info))
        tiny = {"max_input_tokens": 4096, "max_output_tokens": 1024}
        routes.append(sim_route("tiny", sim.base_url, model.name, model_info=tiny))
        path = tmp_path_factory.mktemp("gemini-cli") / "routefit.yaml"
        with run_routefit(gateway_config(path, routes)) as gw:
            yield sim, gw


def _gemini_route(alias: str, sim_url: str, model: str, info: dict[str, int]) -> dict[str, Any]:
    """A route whose provider speaks Gemini: the simulator's Gemini wire under ``/v1beta``."""
    return {
        "model_name": alias,
        "litellm_params": {
            "model": f"gemini/{model}",
            "api_base": f"{sim_url}/v1beta",
            "api_key": "sk-sim-google",
        },
        "model_info": info,
    }


@pytest.fixture(scope="module")
def native_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimServer, Running]]:
    model = replace(small_variant(get_builtin("gemini-sim"), WINDOW, 4096), name="gemini-24k")
    info = {"max_input_tokens": WINDOW, "max_output_tokens": 2048}
    with run_sim(models=[model], api_keys=["sk-sim-google"]) as sim:
        routes = [_gemini_route(n, sim.base_url, model.name, info) for n in (*CLI_MODELS, "small")]
        vision = {**info, "supports_vision": True}
        routes.append(_gemini_route("small-vision", sim.base_url, model.name, vision))
        path = tmp_path_factory.mktemp("gemini-cli-native") / "routefit.yaml"
        with run_routefit(gateway_config(path, routes)) as gw:
            yield sim, gw


def _home(tmp: Path) -> tuple[Path, Path]:
    home, work = tmp / "home", tmp / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    return home, work


def _run(gw: Running, home: Path, work: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GEMINI_API_KEY": "x",
        "GOOGLE_GEMINI_BASE_URL": gw.base_url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "NO_COLOR": "1",
    }
    return subprocess.run(
        [agent_cli("gemini"), *args, "-o", "json"],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _gemini(gw: Running, home: Path, work: Path, args: list[str]) -> dict[str, Any]:
    """One headless turn (``-o json``); its JSON result, after asserting it exited 0."""
    done = _run(gw, home, work, args)
    assert done.returncode == 0, (args[:2], done.stdout[-2000:], done.stderr[-3000:])
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _served(gw: Running) -> list[dict[str, Any]]:
    """routefit's request log (its access lines) of the requests it served, oldest first."""
    return [
        json.loads(line.split("routefit.access: ", 1)[1])
        for line in gw.log().splitlines()
        if '"kind":"serve"' in line
    ]


def _simulated(text: str) -> bool:
    """Whether ``text`` is one of the simulator's answers (its words only)."""
    words = set(text.lower().replace(".", "").split())
    return bool(words) and words <= set(WORDS)


def test_say_hi_answers_with_the_simulators_text(stack, tmp_path):
    sim, gw = stack
    sim.reset()
    home, work = _home(tmp_path)
    result = _gemini(gw, home, work, ["-p", "Say hi"])
    assert _simulated(result["response"]), result["response"]
    seen = sim.requests(path="/v1/chat/completions")
    assert all(r["status"] == 200 for r in seen)
    # the router's classifier asked for JSON of a schema, and got it (no retries on prose)
    classifier = [r for r in seen if r["body"].get("response_format")]
    assert len(classifier) == 1
    assert classifier[0]["body"]["response_format"]["type"] == "json_schema"
    main = [r for r in seen if not r["body"].get("response_format")]
    assert len(main) == 1 and main[0]["body"]["stream"] is True
    assert main[0]["body"]["tools"]  # the CLI's tools, translated to chat functions
    # the CLI read routefit's usageMetadata: its own stats name the provider's prompt count
    stats = result["stats"]["models"]
    assert sum(m["tokens"]["prompt"] for m in stats.values()) == sum(
        r["prompt_tokens"] for r in seen
    )
    # each priced at or above that count, the classifier's JSON schema included (it was left
    # out: 706 against 770)
    served = _served(gw)[-len(seen) :]
    assert sorted(s["prompt_tokens"] for s in served) == sorted(r["prompt_tokens"] for r in seen)
    assert all(s["prompt_estimate"] >= s["prompt_tokens"] for s in served)


def test_a_tool_using_turn(stack, tmp_path):
    sim, gw = stack
    sim.reset()
    home, work = _home(tmp_path)
    (work / "notes.txt").write_text("hello\n")
    result = _gemini(gw, home, work, ["-p", "Please call:list_directory now"])
    assert _simulated(result["response"]), result["response"]
    seen = sim.requests(path="/v1/chat/completions")
    assert all(r["status"] == 200 for r in seen)
    last = seen[-1]["body"]["messages"]
    call = next(m for m in reversed(last) if m["role"] == "assistant" and m.get("tool_calls"))
    answer = last[-1]
    assert answer["role"] == "tool"
    assert answer["tool_call_id"] == call["tool_calls"][0]["id"]
    assert call["tool_calls"][0]["function"]["name"] == "list_directory"
    assert result["stats"]["tools"]["totalCalls"] == 1


@pytest.mark.parametrize("model", [None, "small"], ids=["routed", "with-m"])
def test_a_session_on_a_route_it_outgrows(stack, tmp_path, model):
    sim, gw = stack
    sim.reset()
    home, work = _home(tmp_path)
    chosen = ["-m", model] if model else []
    for turn in range(TURNS):
        resume = ["-r", "latest"] if turn else []
        result = _gemini(gw, home, work, [*resume, *chosen, "-p", f"Turn {turn}. {NOTE}"])
        assert _simulated(result["response"]), (turn, result["response"])
    seen = sim.requests(path="/v1/chat/completions")
    assert len(seen) >= TURNS
    assert all(r["status"] == 200 for r in seen), [r["status"] for r in seen]
    assert max(r["prompt_tokens"] for r in seen) <= WINDOW
    # the session's whole history is sent every turn: the later turns were fitted
    metrics = httpx.get(gw.base_url + "/metrics").text
    assert 'routefit_fit_actions_total{action="elided_messages"' in metrics
    last = [r for r in seen if f"Turn {TURNS - 1}." in json.dumps(r["body"]["messages"][-1])]
    assert last and json.dumps(last[-1]["body"]["messages"]).count(NOTE[:30]) < TURNS


def test_an_overflow_reaches_the_cli_as_googles_error(stack, tmp_path):
    """The CLI's first turn (~7,500 tokens of system prompt and tools) cannot fit a 4k window:
    routefit refuses it as Google would (400 INVALID_ARGUMENT, "The input token count (N)
    exceeds the maximum number of tokens allowed (M)."), the CLI shows that error and exits
    non-zero without retrying, and the provider never sees the request."""
    sim, gw = stack
    sim.reset()
    home, work = _home(tmp_path)
    done = _run(gw, home, work, ["-m", "tiny", "-p", "Say hi"])
    assert done.returncode != 0
    # its JSON result goes to stderr on an error, after the error as the API client read it
    assert '"status":"INVALID_ARGUMENT"' in done.stderr
    assert "The input token count (" in done.stderr
    assert "exceeds the maximum number of tokens allowed (4096)" in done.stderr
    assert sim.requests(path="/v1/chat/completions") == []


@pytest.mark.parametrize("model", [None, "small"], ids=["routed", "with-m"])
def test_a_session_on_a_native_gemini_route_it_outgrows(native_stack, tmp_path, model):
    """Six turns continuing one session on a 24k Gemini route: every turn exits 0, the
    provider receives the CLI's own wire (its model in the URL, routefit's key for it in
    ``x-goog-api-key``) and never refuses, and the later turns are fitted."""
    sim, gw = native_stack
    sim.reset()
    home, work = _home(tmp_path)
    chosen = ["-m", model] if model else []
    for turn in range(TURNS):
        resume = ["-r", "latest"] if turn else []
        result = _gemini(gw, home, work, [*resume, *chosen, "-p", f"Turn {turn}. {NOTE}"])
        assert _simulated(result["response"]), (turn, result["response"])
    seen = sim.requests()
    assert len(seen) >= TURNS
    assert all(r["status"] == 200 for r in seen), [(r["path"], r["status"]) for r in seen]
    assert all(r["path"].startswith("/v1beta/models/gemini-24k:") for r in seen)
    assert all(r["headers"]["x-goog-api-key"] == "sk-sim-google" for r in seen)
    assert max(r["prompt_tokens"] for r in seen) <= WINDOW
    streamed = [r for r in seen if r["path"].endswith(":streamGenerateContent")]
    assert len(streamed) >= TURNS
    assert all(r["body"]["tools"] and r["body"]["systemInstruction"] for r in streamed)
    metrics = httpx.get(gw.base_url + "/metrics").text
    assert 'routefit_fit_actions_total{action="elided_messages"' in metrics
    last = [r for r in streamed if f"Turn {TURNS - 1}." in json.dumps(r["body"]["contents"][-1])]
    assert last and json.dumps(last[-1]["body"]["contents"]).count(NOTE[:30]) < TURNS


MEDIA = {  # a file the CLI reads for `@name`: (its bytes, its type, the note that replaces it)
    "report.pdf": (lambda: text_pdf(20), "application/pdf", "[document omitted: application/pdf"),
    "clip.mp4": (lambda: video(20), "video/mp4", "[video omitted: video/mp4"),
    "photo.heic": (lambda: heic(1001, 777), "image/heic", "[image omitted: 1002x778 heif"),
}


@pytest.mark.parametrize("route", ["small-vision", "small"])
@pytest.mark.parametrize("name", list(MEDIA))
def test_a_file_the_cli_reads_is_priced_from_what_it_holds(native_stack, tmp_path, route, name):
    """``@report.pdf``, ``@clip.mp4`` or ``@photo.heic`` makes the CLI send the file as
    ``inlineData``. On a route that takes images it reaches the provider as the CLI sent it,
    priced at or above the provider's count (258 a page; 258 a frame and 42 a second besides; a
    HEIC photo by Google's tiles: routefit prices its pages, seconds or size, not a note, and
    never refuses the photo); on one that takes none it is replaced by its placeholder and never
    sent."""
    make, mime, note = MEDIA[name]
    sim, gw = native_stack
    sim.reset()
    home, work = _home(tmp_path)
    (work / name).write_bytes(make())
    result = _gemini(gw, home, work, ["-m", route, "-p", f"Summarise @{name}"])
    assert _simulated(result["response"]), result["response"]
    (turn,) = [r for r in sim.requests() if r["path"].endswith(":streamGenerateContent")]
    assert turn["status"] == 200
    parts = [p for c in turn["body"]["contents"] for p in c["parts"]]
    media = [p["inlineData"] for p in parts if "inlineData" in p]
    if route == "small":
        assert not media
        assert any(p.get("text", "").startswith(note) for p in parts)
        return
    assert [p["mimeType"] for p in media] == [mime]
    served = [s for s in _served(gw) if s["route"] == route]
    assert served[-1]["prompt_tokens"] == turn["prompt_tokens"]
    assert served[-1]["prompt_estimate"] >= turn["prompt_tokens"]
