"""Section 4b: the models of the bias, before and after (issue 18), replayed in-process.

Each scenario is a stream of requests: routefit's meter prices them (``pricing.meter.measure`` on
the route the config builds), the simulator's counting rules give the provider's count
(``proxy.sim.counting``, independent of pricing), and the calibration is refitted after every
request, as the proxy does while a route is learning. The same stream is replayed under each
model of the bias — the switch is ``CalibrationPolicy.model``, so "before" is the old model run
now, not a pasted number:

- ``raw``: the meter's count, no calibration;
- ``one-factor``: one text factor, framing, messages and images, image tokens priced by a
  default lumped with the rest (the calibration before issue 18);
- ``classes``: per-class token weights and per-message / per-call overhead, fitted on absolute
  errors (issue 18's first step);
- ``digits``: ``classes`` plus a per-prompt overhead and per-character weights (digits,
  newlines, indentation, tabs, punctuation, non-ASCII), fitted on relative errors (before
  issue 31 item 5);
- ``features``: ``digits`` plus the count of numbers, runs of digits (now).

Scenarios:

- ``mystery-2`` / ``mystery-3``, unanchored: every request a new tool-heavy conversation (prose,
  code, JSON with and without indentation, logs, CJK, images); errors after 30 requests.
- ``mystery-2`` / ``mystery-3``, anchored sessions: five interleaved sessions that grow turn by
  turn; each request is estimated from the previous turn's provider count plus the corrected
  increment (``anchored_estimate``).
- poisoning: ``gpt-4o-mini`` and ``gpt-4o`` (exact meters), URL images of unknown size with URL
  sizing off (priced at the rule's worst case, counted by the provider at its assumed size),
  ``poison`` such requests, then plain ~8k-token prompts: the error on those.
"""

from __future__ import annotations

import base64
import io
import json
import random
import statistics
import tempfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

MODELS = ("raw", "one-factor", "classes", "digits", "features")
_PROSE = (
    "the service reads its configuration at start up and keeps a small cache of recent answers "
    "so that a retry does not reach the backend twice while the operator watches the queue"
).split()
_CJK = "東京の天気は晴れです今日は会議があります資料を確認してください서울부산데이터분석"
_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


def _routes() -> Any:
    from proxy.config import load_config

    url = "http://127.0.0.1:9/v1"
    info = {"max_input_tokens": 32768, "max_output_tokens": 4096, "supports_vision": True}
    entries = [
        {
            "model_name": m,
            "litellm_params": {"model": f"openai/{m}", "api_base": url, "api_key": "x"},
            "model_info": info,
            "routefit": {"image_rule": "openai-tile"},
        }
        for m in ("mystery-2", "mystery-3")
    ] + [
        {"model_name": m, "litellm_params": {"model": f"openai/{m}", "api_base": url}}
        for m in ("gpt-4o-mini", "gpt-4o")
    ]
    # The same provider behind a vision rule routefit does not know: a stand-in price.
    entries.append(
        {**entries[-2], "model_name": "gpt-4o-mini~flat", "routefit": {"image_rule": "flat"}}
    )
    import yaml

    path = Path(tempfile.mkdtemp()) / "accuracy-models.yaml"
    path.write_text(yaml.safe_dump({"model_list": entries}))
    return load_config(str(path))


def _picture(part: Mapping[str, Any]) -> Any:
    from proxy.sim.images import Picture, decode_data_url, probe_bytes
    from proxy.sim.tokens import digest

    url = part["image_url"]["url"]
    if url.startswith("data:"):
        _, data = decode_data_url(url)
        w, h, kind = probe_bytes(data)
        return Picture(w, h, kind, digest(data))
    return Picture(1024, 1024, None, digest(url))  # the simulator's assumed size


def _png(rng: random.Random) -> str:
    from PIL import Image

    w, h = rng.choice([(256, 256), (640, 480), (1200, 900), (90, 700)])
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (rng.randrange(256), 40, 90)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_PROSE) for _ in range(n)).capitalize() + "."


