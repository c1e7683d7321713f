"""Fit policies: a route's (its ``fit:`` block and three shortcut keys) and a team's overrides.

Each knob is checked on its own so an error names its exact path. A team's overrides are parsed
here once, to normalised values, and applied per route with ``FitPolicy.merged``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from proxy.config.reader import Reader, scalar
from strategies.policy import MIN_PROMPT_TOKENS, FitPolicy

__all__ = ["FIT_KEYS", "SHORTCUTS", "read_overrides", "read_route_policy"]

FIT_KEYS = frozenset(f.name for f in fields(FitPolicy))
#: Fit knobs a ``routefit:`` block may also give at its top level (LiteLLM-era spellings).
SHORTCUTS = ("output_reserve", "safety_margin", "message_cap_tokens")


def read_overrides(raw: Any, where: str, rd: Reader) -> Mapping[str, Any]:
    """Validated knob → normalised value (tuples, frozensets, floats), in the order given."""
    block = rd.strict(raw, FIT_KEYS, where)
    out: dict[str, Any] = {}
    for key, value in block.items():
        try:  # an os.environ/NAME value is text: the knob gets the number it spells
            out[key] = getattr(FitPolicy.parse({key: scalar(value)}), key)
        except ValueError as exc:
            raise rd.error(f"{where}.{key}", str(exc)) from None
        if key == "max_prompt_tokens" and out[key] is not None and out[key] < MIN_PROMPT_TOKENS:
            raise rd.error(  # a budget of 0 loaded, and refused every request of the route
                f"{where}.{key}",
                f"must be at least {MIN_PROMPT_TOKENS}: a smaller budget holds no prompt",
            )
    return MappingProxyType(out)


def read_route_policy(own: Mapping[str, Any], where: str, rd: Reader) -> FitPolicy:
    """``where`` is the route's routefit block; a shortcut key wins over the same in ``fit``."""
    knobs = dict(read_overrides(own.get("fit"), f"{where}.fit", rd))
    for key in SHORTCUTS:
        if own.get(key) is not None:
            knobs.update(read_overrides({key: own[key]}, where, rd))
    return FitPolicy().merged(knobs)
