"""Pricing a long conversation, cold and warm.

A 200-message, ~100k-token conversation (a system prompt, user turns, assistant turns, tool
calls with their outputs) priced on gpt-4o (o200k_base, OpenAI framing):

- cold: a fresh process whose tokenizer is loaded but whose count cache is empty;
- warm: the same conversation grown by two new messages (the next turn), every earlier message
  already priced — what the proxy does on every turn of a session.

Goals on the 2-core reference machine: warm <= 2 ms, cold <= 60 ms.
Run: python bench/bench_pricing.py [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pricing.framing import default_framing
from pricing.messages import parse_request
from pricing.meter import measure
from pricing.route import Route
from pricing.tokenizers import get_tokenizer

ROUTE = Route(
    alias="gpt-4o",
    model="gpt-4o",
    tokenizer="o200k_base",
    framing=default_framing("gpt-4o", "o200k_base"),
)
VOCAB = (
    "the of and to in is for on that with as this by error warning line file path value "
    "function return class import test passed failed assert expected got result json "
    "{ } [ ] : , ; = ( ) 0 1 2 3 42 1999 2026 http://example.com/api/v1 user@example.com "
    "Traceback File line in module raise ValueError KeyError None True False"
).split()


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def conversation(messages: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = [{"role": "system", "content": words(rng, 400)}]
    call = 0
    while len(out) < messages:
        out.append({"role": "user", "content": words(rng, rng.randint(20, 200))})
        for _ in range(rng.randint(1, 3)):
            call += 1
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{call}",
                            "type": "function",
                            "function": {
                                "name": "run",
                                "arguments": json.dumps({"cmd": words(rng, 6)}),
                            },
                        }
                    ],
                }
            )
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": f"call_{call}",
                    "content": words(rng, rng.randint(400, 1500)),
                }
            )
        out.append({"role": "assistant", "content": words(rng, rng.randint(30, 200))})
    return out[:messages]


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    base = conversation(200)
    grown = [
        *base,
        {"role": "user", "content": "And now?"},
        {"role": "assistant", "content": "Next I will run the tests again."},
    ]
    tok = get_tokenizer("o200k_base")
    tok.count("warm up the tokenizer itself")
    body = {"model": "gpt-4o", "messages": base}
    t0 = time.perf_counter()
    pressure = measure(parse_request(body), ROUTE)
    cold = (time.perf_counter() - t0) * 1000
    warm = timed(lambda: measure(parse_request({"model": "gpt-4o", "messages": grown}), ROUTE), 50)
    result = {
        "messages": len(base),
        "tokens": pressure.total,
        "cold_ms": round(cold, 2),
        "warm_ms_p50": round(statistics.median(warm), 3),
        "warm_ms_p90": round(sorted(warm)[int(0.9 * len(warm))], 3),
        "goals": {"cold_ms": 60, "warm_ms": 2},
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"pricing {result['messages']} messages, {result['tokens']:,} tokens on gpt-4o")
        print(f"  cold: {result['cold_ms']:.1f} ms (goal <= 60 ms)")
        print(
            f"  warm: {result['warm_ms_p50']:.2f} ms p50, {result['warm_ms_p90']:.2f} ms p90 "
            f"(goal <= 2 ms)"
        )


if __name__ == "__main__":
    main()
