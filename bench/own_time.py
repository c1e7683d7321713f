"""routefit's own time on big prompts of new text, two commits paired, on any client wire.

    python bench/own_time.py REV_A [--rev-b REV] [--wire messages] [--cells prose:32000,json:120000]

Where the provider's own time varies more than a gateway adds (the simulator counts a Claude or
Gemini prompt its own way: 12-230 ms at 8k-120k tokens, tens of ms apart run to run), the added
latency of bench/new_text.py is noise-bound. This reads what routefit itself spent from its
request log instead (the ``routefit.access`` record of each request): the fit phase before
forwarding, and the whole request less the provider's time (``latency_ms - upstream_ms``: what
the client waited for routefit, the count it held the answer for included).

Both revisions serve one simulator (``REV_A`` from a temporary git worktree, B the working tree
unless ``--rev-b``), one worker each, with an OpenAI, a Claude (``anthropic/``) and a native
Gemini route. Per cell (bench/new_text.py's bodies: a kind of new text, its size, new text
first) each server gets one request in turn, ``--warm`` of them first (a route learns the kind
of text from its first samples) and ``--requests`` measured; the report is each figure's p50.

Read it for differences of several ms, not fractions of one: on two cores, one server's count
of the prompt it just answered (a thread, after the answer) overlaps the other's request. A JSON
prompt of 120k tokens on the chat route, sampled and forwarded after 6.6 ms when sent alone,
shows a fit of 25 ms here in both columns; a 32k prompt of prose, which both revisions prove
alike by its bound (1.3 ms of own time each, sent alone), showed 1.5 against 4-7 ms in two runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from new_text import NONCE, body
from procs import Server, Servers, anthropic_entry, checkouts, openai_entry, serve, write_yaml
from proxy_load import BENCH_KEY

#: Per wire: the path a request goes to and the headers it carries (the bench team's key).
WIRES = {
    "chat": ("/v1/chat/completions", {"Authorization": f"Bearer {BENCH_KEY}"}),
    "messages": ("/v1/messages", {"x-api-key": BENCH_KEY, "anthropic-version": "2023-06-01"}),
    "gemini": ("/v1beta/models/gemini:generateContent", {"x-goog-api-key": BENCH_KEY}),
}


def config(path: Path, sim_url: str) -> Path:
    gemini = {
        "model_name": "gemini",
        "litellm_params": {
            "model": "gemini/gemini-sim",
            "api_base": f"{sim_url}/v1beta",
            "api_key": "sk-google-sim",
        },
        "model_info": {"max_input_tokens": 200_000, "max_output_tokens": 8192},
    }
    return write_yaml(
        path,
        {
            "model_list": [
                openai_entry("gpt-4o", sim_url),
                anthropic_entry("claude", sim_url),
                gemini,
            ],
            "routefit_settings": {
                "store_path": ":memory:",
                "teams": [{"id": "bench", "keys": [BENCH_KEY]}],
            },
        },
    )


def payload(wire: str, kind: str, size: int) -> str:
    """bench/new_text.py's body for the cell, on ``wire`` (new text first)."""
    if wire != "gemini":
        return body(kind, size, "start", wire)
    sent = json.loads(body(kind, size, "start", "messages"))
    return json.dumps(
        {
            "systemInstruction": {"parts": [{"text": sent["system"]}]},
            "contents": [{"role": "user", "parts": [{"text": sent["messages"][0]["content"]}]}],
            "generationConfig": {"maxOutputTokens": 64},
        },
        ensure_ascii=False,
    )


def records(server: Server, after: int) -> tuple[list[dict], int]:
    """The request records ``server`` logged after its first ``after`` log lines."""
    lines = server.log().splitlines()
    found = [
        json.loads(line[line.index("{") :]) for line in lines[after:] if '"kind":"serve"' in line
    ]
    return found, len(lines)


def summary(found: list[dict]) -> dict:
    served = [r for r in found if r["status"] == 200]
    fit = [p[2] for r in served for p in r["phases"] if p[0] == "fit"]
    own = [r["latency_ms"] - r["upstream_ms"] for r in served if r["upstream_ms"] is not None]
    return {
        "requests": len(found),
        "refused": len(found) - len(served),
        "fit_p50_ms": statistics.median(fit) if fit else None,
        "own_p50_ms": statistics.median(own) if own else None,
    }


def cell(
    client: httpx.Client, pair: list[Server], wire: str, kind: str, size: int, warm: int, n: int
) -> dict:
    path, headers = WIRES[wire]
    sent = payload(wire, kind, size)
    out = {}
    for i in range(warm + n):
        if i == warm:
            marks = {s.name: len(s.log().splitlines()) for s in pair}
        for server in pair if i % 2 else pair[::-1]:
            tag = f"{server.name}{i}-{time.monotonic_ns() % 10**6}-"
            client.post(
                server.base_url + path, content=sent.replace(NONCE, tag + NONCE), headers=headers
            )
    for server in pair:
        out[server.name] = summary(records(server, marks[server.name])[0])
    return out


def line(wire: str, kind: str, size: int, got: dict) -> str:
    def figures(name: str) -> str:
        s = got[name]
        if s["fit_p50_ms"] is None:
            return f"{name}: refused {s['refused']} of {s['requests']}"
        refused = f" (refused {s['refused']})" if s["refused"] else ""
        return f"{name}: fit {s['fit_p50_ms']:6.2f} ms, own {s['own_p50_ms']:6.2f} ms{refused}"

    return f"{wire:8} {kind:5} {size:>7}  " + " | ".join(figures(n) for n in ("A", "B"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev_a")
    parser.add_argument("--rev-b", default=None, help="default: the working tree")
    parser.add_argument("--wire", choices=sorted(WIRES), default="messages")
    parser.add_argument("--cells", default="prose:8000,prose:32000,json:32000,prose:120000")
    parser.add_argument("--warm", type=int, default=6)
    parser.add_argument("--requests", type=int, default=14)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cells = [(k, int(s)) for k, s in (c.split(":") for c in args.cells.split(","))]
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        checkouts(args.rev_a, args.rev_b, Path(tmp)) as (a_src, b_src),
        Servers() as servers,
        httpx.Client(timeout=300) as client,
    ):
        sim = servers.sim()
        cfg = config(servers.dir / "routefit.yaml", sim.base_url)
        pair = [
            serve(servers, src, cfg, name, "info") for src, name in ((a_src, "A"), (b_src, "B"))
        ]
        for kind, size in cells:
            got = cell(client, pair, args.wire, kind, size, args.warm, args.requests)
            rows.append({"wire": args.wire, "kind": kind, "size": size, **got})
            print(line(args.wire, kind, size, got), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"a": args.rev_a, "b": args.rev_b, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
