"""What a fit returns: the request to send (``Fit``) with its report, or why none fits.

The report lists what every registered strategy did (``strategies.actions``), zeros included,
so ``/routefit/fit``'s JSON names every action the house knows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pricing.messages import Message
from pricing.meter import Pressure
from strategies.actions import Action, Actions
from strategies.policy import OutputLimit
from strategies.registry import STRATEGIES

__all__ = ["NOTHING", "Fit", "FitError", "FitReport", "actions_of"]

#: Every registered strategy's label, in the registry's order: the report lists them all.
_LABELS = tuple(s.label for s in STRATEGIES)


def actions_of(*done: Action) -> Actions:
    return Actions.tally(_LABELS, done)


#: A report's actions when nothing was done (every strategy listed, at zero).
NOTHING = actions_of()


@dataclass(frozen=True, slots=True)
class FitReport:
    route: str
    budget: int
    estimate_before: int
    estimate_after: int
    #: What each registered strategy did (``strategies.actions``): the header, the metrics,
    #: ``routefit fit`` and the dashboard iterate over it.
    actions: Actions = NOTHING
    #: The reply's reservation (``strategies.output``); None when ``fit`` ran on its own.
    output: OutputLimit | None = None
    #: Fitted at the meter's own count: the route has not learnt its tokenizer, and the prior
    #: it prices with until then (meant to err high) left nothing that fits
    #: (``proxy.estimate.Job.fit``). The provider judges; an overflow it states is learnt.
    on_meter: bool = False

    @property
    def transparent(self) -> bool:
        return not self.actions.taken()

    @property
    def output_room(self) -> int | None:
        """The longest reply the fitted prompt leaves room for: the reservation and whatever
        of the prompt's budget it did not use, at most the route's output limit (None without
        a reservation). What a provider given no cap may write is exactly this much, so it is
        the cap to send one that needs a cap (``proxy.wires.base.room_capped``)."""
        if self.output is None:
            return None
        room = self.output.reserve + max(0, self.budget - self.estimate_after)
        return min(self.output.route_limit, room)

    def as_dict(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "budget": self.budget,
            "estimate_before": self.estimate_before,
            "estimate_after": self.estimate_after,
            "transparent": self.transparent,
            "on_meter": self.on_meter,
            "actions": {
                name: {a.label.counts: a.count, "tokens_removed": a.tokens}
                for name, a in self.actions.items()
            },
            "output": None
            if self.output is None
            else {
                "requested": self.output.requested,
                "route_limit": self.output.route_limit,
                "reserve": self.output.reserve,
                "sent": self.output.sent,
            },
        }


@dataclass(frozen=True, slots=True)
class Fit:
    body: Mapping[str, Any]
    messages: tuple[Message, ...]
    pressure: Pressure
    report: FitReport
    estimate: int = field(default=0)
    #: The ``tool_call_id`` of the last output masked before the first place where this
    #: request's masking and the session's previous request's differ: the sent prefix up to it is
    #: what both share (after a mask step, or a verbatim head masked), where a wire with explicit
    #: cache breakpoints should read (None: nothing masked that long).
    settled_mask: str | None = None


class FitError(Exception):
    """Nothing the policy allows makes the request fit; the proxy answers 400
    ``context_length_exceeded`` with these figures.

    ``team_limit`` is set when the budget is the team's per-request prompt quota
    (``max_prompt_tokens``) rather than what the window leaves: the refusal must then name the
    team's limit, not the model's window."""

    def __init__(
        self, route: str, estimate: int, budget: int, window: int, team_limit: int | None = None
    ) -> None:
        self.route = route
        self.estimate = estimate
        self.budget = budget
        self.window = window
        self.team_limit = team_limit
        if team_limit is not None:
            limit = (
                f"but the team's per-request prompt limit (max_prompt_tokens) is {budget:,} "
                f"tokens (the model's window, {window:,}, would allow more)"
            )
        else:
            limit = (
                f"but its budget is {budget:,} (context window {window:,} minus the output "
                f"reserve and safety margin)"
            )
        super().__init__(
            f"route {route!r}: the request needs about {estimate:,} prompt tokens after fitting "
            f"{limit}; the system prompt and the latest user message alone do not fit, even "
            f"with everything else masked or elided"
        )
