"""FitPolicy, the output reservation and the prompt budget.

One policy per route, from config, optionally overridden per team. Every knob has a default a
demanding user would pick; docs/fitting.md explains each one.

Output limits (docs/fitting.md, "Output limits"). A client's output cap is a request for room,
and the window is shared: the prompt budget is the window less the reply's reservation and the
safety margin. Two rules keep the reservation from failing a request that could be served:

* a cap above the route's output limit is clamped to the limit (the provider would refuse it,
  and the reply can never be longer anyway) — ``output_limit``;
* a cap that leaves too little room beside the prompt is shrunk to the room there is, but never
  below ``min_output_reserve`` (or the client's own cap when that is smaller): a reply squeezed
  below that is refused with the largest cap that would fit, rather than cut short silently —
  ``shrunk_output`` and ``output_room``;
* nor below the smallest cap the request can be sent with at all, when its wire has one
  (``least``: Anthropic's extended thinking needs ``max_tokens`` of at least 1,025, its
  ``budget_tokens`` being at least 1,024 and below the cap) — ``reserve_floor``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from strategies.registry import NAMES

__all__ = [
    "MIN_PROMPT_TOKENS",
    "STRATEGIES",
    "FitPolicy",
    "OutputLimit",
    "minimum_window",
    "output_limit",
    "output_reserve",
    "output_room",
    "prompt_budget",
    "reserve_floor",
    "safety_margin",
    "shrunk_output",
]

#: Every registered strategy's name, in the default order (``strategies.registry``).
STRATEGIES = NAMES


@dataclass(frozen=True, slots=True)
class FitPolicy:
    #: Output tokens reserved when the request does not say (``max_tokens``); None → route
    #: default, min(route max output, 4096).
    output_reserve: int | None = None
    #: Tokens kept free beyond the estimate; None → 1% of the window, at least 32.
    safety_margin: int | None = None
    #: The smallest reservation a client's cap is shrunk to when the prompt leaves too little
    #: room for it (a client's own smaller cap is kept as it is).
    min_output_reserve: int = 1024
    strategies: tuple[str, ...] = STRATEGIES
    #: A message's text+framing cap when capping runs; None → ``cap_fraction`` of the budget.
    message_cap_tokens: int | None = None
    cap_fraction: float = 0.15
    cap_roles: frozenset[str] = frozenset({"tool"})
    #: Images are offloaded oldest-first in steps of this many, so consecutive turns agree.
    image_offload_step: int = 4
    #: When offloading must run, it offloads old images (in steps of ``image_offload_step``)
    #: until the prompt is at most this fraction of the budget; None: ``low_water``. Each step
    #: re-sends, uncached, the prompt from the first image it offloads, which is early in the
    #: prompt: a lower mark offloads in fewer, larger steps -- a higher cache-hit on image-dense
    #: sessions, less window used (docs/fitting.md, strategy 2; bench/REPORT.md 5b.6).
    offload_water: float | None = None
    #: When offloading runs, the head of the conversation up to this fraction of the budget
    #: keeps its images; offloading starts after it and offloads the head (all at once, for
    #: good) only when every image after it is offloaded and the prompt still overflows; the next
    #: head starts after the offloaded conversation. A step then re-sends the tail after the
    #: head, not the prompt from its first image (bench/REPORT.md 5b.6). 0 = off.
    image_head: float = 0.7
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
    #: When masking runs, the head of the conversation up to this fraction of the budget keeps
    #: its tool outputs verbatim; masking starts after it and masks it (all at once, for good)
    #: only when everything after it is masked and the prompt still overflows, and the next head
    #: starts where the masked conversation ends. Between mask steps the prompt then grows from
    #: about this fraction to the budget instead of from what the masked conversation weighs
    #: (window use p50 on agent-shaped sessions 0.66 → 0.78, cache-hit unchanged on every wire:
    #: docs/fitting.md, "The verbatim head").
    verbatim_head: float = 0.7
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
    if key in ("image_offload_step", "min_output_reserve"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive integer")
        return value
    if key in (
        "cap_fraction",
        "low_water",
        "checkpoint_quantum",
        "pin_fraction",
        "mask_water",
        "offload_water",
        "image_head",
        "verbatim_head",
    ):
        if key == "offload_water" and value is None:
            return None  # follow low_water
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{key} must be a number")
        lo = 0.01 if key in ("cap_fraction", "low_water", "checkpoint_quantum") else 0.0
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


#: The smallest prompt a route must have room for besides its reserve and margin: a chat
#: request with one short user message (``routefit check`` refuses a route without it).
MIN_PROMPT_TOKENS = 16


@dataclass(frozen=True, slots=True)
class OutputLimit:
    """The reply's share of the window for one request, and what became of the client's cap."""

    #: The client's cap (``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens``),
    #: None when it set none.
    requested: int | None
    #: The route's output limit (``max_output_tokens``).
    route_limit: int
    #: Tokens kept free for the reply: the prompt budget is the window less this and the margin.
    reserve: int

    @property
    def sent(self) -> int | None:
        """The cap the provider gets: the reserve when the client set a cap, else none."""
        return None if self.requested is None else self.reserve

    @property
    def lowered(self) -> bool:
        """Whether routefit lowered the client's cap (clamped or shrunk)."""
        return self.requested is not None and self.reserve < self.requested

    def describe(self) -> str:
        """``32000->16384``: the client's cap and the one sent (the clamp header's value)."""
        return f"{self.requested}->{self.reserve}"


