"""bench/REPORT.md and bench/plots/*.png from the results of one run."""

from __future__ import annotations

from pathlib import Path

import fit_scaling
from startup import ANTHROPIC, LITELLM_ONLY

PROXY_GOALS = {
    "added_p50": 1 / 8,  # routefit's added p50 <= 1/8 of LiteLLM's (OpenAI path)
    "throughput": 6.0,  # routefit >= 6x LiteLLM's req/s at concurrency 16 (OpenAI path)
    "translated_throughput": 2.0,  # >= 2x on the litellm-translated path
    "startup": 1 / 4,
    "idle_rss": 1 / 3,
    "cache_hit": 0.80,
}


def _mark(ok: bool | None) -> str:
    return "—" if ok is None else ("**met**" if ok else "**missed**")


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "n/a" if x is None else format(x, fmt)


# -- plots ----------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_proxy(load: dict, path: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    targets = ("direct", "routefit", "litellm", "portkey")
    colors = {
        "direct": "#999999",
        "routefit": "#1f77b4",
        "litellm": "#d62728",
        "portkey": "#2ca02c",
    }
    for ax, (path_name, title) in zip(
        axes[:2],
        (("openai", "OpenAI-compatible path"), ("translated", "translated path")),
        strict=True,
    ):
        phases = list(load[path_name]["direct"])
        width = 0.2
        for k, t in enumerate(targets):
            data = load[path_name].get(t, {})
            ax.bar(
                [i + (k - 1.5) * width for i in range(len(phases))],
                [data.get(p, {}).get("rps", 0) for p in phases],
                width,
                label=t,
                color=colors[t],
            )
        ax.set_xticks(range(len(phases)))
        ax.set_xticklabels(phases, rotation=20, fontsize=8)
        ax.set_ylabel("requests/s (one worker)")
        ax.set_title(f"throughput — {title}")
        ax.legend(fontsize=8)
    ax = axes[2]
    rows = load["summary"]["openai"]
    phases = list(rows)
    width = 0.27
    for k, t in enumerate(("routefit", "litellm", "portkey")):
        ax.bar(
            [i + (k - 1) * width for i in range(len(phases))],
            # a target that failed the phase (Portkey's streams) has no bar
            [
                max(rows[p].get(f"{t}_added_p50_ms", 0), 0.01) if rows[p].get(f"{t}_ok") else 0
                for p in phases
            ],
            width,
            label=t,
            color=colors[t],
        )
    ax.set_yscale("log")
    ax.set_xticks(range(len(phases)))
    ax.set_xticklabels(phases, rotation=20, fontsize=8)
    ax.set_ylabel("added p50 latency vs direct, ms (log)")
    ax.set_title("added latency — OpenAI-compatible path")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sessions(sessions: dict, path: Path) -> None:
    plt = _plt()
    strategies = list(sessions["strategies"])
    s = sessions["strategies"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].bar(strategies, [s[k]["cache_hit_ratio"] * 100 for k in strategies], color="#1f77b4")
    axes[0].axhline(80, color="k", ls="--", lw=1, label="goal 80%")
    axes[0].set_ylabel("provider cache-hit ratio, %")
    axes[0].legend(fontsize=8)
    width = 0.4
    xs = range(len(strategies))
    axes[1].bar(
        [x - width / 2 for x in xs],
        [s[k]["overflow"] for k in strategies],
        width,
        label="overflow (400)",
        color="#d62728",
    )
    axes[1].bar(
        [x + width / 2 for x in xs],
        [s[k]["invalid"] for k in strategies],
        width,
        label="invalid (orphaned tool result)",
        color="#ff7f0e",
    )
    axes[1].set_xticks(list(xs))
    axes[1].set_xticklabels(strategies)
    axes[1].set_ylabel("rejected requests")
    axes[1].legend(fontsize=8)
    axes[2].bar(
        strategies,
        [s[k]["billed_input_tokens"] / max(1, s[k]["accepted"]) for k in strategies],
        color="#2ca02c",
    )
    axes[2].set_ylabel("billed input tokens per accepted request\n(cached at 10%)")
    fig.suptitle(
        f"long agent sessions on an {sessions['window']:,}-token window "
        f"({sessions['sessions']} sessions, {sum(sessions['model_calls_per_session'])} model calls)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_accuracy(acc: dict, path: Path) -> None:
    plt = _plt()
    routes = list(acc["routes"])
    methods = ("raw", "calibrated", "anchored", "litellm_token_counter")
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.2))
    width = 0.2
    for k, m in enumerate(methods):
        xs = [i + (k - 1.5) * width for i in range(len(routes))]
        axes[0].bar(
            xs, [acc["routes"][r][m].get("mean_abs_pct", 0) for r in routes], width, label=m
        )
        axes[1].bar(
            xs, [acc["routes"][r][m].get("worst_under_pct", 0) for r in routes], width, label=m
        )
    for ax, label in zip(axes, ("mean |error|, %", "worst under-estimate, %"), strict=True):
        ax.set_xticks(range(len(routes)))
        ax.set_xticklabels(routes)
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("prompt-size estimate vs the provider's usage.prompt_tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- markdown -------------------------------------------------------------------------------


def _proxy_section(load: dict, lines: list[str], goals: list[tuple[str, str, str]]) -> None:
    so = load["summary"]["openai"]
    st = load["summary"]["translated"]
    lines += [
        "## 1. Proxy overhead and throughput",
        "",
        f"One worker each; the load generator (bench/loadgen.py, a separate process, raw HTTP/1.1 "
        f"keep-alive over asyncio) runs {load['duration_s']:g} s per phase after "
        f"{load['warmup_s']:g} s of warm-up; every request carries a unique nonce (no cache in "
        "routefit or the simulator is hit by repetition). *Added* latency = the target's "
        "percentile minus the direct percentile in the same phase. CPU = the server process's "
        "user+system time (/proc) over the phase, per request.",
        "",
    ]
    for title, rows in (
        ("OpenAI-compatible path (`openai/gpt-4o`)", so),
        ("litellm-translated path (`anthropic/claude-sonnet-4-5`)", st),
    ):
        lines += [
            f"### {title}",
            "",
            "| phase | direct req/s | routefit req/s | LiteLLM req/s | routefit ÷ LiteLLM "
            "| added p50 ms routefit / LiteLLM | added p99 ms routefit / LiteLLM "
            "| CPU ms/req routefit / LiteLLM |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for phase, r in rows.items():
            lines.append(
                f"| {phase} | {r['direct_rps']:.0f} | {r.get('routefit_rps', 0):.0f} | "
                f"{r.get('litellm_rps', 0):.0f} | {_f(r.get('throughput_ratio'))}× | "
                f"{_f(r.get('routefit_added_p50_ms'))} / {_f(r.get('litellm_added_p50_ms'))} | "
                f"{_f(r.get('routefit_added_p99_ms'))} / {_f(r.get('litellm_added_p99_ms'))} | "
                f"{_f(r.get('routefit_cpu_ms_per_request'))} / "
                f"{_f(r.get('litellm_cpu_ms_per_request'))} |"
            )
        lines.append("")
    failed = [
        f"{path}/{t}/{phase}"
        for path in ("openai", "translated")
        for t, phases in load[path].items()
        for phase, r in phases.items()
        if r["errors"] or r["statuses"].get("200", 0) != r["requests"]
    ]
    lines.append(
        "Every request in every phase answered 200 with a complete body."
        if not failed
        else f"**Phases with failed requests:** {', '.join(failed)} (see results/proxy_load.json)."
    )
    lines += ["", "![proxy throughput and latency](plots/proxy.png)", ""]
    c1, c16, t16 = so["small c1"], so["small c16"], st["small c16"]
    ratio = c1.get("added_p50_ratio")
    goals.append(
        (
            "added p50 latency ≤ 1/8 of LiteLLM's (OpenAI path, small c1)",
            f"{_f(c1['routefit_added_p50_ms'])} ms vs {_f(c1['litellm_added_p50_ms'])} ms = "
            f"{_f(ratio, '.3f')}",
            _mark(ratio is not None and ratio <= PROXY_GOALS["added_p50"]),
        )
    )
    goals.append(
        (
            "throughput ≥ 6× LiteLLM's at concurrency 16 (OpenAI path)",
            f"{c16['routefit_rps']:.0f} vs {c16['litellm_rps']:.0f} req/s = "
            f"{_f(c16.get('throughput_ratio'))}×",
            _mark(c16.get("throughput_ratio", 0) >= PROXY_GOALS["throughput"]),
        )
    )
    goals.append(
        (
            "throughput ≥ 2× LiteLLM's at concurrency 16 (translated path)",
            f"{t16['routefit_rps']:.0f} vs {t16['litellm_rps']:.0f} req/s = "
            f"{_f(t16.get('throughput_ratio'))}×",
            _mark(t16.get("throughput_ratio", 0) >= PROXY_GOALS["translated_throughput"]),
        )
    )
    _issue22_goals(load, lines, goals)


def _issue22_goals(load: dict, lines: list[str], goals: list[tuple[str, str, str]]) -> None:
    """Issue 22: ahead of Portkey and LiteLLM on every phase; the translated path's targets;
    the other client wires within 0.3 ms of chat."""
    so, st = load["summary"]["openai"], load["summary"]["translated"]
    lines += [
        "### Beside Portkey's gateway",
        "",
        "| path | phase | routefit added p50 ms | Portkey added p50 ms | routefit req/s "
        "| Portkey req/s | Portkey answered |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for name, rows in (("OpenAI", so), ("translated", st)):
        for phase, r in rows.items():
            if "portkey_rps" not in r:
                continue
            ok = "all 200" if r.get("portkey_ok") else "**failed** (see results)"
            lines.append(
                f"| {name} | {phase} | {_f(r.get('routefit_added_p50_ms'))} | "
                f"{_f(r.get('portkey_added_p50_ms'))} | {r.get('routefit_rps', 0):.0f} | "
                f"{r.get('portkey_rps', 0):.0f} | {ok} |"
            )
    lines.append("")
    for phase, r in so.items():
        c1 = phase.endswith("c1")
        mine = r.get("routefit_added_p50_ms") if c1 else r.get("routefit_rps")
        others = [
            (t, r.get(f"{t}_added_p50_ms") if c1 else r.get(f"{t}_rps"))
            for t in ("portkey", "litellm")
            if r.get(f"{t}_ok")
        ]
        if mine is None or not others:
            continue
        ahead = all((mine <= v) if c1 else (mine >= v) for _, v in others if v is not None)
        unit = "added p50 ms" if c1 else "req/s"
        figures = ", ".join(f"{t} {_f(v)}" for t, v in others)
        goals.append(
            (
                f"issue 22: ahead on {phase} (OpenAI path, {unit}; where the peer answers)",
                f"routefit {_f(mine)}; {figures}",
                _mark(ahead),
            )
        )
    wires = load["summary"].get("wires", {})
    if wires:
        lines += [
            "### Client wires at c1 (each on a route that speaks it natively)",
            "",
            "Chat and Responses to the OpenAI route, Messages to the Anthropic route; *added* is "
            "against the simulator's own endpoint for that wire. One client at c1 cycles through "
            "every wire, direct and through routefit, request by request (bench/wire_overhead.py)"
            ", so the machine's drift lands on all of them alike. Responses is like-for-like with "
            "chat at `store: false`; `store: true` (the API's default) also writes a stored "
            "response per request, a feature, shown beside it and not held to the goal.",
            "",
            "| wire | routefit p50 ms | added p50 ms | vs chat ms |",
            "|---|---:|---:|---:|",
        ]
        for phase, r in wires.items():
            if r.get("absent"):
                lines.append(f"| {phase} | not served | | |")
                continue
            lines.append(
                f"| {phase} | {_f(r['p50_ms'])} | {_f(r.get('added_p50_ms'))} | "
                f"{_f(r.get('vs_chat_ms'))} |"
            )
        lines.append("")
    lines += [
        "Before issue 22's translated-path work (its recorded run): the litellm-translated path "
        "added 5.9 ms at c1 and did 2.4× LiteLLM's throughput at c16; idle RSS with a litellm "
        "route was 197 MiB (117 without). routefit now translates chat ↔ Anthropic Messages "
        "itself over its aiohttp client and imports litellm only for routes or requests its "
        "mapping does not cover.",
        "",
    ]
    c1, c16 = st.get("small c1", {}), st.get("small c16", {})
    if "routefit_added_p50_ms" in c1:
        goals.append(
            (
                "issue 22: litellm-translated path ≤ 2.5 ms added at c1",
                f"{_f(c1['routefit_added_p50_ms'])} ms",
                _mark(c1["routefit_added_p50_ms"] <= 2.5),
            )
        )
    if c16.get("throughput_ratio") is not None:
        goals.append(
            (
                "issue 22: litellm-translated path ≥ 3× LiteLLM's throughput at c16",
                f"{_f(c16['throughput_ratio'])}×",
                _mark(c16["throughput_ratio"] >= 3.0),
            )
        )
    for phase, r in load["summary"].get("wires", {}).items():
        if phase.startswith("chat") or "store=true" in phase:
            continue
        goals.append(
            (
                f"issue 22: {phase} within 0.3 ms of the chat path",
                "not served yet" if r.get("absent") else f"{r['vs_chat_ms']:+.2f} ms vs chat",
                "—" if r.get("absent") else _mark(r["vs_chat_ms"] <= 0.3),
            )
        )


def _startup_section(st: dict, load: dict, lines: list[str], goals: list) -> None:
    servers = st["servers"]
    lines += [
        "## 2. Start-up and memory",
        "",
        f"Median of {st['repetitions']} cold starts each: launch → first 200 on the readiness "
        "endpoint (`/readyz`; LiteLLM `/health/readiness`), idle RSS of the process tree 1 s "
        "after ready (for routefit, after litellm has loaded too when a route needs it: "
        "`/readyz` does not wait for it), then the first two proxied requests and the RSS "
        "after them.",
        "",
        "| server | ready s | idle RSS MiB | RSS after 2 requests MiB | first request ms | "
        "second request ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in servers.items():
        m = s["median"]
        after = m.get("after_requests_rss_mib")
        lines.append(
            f"| {name} | {m['ready_s']:.2f} | {m['idle_rss_mib']:.0f} | "
            f"{'—' if after is None else f'{after:.0f}'} | "
            f"{m['first_request_ms']:.0f} | {m['second_request_ms']:.1f} |"
        )
    mem = load.get("memory", {})
    if mem:
        lines += [
            "",
            "RSS around the load test (section 1 config: one OpenAI route and one "
            "`anthropic/` route):",
            "",
            "| server | idle MiB | after the load phases MiB |",
            "|---|---:|---:|",
        ]
        for name, m in mem.items():
            lines.append(f"| {name} | {m['idle_rss_mib']:.0f} | {m['loaded_rss_mib']:.0f} |")
    lines.append("")
    ll = servers["litellm proxy"]["median"]
    names = (
        "routefit (OpenAI routes only)",
        ANTHROPIC,
        LITELLM_ONLY,
        "routefit (+ a litellm route)",
    )
    for name in names:
        if name not in servers:
            continue
        m = servers[name]["median"]
        r = m["ready_s"] / ll["ready_s"]
        goals.append(
            (
                f"start-up ≤ 1/4 of LiteLLM's — {name}",
                f"{m['ready_s']:.2f} s vs {ll['ready_s']:.2f} s = {r:.2f}",
                _mark(r <= PROXY_GOALS["startup"]),
            )
        )
        r = m["idle_rss_mib"] / ll["idle_rss_mib"]
        goals.append(
            (
                f"idle RSS ≤ 1/3 of LiteLLM's — {name}",
                f"{m['idle_rss_mib']:.0f} vs {ll['idle_rss_mib']:.0f} MiB = {r:.2f}",
                _mark(r <= PROXY_GOALS["idle_rss"]),
            )
        )
    mixed_name = ANTHROPIC if ANTHROPIC in servers else "routefit (+ a litellm route)"
    mixed = servers[mixed_name]["median"]["idle_rss_mib"]
    after = servers[mixed_name]["median"].get("after_requests_rss_mib")
    goals.append(
        (
            "issue 22: idle RSS with a litellm route (`anthropic/claude-…`) ≤ 130 MiB",
            f"{mixed:.0f} MiB" + (f" ({after:.0f} after the first requests)" if after else ""),
            _mark(mixed <= 130),
        )
    )
    only = servers.get(LITELLM_ONLY, {}).get("median", {}).get("idle_rss_mib")
    if only:
        goals.append(
            (
                "issue 22: the same with a route only litellm serves (`gemini/…`; "
                "`import litellm` alone is ~150 MiB, see proxy/transports/litellm.py)",
                f"{only:.0f} MiB",
                _mark(only <= 130),
            )
        )


def _fit_section(fs: dict, lines: list[str], goals: list) -> None:
    lines += [
        "## 3. Pricing and fitting cost",
        "",
        "In-process `pricing.meter.measure` / `strategies.fit.fit` on the `gpt-4o` route; each "
        "point in a fresh process (empty count and probe caches), medians of 3 variants. "
        "*cold*: the conversation's content never seen; *warm*: the same conversation plus one "
        "new turn (~100-token reply + ~100-token user message), everything earlier priced.",
        "",
        "| sweep | n | messages | prompt tokens | parse ms | cold measure ms | warm measure ms "
        "| warm fit ms | fit actions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in fs["points"]:
        lines.append(
            f"| {p['kind']} | {p['n']:,} | {p['messages']:,} | {p['tokens']:,} | "
            f"{p['parse_ms']:.2f} | {p['cold_measure_ms']:.2f} | {p['warm_measure_ms']:.2f} | "
            f"{p['warm_fit_ms']:.2f} | {p['fit_actions']} |"
        )
    lines += ["", "![pricing cost](plots/fit_scaling.png)", ""]
    t = fs["summary"].get("tokens")
    if t:
        ok = t["warm_growth"] <= t["history_growth"] / 10
        goals.append(
            (
                "warm pricing cost tracks the new turn, not the history (tokens sweep)",
                f"history ×{t['history_growth']:.0f} → cold ×{t['cold_growth']:.0f}, "
                f"warm ×{t['warm_growth']:.1f}",
                _mark(ok),
            )
        )
    m = fs["summary"].get("messages")
    if m:
        big = [p for p in fs["points"] if p["kind"] == "messages"][-1]
        per = big["warm_measure_ms"] / big["messages"] * 1e3
        goals.append(
            (
                "… per message (messages sweep)",
                f"history ×{m['history_growth']:.0f} → cold ×{m['cold_growth']:.0f}, "
                f"warm ×{m['warm_growth']:.1f}: a warm re-price still costs ~{per:.1f} µs per "
                f"earlier message ({big['warm_measure_ms']:.1f} ms at {big['messages']:,})",
                "**partly**" if m["warm_growth"] > m["history_growth"] / 10 else _mark(True),
            )
        )
    i = fs["summary"].get("images")
    if i:
        big = [p for p in fs["points"] if p["kind"] == "images"][-1]
        per = big["warm_measure_ms"] / max(1, big["n"]) * 1e3
        goals.append(
            (
                "… per image (images sweep)",
                f"warm/cold at {big['n']} images {i['warm_over_cold_at_largest']:.2f}: an "
                f"already-probed image still costs ~{per:.0f} µs per re-price",
                "**partly**" if i["warm_over_cold_at_largest"] > 0.25 else _mark(True),
            )
        )


def _accuracy_section(acc: dict, lines: list[str]) -> None:
    lines += [
        "## 4. Estimation accuracy",
        "",
        f"Per route: {acc['train']} training requests, then {acc['test']} new test requests "
        f"after the calibration refresh, then {acc['sessions']} sessions of {acc['turns']} "
        "turns. Error = (estimate − usage.prompt_tokens) / usage.prompt_tokens; negative = "
        "under-estimate (the side that overflows).",
        "",
        "| route | method | n | mean abs error % | p95 abs % | worst under % | worst over % "
        "| share under |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for route, methods in acc["routes"].items():
        for method, e in methods.items():
            if not e.get("n"):
                continue
            lines.append(
                f"| {route} | {method} | {e['n']} | {e['mean_abs_pct']:.2f} | "
                f"{e['p95_abs_pct']:.2f} | {e['worst_under_pct']:.2f} | "
                f"{e['worst_over_pct']:.2f} | {e['under_share']:.0%} |"
            )
    lines += ["", "![estimation accuracy](plots/accuracy.png)", ""]
    if acc.get("models"):
        _models_rows(acc["models"], lines)


def _models_rows(mo: dict, lines: list[str]) -> None:
    """Section 4b: the same request streams under each model of the bias (before / after)."""
    models = mo["models"]
    lines += [
        "### 4b. Models of the bias, before and after (issue 18)",
        "",
        "Replayed in-process (bench/accuracy_models.py): routefit's meter against the "
        "simulator's counting rules, calibration refitted after every request under each model "
        "(`CalibrationPolicy.model`): raw = no calibration; one-factor = the calibration before "
        "issue 18; classes = per-class weights and per-message overhead; features = classes "
        "plus per-prompt overhead and per-character weights, relative errors (now). Cells: p95 "
        "abs error % / worst under-estimate %, after 30 requests. Goal: ≤ 3% / ≥ −1%.",
        "",
        "| scenario | " + " | ".join(models) + " |",
        "|---|" + "---:|" * len(models),
    ]
    for kind, label in (("unanchored", "unanchored"), ("sessions", "anchored sessions")):
        for alias, row in mo[kind].items():
            cells = [
                f"{row[m]['p95_abs_pct']:.1f} / {row[m]['worst_under_pct']:.1f}" for m in models
            ]
            lines.append(f"| {alias}, {label} | " + " | ".join(cells) + " |")
    for alias, row in mo["poisoning"].items():
        cells = [
            f"{row[m]['p95_abs_pct']:.1f} / {row[m]['worst_under_pct']:.1f} "
            f"(text ×{row[m]['text_factor']})"
            for m in models
        ]
        lines.append(f"| poisoning {alias}: plain ~8k prompt | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Poisoning: 11 requests with 1-3 URL images of unknown size (URL sizing off), then plain "
        "~8k-token prompts. On `gpt-4o-mini` / `gpt-4o` the meter prices such an image at the "
        "rule's worst case (above the provider's count); `gpt-4o-mini~flat` is the same provider "
        "behind a vision rule routefit does not know (a 1,600-token stand-in, far below it).",
        "",
    ]


def _sessions_section(se: dict, lines: list[str], goals: list) -> None:
    lines += [
        "## 5. Long agent sessions",
        "",
        f"{se['sessions']} deterministic tool-heavy agent sessions ({se['rounds']} tool rounds "
        f"each, {sum(se['model_calls_per_session'])} model calls in all, histories growing to "
        f"~{max(se['approx_history_tokens']):,} tokens, some tool outputs of 1.5k-6k tokens, "
        f"a 512×512 image every 18 rounds) replayed against the simulator's "
        f"`gpt-4o-small` ({se['window']:,}-token window, `max_tokens` {se['max_tokens']}). "
        f"routefit gets the whole history; `trim_messages` trims to {se['trim_to']:,} tokens "
        f"(litellm's default 75% ratio); last-N keeps the system message and the last "
        f"{se['last_n']} messages.",
        "",
        "| strategy | requests | accepted | overflow | invalid | other errors | cache-hit ratio "
        "| billed input tokens (accepted) | per accepted request | median window use |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in se["strategies"].items():
        lines.append(
            f"| {name} | {s['requests']} | {s['accepted']} | {s['overflow']} | {s['invalid']} | "
            f"{s['other_errors']} | {s['cache_hit_ratio']:.1%} | "
            f"{s['billed_input_tokens']:,.0f} | "
            f"{s['billed_input_tokens'] / max(1, s['accepted']):,.0f} | "
            f"{s['median_window_use']:.3f} |"
        )
    extra = se.get("trim_internal_errors")
    if extra:
        lines += [
            "",
            f"`trim_messages` raised internally (and returned the history untrimmed) "
            f"{extra} times: it cannot shorten a message whose content is a list of parts.",
        ]
    lines += ["", "![sessions](plots/sessions.png)", ""]
    rf = se["strategies"]["routefit"]
    goals.append(
        (
            "zero overflows and zero invalid requests (routefit, long sessions)",
            f"{rf['overflow']} overflows, {rf['invalid']} invalid, {rf['other_errors']} other "
            f"of {rf['requests']}",
            _mark(rf["overflow"] == 0 and rf["invalid"] == 0 and rf["other_errors"] == 0),
        )
    )
    goals.append(
        (
            "provider cache-hit ratio ≥ 80% (routefit, long sessions)",
            f"{rf['cache_hit_ratio']:.1%}",
            _mark(rf["cache_hit_ratio"] >= PROXY_GOALS["cache_hit"]),
        )
    )
    if se.get("frontier"):
        _frontier_lines(se["frontier"], lines, goals)
    if se.get("kept"):
        kept_lines(se["kept"], lines, goals)


def kept_lines(kept: dict, lines: list[str], goals: list) -> None:
    """Section 5b (bench/sessions_fit.py): what the fit keeps, per wire and fit policy; rows
    of ``kept["before"]`` (the same sessions at an earlier commit) first when present."""
    lines += [
        "## 5b. What the fit keeps (issue 31)",
        "",
        f"{kept['sessions']} agent sessions ({kept['rounds']} tool rounds each, "
        f"{kept['model_calls']} model calls per wire, histories of "
        f"~{min(kept['approx_history_tokens']):,}-{max(kept['approx_history_tokens']):,} tokens: "
        f"{max(kept['approx_history_tokens']) // kept['window']}× the {kept['window']:,}-token "
        "window) with long stretches of tool rounds after one user message and fan-out rounds "
        "(6-8 parallel outputs, each under the cap, together over the budget), replayed through "
        "`routefit serve` on each wire (`bench/sessions_fit.py`). Per fitted request, from the "
        "body the simulator received: the newest turn kept (every call since the latest user "
        "message still there, outputs at most masked, its words verbatim), and the medians of "
        "the share of user-message, assistant and tool-result tokens that arrive (user and "
        "assistant verbatim, tool results verbatim or capped, not masked).",
        "",
        "| commit / policy | wire | refused | overflow | invalid | cache-hit | window use p50 "
        "| newest turn kept | user verbatim | assistant verbatim | tool results arrive |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [
        (f"before ({kept.get('before_commit', 'main')})", k, v)
        for k, v in (kept.get("before") or {}).items()
    ]
    rows += [("after", k, v) for k, v in kept["results"].items()]
    for label, key, s in rows:
        policy, wire = key.split("/")
        name = label if policy == "default" else f"{label}, `{policy}`"
        lines.append(
            f"| {name} | {wire} | {s['refused']} | {s['overflow']} | {s['invalid']} | "
            f"{s['cache_hit_ratio']:.1%} | {s['median_window_use']:.2f} | "
            f"{s['newest_turn_kept']:.1%} | {s['median_user_verbatim']:.2f} | "
            f"{s['median_assistant_verbatim']:.2f} | {s['median_tool_arrived']:.2f} |"
        )
    lines.append("")
    after = [v for k, v in kept["results"].items() if k.startswith("default/")]
    if after:
        goals.append(
            (
                "0 refusals of fittable requests, 0 invalid, every wire (issue 31)",
                ", ".join(f"{v['refused']} refused / {v['invalid']} invalid" for v in after),
                _mark(all(v["refused"] == 0 and v["invalid"] == 0 for v in after)),
            )
        )
        goals.append(
            (
                "newest turn kept in ≥ 99% of fitted requests (issue 31)",
                ", ".join(f"{v['newest_turn_kept']:.1%}" for v in after),
                _mark(all(v["newest_turn_kept"] >= 0.99 for v in after)),
            )
        )
        goals.append(
            (
                "cache-hit ≥ 85% and window use p50 ≥ 0.85 together (issue 31)",
                ", ".join(
                    f"{v['cache_hit_ratio']:.1%} / {v['median_window_use']:.2f}" for v in after
                ),
                _mark(
                    all(
                        v["cache_hit_ratio"] >= 0.85 and v["median_window_use"] >= 0.85
                        for v in after
                    )
                ),
            )
        )


def _frontier_lines(fr: dict, lines: list[str], goals: list) -> None:
    """The cut schedule's cache-hit / window-use frontier over the fit policy knobs."""
    previous = tuple(fr.get("previous_default") or ())
    lines += [
        "### The cut schedule's frontier",
        "",
        "The same sessions through routefit once per point of the cut-schedule knobs "
        "(`pin_fraction`, `low_water`, `checkpoint_quantum`). Recent tail is what a jump keeps "
        "after the pinned head, `low_water − pin_fraction` of the budget: the recent "
        "conversation the model still sees besides the protected newest turns. On cache-hit "
        "and window use alone a larger head with no tail always wins (docs/fitting.md, "
        '"Choosing the schedule"), so ★ marks the points no other point beats on all three; '
        "**bold** is the default"
        + (", _previous_ the default before issue 18" if previous else "")
        + ".",
        "",
        "| pin_fraction | low_water | checkpoint_quantum | recent tail | cache-hit "
        "| median window use | overflow | invalid | frontier | |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---|",
    ]
    for p in sorted(fr["points"], key=lambda p: (-p["median_window_use"], -p["cache_hit_ratio"])):
        knobs = (p["pin_fraction"], p["low_water"], p["checkpoint_quantum"])
        bold = "**" if p["default"] else ""
        note = "default" if p["default"] else ("_previous_" if knobs == previous else "")
        lines.append(
            f"| {bold}{p['pin_fraction']:.3g}{bold} | {bold}{p['low_water']:.3g}{bold} | "
            f"{bold}{p['checkpoint_quantum']:.3g}{bold} | "
            f"{p.get('recent_tail', max(0.0, knobs[1] - knobs[0])):.3g} | "
            f"{p['cache_hit_ratio']:.1%} | "
            f"{p['median_window_use']:.3f} | {p['overflow']} | {p['invalid']} | "
            f"{'★' if p['on_frontier'] else ''} | {note} |"
        )
    default = next(p for p in fr["points"] if p["default"])
    met = (
        default["median_window_use"] >= 0.80
        and default["cache_hit_ratio"] >= PROXY_GOALS["cache_hit"]
        and default["on_frontier"]
    )
    figures = (
        f"default: median window use {default['median_window_use']:.3f} at cache-hit "
        f"{default['cache_hit_ratio']:.1%}"
        f"{', on the frontier' if default['on_frontier'] else ', off the frontier'}"
    )
    lines += [
        "",
        f"Goal (issue 18): median window use ≥ 0.80 at cache-hit ≥ 80%, the default on the "
        f"frontier — {_mark(met)} ({figures}).",
        "",
    ]
    goals.append(
        (
            "window use ≥ 0.80 at cache-hit ≥ 80%, the default on the frontier (issue 18)",
            figures,
            _mark(met),
        )
    )


PROFILE_NOTES = [
    "From `python bench/profile_proxy.py` (py-spy of routefit's main thread under small c16 "
    "load, and an experiment; not re-run by run.py, figures from one run on this machine, "
    "before the changes they led to):",
    "",
    "- With httpx as the passthrough client, the HTTP client dominated: the passthrough's "
    "`complete` was 57% of the main thread's samples, of which httpx `AsyncClient.send` 44% and "
    "httpcore's pool scan (a poll per pooled connection, on every request) 21%; routefit's own "
    "work (parse, price, fit, anchor lookup) 10.5%. The same app with an aiohttp POST instead: "
    "958 vs 232 req/s at c16, 0.61 vs 2.65 ms of CPU per request. routefit's passthrough now "
    "uses aiohttp (section 1 is measured with it).",
    "- The route's tokenizer used to load on the first request (~0.5-1.2 s on the event loop); "
    "it is now loaded in a thread before `/readyz` answers 200.",
    "- `profile_proxy.py --as-bench` (run.py's config, small c1): refitting a learnt route's "
    "calibration every 16 samples (~2 ms per refit of a 200-sample window, on the event loop) "
    "was ~5% of the main thread, and anyio's cancel scope around every body read cost 13 µs "
    "against 6.7 for asyncio's own timeout. Refits now come at most every 0.25 s, the body "
    "deadline is asyncio's, and learning from the usage runs after the response is sent: "
    "`compare_commits.py d7d142c 5d87a99` (4 rounds, order alternated) measured the server's "
    "CPU per request at 0.90 (small c1), 0.92 (small c16), 0.93 (stream c1) and 0.92 (new "
    "28k-token prompt) of before.",
    "- Streams (`--workload stream --concurrency 16`): anyio's task group and cancel scopes, "
    "two tasks per stream to watch the client and the drain, were 12% of the main thread. The "
    "relay now shares the non-stream path's single watch task (`proxy.disconnect.watching`): "
    "`compare_commits.py` measured the server's CPU per request at 0.84 (stream c1) and 0.81 "
    "(stream c16) of before, and stream c16 at 861 vs 671 req/s.",
    "",
]


def _dirty_note(m: dict) -> list[str]:
    dirty = m.get("uncommitted")
    if not dirty:
        return []
    return [
        f"- Measured: the working tree of commit `{m['routefit_commit']}` with uncommitted "
        f"changes in {', '.join(f'`{p}`' for p in dirty)} (routefit is installed editable)."
    ]


def _load_note(results: dict) -> list[str]:
    loads = {
        name: data["load_average"]
        for name, data in results["sections"].items()
        if isinstance(data, dict) and "load_average" in data
    }
    note = results.get("note")
    out = [f"- {note}"] if note else []
    if loads:
        out.append(
            "- 1-minute load average at the start / end of each section (2 cores; above ~2 "
            "means other work shared the machine): "
            + ", ".join(f"{k} {v['start']:.1f}/{v['end']:.1f}" for k, v in loads.items())
        )
    return out


def _findings(sections: dict) -> list[str]:
    lines = ["## Findings", ""]
    st = sections.get("startup", {}).get("servers", {})
    rf = st.get("routefit (OpenAI routes only)", {}).get("median")
    if rf:
        lines.append(
            f"- routefit's first proxied request after `/readyz` took "
            f"{rf['first_request_ms']:.0f} ms, the second {rf['second_request_ms']:.1f} ms "
            "(tokenizers are loaded before /readyz answers; the first request still fills "
            "caches and the connection pool)."
        )
    load = sections.get("proxy_load", {}).get("summary", {})
    t = load.get("translated", {}).get("stream c16")
    native = load.get("openai", {}).get("stream c16") or {}
    if t and t.get("throughput_ratio") is not None:
        beside = native.get("routefit_cpu_ms_per_request")
        passthrough = f" (a passthrough stream: {beside:.2f})" if beside is not None else ""
        lines.append(
            f"- Translated streaming (chat client → Anthropic route, c16): routefit "
            f"{t['routefit_rps']:.0f} vs LiteLLM {t['litellm_rps']:.0f} req/s "
            f"({t['throughput_ratio']:.2f}×), CPU {t['routefit_cpu_ms_per_request']:.2f} vs "
            f"{t['litellm_cpu_ms_per_request']:.1f} ms/request{passthrough}. routefit's own "
            "mapping reads every Anthropic event and writes it as a chat chunk "
            "(proxy/transports/anthropic.py); litellm is not imported for this route."
        )
    o = load.get("openai", {}).get("small c16")
    if o and o.get("cpu_ratio") is not None:
        lines.append(
            f"- OpenAI path, small c16: routefit spends {o['routefit_cpu_ms_per_request']:.2f} "
            f"ms of CPU per request, LiteLLM {o['litellm_cpu_ms_per_request']:.2f} "
            f"({o['cpu_ratio']:.2f}×), yet throughput is only "
            f"{o['throughput_ratio']:.1f}× (routefit's event loop, the simulator and the load "
            "generator share the 2 cores)."
        )
    big = load.get("openai", {}).get("30k-token prompt c1")
    if big and big.get("routefit_added_p50_ms") is not None:
        lines.append(
            f"- A new 30k-token prompt (unique per request): routefit adds "
            f"{big['routefit_added_p50_ms']:.1f} ms p50 (LiteLLM "
            f"{big['litellm_added_p50_ms']:.1f} ms) and spends "
            f"{big['routefit_cpu_ms_per_request']:.1f} ms of CPU per request, most of it "
            "tokenizing the 30k new tokens (new content is never cached; section 3 shows the "
            "warm case, where earlier turns cost almost nothing)."
        )
    acc = sections.get("accuracy", {}).get("routes", {})
    exact = acc.get("gpt-4o", {}).get("calibrated", {})
    if exact.get("worst_under_pct", 0) < 0:
        lines.append(
            f"- Calibration moves an exact route off the truth: on `gpt-4o` (meter exact, raw "
            f"error {acc['gpt-4o']['raw']['mean_abs_pct']:.2f}%) the calibrated estimate is off "
            f"by {exact['mean_abs_pct']:.2f}% on average and as low as "
            f"{exact['worst_under_pct']:.2f}% — an exact meter should not be corrected below "
            "itself."
        )
    claude = acc.get("claude", {}).get("raw", {})
    if claude.get("worst_under_pct", 0) < -20:
        lines.append(
            f"- Claude via litellm: raw under-estimates down to {claude['worst_under_pct']:.0f}% "
            "on small requests with tools. The simulator (like Anthropic) adds the tool-use "
            "system prompt (346 tokens; 313 with `tool_choice` any/tool) whenever tools are "
            "present; routefit prices Claude routes with the `generic` framing "
            "(`pricing/framing.py` `default_framing`), which has no such term — e.g. one user "
            "message + 3 tools: 491 tokens on the wire, 145 estimated. Calibration only "
            "partly hides it (calibrated worst "
            f"{acc['claude']['calibrated']['worst_under_pct']:.0f}%)."
        )
    lines += ["", *PROFILE_NOTES]
    return lines


def write(results: dict, bench_dir: Path, command: str) -> Path:
    plots = bench_dir / "plots"
    plots.mkdir(exist_ok=True)
    sections = results["sections"]
    if "proxy_load" in sections:
        plot_proxy(sections["proxy_load"], plots / "proxy.png")
    if "fit_scaling" in sections:
        fit_scaling.plot(sections["fit_scaling"], plots / "fit_scaling.png")
    if "accuracy" in sections:
        plot_accuracy(sections["accuracy"], plots / "accuracy.png")
    if "sessions" in sections:
        plot_sessions(sections["sessions"], plots / "sessions.png")

    m = results["machine"]
    body: list[str] = []
    goals: list[tuple[str, str, str]] = []
    if "proxy_load" in sections:
        _proxy_section(sections["proxy_load"], body, goals)
    if "startup" in sections:
        _startup_section(sections["startup"], sections.get("proxy_load", {}), body, goals)
    if "fit_scaling" in sections:
        _fit_section(sections["fit_scaling"], body, goals)
    if "accuracy" in sections:
        _accuracy_section(sections["accuracy"], body)
    if "sessions" in sections:
        _sessions_section(sections["sessions"], body, goals)
    others = (sections.get("others") or {}).get("scripts") or {}
    if others:
        body += ["## 6. Other benchmarks (bench/bench_*.py, as they print)", ""]
        for name, o in others.items():
            body += [
                f"### `{name}` (exit {o['returncode']}, {o['seconds']:.1f} s)",
                "",
                "```",
                o["output"].rstrip()[-4000:],
                "```",
                "",
            ]

    lines = [
        "# routefit benchmarks",
        "",
        f"Generated by `{command}` in {results['seconds']:.0f} s"
        + (" (**quick mode**: shorter phases, fewer points)" if results.get("quick") else "")
        + f" at commit `{m['routefit_commit']}`. Raw results: `bench/results/*.json`. Absolute "
        "times depend on the machine; compare the ratios, which come from one run on one "
        "machine with the same simulator and load generator.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}",
        f"- Python {m['python']}; routefit venv: "
        + ", ".join(f"{k} {v}" for k, v in m["routefit_venv"].items()),
        f"- LiteLLM proxy venv: litellm {m['litellm_proxy_venv']['litellm']} "
        f"(`{m['litellm_proxy_venv']['path']}`), run as `litellm --config FILE --port P "
        "--num_workers 1` with `LITELLM_LOCAL_MODEL_COST_MAP=True`, `LITELLM_LOG=ERROR`, "
        "`litellm_settings.telemetry: false` and a `general_settings.master_key` (it refuses to "
        "start without one); no database, no callbacks.",
        "- routefit: `routefit serve --workers 1 --log-level warning`, embedded in-memory "
        "store, one team key (authenticated like LiteLLM's master key, no quotas).",
        "- Simulator: `python -m proxy.sim`, one process, h11; all servers on 127.0.0.1.",
        *_dirty_note(m),
        *_load_note(results),
        "",
        "## Goals",
        "",
        "| goal | measured | |",
        "|---|---|---|",
        *[f"| {g} | {v} | {ok} |" for g, v, ok in goals],
        "",
        *body,
    ]
    lines += _findings(sections)
    path = bench_dir / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    return path
