"""Sections 4f-4g: a new route's prior against real tokenizers, script by script and on runs of
whitespace (issue 31 item 4).

For each meter a route may price with (o200k, cl100k, Claude's legacy BPE) and each real
tokenizer (bench/real_tokenizers.py: the set the prior's weights were chosen on, and the ones
held out), the count of ten scripts' sentences and three runs of whitespace
(tests/script_sentences.py, as a user's message and as a tool's output) over the price the
prior of a route with no samples puts on them. Above 1 the prior under-estimates that
tokenizer on that text; the worst and the least text are printed per tokenizer.

    python bench/prior_scripts.py            # every meter, every real tokenizer
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the sentences, one copy: tests/script_sentences.py

#: The meters a route may price with: ``PRIOR_METERS`` in the environment to pick others (a
#: route's ``heuristic:CHARS_PER_TOKEN``, say).
METERS = tuple(os.environ.get("PRIOR_METERS", "o200k_base,cl100k_base,anthropic-legacy").split(","))


def ratios(meter: str, tokenizers: list[str]) -> dict[str, dict[str, float]]:
    """count ÷ the prior's price, per tokenizer and script (the worse of the two bodies)."""
    from script_sentences import SCRIPTS, WHITESPACE, script_bodies

    from pricing.calibration import CalibrationPolicy, fit_correction
    from pricing.messages import parse_request
    from pricing.meter import measure
    from pricing.route import Route
    from proxy.sim.counting import openai_prompt
    from proxy.sim.models import SimModel

    route = Route(alias="unknown", model="acme-7", tokenizer=meter)
    prior = fit_correction((), CalibrationPolicy(), exact=False, meter=meter)
    texts = {**SCRIPTS, **WHITESPACE}
    bodies = {name: script_bodies(text) for name, text in texts.items()}
    priced = {
        name: [prior.price_pressure(measure(parse_request(b), route)) for b in bs]
        for name, bs in bodies.items()
    }
    out: dict[str, dict[str, float]] = {}
    for spec in tokenizers:
        sim = SimModel("real", context_window=1 << 20, max_output=4096, tokenizer=spec)
        out[spec] = {
            name: max(
                len(openai_prompt(b, sim, None).tokens) / p
                for b, p in zip(bs, priced[name], strict=True)
            )
            for name, bs in bodies.items()
        }
    return out


def main() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from real_tokenizers import specs

    chosen = [*specs(), "p50k_base"]
    held_out = [*specs(held_out=True)[1:], *specs(held_out="more")]
    for meter in METERS:
        print(f"meter {meter}: count / prior's price, worst and least text")
        for spec, row in ratios(meter, chosen + held_out).items():
            worst, least = max(row, key=row.__getitem__), min(row, key=row.__getitem__)
            kind = "chosen on" if spec in chosen else "held out"
            name = spec.rsplit("/", 1)[-1]
            print(f"  {name:48} {kind:9} {row[worst]:.2f} ({worst})  {row[least]:.2f} ({least})")


if __name__ == "__main__":
    main()