def output_limit(max_output: int, policy: FitPolicy, requested_output: int | None) -> OutputLimit:
    """The reservation before any shrinking: the client's cap clamped to the route's limit,
    else the policy's reserve, else min(the route's max output, 4096) — never above the limit,
    as no reply can be longer."""
    if requested_output is not None:
        reserve = requested_output
    elif policy.output_reserve is not None:
        reserve = policy.output_reserve
    else:
        reserve = 4096
    return OutputLimit(requested_output, max_output, min(reserve, max_output))


def output_reserve(max_output: int, policy: FitPolicy, requested_output: int | None) -> int:
    """What the reply may use (``output_limit``'s reserve)."""
    return output_limit(max_output, policy, requested_output).reserve


def safety_margin(window: int, policy: FitPolicy) -> int:
    """Tokens kept free beyond the estimate: the policy's, else 1% of the window (≥ 32)."""
    if policy.safety_margin is not None:
        return policy.safety_margin
    return max(32, window // 100)


def reserve_floor(limit: OutputLimit, policy: FitPolicy, least: int = 0) -> int:
    """The smallest reservation ``limit`` may be shrunk to: ``min_output_reserve``, or
    ``least`` when that is more (the smallest cap the request can be sent with: a wire's rule,
    such as extended thinking's on Anthropic), or the reservation itself when it is already
    smaller (a client's small cap is not shrunk)."""
    return min(max(policy.min_output_reserve, least), limit.reserve)


def output_room(window: int, policy: FitPolicy, prompt: int) -> int:
    """The largest reply a ``prompt``-token prompt leaves room for in the window (≤ 0: none)."""
    return window - safety_margin(window, policy) - prompt


def shrunk_output(
    limit: OutputLimit, window: int, policy: FitPolicy, prompt: int, least: int = 0
) -> OutputLimit | None:
    """``limit`` shrunk so that a ``prompt``-token prompt fits beside it; None when even the
    floor (``reserve_floor``, with the request's ``least`` cap) does not leave room for it.
    Never grows the reservation."""
    room = output_room(window, policy, prompt)
    if room < reserve_floor(limit, policy, least):
        return None
    return replace(limit, reserve=min(limit.reserve, room))


def minimum_window(max_output: int, policy: FitPolicy, window: int) -> int:
    """The smallest window in which a request that sets no cap can be served on a route: its
    reserve shrunk to the floor, the safety margin, and a minimal prompt."""
    floor = reserve_floor(output_limit(max_output, policy, None), policy)
    return floor + safety_margin(window, policy) + MIN_PROMPT_TOKENS


def prompt_budget(
    window: int, max_output: int, policy: FitPolicy, requested_output: int | None
) -> int:
    """prompt budget = window − output reserve − safety margin (never negative), capped by the
    policy's ``max_prompt_tokens`` when a team sets one.

    The reserve is ``output_limit``'s: what the request asks for (``max_completion_tokens`` /
    ``max_tokens``) clamped to the route's output limit, else the policy's reserve, else
    min(the route's max output, 4096).
    """
    reserve = output_reserve(max_output, policy, requested_output)
    budget = max(0, window - reserve - safety_margin(window, policy))
    if policy.max_prompt_tokens is not None:
        budget = min(budget, policy.max_prompt_tokens)
    return budget
