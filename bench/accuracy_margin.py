"""Section 4c: a safety margin learnt from the estimates' one-step-ahead under-tail (measured,
not adopted).

On the held-out unknown tokenizers of ``accuracy_heldout`` (same streams, refit after every
request), the calibrated estimate is multiplied by max(1, the upper quantile of actual /
estimate over the newest ``k`` requests), each ratio taken against the estimate made before
that request's count was known. Printed per rule (k, quantile): p95 |error| %, worst
under-estimate %, mean over-estimate %, after 30 requests.

``python bench/accuracy_margin.py COUNT SEED FAMILY`` (bench/REPORT.md, 4c).
"""

from __future__ import annotations

import random
import statistics
import sys
from typing import Any

import accuracy_heldout as heldout
from accuracy_models import _picture, _routes

RULES = ((0, 1.0), (30, 1.0), (60, 1.0), (30, 0.9))


def replay(stream: list, policy: Any, k: int, q: float) -> list[float]:
    from pricing.calibration import fit_correction, sample_of

    samples: list[Any] = []
    correction = fit_correction((), policy, False)
    errors: list[float] = []
    ratios: list[float] = []
    for pressure, actual in stream:
        raw = correction.price_request(pressure)
        margin = 1.0
        if k and len(ratios) >= policy.min_samples:
            recent = sorted(ratios[-k:])
            margin = max(1.0, recent[min(len(recent) - 1, int(q * len(recent)))])
        estimate = int(raw * margin + 0.999)
        errors.append((estimate - actual) / actual)
        ratios.append(actual / raw)
        samples.append(sample_of("r", 0.0, pressure, estimate, False, actual))
        correction = fit_correction(samples[-policy.window :], policy, False)
    return errors


def main(count: int, seed: int, family: str) -> None:
    from pricing.calibration import CalibrationPolicy
    from pricing.messages import parse_request
    from pricing.meter import measure
    from proxy.sim.counting import openai_prompt

    route = _routes().route("mystery-2").route
    rng = random.Random(seed)
    later: dict[tuple[int, float], list[float]] = {r: [] for r in RULES}
    for i in range(count):
        sim = heldout.random_tokenizer(rng, i, family)

        def price(body: dict, sim: Any = sim) -> tuple[Any, int]:
            actual = len(openai_prompt(body, sim, _picture).tokens)
            return measure(parse_request(body), route), actual

        for s in range(2):
            stream = heldout._stream(price, 70, seed=seed * 100 + i * 2 + s)
            for rule in RULES:
                later[rule] += replay(stream, CalibrationPolicy(), *rule)[30:]
    for (k, q), errors in later.items():
        absolute = sorted(abs(e) for e in errors)
        p95 = absolute[int(0.95 * len(absolute))] * 100
        over = statistics.mean(max(0.0, e) for e in errors) * 100
        print(
            f"k={k} q={q}: p95 {p95:.2f}%  worst under {min(0.0, *errors) * 100:.2f}%  "
            f"mean over {over:.2f}%",
            flush=True,
        )


if __name__ == "__main__":
    args = sys.argv[1:]
    family = args[2] if len(args) > 2 else "stated"
    main(int(args[0]) if args else 10, int(args[1]) if len(args) > 1 else 2031, family)
