"""Section 4: how close routefit's prompt estimate is to the provider's count, per route.

Routes (all on the simulator, which counts independently — see docs/simulator.md):

- ``gpt-4o``: o200k + OpenAI framing, exactly what routefit's meter implements;
- ``mystery-1``: o200k text ×1.11 and 6 tokens per message — a tokenizer routefit does not know;
- ``claude``: ``anthropic/claude-sonnet-4-5`` through litellm's Anthropic adapter (closed
  tokenizer; routefit prices with the legacy Anthropic tokenizer);
- ``deepseek``: the DeepSeek tokenizer and V3 chat template (text only).

Per route, in one fresh routefit: a training set of varied requests (1-12 messages, 20-3,000
tokens per message, some with tools, tool calls and images) sent through routefit, then a test set
of new requests after the calibration refresh, then multi-turn sessions (each turn extends the
previous one by the reply and a new user message). Errors are (estimate − actual) / actual with
actual = ``usage.prompt_tokens``:

- raw: ``pricing.meter.measure`` in-process (no correction) on the test set;
- calibrated: ``x-routefit-prompt-tokens`` on the test set (the correction learnt from training);
- anchored: ``x-routefit-prompt-tokens`` on session turns 2+ (a prefix anchor matched);
- litellm: ``litellm.token_counter(model, messages, tools)`` on the test set.

A negative error is an under-estimate: the dangerous side (an overflow the proxy did not see).

Then section 4b (``accuracy_models``): the mystery-2 / mystery-3 routes and the poisoning scenario
replayed in-process under each model of the bias, before and after issue 18.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from typing import Any

import httpx
from procs import Server, Servers, anthropic_entry, free_port, openai_entry, write_yaml
from sessions import TOOLS
from workloads import png_data_url, text_tokens

ROUTES = {
    # alias: (sim model, litellm model name for token_counter, vision, max tokens per message)
    "gpt-4o": ("gpt-4o", "gpt-4o", True, 3000),
    "mystery": ("mystery-1", "mystery-1", True, 2000),
    "claude": ("claude-sonnet-4-5", "claude-sonnet-4-5", True, 3000),
    "deepseek": ("deepseek-chat", "deepseek-chat", False, 3000),
}


def make_request(alias: str, seed: int) -> dict:
    _, _, vision, per_message = ROUTES[alias]
    rng = random.Random(seed)
    messages: list[dict] = []
    if rng.random() < 0.7:
        messages.append({"role": "system", "content": text_tokens(rng.randint(20, 400), seed)})
    n = rng.randint(1, 12)
    tools = rng.random() < 0.35
    for i in range(n):
        last = i == n - 1
        if (
            not last
            and tools
            and rng.random() < 0.3
            and messages
            and messages[-1]["role"] == "user"
        ):
            cid = f"call_{seed}_{i}"
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": "search", "arguments": '{"query": "x y z"}'},
                        }
                    ],
                }
            )
            out = text_tokens(rng.randint(20, per_message), seed * 31 + i)
            messages.append({"role": "tool", "tool_call_id": cid, "content": out})
            messages.append({"role": "assistant", "content": text_tokens(30, seed * 37 + i)})
            continue
        role = "user" if last or not messages or messages[-1]["role"] != "user" else "assistant"
        size = rng.randint(20, per_message) if rng.random() < 0.5 else rng.randint(20, 300)
        content: object = text_tokens(size, seed * 1000 + i)
        if role == "user" and vision and rng.random() < 0.2:
            w, h = rng.choice([(256, 256), (800, 600), (1500, 1100), (64, 900)])
            content = [
                {"type": "text", "text": content},
                {"type": "image_url", "image_url": {"url": png_data_url(w, h, seed + i)}},
            ]
        messages.append({"role": role, "content": content})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": text_tokens(40, seed * 7)})
    body = {"model": alias, "messages": messages, "max_tokens": 128}
    if tools:
        body["tools"] = TOOLS
    return body


def _errors(pairs: list[tuple[float, float]]) -> dict:
    errs = [(est - act) / act for est, act in pairs if act > 0]
    if not errs:
        return {"n": 0}
    absolute = sorted(abs(e) for e in errs)
    return {
        "n": len(errs),
        "mean_abs_pct": statistics.fmean(absolute) * 100,
        "p95_abs_pct": absolute[min(len(absolute) - 1, int(0.95 * len(absolute)))] * 100,
        "worst_under_pct": min(min(errs), 0.0) * 100,
        "worst_over_pct": max(max(errs), 0.0) * 100,
        "under_share": sum(e < 0 for e in errs) / len(errs),
    }


def _send(client: httpx.Client, url: str, body: dict) -> tuple[int, int, dict]:
    resp = client.post(url, json=body)
    data = resp.json()
    if resp.status_code != 200:
        raise RuntimeError(f"{body['model']}: HTTP {resp.status_code}: {str(data)[:400]}")
    estimate = int(resp.headers["x-routefit-prompt-tokens"])
    return estimate, int(data["usage"]["prompt_tokens"]), data


def _routefit(servers: Servers, exe: str, config: Any) -> Server:
    """``routefit serve`` from another checkout's executable (the code before a change)."""
    port = free_port()
    cmd = [exe, "serve", "--config", str(config), "--port", str(port), "--workers", "1"]
    process, log_path, started = servers.spawn(
        "routefit-before", [*cmd, "--log-level", "warning"], {}
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(base + "/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    return servers.wait_ready("routefit-before", process, log_path, started, base, ready, 60)


def _measure(base_url: str, cfg: Any, sizes: tuple[int, int, int, int], log: Any) -> dict:
    """Train, test and session errors per route, through the routefit at ``base_url``."""
    import litellm

    from pricing.messages import parse_request
    from pricing.meter import measure

    n_train, n_test, n_sessions, turns = sizes
    chat = base_url + "/v1/chat/completions"
    routes: dict = {}
    with httpx.Client(timeout=120) as client:
        for alias in ROUTES:
            for i in range(n_train):
                _send(client, chat, make_request(alias, 10_000 + i))
        time.sleep(6.5)  # the calibrator refreshes corrections from the store every 5 s
        for alias, (_, ll_model, _, _) in ROUTES.items():
            rc = cfg.route(alias)
            assert rc is not None
            raw, calibrated, ll, anchored = [], [], [], []
            for i in range(n_test):
                body = make_request(alias, 20_000 + i)
                estimate, actual, _ = _send(client, chat, body)
                raw.append((measure(parse_request(body), rc.route).total, actual))
                calibrated.append((estimate, actual))
                count = litellm.token_counter(
                    model=ll_model, messages=body["messages"], tools=body.get("tools")
                )
                ll.append((count, actual))
            for s in range(n_sessions):
                body = make_request(alias, 30_000 + s)
                for t in range(turns):
                    estimate, actual, data = _send(client, chat, body)
                    if t:
                        anchored.append((estimate, actual))
                    reply = data["choices"][0]["message"].get("content") or "ok"
                    body = {
                        **body,
                        "messages": [
                            *body["messages"],
                            {"role": "assistant", "content": reply},
                            {"role": "user", "content": text_tokens(200, s * 100 + t)},
                        ],
                    }
            routes[alias] = {
                "raw": _errors(raw),
                "calibrated": _errors(calibrated),
                "anchored": _errors(anchored),
                "litellm_token_counter": _errors(ll),
            }
            r = routes[alias]
            log(
                f"  {alias:<9} mean |error|: raw {r['raw']['mean_abs_pct']:5.1f}%  calibrated "
                f"{r['calibrated']['mean_abs_pct']:5.1f}%  anchored "
                f"{r['anchored']['mean_abs_pct']:5.1f}%  litellm.token_counter "
                f"{r['litellm_token_counter']['mean_abs_pct']:5.1f}%   worst under: raw "
                f"{r['raw']['worst_under_pct']:.1f}%  cal "
                f"{r['calibrated']['worst_under_pct']:.1f}% "
                f" anch {r['anchored']['worst_under_pct']:.1f}%  litellm "
                f"{r['litellm_token_counter']['worst_under_pct']:.1f}%"
            )
    return routes


def run(servers: Servers, quick: bool, log=print) -> dict:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # routefit takes REDIS_URL for a store when its config names none: inherited, the before and
    # after servers would share one Redis, and the after run would find the before run's anchors
    # for the same test prompts (calibrated error 0.0% on every route, measured).
    os.environ.pop("REDIS_URL", None)
    from proxy.config import load_config

    n_train, n_test, n_sessions, turns = (16, 16, 3, 4) if quick else (40, 40, 6, 6)
    sim: Server = servers.sim()
    url = sim.base_url
    config = write_yaml(
        servers.dir / "routefit-accuracy.yaml",
        {
            "model_list": [
                openai_entry("gpt-4o", url),
                openai_entry(
                    "mystery",
                    url,
                    "mystery-1",
                    # unknown to litellm's map: a user states the window and that it sees images
                    model_info={
                        "max_input_tokens": 32768,
                        "max_output_tokens": 4096,
                        "supports_vision": True,
                    },
                ),
                anthropic_entry("claude", url),
                openai_entry(
                    "deepseek",
                    url,
                    "deepseek-chat",
                    model_info={"max_input_tokens": 65536, "max_output_tokens": 8192},
                    routefit={"tokenizer": "deepseek", "framing": "deepseek"},
                ),
            ],
            # The estimate is what is measured: a big body is proved by a bound and its answer
            # may go out on it (``x-routefit-prompt-tokens-kind: bound``) unless asked to wait
            # for the exact count — read as an estimate, a bound is 2-4x the count.
            "routefit_settings": {"store_path": ":memory:", "exact_prompt_headers": True},
        },
    )
    cfg = load_config(str(config))
    out: dict = {"train": n_train, "test": n_test, "sessions": n_sessions, "turns": turns}
    before = os.environ.get("ROUTEFIT_BEFORE")  # a routefit executable of the code before
    if before:
        log(f"  before ({before}):")
        rf = _routefit(servers, before, config)
        out["before"] = _measure(rf.base_url, cfg, (n_train, n_test, n_sessions, turns), log)
        servers.stop(rf)
        log("  after (this checkout):")
    rf = servers.routefit(config)
    routes = _measure(rf.base_url, cfg, (n_train, n_test, n_sessions, turns), log)
    calib = httpx.get(rf.base_url + "/routefit/calibration", timeout=60)
    out["calibration_endpoint"] = calib.json() if calib.status_code == 200 else calib.text
    out["routes"] = routes
    servers.stop(rf)
    servers.stop(sim)
    import accuracy_models

    log("  models of the bias, before / after (in-process replay):")
    out["models"] = accuracy_models.run(quick, log)
    import accuracy_heldout

    log("  held-out unknown tokenizers, before / after (in-process replay):")
    out["heldout"] = accuracy_heldout.run(4 if quick else 10, log=log)
    log("  real tokenizers, tuning and held out (bench/real_tokenizers.py):")
    scripts = accuracy_heldout._policies("scripts")
    for family in ("real", "real-heldout"):
        n = 4 if quick else 8
        out[f"heldout_{family}"] = accuracy_heldout.run(n, family=family, log=log, policies=scripts)
    return out


if __name__ == "__main__":
    import sys

    with Servers() as s:
        result = run(s, quick="--quick" in sys.argv)
    print(json.dumps(result, indent=1)[:3000])
