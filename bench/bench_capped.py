"""Benchmark: cap a 1 MB tool output (~250k tokens) to 8,000 tokens on o200k_base.

    python bench/bench_capped.py [--runs N]

Each run caps a fresh variant (different request ids and numbers), so no count cached by an
earlier run helps a later one. "warm" is the gateway's case: the meter has already priced the
message (its count is memoised), so capping pays only for the cut. "cold" adds that one full
count of the original. The tokenizations line comes from a counting wrapper around the real
tokenizer: candidates priced, and characters given to ``boundaries`` (head and tail windows).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

from pricing.capped import cap_message, cut_text
from pricing.messages import Message, parse_message
from pricing.route import Route
from pricing.tokenizers import Tokenizer, get_tokenizer

ROUTE = Route(alias="gpt-4o", model="gpt-4o")
CAP = 8_000
SIZE = 1_000_000


def log_output(seed: int) -> str:
    """A service log as an agent's tool sees it: timestamps, threads, classes, messages, then
    the failure that matters at the very end."""
    rng = random.Random(seed)
    users = ["alice", "bob", "carol", "dave", "erin", "frank"]
    events = [
        "GET /api/v1/items/{n} completed in {ms} ms (user={u}, cache=hit)",
        "POST /api/v1/orders created order {n} for user={u} in {ms} ms",
        "Refreshing inventory snapshot for warehouse {w}: {n} rows updated",
        "Connection pool stats: active={a}, idle={i}, waiting=0, max=32",
        "Scheduled job 'reindex-search' finished, {n} documents in {ms} ms",
        "Slow query detected ({ms} ms): SELECT * FROM items WHERE owner = '{u}' LIMIT 50",
        "Retrying call to payments-service (attempt {a} of 3) after timeout",
    ]
    lines = ["$ kubectl logs deploy/api --since=6h"]
    size = len(lines[0])
    i = 0
    while size < SIZE - 600:
        level = "WARN" if i % 17 == 0 else "INFO"
        message = rng.choice(events).format(
            n=rng.randrange(10**5),
            ms=rng.randrange(2, 900),
            u=rng.choice(users),
            w=rng.randrange(40),
            a=rng.randrange(1, 8),
            i=rng.randrange(32),
        )
        line = (
            f"2026-05-01 {i // 36000 % 24:02d}:{i // 600 % 60:02d}:{i // 10 % 60:02d},"
            f"{rng.randrange(1000):03d} {level:5} [http-nio-8080-exec-{rng.randrange(1, 40)}] "
            f"com.example.api.{rng.choice(['ItemController', 'OrderService', 'Inventory'])} - "
            f"{message}"
        )
        lines.append(line)
        size += len(line) + 1
        i += 1
    lines += [
        "ERROR [http-nio-8080-exec-7] com.example.api.OrderService - Unhandled exception",
        "java.lang.IllegalStateException: order 90412 has no shipping address",
        "    at com.example.api.OrderService.ship(OrderService.java:214)",
        "    at com.example.api.OrderController.post(OrderController.java:88)",
    ]
    return "\n".join(lines)


def json_output(seed: int) -> str:
    """A search tool's JSON result (indent=2): many records with short fields and escapes."""
    rng = random.Random(seed)
    rows = []
    size = 0
    while size < SIZE:
        row = {
            "id": f"doc-{rng.getrandbits(40):010x}",
            "title": f'Issue #{rng.randrange(10**5)}: "{rng.choice(["crash", "leak", "hang"])}"',
            "score": round(rng.random(), 4),
            "path": f"src/module_{rng.randrange(300)}/file_{rng.randrange(50)}.py",
            "snippet": f"def f_{rng.randrange(999)}(x):\n    return x * {rng.randrange(99)}\n",
            "tags": rng.sample(["bug", "p1", "p2", "backend", "ui", "infra"], 2),
        }
        rows.append(row)
        size += len(json.dumps(row, indent=2)) + 8
    return json.dumps({"query": "KeyError item", "total": len(rows), "results": rows}, indent=2)


class Counting:
    """The real tokenizer with a tally of what it was asked to tokenize."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner, self.name = inner, inner.name
        self.counts: list[int] = []
        self.bounded = 0

    def count(self, text: str) -> int:
        self.counts.append(len(text))
        return self.inner.count(text)

    def boundaries(self, text: str) -> list[int]:
        self.bounded += len(text)
        return self.inner.boundaries(text)


def tool(text: str) -> Message:
    return parse_message({"role": "tool", "tool_call_id": "call_1", "content": text}, 0)


def bench(name: str, make: Callable[[int], str], runs: int) -> None:
    tok = get_tokenizer(ROUTE.tokenizer)
    warm: list[float] = []
    cold: list[float] = []
    result = None
    for run in range(runs):
        message = tool(make(1000 + run))
        start = time.perf_counter()
        tok.count(message.text)  # the meter's count of the original
        priced = time.perf_counter()
        result = cap_message(message, CAP, ROUTE)
        done = time.perf_counter()
        warm.append((done - priced) * 1000)
        cold.append((done - start) * 1000)
    assert result is not None
    text = make(1)
    counting = Counting(tok)
    cut = cut_text(text, CAP, counting)
    assert cut is not None
    whole = sum(1 for n in counting.counts if n == len(text))
    candidates = sum(1 for n in counting.counts if 200 < n < len(text))
    print(
        f"{name:5} {len(text) / 1e6:.2f} MB, {tok.count(text):,} tokens -> {result.tokens:,} "
        f"(cap {CAP:,}, {result.tokens / CAP:.1%}), kind={result.kind}, "
        f"removed ~{result.removed_tokens:,}"
    )
    print(
        f"      warm: median {statistics.median(warm):.1f} ms (min {min(warm):.1f}, "
        f"max {max(warm):.1f}) | cold: median {statistics.median(cold):.1f} ms  [{runs} runs]"
    )
    print(
        f"      tokenizations: original counted {whole}x, {candidates} rendered candidates "
        f"priced, boundaries over {counting.bounded:,} chars "
        f"({counting.bounded / len(text):.1%} of the original)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    get_tokenizer(ROUTE.tokenizer).count("warm up the encoder")
    bench("text", log_output, args.runs)
    bench("json", json_output, args.runs)


if __name__ == "__main__":
    main()