def _output(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return _words(rng, rng.randint(30, 500))
    if kind == 1:
        return "\n".join(
            f"def {rng.choice(_PROSE)}_{i}(xs, n={rng.randint(1, 99)}):\n"
            f"    return [x for x in xs if x.{rng.choice(_PROSE)} > n]"
            for i in range(rng.randint(3, 30))
        )
    if kind == 2:
        rows = [
            {"id": rng.randint(1, 10**6), "name": rng.choice(_PROSE), "score": rng.random()}
            for _ in range(rng.randint(3, 40))
        ]
        return json.dumps({"rows": rows}, indent=rng.choice([None, 2, 4]))
    if kind == 3:
        return "\n".join(
            f"2025-04-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} "
            f"worker-{rng.randint(1, 9)} {rng.randint(100, 99999)} {rng.random() * 100:.2f} ms"
            for _ in range(rng.randint(5, 80))
        )
    if kind == 4:
        return "".join(rng.choice(_CJK) for _ in range(rng.randint(50, 700)))
    return _words(rng, rng.randint(10, 80)) + "\n```\n" + _output(rng) + "\n```"


def _turn(rng: random.Random, first: bool) -> list[dict]:
    """The messages one agent step appends (the first step opens the conversation)."""
    out: list[dict] = []
    if first:
        out += [
            {"role": "system", "content": "You are a coding agent. " + _words(rng, 60)},
            {"role": "user", "content": _words(rng, rng.randint(10, 120))},
        ]
    if rng.random() < 0.2:
        content: Any = _words(rng, 30) if rng.random() < 0.6 else _CJK[: rng.randint(5, 40)]
        if rng.random() < 0.5:
            content = [
                {"type": "text", "text": content},
                {"type": "image_url", "image_url": {"url": _png(rng)}},
            ]
        out += [
            {"role": "assistant", "content": _words(rng, 30)},
            {"role": "user", "content": content},
        ]
    calls = [
        {
            "id": f"call_{rng.getrandbits(40):x}",
            "type": "function",
            "function": {"name": "shell", "arguments": json.dumps({"cmd": _words(rng, 5)})},
        }
        for _ in range(rng.choice([1, 1, 2]))
    ]
    out.append({"role": "assistant", "content": _words(rng, 15), "tool_calls": calls})
    out += [{"role": "tool", "tool_call_id": c["id"], "content": _output(rng)} for c in calls]
    return out


class _Replay:
    """One model of the bias learning from a stream of (pressure, actual), like the proxy."""

    def __init__(self, model: str, exact: bool) -> None:
        from pricing.calibration import CalibrationPolicy, fit_correction

        self.model = model
        self.exact = exact
        self.policy = CalibrationPolicy(model="features" if model == "raw" else model)
        self.samples: list[Any] = []
        self.correction = fit_correction((), self.policy, exact)

    def estimate(self, pressure: Any, anchor: Any = None) -> int:
        from pricing.calibration import anchored_estimate

        if self.model == "raw":
            return int(pressure.total)
        if anchor is not None:
            return int(anchored_estimate(anchor, pressure, self.correction))
        return int(self.correction.price_request(pressure))

    def learn(self, pressure: Any, estimate: int, actual: int) -> None:
        from pricing.calibration import fit_correction, sample_of

        self.samples.append(sample_of("r", 0.0, pressure, estimate, False, actual))
        self.correction = fit_correction(self.samples[-200:], self.policy, self.exact)


def _stats(errors: list[float]) -> dict:
    if not errors:
        return {"n": 0}
    absolute = sorted(abs(e) for e in errors)
    return {
        "n": len(errors),
        "mean_abs_pct": round(statistics.fmean(absolute) * 100, 2),
        "p95_abs_pct": round(absolute[min(len(absolute) - 1, int(0.95 * len(absolute)))] * 100, 2),
        "worst_under_pct": round(min(min(errors), 0.0) * 100, 2),
        "worst_over_pct": round(max(max(errors), 0.0) * 100, 2),
    }


Priced = tuple[Any, int]  # (routefit's pressure, the provider's count)


def _pricer(cfg: Any, alias: str) -> Callable[[dict], Priced]:
    from pricing.messages import parse_request
    from pricing.meter import measure
    from proxy.sim.counting import openai_prompt
    from proxy.sim.models import get_builtin

    route = cfg.route(alias).route
    sim = get_builtin(alias.split("~")[0])

    def price(body: dict) -> Priced:
        actual = len(openai_prompt(body, sim, _picture).tokens)
        return measure(parse_request(body), route), actual

    return price


def _unanchored(price: Callable[[dict], Priced], n: int, seed: int) -> dict:
    rng = random.Random(seed)
    stream = []
    for _ in range(n):
        messages = _turn(rng, True)
        for _ in range(rng.randint(0, 7)):
            messages += _turn(rng, False)
        stream.append(price({"model": "m", "messages": messages, "tools": _TOOL}))
    out = {}
    for model in MODELS:
        replay = _Replay(model, exact=False)
        errors = []
        for pressure, actual in stream:
            estimate = replay.estimate(pressure)
            errors.append((estimate - actual) / actual)
            replay.learn(pressure, estimate, actual)
        out[model] = _stats(errors[30:])
    return out


def _sessions(price: Callable[[dict], Priced], sessions: int, turns: int, seed: int) -> dict:
    from pricing.calibration import anchor_of

    rng = random.Random(seed)
    bodies: list[list[dict]] = [[] for _ in range(sessions)]
    stream = []  # (session, pressure, actual), interleaved turn by turn
    for t in range(turns):
        for s in range(sessions):
            bodies[s] = bodies[s] + _turn(rng, t == 0)
            stream.append((s, *price({"model": "m", "messages": bodies[s], "tools": _TOOL})))
    out = {}
    for model in MODELS:
        replay = _Replay(model, exact=False)
        anchors: dict[int, Any] = {}
        errors = []
        for i, (s, pressure, actual) in enumerate(stream):
            estimate = replay.estimate(pressure, anchors.get(s))
            if i >= 30:
                errors.append((estimate - actual) / actual)
            replay.learn(pressure, estimate, actual)
            anchors[s] = anchor_of(pressure, actual)
        out[model] = _stats(errors)
    return out


def _poisoning(price: Callable[[dict], Priced], poison: int, plain: int, seed: int) -> dict:
    """URL images of unknown size, then plain ~8k-token prompts (errors on those only)."""
    rng = random.Random(seed)
    dirty = []
    for i in range(poison):
        content: list[dict] = [{"type": "text", "text": _words(rng, rng.randint(100, 1500))}]
        content += [
            {
                "type": "image_url",
                "image_url": {"url": f"https://img.example.com/{seed}/{i}/{k}.png"},
            }
            for k in range(rng.randint(1, 3))
        ]
        dirty.append(price({"model": "m", "messages": [{"role": "user", "content": content}]}))
    clean = [
        price({"model": "m", "messages": [{"role": "user", "content": _words(rng, 7_400)}]})
        for _ in range(plain)
    ]
    out = {}
    for model in MODELS:
        replay = _Replay(model, exact=True)
        for pressure, actual in dirty:
            replay.learn(pressure, replay.estimate(pressure), actual)
        errors = [(replay.estimate(p) - a) / a for p, a in clean]
        out[model] = {**_stats(errors), "text_factor": replay.correction.text}
    return out


def run(quick: bool, log: Callable[[str], None] = print) -> dict:
    cfg = _routes()
    n, sessions, turns, plain = (50, 4, 10, 4) if quick else (70, 5, 14, 10)
    out: dict = {"models": list(MODELS), "unanchored": {}, "sessions": {}, "poisoning": {}}
    for alias in ("mystery-2", "mystery-3"):
        price = _pricer(cfg, alias)
        out["unanchored"][alias] = _unanchored(price, n, seed=zlib.crc32(alias.encode()) % 1000 + 1)
        out["sessions"][alias] = _sessions(price, sessions, turns, seed=7)
        for kind in ("unanchored", "sessions"):
            row = out[kind][alias]
            log(
                f"  {alias} {kind:<10} p95 / worst under: "
                + "  ".join(
                    f"{m} {row[m]['p95_abs_pct']:.1f}%/{row[m]['worst_under_pct']:.1f}%"
                    for m in MODELS
                )
            )
    for alias in ("gpt-4o-mini", "gpt-4o", "gpt-4o-mini~flat"):
        row = _poisoning(_pricer(cfg, alias), poison=11, plain=plain, seed=18)
        out["poisoning"][alias] = row
        log(
            f"  poisoning {alias}: plain 8k prompt p95 error "
            + "  ".join(
                f"{m} {row[m]['p95_abs_pct']:.1f}% (text x{row[m]['text_factor']})" for m in MODELS
            )
        )
    return out


if __name__ == "__main__":
    import sys

    print(json.dumps(run("--quick" in sys.argv), indent=1))
