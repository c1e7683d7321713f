"""Big prompts of text no one has seen: routefit beside Portkey's gateway and LiteLLM's proxy.

    python bench/new_text.py                      # the matrix below, ~5 minutes on 2 cores
    python bench/new_text.py --quick              # 8k and 32k only, shorter phases
    python bench/new_text.py --targets routefit,portkey --sizes 32000 --kinds prose
    python bench/new_text.py --wire messages      # the same on the Messages wire, to a Claude route
    python bench/new_text.py --targets routefit,floor,portkey --upstream instant

An agent's every turn carries text the gateway has never counted: a new file, a tool's output.
Each request here is one user message holding a block of NEW text of ``size`` o200k tokens
placed at the ``start``, the ``middle`` or the ``end`` of 1,000 tokens of common text (the same
in every request), in one of four kinds: ``prose`` (common English words), ``code`` (Python),
``json`` (indented records, a tool's output) and ``cjk`` (Chinese characters and punctuation).

What makes the block new in every request: the load generator writes a serial number into it
every 100-300 characters (``@@NONCE@@``, a fresh value per request and a fresh prefix per
phase and target), so no span of it longer than that was ever sent before — no count cache, no
cached prefix, no anchor can price it; only counting it, or a bound that needs no count, can.
The sizes are measured with o200k on the body as sent (the serials included).

Per cell (placement × size × kind) the targets run one after another at c1 (the direct
simulator first; the others in an order that rotates from cell to cell, so no target always
runs right after another), each after a short warm-up: the figure is the target's p50 minus the
direct p50 of the same cell ("added"), and routefit's server CPU per request. ``--wire
messages`` sends each as an Anthropic Messages request to the simulator's Claude model (routefit's
``claude`` route: its tokenizer is not Claude's, so it prices through a learnt correction; Portkey
with its ``anthropic`` provider). One worker each,
the same simulator, the same load generator (bench/loadgen.py). Results: bench/results/
new_text.json and a Markdown table on stdout (what REPORT.md's issue-34 section shows). The
target ``floor`` is a bare pass-through on routefit's own stack (bench/floor_app.py): what any
proxy on uvicorn and aiohttp adds for the same body, so routefit's own work is what it adds over
the floor.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from procs import (
    UPSTREAM_HELP,
    UPSTREAMS,
    Server,
    Servers,
    anthropic_entry,
    openai_entry,
    portkey_headers,
    serve,
    worktree,
    write_yaml,
)
from proxy_load import BENCH_KEY, routefit_config, run_phase
from workloads import text

NONCE = "@@NONCE@@"
#: A serial as long as the ones sent (a phase's prefix and the load generator's 9 digits).
_SENT = "11ro123456-000000001"
SHARED_TOKENS = 1_000
PLACEMENTS = ("start", "middle", "end")
KINDS = ("prose", "code", "json", "cjk")
SIZES = (8_000, 32_000, 120_000)
#: The matrix: every placement and size for prose; the other kinds at 32k and the largest size,
#: new text first.
QUICK_SIZES = (8_000, 32_000)

_CJK = (
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学"
    "对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头"
    "面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向"
    "情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信"
)


def _numbered(units: list[str], every: int, mark: str) -> list[str]:
    """``units`` with ``mark`` (holding the nonce) after every ``every``-th one."""
    out: list[str] = []
    for i, unit in enumerate(units, 1):
        out.append(unit)
        if i % every == 0:
            out.append(mark)
    return out


def prose_units(n: int, rng: random.Random) -> list[str]:
    return [text(12, rng.randrange(1 << 30)) for _ in range(n)]


def code_units(n: int, rng: random.Random) -> list[str]:
    words = text(400, rng.randrange(1 << 30)).lower().replace(".", "").split()
    out = []
    for i in range(n):
        a, b, c, d = (rng.choice(words) for _ in range(4))
        k, m = rng.randrange(2, 999), rng.randrange(2, 99)
        out.append(
            f"def {a}_{b}_{i}(self, {c}, {d}=None):\n"
            f'    """{text(10, rng.randrange(1 << 30))}"""\n'
            f"    total = self.{b}.get({c}, {k})\n"
            f"    if total > {m} and {d} is not None:\n"
            f"        return [{d}, total, {k * m}]\n"
            f"    for item in {c}:\n"
            f"        total += len(item) * {m}\n"
            f"    return total\n"
        )
    return out


def json_units(n: int, rng: random.Random) -> list[dict[str, object]]:
    words = text(200, rng.randrange(1 << 30)).lower().replace(".", "").split()
    return [
        {
            "id": rng.randrange(10**8),
            "name": "-".join(rng.choices(words, k=2)),
            "tags": rng.choices(words, k=3),
            "score": round(rng.random() * 100, 3),
            "active": rng.random() < 0.5,
            "note": text(8, rng.randrange(1 << 30)),
            "rev": NONCE,
        }
        for _ in range(n)
    ]


def cjk_units(n: int, rng: random.Random) -> list[str]:
    return ["".join(rng.choices(_CJK, k=rng.randrange(12, 30))) + "。" for _ in range(n)]


def block(kind: str, units: int, seed: int) -> str:
    """``units`` units of ``kind`` with the nonce every 100-300 characters."""
    rng = random.Random(seed)
    if kind == "prose":
        return " ".join(_numbered(prose_units(units, rng), 2, f"Ref {NONCE}."))
    if kind == "code":
        return "\n".join(_numbered(code_units(units, rng), 1, f"# rev {NONCE}\n"))
    if kind == "json":
        return json.dumps(json_units(units, rng), indent=2, ensure_ascii=False)
    if kind == "cjk":
        return "".join(_numbered(cjk_units(units, rng), 4, f"（{NONCE}）"))
    raise ValueError(kind)


def _tokens(s: str) -> int:
    from pricing.tokenizers import get_tokenizer

    return get_tokenizer("o200k_base").count(s.replace(NONCE, _SENT))


def _content_tokens(payload: str) -> int:
    """o200k tokens of the user message's content as sent (a serial as long as a sent one)."""
    content = json.loads(payload)["messages"][-1]["content"]
    return _tokens(content)


