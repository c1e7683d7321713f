"""Section 5: long agent sessions that outgrow an 8k window.

Deterministic tool-heavy agent sessions (a task, then many rounds of assistant tool calls and
tool results of varied size — some large —, now and then a user follow-up, some with an image)
are replayed turn by turn against the simulator's ``gpt-4o-small`` (8,192-token window, exact
o200k counting, OpenAI-style prefix cache: 128-token blocks from 1,024 tokens). At every model
call the client holds the whole history; three ways of sending it:

- ``routefit``: the whole history to routefit, which fits it (route ``small``, window 8,192);
- ``trim_messages``: ``litellm.utils.trim_messages(history, model="gpt-4o", max_tokens=6144)``
  on the client (6,144 = 75% of the window, litellm's default trim ratio), sent to the simulator;
- ``last-N``: the system message plus the last 20 messages, sent to the simulator.

Every request asks for ``max_tokens`` 256. Counted per strategy: requests rejected for overflow
(400 ``context_length_exceeded``, from the provider or from routefit), invalid requests (400 for
an orphaned tool result / unanswered tool call), the provider cache-hit ratio (cached / prompt
tokens, summed over accepted requests) and billed input tokens with cached tokens at 10%.
The simulator's caches are reset between strategies; sessions never share content.

The frontier: the same sessions through routefit once per point of the cut-schedule knobs
(``pin_fraction``, ``low_water``, ``checkpoint_quantum``), each point's cache-hit ratio against
its median window use; the points no other beats on both and on the recent tail a jump keeps
(``low_water − pin_fraction``) are the frontier, and the report says whether the default is on it.
"""

from __future__ import annotations

import json
import logging
import os
import random
import statistics
from pathlib import Path

import httpx
from procs import Server, Servers, openai_entry, write_yaml
from workloads import png_data_url, text_tokens

from strategies.policy import FitPolicy

WINDOW = 8192
MAX_TOKENS = 256
TRIM_TO = int(WINDOW * 0.75)
LAST_N = 20

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Path to read"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the code base.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "What to find"}},
                "required": ["query"],
            },
        },
    },
]


