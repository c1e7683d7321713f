"""FitPolicy and the prompt budget.

One policy per route, from config, optionally overridden per team. Every knob has a default a
demanding user would pick; docs/fitting.md explains each one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["STRATEGIES", "FitPolicy", "output_reserve", "prompt_budget"]

#: Every strategy, in the default order: masking old tool outputs comes before eliding whole
#: turns (bench/REPORT.md, section 5b, measures the orders).
STRATEGIES = ("cap", "offload_images", "mask", "elide")


@dataclass(frozen=True, slots=True)
class FitPolicy:
    #: Output tokens reserved when the request does not say (``max_tokens``); None → route
    #: default, min(route max output, 4096).
    output_reserve: int | None = None
    #: Tokens kept free beyond the estimate; None → 1% of the window, at least 32.
    safety_margin: int | None = None
    strategies: tuple[str, ...] = STRATEGIES
    #: A message's text+framing cap when capping runs; None → ``cap_fraction`` of the budget.
    message_cap_tokens: int | None = None
    cap_fraction: float = 0.15
    cap_roles: frozenset[str] = frozenset({"tool"})
    #: Images are offloaded oldest-first in steps of this many, so consecutive turns agree.
    image_offload_step: int = 4
    # The cut schedule (docs/fitting.md, "Choosing the schedule"). A jump re-sends uncached
    # what it keeps after the head, about (low_water − pin_fraction) × budget, and buys
    # (1 − low_water) × budget of growth before the next one; the window use between jumps is
    # about 1 − (1 − low_water) / 2. The defaults take the smallest headroom that still lets a
    # jump re-send no more than the growth it buys (low_water − pin_fraction = 1 − low_water),
    # so every token is sent uncached at most twice, and a quantum no wider than that tail.
    #: When elision must cut, it cuts down to this fraction of the budget (headroom for growth).
    low_water: float = 0.95
    #: Cut points are quantised to multiples of this fraction of the budget.
    checkpoint_quantum: float = 0.05
    #: The head of the conversation kept verbatim, as a fraction of the budget (0 = drop oldest).
    pin_fraction: float = 0.9
    #: When masking must run, it masks old tool outputs, oldest first at the elision checkpoints,
    #: until the prompt is at most this fraction of the budget (0 = every output older than the
    #: newest unit's checkpoint at once). A low mark masks in few large steps, each re-sending
    #: little; a high one keeps more outputs verbatim but re-sends the tail after the mask point
    #: at every step (docs/fitting.md, "Masking").
    mask_water: float = 0.0
    #: An upper bound on the prompt budget (a team's per-request quota); None = the window's.
    max_prompt_tokens: int | None = None

    def merged(self, overrides: Mapping[str, Any]) -> FitPolicy:
        """This policy with a team's overrides applied (already validated by ``parse``)."""
        return replace(self, **dict(overrides))

    @classmethod
    def parse(cls, raw: Mapping[str, Any], base: FitPolicy | None = None) -> FitPolicy:
        """Validate a mapping of knobs; raise ValueError naming the bad knob."""
        base = base or cls()
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in known:
                raise ValueError(f"unknown fit policy key {key!r} (known: {sorted(known)})")
            values[key] = _check(key, value)
        return replace(base, **values)


def _check(key: str, value: Any) -> Any:
    if key in ("output_reserve", "safety_margin", "message_cap_tokens", "max_prompt_tokens"):
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} must be a non-negative integer")
        return value
    if key == "image_offload_step":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive integer")
        return value
    if key in ("cap_fraction", "low_water", "checkpoint_quantum", "pin_fraction", "mask_water"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{key} must be a number")
        lo = 0.0 if key in ("pin_fraction", "mask_water") else 0.01
        if not lo <= float(value) <= 1.0:
            raise ValueError(f"{key} must be between {lo} and 1")
        return float(value)
    if key == "strategies":
        if not isinstance(value, list | tuple) or any(v not in STRATEGIES for v in value):
            raise ValueError(f"strategies must be a list drawn from {list(STRATEGIES)}")
        return tuple(value)
    if key == "cap_roles":
        if not isinstance(value, list | tuple) or any(not isinstance(v, str) for v in value):
            raise ValueError("cap_roles must be a list of roles")
        return frozenset(value)
    raise AssertionError(key)


def output_reserve(max_output: int, policy: FitPolicy, requested_output: int | None) -> int:
    """What the reply may use: the request's ``max_tokens`` when it says, else the policy's
    reserve, else min(the route's max output, 4096)."""
    if requested_output is not None:
        return requested_output
    if policy.output_reserve is not None:
        return policy.output_reserve
    return min(max_output, 4096)


def prompt_budget(
    window: int, max_output: int, policy: FitPolicy, requested_output: int | None
) -> int:
    """prompt budget = window − output reserve − safety margin (never negative), capped by the
    policy's ``max_prompt_tokens`` when a team sets one.

    The reserve is what the request asks for (``max_completion_tokens`` / ``max_tokens``) when it
    says, else the policy's reserve, else min(the route's max output, 4096).
    """
    reserve = output_reserve(max_output, policy, requested_output)
    margin = policy.safety_margin
    if margin is None:
        margin = max(32, window // 100)
    budget = max(0, window - reserve - margin)
    if policy.max_prompt_tokens is not None:
        budget = min(budget, policy.max_prompt_tokens)
    return budget
