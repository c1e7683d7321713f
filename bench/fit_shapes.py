"""How the fit's cost grows with the shapes a client may send (in-process, one thread).

The CPU rule (docs/security.md, "CPU fairness") threads pricing by body size, so the fit's work
must grow with the conversation, not with its square: a small body that costs seconds stalls
every team on the event loop. Each shape is fitted at N, 2N and 4N on an 8k-window route (the
tightest fit: most plans are tried); ``growth`` is log2 of the time at 4N over the time at 2N
(1 for linear work, 2 for quadratic).

- ``tools_over``: N short turns behind N tool definitions that alone exceed the budget (refused);
- ``wide_turn``: one assistant message calling N tools, all answered: the newest turn;
- ``rounds``: N tool rounds of ~30-token outputs (an agent session);
- ``turns``: N short user/assistant turns.

``python bench/fit_shapes.py [N] [--tree DIR]``: DIR is another checkout to measure (its
``pricing``/``strategies`` are imported instead of this one's), for a before/after pair.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _tree(argv: list[str]) -> Path:
    if "--tree" in argv:
        return Path(argv[argv.index("--tree") + 1]).resolve()
    return HERE.parent


def _call(i: int) -> dict[str, Any]:
    return {"id": f"c{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}


def shape(kind: str, n: int) -> dict[str, Any]:
    task = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    if kind == "tools_over":
        turns = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
            for i in range(n)
        ]
        tools = [
            {
                "type": "function",
                "function": {
                    "name": f"tool_{i}",
                    "description": f"tool number {i}",
                    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
                },
            }
            for i in range(n)
        ]
        return {"messages": [*task, *turns, {"role": "user", "content": "end"}], "tools": tools}
    if kind == "wide_turn":
        results = [
            {"role": "tool", "tool_call_id": f"c{i}", "content": "out " * 20} for i in range(n)
        ]
        call = {"role": "assistant", "content": None, "tool_calls": [_call(i) for i in range(n)]}
        return {"messages": [*task, call, *results]}
    if kind == "rounds":
        out = list(task)
        for i in range(n):
            out.append({"role": "assistant", "content": f"step {i}", "tool_calls": [_call(i)]})
            out.append({"role": "tool", "tool_call_id": f"c{i}", "content": "out " * 30})
        return {"messages": [*out, {"role": "user", "content": "end"}]}
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * 8}
        for i in range(n)
    ]
    return {"messages": [*task, *turns, {"role": "user", "content": "end"}]}


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(_tree(argv)))
    from pricing.framing import default_framing
    from pricing.images import default_image_rule
    from pricing.messages import parse_request
    from pricing.route import Route
    from strategies.fit import FitError, fit
    from strategies.policy import FitPolicy

    numbers = [a for a in argv if a.isdigit()]
    n = int(numbers[0]) if numbers else 500
    route = Route(
        alias="small",
        model="gpt-4o",
        context_window=8192,
        max_output_tokens=1024,
        tokenizer="o200k_base",
        framing=default_framing("gpt-4o", "o200k_base"),
        image_rule=default_image_rule("gpt-4o", True),
        supports_vision=True,
    )
    policy = FitPolicy()

    def seconds(kind: str, size: int) -> float:
        body = {"model": "small", "max_tokens": 256, **shape(kind, size)}
        fit(parse_request({"model": "small", "messages": [{"role": "user", "content": "warm"}]}),
            route, policy)  # fmt: skip
        started = time.perf_counter()
        with contextlib.suppress(FitError):
            fit(parse_request(body), route, policy)
        return time.perf_counter() - started

    print(f"tree: {_tree(argv)}")
    print(f"{'shape':12} {'N':>8} {'2N':>8} {'4N':>8}  growth (s at N, 2N, 4N)")
    for kind in ("tools_over", "wide_turn", "rounds", "turns"):
        times = [seconds(kind, n * k) for k in (1, 2, 4)]
        growth = math.log2(times[2] / times[1]) if times[1] > 0 else float("nan")
        cells = " ".join(f"{t:8.3f}" for t in times)
        print(f"{kind:12} {cells}  {growth:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
