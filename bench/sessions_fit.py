"""Section 5b: what the fit keeps of long agent sessions, on each of the four wires.

Section 5 measures cache-hit and window use; a fit can score well on both and still send the
model little of what was said. This section replays long tool-heavy agent sessions through
``routefit serve`` on the chat, Messages, Responses and Gemini wires and measures, per request,
what the simulator received (``GET /sim/requests``) against the client's history:

- refusals (routefit's 400 ``context_length_exceeded``), provider overflows, invalid requests;
- provider cache-hit (cached / prompt tokens) and median window use (prompt / window);
- newest turn kept: every call since the latest user message still there (its outputs verbatim,
  capped or masked) and that turn's user and assistant words verbatim, in fitted requests;
- the median share, per fitted request, of user-message tokens and assistant tokens that arrive
  verbatim, and of tool-result tokens that arrive in any form (verbatim or capped, not masked).

The sessions (``session``) are Section 5's agent sessions with two things real agents do and
Section 5 lacks: long stretches of tool rounds after one user message (so the newest turn is
large) and fan-out rounds (6-8 parallel calls whose outputs, each under the cap, together
outgrow the budget: the newest turn alone does not fit unless masked).

``python bench/sessions_fit.py [--quick] [--policy NAME]... [--wire NAME]... [--shape=S]``
prints a JSON summary; each ``--policy`` names a fit policy of ``POLICIES`` (default: all);
``--shape`` is one of ``SHAPES``: ``fit`` (these sessions, the default), ``agent`` (agent-shaped
sessions on 32k and 64k windows), ``agent-128k`` (the same on gpt-4o's 128k window) or
``agent-64k`` (on a 64k window, ~12.5× of it in all, as issue 31's sessions were). Run it at
another commit by pointing ``PYTHONPATH`` at that commit's tree (the servers import from it).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx
from procs import Server, Servers, _ok, free_port, openai_entry, write_yaml
from sessions import TOOLS, _tool_output_tokens
from workloads import png_data_url, text_tokens

WINDOW = 8192
MAX_TOKENS = 256
#: Fit policies measured (route ``fit`` overrides); names are the report's row labels.
POLICIES: dict[str, dict[str, Any]] = {
    "default": {},
    "no-mask": {"strategies": ["cap", "offload_images", "elide"]},
    "elide-then-mask": {"strategies": ["cap", "offload_images", "elide", "mask"]},
    "mask-water-0.5": {"mask_water": 0.5},
    "mask-water-0.8": {"mask_water": 0.8},
    "no-verbatim-head": {"verbatim_head": 0.0},
    "verbatim-head-0.7": {"verbatim_head": 0.7},
    "verbatim-head-0.85": {"verbatim_head": 0.85},
}
WIRES = ("chat", "messages", "responses", "gemini")


def session(seed: int, rounds: int) -> list[list[dict[str, Any]]]:
    """Chat messages appended before each model call (the first entry opens the session)."""
    rng = random.Random(seed)
    system = {
        "role": "system",
        "content": f"Session {seed}. You are a coding agent. " + text_tokens(350, seed * 7 + 1),
    }
    task = {"role": "user", "content": f"Task {seed}: " + text_tokens(150, seed * 7 + 2)}
    steps: list[list[dict[str, Any]]] = [[system, task]]
    follow_every = rng.choice((6, 15, 30))
    for r in range(rounds):
        new: list[dict[str, Any]] = []
        if r and r % follow_every == 0:
            new.append({"role": "assistant", "content": text_tokens(120, seed * 1000 + r)})
            follow = text_tokens(rng.randint(40, 200), seed * 1000 + r + 500)
            content: Any = follow
            if r % (2 * follow_every) == 0:
                url = png_data_url(256, 256, seed=seed * 1000 + r)
                content = [
                    {"type": "text", "text": follow},
                    {"type": "image_url", "image_url": {"url": url}},
                ]
            new.append({"role": "user", "content": content})
            steps.append(new)
            new = []
        fan_out = rng.random() < 0.04
        n_calls = rng.randint(6, 8) if fan_out else (1 if rng.random() < 0.7 else 2)
        calls = []
        for k in range(n_calls):
            tool = rng.choice(TOOLS)["function"]["name"]
            arg = {"read_file": "path", "run_shell": "command", "search": "query"}[tool]
            calls.append(
                {
                    "id": f"call_{seed}_{r}_{k}",
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({arg: f"{tool}-{r}-{k}"})},
                }
            )
        thought = text_tokens(rng.randint(20, 90), seed * 100_000 + r)
        new.append({"role": "assistant", "content": thought, "tool_calls": calls})
        for k, call in enumerate(calls):
            size = rng.randint(900, 1150) if fan_out else _tool_output_tokens(rng)
            out = text_tokens(size, seed * 10_000_000 + r * 10 + k)
            new.append({"role": "tool", "tool_call_id": call["id"], "content": out})
        steps.append(new)
    return steps


#: Agent-shaped sessions (``--shape agent``): the proportions of real coding-agent sessions — a
#: large system prompt, prompts of 20-60k tokens once the history outgrows the window, 1-3k new
#: tokens per round — on routes of these windows (one session per window in turn).
AGENT_WINDOWS = (32_768, 65_536)
AGENT_MAX_TOKENS = 4096


def _agent_output_tokens(rng: random.Random) -> int:
    """One tool output: mostly short listings and edits, some file reads, a few long logs."""
    r = rng.random()
    if r < 0.45:
        return rng.randint(100, 800)
    if r < 0.85:
        return rng.randint(800, 2500)
    if r < 0.97:
        return rng.randint(2500, 6000)
    return rng.randint(8000, 16000)  # a big file or a long log (capped by the fit)


def agent_session(seed: int, rounds: int) -> list[list[dict[str, Any]]]:
    """Chat messages appended before each model call, shaped like a coding agent's session:
    a ~4k-token system prompt, a task, 1-3k new tokens per round (a thought, 1-4 calls and
    their outputs), a user follow-up every 12-40 rounds."""
    rng = random.Random(seed)
    system = {"role": "system", "content": f"Agent {seed}. " + text_tokens(4000, seed * 7 + 3)}
    task = {"role": "user", "content": f"Task {seed}: " + text_tokens(400, seed * 7 + 4)}
    steps: list[list[dict[str, Any]]] = [[system, task]]
    follow = rng.randint(12, 40)
    for r in range(rounds):
        new: list[dict[str, Any]] = []
        if r and r % follow == 0:
            new.append({"role": "assistant", "content": text_tokens(250, seed * 1000 + r)})
            text = text_tokens(rng.randint(50, 400), seed * 1000 + r + 500)
            steps.append([*new, {"role": "user", "content": text}])
            new = []
        n_calls = rng.choices((1, 2, 3, 4), weights=(70, 18, 8, 4))[0]
        calls = []
        for k in range(n_calls):
            tool = rng.choice(TOOLS)["function"]["name"]
            arg = {"read_file": "path", "run_shell": "command", "search": "query"}[tool]
            calls.append(
                {
                    "id": f"call_{seed}_{r}_{k}",
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({arg: f"{tool}-{r}-{k}"})},
                }
            )
        thought = text_tokens(rng.randint(30, 300), seed * 100_000 + r)
        new.append({"role": "assistant", "content": thought, "tool_calls": calls})
        for k, call in enumerate(calls):
            out = text_tokens(_agent_output_tokens(rng), seed * 10_000_000 + r * 10 + k)
            new.append({"role": "tool", "tool_call_id": call["id"], "content": out})
        steps.append(new)
    return steps


def screen_session(seed: int, rounds: int) -> list[list[dict[str, Any]]]:
    """Chat messages appended before each model call, shaped like a computer-use agent's
    session: a ~2k-token system prompt, a task with a first screenshot, then every round an
    action (a call and its short output) and the next 1280x800 screenshot (1,105 tokens on
    gpt-4o), which dominate the prompt."""
    rng = random.Random(seed)
    system = {"role": "system", "content": f"Agent {seed}. " + text_tokens(2000, seed * 7 + 3)}

    def screenshot(r: int, text: str) -> dict[str, Any]:
        url = png_data_url(1280, 800, seed * 100_000 + r)
        parts = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]
        return {"role": "user", "content": parts}

    steps: list[list[dict[str, Any]]] = [
        [system, screenshot(0, f"Task {seed}: " + text_tokens(200, seed * 7 + 4))]
    ]
    for r in range(rounds):
        call = {
            "id": f"call_{seed}_{r}",
            "type": "function",
            "function": {"name": "run_shell", "arguments": json.dumps({"command": f"click {r}"})},
        }
        thought = text_tokens(rng.randint(20, 150), seed * 100_000 + r)
        output = text_tokens(rng.randint(20, 400), seed * 10_000_000 + r)
        steps.append(
            [
                {"role": "assistant", "content": thought, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": output},
                screenshot(r + 1, "The screen after the action."),
            ]
        )
    return steps


# -- the four wires -----------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def to_messages(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The history as an Anthropic Messages body, breakpoints where Claude Code puts them (the
    system prompt and the last two messages)."""
    system = history[0]["content"]
    out: list[dict[str, Any]] = []
    for m in history[1:]:
        if m["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}]
            for c in m.get("tool_calls", []):
                args = json.loads(c["function"]["arguments"])
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": c["id"],
                        "name": c["function"]["name"],
                        "input": args,
                    }
                )
            out.append({"role": "assistant", "content": blocks})
            continue
        if m["role"] == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m["tool_call_id"],
                "content": m["content"],
            }
        elif isinstance(m["content"], str):
            block = {"type": "text", "text": m["content"]}
        else:
            url = m["content"][1]["image_url"]["url"]
            data = url.split(",", 1)[1]
            _user_block(out, {"type": "text", "text": m["content"][0]["text"]})
            block = {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": data},
            }
        _user_block(out, block)
    for m in out[-3::2] if len(out) >= 3 else out[-1:]:
        last = m["content"][-1]
        m["content"][-1] = {**last, "cache_control": {"type": "ephemeral"}}
    body_system = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
    return {"system": body_system, "messages": out}