def sized_block(kind: str, tokens: int, seed: int) -> str:
    """A block of about ``tokens`` o200k tokens (within 1%), serials included."""
    units = max(4, tokens // 40)
    for _ in range(8):
        n = _tokens(block(kind, units, seed))
        if abs(n - tokens) <= tokens // 100:
            break
        units = max(4, round(units * tokens / n))
    return block(kind, units, seed)


def body(kind: str, size: int, placement: str, wire: str = "chat") -> str:
    shared = text(int(SHARED_TOKENS / 1.08), 99)
    new = sized_block(kind, size, seed=zlib.crc32(f"{kind}{size}".encode()))
    half = shared.find(" ", len(shared) // 2)
    content = {
        "start": f"{new}\n\n{shared}",
        "middle": f"{shared[:half]}\n\n{new}\n\n{shared[half + 1 :]}",
        "end": f"{shared}\n\n{new}",
    }[placement]
    system = "You are a concise assistant."
    user = {"role": "user", "content": content + "\n\nSummarise the above in one sentence."}
    if wire == "messages":
        sent = {"model": "claude", "system": system, "messages": [user], "max_tokens": 64}
    else:
        sent = {
            "model": "gpt-4o",
            "messages": [{"role": "system", "content": system}, user],
            "max_tokens": 64,
        }
    return json.dumps(sent, ensure_ascii=False)


def cells(sizes: tuple[int, ...], kinds: tuple[str, ...]) -> list[tuple[str, int, str]]:
    """Every placement and size for prose; the other kinds new text first, at 32k and at the
    largest size (near the window, where no cheap bound proves a prompt)."""
    out = [("prose", s, p) for s in sizes for p in PLACEMENTS] if "prose" in kinds else []
    mid = 32_000 if 32_000 in sizes else sizes[0]
    for size in sorted({mid, max(sizes)}):
        out += [(k, size, "start") for k in kinds if k != "prose"]
    return out


#: Per wire: the path, routefit's alias and the upstream model the direct and Portkey requests
#: name, Portkey's provider and the simulator's key for it.
WIRES = {
    "chat": ("/v1/chat/completions", "gpt-4o", "gpt-4o", "openai", "sk-sim"),
    "messages": ("/v1/messages", "claude", "claude-sonnet-4-5", "anthropic", "sk-ant-sim"),
}
_ANTHROPIC = {"anthropic-version": "2023-06-01"}


def start(
    servers: Servers, name: str, sim: Server, litellm_venv: Path | None, base: Path | None = None
) -> Server:
    if name == "routefit":
        return servers.routefit(routefit_config(servers.dir / "rf.yaml", sim.base_url))
    if name == "base":
        assert base is not None
        return serve(servers, base, routefit_config(servers.dir / "base.yaml", sim.base_url), name)
    if name == "portkey":
        return servers.portkey()
    if name == "floor":
        return servers.floor(sim)
    if litellm_venv is None:
        raise RuntimeError("no LiteLLM venv")
    config = write_yaml(
        servers.dir / "ll.yaml",
        {
            "model_list": [
                openai_entry("gpt-4o", sim.base_url),
                anthropic_entry("claude", sim.base_url),
            ],
            "litellm_settings": {"telemetry": False},
            "general_settings": {"master_key": BENCH_KEY},
        },
    )
    return servers.litellm(litellm_venv, config)


def headers_for(name: str, sim: Server, wire: str = "chat") -> dict[str, str]:
    _, _, _, provider, key = WIRES[wire]
    extra = _ANTHROPIC if wire == "messages" else {}
    if name == "portkey":
        return {**portkey_headers(provider, sim.base_url + "/v1", key), **extra}
    if name == "direct":
        return {"x-api-key": key, **extra} if wire == "messages" else {}
    return {"Authorization": f"Bearer {BENCH_KEY}", **extra}


def payload_for(name: str, sent: str, wire: str) -> str:
    """The body a target is sent: the direct simulator and Portkey name the upstream model."""
    _, alias, upstream, _, _ = WIRES[wire]
    if name in ("direct", "portkey", "floor"):
        return sent.replace(f'"model": "{alias}"', f'"model": "{upstream}"', 1)
    return sent


def measure(
    url: str, payload: str, headers: dict[str, str], measured: dict[str, Server], quick: bool
) -> dict:
    duration, warmup = (1.5, 0.3) if quick else (3.0, 0.5)
    return run_phase(url, payload, headers, 1, False, duration, warmup, measured)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--targets", default="routefit,portkey,litellm")
    parser.add_argument("--sizes", help="comma-separated token counts (default 8000,32000,120000)")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--wire", choices=sorted(WIRES), default="chat")
    parser.add_argument("--upstream", choices=UPSTREAMS, default="sim", help=UPSTREAM_HELP)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "new_text.json")
    parser.add_argument(
        "--base",
        metavar="REV",
        help="also serve routefit at this revision (a temporary worktree, as compare_commits.py "
        "does): the target 'base', in the same cells, against the same upstream",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="replace only the measured cells in --out (a re-run of some cells)",
    )
    args = parser.parse_args()
    if args.upstream == "instant" and args.wire != "chat":
        parser.error("--upstream instant answers the chat wire only")
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else None
    sizes = sizes or (QUICK_SIZES if args.quick else SIZES)
    targets = [t for t in args.targets.split(",") if t]
    if args.base:
        targets.append("base")
    venv = None
    if "litellm" in targets:
        import litellm_env

        venv = litellm_env.ensure()
    plan = cells(sizes, tuple(args.kinds.split(",")))
    bodies = {cell: body(*cell, args.wire) for cell in plan}
    sent = {cell: _content_tokens(b) for cell, b in bodies.items()}
    rows: list[dict] = []
    with Servers() as servers, contextlib.ExitStack() as worktrees:
        base = (
            worktrees.enter_context(worktree(args.base, servers.dir / "base"))
            if args.base
            else None
        )
        sim = servers.upstream(args.upstream)
        running: dict[str, Server] = {}
        for name in targets:
            try:
                running[name] = start(servers, name, sim, venv, base)
            except RuntimeError as exc:
                print(f"{name}: not measured ({exc})", flush=True)
        for n, cell in enumerate(plan):
            kind, size, placement = cell
            order = list(running)
            order = order[n % len(order) :] + order[: n % len(order)] if order else []
            row: dict = {"kind": kind, "size": size, "placement": placement}
            row["body_tokens"] = sent[cell]
            for name in ["direct", *order]:
                server = running.get(name)
                base = sim.base_url if server is None else server.base_url
                tag = f"{n}{name[:2]}{time.monotonic_ns() % 10**6}-"
                payload = payload_for(name, bodies[cell].replace(NONCE, tag + NONCE), args.wire)
                measured = {"sim": sim} if server is None else {"sim": sim, "server": server}
                url = base + WIRES[args.wire][0]
                headers = headers_for(name, sim, args.wire)
                r = measure(url, payload, headers, measured, args.quick)
                ok = r["statuses"].get("200", 0) == r["requests"] and not r["errors"]
                row[name] = {
                    "p50_ms": r["p50_ms"],
                    "p90_ms": r["p90_ms"],
                    "requests": r["requests"],
                    "ok": ok,
                    "cpu_ms": r.get("server_cpu_ms_per_request"),
                    "failure": None if ok else (r["error_samples"][:1] or r["error_kinds"]),
                }
            rows.append(row)
            print(line(row, list(running)), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.update and args.out.is_file():
        again = {(r["kind"], r["size"], r["placement"]) for r in rows}
        old = json.loads(args.out.read_text())["rows"]
        kept = [r for r in old if (r["kind"], r["size"], r["placement"]) not in again]
        rows = sorted(kept + rows, key=lambda r: (r["kind"] != "prose", r["kind"], r["size"]))
    kept = {"targets": targets, "wire": args.wire, "upstream": args.upstream, "rows": rows}
    args.out.write_text(json.dumps(kept, indent=1))
    print()
    print(table(rows, [t for t in targets if any(t in r for r in rows)]))
    return 0


def added(row: dict, name: str) -> float | None:
    got = row.get(name)
    if not got or not got["ok"] or not row["direct"]["ok"]:
        return None
    return float(got["p50_ms"] - row["direct"]["p50_ms"])


def line(row: dict, targets: list[str]) -> str:
    parts = [f"{row['kind']:<5} {row['size']:>7} {row['placement']:<6}"]
    parts.append(f"direct {row['direct']['p50_ms']:7.2f}")
    for name in targets:
        a = added(row, name)
        parts.append(f"{name} +{a:7.2f}" if a is not None else f"{name} FAILED")
    return "  ".join(parts)


def table(rows: list[dict], targets: list[str]) -> str:
    head = "| new text | tokens sent | direct p50 | " + " | ".join(
        f"{t} added p50" for t in targets
    )
    ratio = "portkey" in targets and "routefit" in targets
    head += " | routefit CPU/request |" + (" routefit ÷ Portkey |" if ratio else "")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        cells_ = [
            f"{row['kind']} {row['size'] // 1000}k at the {row['placement']}",
            f"{row['body_tokens']:,}",
            f"{row['direct']['p50_ms']:.2f} ms",
        ]
        for name in targets:
            a = added(row, name)
            cells_.append(f"{a:.2f} ms" if a is not None else "failed")
        cpu = (row.get("routefit") or {}).get("cpu_ms")
        cells_.append(f"{cpu:.2f} ms" if cpu is not None else "")
        if "base" in targets:
            was = (row.get("base") or {}).get("cpu_ms")
            cells_[-1] += f" (base {was:.2f})" if was is not None else ""
        if ratio:
            r, p = added(row, "routefit"), added(row, "portkey")
            cells_.append(f"{r / p:.2f}×" if r is not None and p else "")
        out.append("| " + " | ".join(cells_) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