def _tool_output_tokens(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.55:
        return rng.randint(80, 400)
    if r < 0.88:
        return rng.randint(400, 1200)
    if r < 0.98:
        return rng.randint(1500, 3000)
    return rng.randint(4500, 6000)  # a big file or a long log


def agent_session(seed: int, rounds: int) -> list[list[dict]]:
    """The messages appended before each model call (the first entry opens the session)."""
    rng = random.Random(seed)
    steps: list[list[dict]] = []
    system = {
        "role": "system",
        "content": f"Session {seed}. You are a coding agent working in a repository. "
        + text_tokens(350, seed * 7 + 1),
    }
    task = {"role": "user", "content": f"Task {seed}: " + text_tokens(150, seed * 7 + 2)}
    steps.append([system, task])
    for r in range(rounds):
        new: list[dict] = []
        if r and r % 9 == 0:  # the agent reports, the user follows up (sometimes with a picture)
            new.append({"role": "assistant", "content": text_tokens(80, seed * 1000 + r)})
            follow = text_tokens(60, seed * 1000 + r + 500)
            if r % 18 == 0:
                url = png_data_url(512, 512, seed=seed * 1000 + r)
                content: object = [
                    {"type": "text", "text": follow},
                    {"type": "image_url", "image_url": {"url": url}},
                ]
            else:
                content = follow
            new.append({"role": "user", "content": content})
            steps.append(new)
            new = []
        calls = []
        for k in range(1 if rng.random() < 0.7 else 2):
            tool = rng.choice(TOOLS)["function"]["name"]
            arg = {"read_file": "path", "run_shell": "command", "search": "query"}[tool]
            calls.append(
                {
                    "id": f"call_{seed}_{r}_{k}",
                    "type": "function",
                    "function": {
                        "name": tool,
                        "arguments": json.dumps({arg: f"{tool}-{seed}-{r}-{k}"}),
                    },
                }
            )
        thought = text_tokens(rng.randint(10, 60), seed * 100_000 + r)
        new.append({"role": "assistant", "content": thought, "tool_calls": calls})
        for k, call in enumerate(calls):
            out = text_tokens(_tool_output_tokens(rng), seed * 10_000_000 + r * 10 + k)
            new.append({"role": "tool", "tool_call_id": call["id"], "content": out})
        steps.append(new)
    return steps


def last_n(history: list[dict]) -> list[dict]:
    system = [m for m in history[:1] if m["role"] == "system"]
    return system + history[max(len(system), len(history) - LAST_N) :]


def classify(status: int, body: dict) -> str:
    if status == 200:
        return "ok"
    err = body.get("error") if isinstance(body, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    message = str(err.get("message") if isinstance(err, dict) else body).lower()
    if code == "context_length_exceeded" or "context length" in message:
        return "overflow"
    if "tool" in message:
        return "invalid"
    return f"error {status}"


def replay(
    strategy: str,
    steps: list[list[dict]],
    client: httpx.Client,
    url: str,
    trim,
    alias: str = "small",
) -> list:
    history: list[dict] = []
    records = []
    for step in steps:
        history.extend(step)
        if strategy == "routefit":
            messages, model = history, alias
        elif strategy == "trim_messages":
            messages, model = trim(history, model="gpt-4o", max_tokens=TRIM_TO), "gpt-4o-small"
        else:
            messages, model = last_n(history), "gpt-4o-small"
        body = {"model": model, "messages": messages, "tools": TOOLS, "max_tokens": MAX_TOKENS}
        resp = client.post(url, json=body)
        try:
            data = resp.json()
        except ValueError:
            data = {}
        kind = classify(resp.status_code, data)
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        records.append(
            {
                "kind": kind,
                "prompt": usage.get("prompt_tokens", 0),
                "cached": details.get("cached_tokens", 0) or 0,
                "actions": resp.headers.get("x-routefit-actions"),
                "error": None if kind == "ok" else str(data)[:300],
            }
        )
    return records


def summarise(records: list[dict]) -> dict:
    ok = [r for r in records if r["kind"] == "ok"]
    prompt = sum(r["prompt"] for r in ok)
    cached = sum(r["cached"] for r in ok)
    kinds: dict[str, int] = {}
    for r in records:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    return {
        "requests": len(records),
        "accepted": len(ok),
        "overflow": kinds.get("overflow", 0),
        "invalid": kinds.get("invalid", 0),
        "other_errors": sum(v for k, v in kinds.items() if k.startswith("error")),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cache_hit_ratio": cached / prompt if prompt else 0.0,
        "billed_input_tokens": (prompt - cached) + 0.1 * cached,
        "median_window_use": statistics.median(r["prompt"] / WINDOW for r in ok) if ok else 0.0,
        "error_samples": [r["error"] for r in records if r["error"]][:3],
    }


#: The fit policy's cut-schedule knobs and the route default (strategies.policy.FitPolicy).
KNOBS = ("pin_fraction", "low_water", "checkpoint_quantum")
DEFAULT = tuple(getattr(FitPolicy(), knob) for knob in KNOBS)
#: The default before issue 18 (always measured, so the report shows before and after).
PREVIOUS = (0.65, 0.8, 0.1)


def policy_grid(quick: bool) -> list[tuple[float, float, float]]:
    """Points of the knob space: each knob moved alone around the default, and the corners of
    the schedule (drop-oldest, a small head with early cuts, a large head cut late); the full
    run adds a second ring of pairs. The default is always one of them."""
    pin, low, quantum = DEFAULT
    pins, lows, quanta = (0.0, 0.5, 0.65, 0.8, 0.9, 0.95), (0.7, 0.8, 0.9, 0.95), (0.05, 0.1, 0.2)
    points = {DEFAULT, PREVIOUS}
    points |= {(p, low, quantum) for p in pins}
    points |= {(pin, lw, quantum) for lw in lows}
    points |= {(pin, low, q) for q in quanta}
    points |= {(0.8, 0.8, 0.1), (0.8, 0.9, 0.1), (0.5, 0.7, 0.2), (0.95, 0.975, 0.025)}
    if not quick:
        points |= {(p, lw, quantum) for p in (0.65, 0.8) for lw in (0.8, 0.95)}
    return sorted(points)


#: What a point is judged on, higher is better: the two the sessions measure, and the share of
#: the budget a jump keeps after the pinned head (the recent conversation the model still sees
#: beyond the protected newest turns). Without the third, the frontier's far end is always the
#: largest head with no recent tail at all: the fewest misses and the fullest window, bought by
#: showing the model nothing between the head and the newest turn (docs/fitting.md).
AXES = ("cache_hit_ratio", "median_window_use", "recent_tail")


def pareto(points: list[dict]) -> list[dict]:
    """The points no other point beats on every axis of ``AXES`` (and on one strictly)."""
    return [
        p
        for p in points
        if not any(
            all(q[a] >= p[a] for a in AXES) and any(q[a] > p[a] for a in AXES) for q in points
        )
    ]


def frontier(servers: Servers, sessions: list[list[list[dict]]], quick: bool, log=print) -> dict:
    """Cache-hit / window-use over the cut-schedule knobs: one routefit, one route per point
    of the grid (same simulator model), every session replayed on each, caches reset between."""
    sim: Server = servers.sim()
    grid = policy_grid(quick)
    aliases = {point: f"small-{i}" for i, point in enumerate(grid)}
    config = write_yaml(
        servers.dir / "routefit-frontier.yaml",
        {
            "model_list": [
                openai_entry(
                    alias,
                    sim.base_url,
                    "gpt-4o-small",
                    model_info={"max_input_tokens": WINDOW, "max_output_tokens": 4096},
                    routefit={"fit": dict(zip(KNOBS, point, strict=True))},
                )
                for point, alias in aliases.items()
            ],
            "routefit_settings": {"store_path": ":memory:", "max_body_bytes": 64_000_000},
        },
    )
    rf = servers.routefit(config)
    points = []
    with httpx.Client(timeout=60) as client:
        for point, alias in aliases.items():
            client.post(sim.base_url + "/sim/reset")
            records = []
            for steps in sessions:
                records += replay(
                    "routefit", steps, client, rf.base_url + "/v1/chat/completions", None, alias
                )
            s = summarise(records)
            row = {
                **dict(zip(KNOBS, point, strict=True)),
                "default": point == DEFAULT,
                "recent_tail": round(max(0.0, point[1] - point[0]), 4),
                "cache_hit_ratio": s["cache_hit_ratio"],
                "median_window_use": s["median_window_use"],
                "overflow": s["overflow"],
                "invalid": s["invalid"],
            }
            points.append(row)
            log(
                f"  pin {point[0]:.2f} low {point[1]:.2f} quantum {point[2]:.2f}: cache hit "
                f"{row['cache_hit_ratio']:6.1%}  median window use {row['median_window_use']:.0%}"
                f"  overflow {row['overflow']}  invalid {row['invalid']}"
                + ("  (default)" if row["default"] else "")
            )
    servers.stop(rf)
    servers.stop(sim)
    front = pareto(points)
    for p in points:
        p["on_frontier"] = p in front
    default = next(p for p in points if p["default"])
    return {
        "knobs": list(KNOBS),
        "points": points,
        "default_on_frontier": default["on_frontier"],
        "previous_default": list(PREVIOUS),
    }


class _Counter(logging.Handler):
    """Counts litellm's "Got exception while token trimming" errors (and keeps them quiet)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "trimming" in record.getMessage():
            self.count += 1


def run(servers: Servers, quick: bool, log=print) -> dict:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from litellm.utils import trim_messages

    counter = _Counter()
    litellm_log = logging.getLogger("LiteLLM")
    saved = litellm_log.handlers[:], litellm_log.propagate
    litellm_log.handlers = [counter]
    litellm_log.propagate = False

    n_sessions, rounds = (2, 45) if quick else (6, 90)
    sessions = [agent_session(1000 + s, rounds) for s in range(n_sessions)]
    total_tokens = []
    for steps in sessions:
        hist = [m for step in steps for m in step]
        total_tokens.append(sum(len(json.dumps(m)) for m in hist) // 4)
    sim: Server = servers.sim()
    config = write_yaml(
        servers.dir / "routefit-sessions.yaml",
        {
            "model_list": [
                openai_entry(
                    "small",
                    sim.base_url,
                    "gpt-4o-small",
                    model_info={"max_input_tokens": WINDOW, "max_output_tokens": 4096},
                )
            ],
            "routefit_settings": {"store_path": ":memory:", "max_body_bytes": 64_000_000},
        },
    )
    rf = servers.routefit(config)
    out: dict = {
        "window": WINDOW,
        "max_tokens": MAX_TOKENS,
        "trim_to": TRIM_TO,
        "last_n": LAST_N,
        "sessions": n_sessions,
        "rounds": rounds,
        "model_calls_per_session": [len(s) for s in sessions],
        "approx_history_tokens": total_tokens,
        "strategies": {},
    }
    with httpx.Client(timeout=60) as client:
        for strategy in ("routefit", "trim_messages", "last-N"):
            client.post(sim.base_url + "/sim/reset")
            url = (
                rf.base_url + "/v1/chat/completions"
                if strategy == "routefit"
                else sim.base_url + "/v1/chat/completions"
            )
            records = []
            for steps in sessions:
                records += replay(strategy, steps, client, url, trim_messages)
            s = summarise(records)
            s["actions_seen"] = sorted({r["actions"] for r in records if r["actions"]})[:10]
            out["strategies"][strategy] = s
            log(
                f"  {strategy:<14} {s['requests']:4} requests: overflow {s['overflow']:3}  "
                f"invalid {s['invalid']:3}  other {s['other_errors']:3}  cache hit "
                f"{s['cache_hit_ratio']:6.1%}  billed input {s['billed_input_tokens']:>11,.0f}  "
                f"median window use {s['median_window_use']:.0%}"
            )
    litellm_log.handlers, litellm_log.propagate = saved
    out["trim_internal_errors"] = counter.count
    servers.stop(rf)
    servers.stop(sim)
    log("  the cut schedule's frontier (routefit, per fit policy):")
    out["frontier"] = frontier(servers, sessions, quick, log)
    return out


if __name__ == "__main__":
    import sys

    with Servers() as s:
        result = run(s, quick="--quick" in sys.argv)
    Path("/tmp/sessions.json").write_text(json.dumps(result, indent=1))
