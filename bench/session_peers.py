"""A long agent session's next turn: routefit beside Portkey's gateway, on the chat or the
Messages wire.

    python bench/session_peers.py                    # both wires, 3 rounds (~2 minutes)
    python bench/session_peers.py --wire messages --rounds 5

What an agent sends every turn is its whole session again: ~400 messages (200 tool calls and
their outputs, ~40k tokens), all seen before but the new user turn at the end, which carries a
per-request nonce (bench/workloads.py ``openai_session`` / ``anthropic_session``, the shape
Claude Code sends). routefit prices, fits and anchors all of it, every turn; Portkey parses and
forwards it. Per round the direct simulator, routefit and Portkey (one worker each, the same
simulator and load generator) run one after another at c1; the figure is each target's median
p50 over the rounds less the direct median ("added"), with each server's CPU per request.
Messages: routefit's ``claude`` route (``anthropic/``, its tokenizer not Claude's: priced
through a learnt correction), Portkey's ``anthropic`` provider; the simulator counts a Claude
prompt its own slow way, so the direct figure there is large and noisy: read several rounds.
Results: bench/results/session_peers.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from new_text import WIRES, headers_for, payload_for, start
from procs import Servers
from proxy_load import run_phase
from workloads import anthropic_session, openai_session

TARGETS = ("direct", "routefit", "portkey")
BODIES = {"chat": openai_session, "messages": anthropic_session}


def measure(wire: str, rounds: int, seconds: float) -> dict[str, dict[str, object]]:
    path, alias, _, _, _ = WIRES[wire]
    seen: dict[str, list[tuple[float, float | None, bool]]] = {t: [] for t in TARGETS}
    with Servers() as servers:
        sim = servers.sim()
        running = {name: start(servers, name, sim, None) for name in TARGETS[1:]}
        for _ in range(rounds):
            for name in TARGETS:
                server = running.get(name)
                base = sim.base_url if server is None else server.base_url
                payload = payload_for(name, BODIES[wire](alias), wire)
                measured = {"sim": sim} if server is None else {"sim": sim, "server": server}
                headers = headers_for(name, sim, wire)
                r = run_phase(base + path, payload, headers, 1, False, seconds, 0.5, measured)
                ok = r["statuses"].get("200", 0) == r["requests"] and not r["errors"]
                seen[name].append((r["p50_ms"], r.get("server_cpu_ms_per_request"), ok))
    direct = statistics.median(p for p, _, _ in seen["direct"])
    out: dict[str, dict[str, object]] = {"direct": {"p50_ms": round(direct, 2)}}
    for name in TARGETS[1:]:
        rows = seen[name]
        cpu = [c for _, c, _ in rows if c is not None]
        out[name] = {
            "added_p50_ms": round(statistics.median(p for p, _, _ in rows) - direct, 2),
            "cpu_ms": round(statistics.median(cpu), 2) if cpu else None,
            "ok": all(ok for _, _, ok in rows),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wire", choices=sorted(BODIES), action="append")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "session_peers.json")
    args = parser.parse_args()
    results = {}
    for wire in args.wire or sorted(BODIES):
        results[wire] = got = measure(wire, args.rounds, args.seconds)
        rf, pk = got["routefit"], got["portkey"]
        ratio = ""
        if rf["ok"] and pk["ok"] and float(str(pk["added_p50_ms"])) > 0:
            ratio = f" = {float(str(rf['added_p50_ms'])) / float(str(pk['added_p50_ms'])):.2f}×"
        print(
            f"{wire}: direct {got['direct']['p50_ms']} ms; added p50 routefit "
            f"{rf['added_p50_ms']} ms (CPU {rf['cpu_ms']}), Portkey {pk['added_p50_ms']} ms "
            f"(CPU {pk['cpu_ms']}){ratio}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