def _user_block(out: list[dict[str, Any]], block: dict[str, Any]) -> None:
    """Append ``block`` to the trailing user message, or open one: a turn's tool results all go
    in the one user message after the call, as Anthropic requires."""
    if out and out[-1]["role"] == "user":
        out[-1]["content"].append(block)
    else:
        out.append({"role": "user", "content": [block]})


def to_responses(history: list[dict[str, Any]]) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for m in history[1:]:
        if m["role"] == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m["tool_call_id"],
                    "output": m["content"],
                }
            )
            continue
        if m["role"] == "user" and not isinstance(m["content"], str):
            content: Any = [
                {"type": "input_text", "text": m["content"][0]["text"]},
                {"type": "input_image", "image_url": m["content"][1]["image_url"]["url"]},
            ]
        else:
            content = m["content"]
        items.append({"type": "message", "role": m["role"], "content": content})
        for c in m.get("tool_calls", []):
            items.append(
                {
                    "type": "function_call",
                    "call_id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
            )
    return {"instructions": history[0]["content"], "input": items}


def to_gemini(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The history as a Gemini body, as Gemini CLI sends one: the system prompt as
    ``systemInstruction``, a turn's calls in one model content (each with its id), their
    responses in the one user content after it (each with its call's id and name)."""
    names: dict[str, str] = {}
    contents: list[dict[str, Any]] = []
    for m in history[1:]:
        if m["role"] == "tool":
            answer = {"id": m["tool_call_id"], "name": names[m["tool_call_id"]]}
            part = {"functionResponse": {**answer, "response": {"output": m["content"]}}}
            if contents[-1]["role"] == "user" and "functionResponse" in contents[-1]["parts"][0]:
                contents[-1]["parts"].append(part)
            else:
                contents.append({"role": "user", "parts": [part]})
            continue
        if m["role"] == "assistant":
            parts: list[dict[str, Any]] = [{"text": m["content"]}] if m["content"] else []
            for c in m.get("tool_calls", []):
                names[c["id"]] = c["function"]["name"]
                args = json.loads(c["function"]["arguments"])
                parts.append(
                    {"functionCall": {"id": c["id"], "name": names[c["id"]], "args": args}}
                )
            contents.append({"role": "model", "parts": parts})
            continue
        if isinstance(m["content"], str):
            parts = [{"text": m["content"]}]
        else:
            data = m["content"][1]["image_url"]["url"].split(",", 1)[1]
            image = {"inlineData": {"mimeType": "image/png", "data": data}}
            parts = [{"text": m["content"][0]["text"]}, image]
        contents.append({"role": "user", "parts": parts})
    return {"systemInstruction": {"parts": [{"text": history[0]["content"]}]}, "contents": contents}


def request(
    wire: str, alias: str, history: list[dict[str, Any]], max_tokens: int = MAX_TOKENS
) -> tuple[str, dict[str, Any]]:
    if wire == "chat":
        body = {"model": alias, "messages": history, "tools": TOOLS, "max_tokens": max_tokens}
        return "/v1/chat/completions", body
    if wire == "messages":
        tools = [
            {
                "name": t["function"]["name"],
                "description": t["function"]["description"],
                "input_schema": t["function"]["parameters"],
            }
            for t in TOOLS
        ]
        body = {"model": alias, "max_tokens": max_tokens, "tools": tools, **to_messages(history)}
        return "/v1/messages", body
    if wire == "gemini":
        declared = [{"functionDeclarations": [t["function"] for t in TOOLS]}]
        config = {"maxOutputTokens": max_tokens}
        body = {"tools": declared, "generationConfig": config, **to_gemini(history)}
        return f"/v1beta/models/{alias}:generateContent", body
    tools = [{"type": "function", **t["function"]} for t in TOOLS]
    body = {"model": alias, "max_output_tokens": max_tokens, "tools": tools, "store": False}
    return "/v1/responses", {**body, **to_responses(history)}


def usage_of(wire: str, data: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of a provider answer."""
    usage = data.get("usage") or {}
    if wire == "chat":
        details = usage.get("prompt_tokens_details") or {}
        return usage.get("prompt_tokens", 0), details.get("cached_tokens", 0) or 0
    if wire == "messages":
        read = usage.get("cache_read_input_tokens", 0) or 0
        creation = usage.get("cache_creation_input_tokens", 0) or 0
        return usage.get("input_tokens", 0) + read + creation, read
    if wire == "gemini":
        meta = data.get("usageMetadata") or {}
        return meta.get("promptTokenCount", 0), meta.get("cachedContentTokenCount", 0) or 0
    details = usage.get("input_tokens_details") or {}
    return usage.get("input_tokens", 0), details.get("cached_tokens", 0) or 0


# -- what was kept ------------------------------------------------------------------------------


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def kept(history: list[dict[str, Any]], sent: str) -> dict[str, Any]:
    """What of ``history`` arrived in ``sent`` (the JSON of the forwarded body)."""

    def verbatim(text: str) -> bool:
        return json.dumps(text)[1:-1] in sent

    shares = {"user": [0, 0], "assistant": [0, 0], "tool": [0, 0]}
    last_user = max(i for i, m in enumerate(history) if m["role"] == "user")
    newest_ok = True
    for i, m in enumerate(history[1:], start=1):
        text = _text_of(m["content"])
        n = _tokens(text)
        role = m["role"]
        if role == "tool":
            call = m["tool_call_id"]
            arrived = f'"{call}"' in sent and (verbatim(text) or verbatim(text[:200]))
            present = f'"{call}"' in sent
            shares["tool"][0] += n * arrived
            shares["tool"][1] += n
            if i > last_user and not present:
                newest_ok = False
            continue
        ok = verbatim(text)
        shares[role][0] += n * ok
        shares[role][1] += n
        if i >= last_user and not ok:
            newest_ok = False
        for c in m.get("tool_calls", []):
            if i > last_user and f'"{c["id"]}"' not in sent:
                newest_ok = False
    return {
        "newest_turn_kept": newest_ok,
        **{f"{role}_verbatim": (a / b if b else 1.0) for role, (a, b) in shares.items()},
    }


def classify(status: int, data: Any, forwarded: bool) -> str:
    if status == 200:
        return "ok"
    text = json.dumps(data).lower()
    too_long = ("context_length_exceeded", "too long", "context length", "maximum number of tokens")
    if any(words in text for words in too_long):
        return "overflow" if forwarded else "refused"
    if "tool" in text or "function" in text:
        return "invalid"
    return f"error {status}"


def replay(
    wire: str,
    steps: list[list[dict[str, Any]]],
    client: httpx.Client,
    rf: str,
    sim: str,
    alias: str,
    window: int = WINDOW,
    max_tokens: int = MAX_TOKENS,
) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    records = []
    last_id = _last_sim(client, sim)[0]
    for step in steps:
        history.extend(step)
        path, body = request(wire, alias, history, max_tokens)
        resp = client.post(rf + path, json=body)
        try:
            data = resp.json()
        except ValueError:
            data = {}
        sim_id, sent = _last_sim(client, sim)
        forwarded = sim_id != last_id
        last_id = sim_id
        kind = classify(resp.status_code, data, forwarded)
        prompt, cached = usage_of(wire, data) if kind == "ok" else (0, 0)
        actions = resp.headers.get("x-routefit-actions") or "none"
        record: dict[str, Any] = {
            "kind": kind,
            "window": window,
            "prompt": prompt,
            "cached": cached,
            "fitted": actions != "none",
            "actions": actions,
            "error": None if kind == "ok" else str(data)[:300],
        }
        if kind == "ok" and record["fitted"] and sent is not None:
            record.update(kept(history, sent))
        records.append(record)
    return records


def _last_sim(client: httpx.Client, sim: str) -> tuple[int | None, str | None]:
    entries = client.get(sim + "/sim/requests", params={"limit": 1}).json()["requests"]
    if not entries:
        return None, None
    return entries[-1]["id"], json.dumps(entries[-1]["body"])


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in records if r["kind"] == "ok"]
    fitted = [r for r in ok if r["fitted"] and "newest_turn_kept" in r]
    prompt = sum(r["prompt"] for r in ok)
    cached = sum(r["cached"] for r in ok)

    def median(key: str) -> float:
        return statistics.median(r[key] for r in fitted) if fitted else 1.0

    return {
        "requests": len(records),
        "accepted": len(ok),
        "refused": sum(r["kind"] == "refused" for r in records),
        "overflow": sum(r["kind"] == "overflow" for r in records),
        "invalid": sum(r["kind"] == "invalid" for r in records),
        "other_errors": sum(r["kind"].startswith("error") for r in records),
        "cache_hit_ratio": cached / prompt if prompt else 0.0,
        "median_window_use": statistics.median(r["prompt"] / r["window"] for r in ok)
        if ok
        else 0.0,
        "fitted": len(fitted),
        "newest_turn_kept": (
            sum(r["newest_turn_kept"] for r in fitted) / len(fitted) if fitted else 1.0
        ),
        "median_user_verbatim": median("user_verbatim"),
        "median_assistant_verbatim": median("assistant_verbatim"),
        "median_tool_arrived": median("tool_verbatim"),
        "masked_requests": sum("masked" in r["actions"] for r in ok),
        "error_samples": {
            kind: [r["error"] for r in records if r["kind"] == kind][:2]
            for kind in sorted({r["kind"] for r in records} - {"ok"})
        },
    }


#: Per shape: the session generator, (sessions, rounds) full and quick, the routes' windows, the
#: output cap the client asks for, and the simulator's models behind the routes (chat, Messages).
SHAPES: dict[str, tuple[Any, tuple[int, int], tuple[int, int], tuple[int, ...], int, str, str]] = {
    "fit": (session, (5, 110), (2, 60), (WINDOW,), MAX_TOKENS, "gpt-4o-small", "claude-sim-small"),
    "agent": (
        agent_session,
        (4, 220),
        (2, 80),
        AGENT_WINDOWS,
        AGENT_MAX_TOKENS,
        "gpt-4o",
        "claude-sim",
    ),
    #: The agent-shaped sessions on a 128k window (gpt-4o's), ~10× of it in all:
    #: where the output reservation takes 3% of the window instead of 12.5% (REPORT 5b.4).
    "agent-128k": (agent_session, (2, 500), (1, 400), (128_000,), AGENT_MAX_TOKENS, "gpt-4o",
                   "claude-sim"),
    #: The same on a 64k window, 320 rounds: ~12.5× the window in all, the middle of issue 31's
    #: 10-15× (the ``agent`` shape's 220 rounds are ~8.6× of 64k and ~17× of 32k).
    "agent-64k": (agent_session, (2, 320), (1, 220), (65_536,), AGENT_MAX_TOKENS, "gpt-4o",
                  "claude-sim"),
}  # fmt: skip


def _alias(wire: str, name: str, window: int) -> str:
    prefix = {"messages": "an", "gemini": "ge"}.get(wire, "oa")
    return f"{prefix}-{name}-{window}"


def _entries(sim_url: str, policies: list[str], shape: str) -> list[dict[str, Any]]:
    _, _, _, windows, _, chat_model, messages_model = SHAPES[shape]
    entries = []
    for name in policies:
        for window in windows:
            fit = POLICIES[name]
            info = {"max_input_tokens": window, "max_output_tokens": 4096}
            extra: dict[str, Any] = {"model_info": info}
            if fit:
                extra["routefit"] = {"fit": fit}
            alias = _alias("chat", name, window)
            entries.append(openai_entry(alias, sim_url, chat_model, **extra))
            entries.append(
                {
                    "model_name": _alias("messages", name, window),
                    "litellm_params": {
                        "model": f"anthropic/{messages_model}",
                        "api_base": sim_url,
                        "api_key": "sk-ant-sim",
                    },
                    **extra,
                }
            )
            # Google's model behind a window of the route's own (the simulator's small
            # Gemini where the shape's window is its 8k, else its 1M one)
            # (Google's image rule, which routefit does not infer for a model it does not know)
            gemini = "gemini-sim-small" if window <= 8192 else "gemini-sim"
            entries.append(
                {
                    "model_name": _alias("gemini", name, window),
                    "litellm_params": {
                        "model": f"gemini/{gemini}",
                        "api_base": f"{sim_url}/v1beta",
                        "api_key": "sk-google-sim",
                    },
                    "model_info": {**info, "supports_vision": True},
                    "routefit": {**extra.get("routefit", {}), "image_rule": "gemini-tile"},
                }
            )
    return entries


def run(
    servers: Servers,
    quick: bool,
    policies: list[str] | None = None,
    wires: list[str] | None = None,
    log=print,
    shape: str = "fit",
) -> dict:
    """Replay the shape's sessions through routefit; with ``ROUTEFIT_BEFORE`` (a routefit
    executable of the code before a change) first through it, then through this checkout, on
    one simulator (rows ``before/…`` and ``…``)."""
    policies = policies or list(POLICIES)
    wires = wires or list(WIRES)
    make, full, short, windows, _, _, _ = SHAPES[shape]
    n_sessions, rounds = short if quick else full
    seed0 = 2000 if shape == "fit" else 3000  # the agent shapes share their sessions
    sessions = [make(seed0 + s, rounds) for s in range(n_sessions)]
    sim: Server = servers.sim()
    config = write_yaml(
        servers.dir / "routefit-sessions-fit.yaml",
        {
            "model_list": _entries(sim.base_url, policies, shape),
            "routefit_settings": {"store_path": ":memory:", "max_body_bytes": 256_000_000},
        },
    )
    history_tokens = [
        sum(_tokens(_text_of(m["content"])) for step in s for m in step) for s in sessions
    ]
    out: dict[str, Any] = {
        "shape": shape,
        "window": windows[0],
        "windows": list(windows),
        "sessions": n_sessions,
        "rounds": rounds,
        "model_calls": sum(len(s) for s in sessions),
        "approx_history_tokens": history_tokens,
        "policies": {name: POLICIES[name] for name in policies},
        "results": {},
    }
    before = os.environ.get("ROUTEFIT_BEFORE")
    for label, exe in ([("before/", before)] if before else []) + [("", None)]:
        rf = _routefit(servers, exe, config) if exe else servers.routefit(config)
        _measure(rf.base_url, sim.base_url, sessions, policies, wires, shape, label, out, log)
        servers.stop(rf)
    servers.stop(sim)
    return out


def _routefit(servers: Servers, exe: str, config: Path) -> Server:
    """``routefit serve`` from another checkout's executable (the code before a change)."""
    port = free_port()
    cmd = [exe, "serve", "--config", str(config), "--port", str(port), "--workers", "1"]
    cmd += ["--log-level", "warning"]
    process, log_path, started = servers.spawn("routefit-before", cmd, {"ROUTEFIT_REDIS_URL": ""})
    base = f"http://127.0.0.1:{port}"
    return servers.wait_ready(
        "routefit-before", process, log_path, started, base, lambda: _ok(base + "/readyz"), 60
    )


def _measure(
    rf: str,
    sim: str,
    sessions: list[list[list[dict[str, Any]]]],
    policies: list[str],
    wires: list[str],
    shape: str,
    label: str,
    out: dict[str, Any],
    log: Any,
) -> None:
    windows, max_tokens = SHAPES[shape][3], SHAPES[shape][4]
    with httpx.Client(timeout=300) as client:
        for name in policies:
            for wire in wires:
                client.post(sim + "/sim/reset")
                records = []
                for k, steps in enumerate(sessions):
                    window = windows[k % len(windows)]
                    alias = _alias(wire, name, window)
                    records += replay(wire, steps, client, rf, sim, alias, window, max_tokens)
                s = summarise(records)
                out["results"][f"{label}{name}/{wire}"] = s
                log(
                    f"  {label + name:<16} {wire:<9} refused {s['refused']:3} "
                    f"overflow {s['overflow']:3} invalid {s['invalid']:3} "
                    f"other {s['other_errors']:3}  cache hit "
                    f"{s['cache_hit_ratio']:6.1%}  window p50 {s['median_window_use']:.2f}  "
                    f"newest turn kept {s['newest_turn_kept']:6.1%}  "
                    f"user {s['median_user_verbatim']:.2f}"
                    f"  assistant {s['median_assistant_verbatim']:.2f}  tool "
                    f"{s['median_tool_arrived']:.2f}  ({s['fitted']} fitted)"
                )


if __name__ == "__main__":
    chosen = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--policy"]
    wires = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--wire"]
    with Servers() as s:
        shape = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--shape=")), "fit")
        if shape not in SHAPES:
            raise SystemExit(f"--shape must be one of {', '.join(SHAPES)}, not {shape!r}")
        result = run(
            s,
            quick="--quick" in sys.argv,
            policies=chosen or None,
            wires=wires or None,
            shape=shape,
        )
    target = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--out=")), None)
    Path(target or "/tmp/sessions_fit.json").write_text(json.dumps(result, indent=1))
