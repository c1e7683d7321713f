"""The time each client wire adds at c1, measured interleaved (run as its own process).

    python bench/wire_overhead.py SPEC.json  → one JSON object on stdout

Why interleaved: the machine is shared and its speed drifts over seconds; phases measured one
after another (chat, then messages, then responses) put that drift into the differences between
wires. Here one client at c1 cycles through every target request by request — each wire straight
to the simulator's endpoint for it, and through routefit — so every target sees the same
conditions, and "added" for a wire is its p50 through routefit minus its p50 direct.

The order is shuffled every cycle (seeded): a server's work after it answered (calibration
writes, budget settlement) overlaps whatever request comes next, so a fixed order would charge
one target's background work to the target after it.

SPEC: ``targets`` (a list of ``{"name", "url", "body", "headers"}``; bodies may contain
``@@NONCE@@``), ``seconds`` (measurement), ``warmup`` (seconds, discarded). Output: per target
``p50_ms`` / ``p90_ms`` / ``mean_ms`` / ``requests`` / ``statuses``.
"""

from __future__ import annotations

import random
import sys
import time
from itertools import count
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen import NONCE, Conn, build_request, percentile, run_spec_file


async def run(spec: dict) -> dict:
    targets = []
    for t in spec["targets"]:
        host, port, head, body = build_request(t["url"], t["body"].encode(), t.get("headers", {}))
        targets.append((t["name"], Conn(host, port), head, body))
    serial = count(1)
    latencies: dict[str, list[float]] = {name: [] for name, *_ in targets}
    statuses: dict[str, dict[str, int]] = {name: {} for name, *_ in targets}
    samples: dict[str, str] = {}
    start = time.perf_counter()
    measure_from = start + float(spec.get("warmup", 1.0))
    stop_at = measure_from + float(spec["seconds"])
    order = random.Random(0)
    try:
        while time.perf_counter() < stop_at:
            order.shuffle(targets)
            for name, conn, head, body in targets:
                b = body.replace(NONCE, b"%09d" % next(serial)) if NONCE in body else body
                data = head + b"Content-Length: %d\r\n\r\n" % len(b) + b
                t0 = time.perf_counter()
                status, reply, _ = await conn.request(data)
                t1 = time.perf_counter()
                if status != 200 and name not in samples:
                    samples[name] = reply[:400].decode("utf-8", "replace")
                if t0 < measure_from:
                    continue
                statuses[name][str(status)] = statuses[name].get(str(status), 0) + 1
                latencies[name].append(t1 - t0)
    finally:
        for _, conn, *_ in targets:
            conn.close()
    out: dict = {}
    for name, values in latencies.items():
        values.sort()
        out[name] = {
            "requests": len(values),
            "statuses": statuses[name],
            "p50_ms": percentile(values, 0.50) * 1e3,
            "p90_ms": percentile(values, 0.90) * 1e3,
            "mean_ms": sum(values) / max(1, len(values)) * 1e3,
            "error_sample": samples.get(name),
        }
    return out


def main() -> int:
    return run_spec_file(run)


if __name__ == "__main__":
    raise SystemExit(main())
