"""Section 3: the cost of pricing and fitting a request, in-process, cold and warm.

Three sweeps, each point in a fresh subprocess (``python bench/fit_scaling.py POINT_JSON``) so
"cold" really is cold: the count cache of ``pricing.tokenizers`` and the image probe cache of
``pricing.probe`` are empty (the tokenizer files themselves are loaded before timing — that is
start-up, not per-request cost).

- messages: 10 → 1,000 messages of ~100 tokens (a chat that grows);
- tokens: 20 messages carrying 1k → 500k tokens in all;
- images: 0 → 200 distinct PNG data-URL images (512×512) in 40 messages.

Per point: ``measure`` of the conversation cold (its content never seen by the process), then
warm: the same conversation plus one new turn (a ~100-token assistant reply and a ~100-token user
message), every earlier turn already priced — what a proxy sees on the next request of a
session; ``fit`` of such a grown conversation (measure + planning, and eliding above the ~120k
budget of the ``gpt-4o`` route). Medians of 3 variants of each point (same shape, new content).
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SWEEPS = {
    "messages": [10, 30, 100, 300, 1000],
    "tokens": [1_000, 10_000, 50_000, 100_000, 250_000, 500_000],
    "images": [0, 10, 50, 100, 200],
}
QUICK_SWEEPS = {
    "messages": [10, 100, 1000],
    "tokens": [1_000, 50_000, 500_000],
    "images": [0, 50, 200],
}


def conversation(kind: str, n: int, variant: int = 0) -> list[dict]:
    from workloads import png_data_url, text_tokens

    v = variant * 100_003  # another variant: the same shape, none of the same content

    messages: list[dict] = [{"role": "system", "content": "You are a careful assistant."}]
    if kind == "messages":
        for i in range(n - 1):
            role = "user" if i % 2 == 0 else "assistant"
            messages.append({"role": role, "content": text_tokens(100, i + v)})
    elif kind == "tokens":
        count = 20
        for i in range(count - 1):
            role = "user" if i % 2 == 0 else "assistant"
            messages.append({"role": role, "content": text_tokens(n // (count - 1), i + v)})
    elif kind == "images":
        count = 40
        per = [n // ((count - 1) // 2 + 1)] * ((count - 1) // 2 + 1)
        for k in range(n - sum(per)):
            per[k] += 1
        u = 0
        for i in range(count - 1):
            if i % 2 == 0:
                parts: list[dict] = [{"type": "text", "text": text_tokens(60, i + v)}]
                for j in range(per[u]):
                    url = png_data_url(512, 512, seed=u * 1000 + j + v)
                    parts.append({"type": "image_url", "image_url": {"url": url}})
                u += 1
                messages.append({"role": "user", "content": parts})
            else:
                messages.append({"role": "assistant", "content": text_tokens(60, i + v)})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": text_tokens(100, 10**6 + v)})
    return messages


def _ms(fn) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def point(kind: str, n: int, config_path: Path, repeats: int = 3) -> dict:
    """Runs in a fresh process: cold and warm timings (medians of ``repeats``) for one point."""
    from workloads import text_tokens

    from pricing.messages import parse_request
    from pricing.meter import measure
    from pricing.tokenizers import get_tokenizer
    from proxy.config import load_config
    from strategies.fit import fit

    rc = load_config(str(config_path)).route("gpt-4o")
    assert rc is not None
    route, policy = rc.route, rc.policy
    get_tokenizer(route.tokenizer).count("load the tokenizer before timing")
    # exercise every code path once on unrelated content (imports, first-call costs)
    warm_up = parse_request({"model": "gpt-4o", "messages": conversation(kind, 3, variant=99)})
    fit(warm_up, route, policy)

    timings: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        timings.setdefault(name, []).append(value)

    for r in range(repeats):
        messages = conversation(kind, n, variant=r)  # content never seen by this process
        body = {"model": "gpt-4o", "messages": messages, "max_tokens": 1024}
        chars = len(json.dumps(body))
        add("parse_ms", _ms(lambda body=body: parse_request(body)))
        request = parse_request(body)
        add("cold_measure_ms", _ms(lambda request=request: measure(request, route)))
        pressure = measure(request, route)
        add("fit_ms_counts_known", _ms(lambda request=request: fit(request, route, policy)))
        result = fit(request, route, policy)
        for k in range(2):  # warm: one new turn (assistant reply + user message) never seen
            seed = 7_000_000 + 1000 * r + 10 * k
            turn = [
                {"role": "assistant", "content": text_tokens(100, seed)},
                {"role": "user", "content": text_tokens(100, seed + 1)},
            ]
            grown = parse_request({**body, "messages": [*messages, *turn]})
            if k == 0:
                add("warm_measure_ms", _ms(lambda g=grown: measure(g, route)))
                add("same_measure_ms", _ms(lambda g=grown: measure(g, route)))
            else:
                add("warm_fit_ms", _ms(lambda g=grown: fit(g, route, policy)))
        body2 = {**body, "messages": [*messages, {"role": "user", "content": "next"}]}
        add("warm_parse_ms", _ms(lambda body2=body2: parse_request(body2)))
    out = {k: statistics.median(v) for k, v in timings.items()}
    out.update(
        kind=kind,
        n=n,
        messages=len(messages),
        chars=chars,
        tokens=pressure.total,
        fit_actions=result.report.actions.header(),
    )
    return out


def run(config_path: Path, quick: bool, log=print) -> dict:
    sweeps = QUICK_SWEEPS if quick else SWEEPS
    out: dict = {"route": "gpt-4o", "points": []}
    for kind, values in sweeps.items():
        for n in values:
            proc = subprocess.run(
                [sys.executable, str(Path(__file__)), json.dumps([kind, n]), str(config_path)],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"fit point {kind}={n} failed:\n{proc.stderr[-3000:]}")
            p = json.loads(proc.stdout.strip().splitlines()[-1])
            out["points"].append(p)
            log(
                f"  {kind:<8} {n:>7,}: {p['tokens']:>8,} tokens  cold measure "
                f"{p['cold_measure_ms']:8.2f} ms  warm (+1 turn) measure "
                f"{p['warm_measure_ms']:6.2f} ms  fit {p['warm_fit_ms']:7.2f} ms  "
                f"[{p['fit_actions']}]"
            )
    out["summary"] = summarise(out["points"])
    return out


def summarise(points: list[dict]) -> dict:
    summary = {}
    for kind in SWEEPS:
        pts = [p for p in points if p["kind"] == kind]
        if len(pts) < 2:
            continue
        first, last = pts[0], pts[-1]
        summary[kind] = {
            "history_growth": last["tokens"] / max(1, first["tokens"]),
            "cold_growth": last["cold_measure_ms"] / max(1e-6, first["cold_measure_ms"]),
            "warm_growth": last["warm_measure_ms"] / max(1e-6, first["warm_measure_ms"]),
            "warm_over_cold_at_largest": last["warm_measure_ms"] / last["cold_measure_ms"],
            "warm_measure_ms_median": statistics.median(p["warm_measure_ms"] for p in pts),
        }
    return summary


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    labels = {
        "messages": "messages in the conversation",
        "tokens": "prompt tokens in the conversation",
        "images": "images in the conversation",
    }
    for ax, kind in zip(axes, SWEEPS, strict=True):
        pts = [p for p in result["points"] if p["kind"] == kind]
        xs = [p["tokens"] if kind == "tokens" else p["n"] for p in pts]
        ax.plot(xs, [p["cold_measure_ms"] for p in pts], "o-", label="cold: measure (all new)")
        ax.plot(xs, [p["warm_measure_ms"] for p in pts], "s-", label="warm: measure (+1 turn)")
        ax.plot(xs, [p["warm_fit_ms"] for p in pts], "^--", label="warm: fit (+1 turn)")
        ax.set_xscale("symlog" if kind == "images" else "log")
        ax.set_yscale("log")
        ax.set_xlabel(labels[kind])
        ax.set_ylabel("ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"pricing cost vs {kind}")
    axes[0].legend(fontsize=8)
    fig.suptitle("routefit: pricing/fitting cost — warm cost tracks the new turn, not the history")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    kind, n = json.loads(sys.argv[1])
    print(json.dumps(point(kind, n, Path(sys.argv[2]))))
