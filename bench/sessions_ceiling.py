"""The provider cache-hit any schedule could reach on section 5b's sessions, beside routefit's.

A prefix cache serves at most what the request shares with an earlier one; every request sends
its own new round (the messages appended since the previous request, as the fit sends them)
for the first time. So whatever the fit does, a request's cached tokens are at most its prompt
less that round (in the provider's whole blocks, nothing below its minimum), and

    ceiling = Σ (prompt − new round) / Σ prompt

over the requests as fitted. It depends on the window use: the same rounds against a larger
prompt leave a higher ceiling. This replays the sessions in-process through ``strategies.fit``
(no server, no learnt correction: cut points do not move between requests unless the
conversation moved them), scores each fitted prompt against the simulator's own prefix cache
(``proxy.sim.cache.PrefixCache`` over ``proxy.sim.counting.openai_prompt``'s token ids) and
reports both, with window use, for

- ``fit``: section 5b's sessions (``sessions_fit.session``: 8,192-token window, ~1,000 new tokens
  per round);
- ``agent``: agent-shaped sessions (``sessions_fit.agent_session``: 32k and 64k windows, prompts
  of 20-60k tokens, 1-3k new tokens per round);
- ``screens``: computer-use-shaped sessions (``sessions_fit.screen_session``: the same windows,
  a 1280x800 screenshot and a short action every round), where offloading images does most of
  the cutting.

``python bench/sessions_ceiling.py [fit|agent|screens] [--quick] [--window=W] [--rounds=N]
[knob=value]``
prints one JSON line per shape: ``--window`` puts every session on a route of that window,
``--rounds`` sets the rounds per session (a 128k window needs ~500 to be outgrown several
times), a knob is a ``FitPolicy`` field. Run it at another commit by pointing ``PYTHONPATH`` at
that commit's tree.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import statistics
import struct
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the fit comes from PYTHONPATH

from sessions import TOOLS
from sessions_fit import (
    AGENT_MAX_TOKENS,
    AGENT_WINDOWS,
    MAX_TOKENS,
    WINDOW,
    agent_session,
    screen_session,
    session,
)

from pricing.framing import default_framing
from pricing.images import default_image_rule
from pricing.messages import parse_request
from pricing.route import Route
from proxy.sim.cache import PrefixCache
from proxy.sim.counting import openai_prompt
from proxy.sim.images import Picture
from proxy.sim.models import get_builtin
from strategies.fit import fit
from strategies.policy import FitPolicy

BLOCK, MINIMUM = 128, 1024  # the simulator's OpenAI prefix cache


def _route(window: int) -> Route:
    return Route(
        alias="bench",
        model="gpt-4o",
        context_window=window,
        max_output_tokens=AGENT_MAX_TOKENS,
        tokenizer="o200k_base",
        framing=default_framing("gpt-4o", "o200k_base"),
        image_rule=default_image_rule("gpt-4o", True),
        supports_vision=True,
    )


def _picture(part: Any) -> Picture:
    url = part["image_url"]["url"]
    width, height = _size(url)
    return Picture(width, height, "image/png", hashlib.sha256(url.encode()).hexdigest())


@functools.lru_cache(maxsize=4096)
def _size(url: str) -> tuple[int, int]:
    """A PNG data URL's size from its header; 256x256 for any other URL."""
    if not url.startswith("data:image/png;base64,"):
        return 256, 256
    head = base64.b64decode(url[22:54])  # the signature and the IHDR chunk's width and height
    return struct.unpack(">II", head[16:24])


def _cacheable(tokens: int) -> int:
    """What the simulator can serve of a ``tokens``-token prefix: whole blocks, above a minimum."""
    served = (tokens // BLOCK) * BLOCK
    return served if served >= MINIMUM else 0


def replay(
    steps: list[list[dict[str, Any]]], window: int, max_tokens: int, policy: FitPolicy
) -> dict[str, Any]:
    """One session through ``fit``: per request, prompt, cached and the ceiling's cached."""
    route = _route(window)
    model = get_builtin("gpt-4o")
    cache = PrefixCache(BLOCK, MINIMUM)
    history: list[dict[str, Any]] = []
    prompt = cached = best = 0
    uses: list[float] = []
    # the prompt against the fit's budget (the window less the output reservation and the
    # margin: the most a prompt may use), on the requests the fit had to cut
    budget_uses: list[float] = []
    for step in steps:
        history.extend(step)
        body = {"model": "gpt-4o", "messages": history, "tools": TOOLS, "max_tokens": max_tokens}
        fitted = fit(parse_request(body), route, policy)
        sent = fitted.body
        ids = openai_prompt(sent, model, _picture).tokens
        before = {**sent, "messages": sent["messages"][: -len(step)]}
        new = len(ids) - len(openai_prompt(before, model, _picture).tokens)
        prompt += len(ids)
        cached += cache.lookup_and_store(ids)
        best += _cacheable(min(len(ids) - 1, len(ids) - new))
        uses.append(len(ids) / window)
        if fitted.report.actions.taken():
            budget_uses.append(len(ids) / fitted.report.budget)
    return {
        "prompt": prompt,
        "cached": cached,
        "best": best,
        "uses": uses,
        "budget_uses": budget_uses,
    }


def measure(
    shape: str,
    quick: bool,
    policy: FitPolicy | None = None,
    window: int | None = None,
    rounds: int | None = None,
) -> dict[str, Any]:
    """``window``: every session on a route of that window (else the shape's own windows);
    ``rounds``: rounds per session (a larger window needs more to be outgrown)."""
    if shape == "fit":
        n, default = (2, 60) if quick else (5, 110)
        rounds = rounds or default
        runs = [(session(2000 + s, rounds), window or WINDOW, MAX_TOKENS) for s in range(n)]
    else:
        n, default = (2, 80) if quick else (4, 220)
        rounds = rounds or default
        make = screen_session if shape == "screens" else agent_session
        runs = [
            (
                make(3000 + s, rounds),
                window or AGENT_WINDOWS[s % len(AGENT_WINDOWS)],
                AGENT_MAX_TOKENS,
            )
            for s in range(n)
        ]
    results = [replay(*r, policy or FitPolicy()) for r in runs]
    prompt = sum(r["prompt"] for r in results)
    uses = [u for r in results for u in r["uses"]]
    budget = [u for r in results for u in r["budget_uses"]]
    return {
        "shape": shape,
        "window": window or "shape's",
        "sessions": n,
        "rounds": rounds,
        "requests": len(uses),
        "cache_hit": round(sum(r["cached"] for r in results) / prompt, 4),
        "ceiling": round(sum(r["best"] for r in results) / prompt, 4),
        "median_window_use": round(statistics.median(uses), 4),
        "fitted_requests": len(budget),
        "median_budget_use_fitted": round(statistics.median(budget), 4) if budget else None,
    }


if __name__ == "__main__":
    shapes = [a for a in sys.argv[1:] if a in ("fit", "agent", "screens")] or ["fit", "agent"]
    given = dict(a.removeprefix("--").split("=", 1) for a in sys.argv[1:] if "=" in a)
    window, rounds = (int(given.pop(k)) if k in given else None for k in ("window", "rounds"))
    chosen = FitPolicy(**{k: float(v) for k, v in given.items()})  # type: ignore[arg-type]
    for shape in shapes:
        got = measure(shape, "--quick" in sys.argv, chosen, window, rounds)
        print(json.dumps({**got, **given}), flush=True)
