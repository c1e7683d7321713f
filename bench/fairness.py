"""``/healthz`` latency while big bodies are priced: CPU fairness (issue 30, item 2).

    python bench/fairness.py [--seconds 20] [--size-mb 9] [--clients 2] [--against REV]
                             [--new-text TOKENS]

Starts the simulator and ``routefit serve --workers 1`` (routes ``gpt-4o``, ``claude``), then
polls ``/healthz`` one request at a time: first idle, then while ``--clients`` threads send
``--size-mb`` MB bodies back to back to ``/v1/messages/count_tokens`` and to the dry run
(``/routefit/fit``). ``--new-text TOKENS`` runs one phase instead: the clients send chat prompts
of that many tokens of prose no one sent before (bench/new_text.py's, new serials in every
request), each under the 512 KB at which a body is parsed off the loop, but counted and
fitted. Reports p50/p99/max of ``/healthz`` per phase and the loaded/idle p99 ratio;
``--against REV`` measures that revision too (checked out as ``compare_commits`` does). Results
go to ``bench/results/fairness.json`` (``fairness_new_text.json`` with ``--new-text``).

Priced on the event loop, every health check waits for the body being priced (seconds);
priced in a worker thread, it waits only for the GIL between the tokenizer's slices.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import new_text
from procs import ROOT, Server, Servers, anthropic_entry, checkout, openai_entry, serve, write_yaml

RESULTS = ROOT / "bench" / "results" / "fairness.json"


def big_body(model: str, size: int) -> bytes:
    rng = random.Random(11)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(4000)]
    messages: list[dict[str, str]] = []
    total = 0
    while total < size:
        text = " ".join(rng.choice(words) for _ in range(200))
        messages.append(
            {"role": "user" if len(messages) % 2 == 0 else "assistant", "content": text}
        )
        total += len(text)
    messages.append({"role": "user", "content": "and this"})
    return orjson.dumps({"model": model, "max_tokens": 10, "messages": messages})


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000  # noqa: E731
    return {"n": len(s), "p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": s[-1] * 1000}


def poll(base: str, seconds: float) -> list[float]:
    out: list[float] = []
    with httpx.Client(timeout=300) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.perf_counter()
            assert client.get(base + "/healthz").status_code == 200
            out.append(time.perf_counter() - t)
    return out


def phases(size: int, new_tokens: int | None = None) -> dict[str, dict[str, bytes]]:
    """Per phase, the big bodies its clients send in turn, by path (``new_text.NONCE`` in a
    body is a new serial in every request)."""
    if new_tokens:
        prose = new_text.body("prose", new_tokens, "start").encode()
        return {f"new text, {new_tokens} tokens (forwarded)": {"/v1/chat/completions": prose}}
    return {
        "count and dry run": {
            "/v1/messages/count_tokens": big_body("claude", size),
            "/routefit/fit": big_body("gpt-4o", size),
        },
        "forwarded (fitted to the window, then answered)": {
            "/v1/chat/completions": big_body("gpt-4o", size),
        },
    }


def loaded(
    base: str, seconds: float, clients: int, bodies: dict[str, bytes]
) -> tuple[list[float], int]:
    """Health-check latencies while ``clients`` threads send big bodies; and how many went."""
    stop = threading.Event()
    done = [0]
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}

    def load(i: int) -> None:
        with httpx.Client(timeout=600) as client:
            paths = list(bodies)
            n = i
            while not stop.is_set():
                path = paths[n % len(paths)]
                n += 1
                body = bodies[path].replace(new_text.NONCE.encode(), b"%d-%d-" % (i, n))
                r = client.post(base + path, content=body, headers=headers)
                assert r.status_code == 200, r.text[:300]
                done[0] += 1

    threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the first bodies are on their way
    try:
        return poll(base, seconds), done[0]
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=600)


def measure(
    server: Server, seconds: float, clients: int, size: int, new_tokens: int | None = None
) -> dict:
    idle = percentiles(poll(server.base_url, min(5.0, seconds)))
    out: dict = {"idle": idle}
    for phase, bodies in phases(size, new_tokens).items():
        samples, sent = loaded(server.base_url, seconds, clients, bodies)
        busy = percentiles(samples)
        out[phase] = {**busy, "bodies": sent, "p99_ratio": busy["p99_ms"] / idle["p99_ms"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--size-mb", type=float, default=9.0)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--against", help="a revision to measure beside the working tree")
    parser.add_argument("--new-text", type=int, help="one phase: prompts of this many new tokens")
    args = parser.parse_args()
    size = int(args.size_mb * 1024 * 1024)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp, Servers() as servers:
        source = checkout(args.against, Path(tmp) / "a") if args.against else None
        try:
            sim = servers.sim()
            config = write_yaml(
                servers.dir / "routefit-fairness.yaml",
                {
                    "model_list": [
                        openai_entry("gpt-4o", sim.base_url),
                        anthropic_entry("claude", sim.base_url),
                    ],
                    "routefit_settings": {
                        "store_path": ":memory:",
                        # the bench measures the CPU path, not the count rate
                        "count_requests_per_minute": 1_000_000,
                        "max_body_bytes": 64 * 1024 * 1024,
                    },
                },
            )
            targets: dict[str, Server] = {"routefit": servers.routefit(config)}
            if source is not None:
                before = write_yaml(servers.dir / "before.yaml", _without_limits(config))
                targets["before"] = serve(servers, source, before, "before")
            for name, server in targets.items():
                results[name] = measure(server, args.seconds, args.clients, size, args.new_text)
                print(name, json.dumps(results[name], indent=1))
        finally:
            if source is not None:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(source)],
                    capture_output=True,
                )
    payload = {"size_mb": args.size_mb, "new_text": args.new_text, "clients": args.clients}
    payload["results"] = results
    out = RESULTS.with_name("fairness_new_text.json") if args.new_text else RESULTS
    out.write_text(json.dumps(payload, indent=1) + "\n")


def _without_limits(config: Path) -> dict:
    """The config for a revision that does not know this change's settings."""
    data = yaml.safe_load(config.read_text())
    data["routefit_settings"].pop("count_requests_per_minute", None)
    return dict(data)


if __name__ == "__main__":
    main()
