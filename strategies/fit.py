"""fit: a priced conversation and a route's budget in, the request to send out.

Transparent when the request fits: the client's body goes out as is. Otherwise the policy's
strategies run in order (default: cap oversized tool outputs → offload old images → elide whole
middle units), each only when the previous ones were not enough, with cache-stable cut points
(``strategies.elide``). The result is verified by measuring it again with the meter; a request
that cannot be made to fit raises FitError instead of being forwarded to fail at the provider.

Pure and deterministic: same request, route, policy and correction → the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pricing.calibration import Correction
from pricing.messages import ChatRequest, Message, TextPart, message_wire
from pricing.meter import Pressure, Sizes, measure_message, measure_messages
from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from strategies.cap import cap_oversized
from strategies.elide import Plan, UnitCosts, elision_marker, plan, plan_max
from strategies.offload import offload_images, placeholder_for
from strategies.policy import FitPolicy, prompt_budget
from strategies.units import Unit, group_units, protected_units

__all__ = ["Fit", "FitError", "FitReport", "fit"]


@dataclass(frozen=True, slots=True)
class FitReport:
    route: str
    budget: int
    estimate_before: int
    estimate_after: int
    capped: int = 0
    capped_tokens: int = 0
    offloaded_images: int = 0
    offloaded_tokens: int = 0
    elided_messages: int = 0
    elided_tokens: int = 0

    @property
    def transparent(self) -> bool:
        return not (self.capped or self.offloaded_images or self.elided_messages)

    def actions(self) -> str:
        """The ``x-routefit-actions`` header value: ``none`` or ``capped=2,elided_messages=14``."""
        parts = [
            f"{name}={value}"
            for name, value in (
                ("capped", self.capped),
                ("offloaded_images", self.offloaded_images),
                ("elided_messages", self.elided_messages),
            )
            if value
        ]
        return ",".join(parts) or "none"

    def as_dict(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "budget": self.budget,
            "estimate_before": self.estimate_before,
            "estimate_after": self.estimate_after,
            "transparent": self.transparent,
            "actions": {
                "capped": {"messages": self.capped, "tokens_removed": self.capped_tokens},
                "offloaded_images": {
                    "images": self.offloaded_images,
                    "tokens_removed": self.offloaded_tokens,
                },
                "elided_messages": {
                    "messages": self.elided_messages,
                    "tokens_removed": self.elided_tokens,
                },
            },
        }


@dataclass(frozen=True, slots=True)
class Fit:
    body: Mapping[str, Any]
    messages: tuple[Message, ...]
    pressure: Pressure
    report: FitReport
    estimate: int = field(default=0)


class FitError(Exception):
    """Nothing the policy allows makes the request fit; the proxy answers 400
    ``context_length_exceeded`` with these figures."""

    def __init__(self, route: str, estimate: int, budget: int, window: int) -> None:
        self.route = route
        self.estimate = estimate
        self.budget = budget
        self.window = window
        super().__init__(
            f"route {route!r}: the request needs about {estimate:,} prompt tokens after fitting "
            f"but its budget is {budget:,} (context window {window:,} minus the output reserve "
            f"and safety margin); the protected messages (system, first and last user message, "
            f"newest turn) alone do not fit"
        )


def _estimate(pressure: Pressure, correction: Correction) -> int:
    return correction.apply(pressure.text, pressure.framing, pressure.images)


def fit(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None = None,
    sizes: Sizes | None = None,
    pressure: Pressure | None = None,
) -> Fit:
    """Compile ``request`` to fit ``route``; raise FitError when it cannot."""
    correction = correction or Correction()
    budget = prompt_budget(
        route.context_window, route.max_output_tokens, policy, request.max_output_tokens
    )
    if pressure is None:
        pressure = measure_messages(request.messages, request.tools, route, sizes)
    before = _estimate(pressure, correction)
    if before <= budget:
        report = FitReport(route.alias, budget, before, before)
        return Fit(request.body, request.messages, pressure, report, before)

    messages = request.messages
    capped = capped_tokens = 0
    active: set[str] = set()
    last: tuple[int, Fit | None] = (before, None)
    for strategy in policy.strategies:
        active.add(strategy)
        if strategy == "cap":
            result = cap_oversized(messages, pressure.messages, route, policy, budget)
            if result.capped:
                messages = result.messages
                capped, capped_tokens = result.capped, result.removed_tokens
                pressure = measure_messages(messages, request.tools, route, sizes)
        attempt = _compile(
            request, messages, pressure, route, policy, correction, sizes, budget, active
        )
        fitted = attempt[1]
        if fitted is not None:
            report = FitReport(
                route.alias,
                budget,
                before,
                fitted.estimate,
                capped,
                capped_tokens,
                fitted.report.offloaded_images,
                fitted.report.offloaded_tokens,
                fitted.report.elided_messages,
                fitted.report.elided_tokens,
            )
            return Fit(fitted.body, fitted.messages, fitted.pressure, report, fitted.estimate)
        last = attempt
    raise FitError(route.alias, last[0], budget, route.context_window)


def _compile(
    request: ChatRequest,
    messages: tuple[Message, ...],
    pressure: Pressure,
    route: Route,
    policy: FitPolicy,
    correction: Correction,
    sizes: Sizes | None,
    budget: int,
    active: set[str],
) -> tuple[int, Fit | None]:
    """Plan offload/elision with the strategies active so far; (estimate, fit or None)."""
    estimate = _estimate(pressure, correction)
    if estimate <= budget:
        return estimate, _done(request, messages, pressure, route, budget, estimate)
    offload = "offload_images" in active and route.supports_vision and route.image_rule.visual
    elide = "elide" in active
    if not (offload or elide):
        return estimate, None
    units = group_units(messages)
    costs = _unit_costs(messages, units, pressure, route, correction)
    overhead = correction.apply(0, pressure.tools + pressure.priming)
    marker = _marker_price(route, correction)
    replayed = plan(
        costs,
        overhead=overhead,
        budget=budget,
        marker=marker,
        offload=offload,
        elide=elide,
        low_water=policy.low_water,
        quantum=policy.checkpoint_quantum,
        step=policy.image_offload_step,
        pin_fraction=policy.pin_fraction,
    )
    # When the replayed plan overflows (a huge new turn), try the most the policy allows: first
    # keeping the pinned head, then only the protected head.
    candidates = [replayed] + [
        plan_max(costs, overhead=overhead, marker=marker, offload=offload, elide=elide, head=h)
        for h in (replayed.head, _protected_head(costs))
    ]
    for candidate in candidates:
        built = _build(
            request, messages, units, pressure, candidate, route, correction, sizes, budget
        )
        estimate = min(estimate, built.estimate)
        if built.estimate <= budget:
            return built.estimate, built
    return estimate, None


def _protected_head(costs: Sequence[UnitCosts]) -> int:
    for i, unit in enumerate(costs):
        if unit.user:
            return min(i + 1, max(len(costs) - 1, 0))
    return 0


def _unit_costs(
    messages: Sequence[Message],
    units: Sequence[Unit],
    pressure: Pressure,
    route: Route,
    correction: Correction,
) -> list[UnitCosts]:
    tok = get_tokenizer(route.tokenizer)
    first_user = next((i for i, m in enumerate(messages) if m.role == "user"), None)
    costs = []
    for unit in units:
        text = framing = images = placeholders = count = 0
        fixed = user = False
        for i in range(unit.start, unit.end):
            m, p = messages[i], pressure.messages[i]
            text += p.text
            framing += p.framing
            images += p.images
            for part in m.images:
                placeholders += tok.count(placeholder_for(part, route))
                count += 1
            fixed |= m.role in ("system", "developer") or i == first_user
            user |= m.role == "user"
        costs.append(
            UnitCosts(
                full=correction.apply(text, framing, images),
                offloaded=correction.apply(text + placeholders, framing),
                images=count,
                fixed=fixed,
                user=user,
            )
        )
    return costs


def _marker_price(route: Route, correction: Correction) -> int:
    """An upper bound on one marker message's price (its numbers at their widest)."""
    marker = Message(role="user", parts=(TextPart(elision_marker(999_999, 999_999_999)),))
    price, _ = measure_message(marker, route, prev_role="tool")
    return correction.apply(price.text, price.framing)


def _marker_message(next_role: str | None, elided: int, tokens: int) -> Message:
    # Alternate with what follows: before a user message the marker speaks as the assistant,
    # elsewhere as the user (after tool results or a user message, before an assistant turn).
    role = "assistant" if next_role == "user" else "user"
    text = elision_marker(elided, tokens)
    return Message(role=role, parts=(TextPart(text),), wire={"role": role, "content": text})


def _build(
    request: ChatRequest,
    messages: tuple[Message, ...],
    units: Sequence[Unit],
    pressure: Pressure,
    chosen: Plan,
    route: Route,
    correction: Correction,
    sizes: Sizes | None,
    budget: int,
) -> Fit:
    keep = protected_units(messages, units)
    out: list[Message] = []
    run_messages = run_tokens = 0
    elided = elided_tokens = offloaded = offloaded_tokens = 0

    def flush(next_role: str | None) -> None:
        nonlocal run_messages, run_tokens
        if run_messages:
            out.append(_marker_message(next_role, run_messages, run_tokens))
            run_messages = run_tokens = 0

    for u, unit in enumerate(units):
        span = range(unit.start, unit.end)
        if chosen.head <= u < chosen.cut and u not in keep:
            run_messages += len(span)
            run_tokens += sum(pressure.messages[i].total for i in span)
            elided += len(span)
            elided_tokens += sum(pressure.messages[i].total for i in span)
            continue
        flush(messages[unit.start].role)
        for i in span:
            message = messages[i]
            if u < chosen.offload and u not in keep and message.images:
                offloaded += len(message.images)
                before = pressure.messages[i].total
                message = offload_images(message, route)
                after, _ = measure_message(message, route, i, sizes)
                offloaded_tokens += before - after.total
            out.append(message)
    flush(None)
    fitted = measure_messages(out, request.tools, route, sizes)
    estimate = _estimate(fitted, correction)
    body = dict(request.body)
    body["messages"] = [message_wire(m) for m in out]
    report = FitReport(
        route.alias,
        budget,
        0,
        estimate,
        offloaded_images=offloaded,
        offloaded_tokens=offloaded_tokens,
        elided_messages=elided,
        elided_tokens=elided_tokens,
    )
    return Fit(body, tuple(out), fitted, report, estimate)


def _done(
    request: ChatRequest,
    messages: tuple[Message, ...],
    pressure: Pressure,
    route: Route,
    budget: int,
    estimate: int,
) -> Fit:
    """Capping alone was enough: the capped messages, nothing else changed."""
    body = dict(request.body)
    body["messages"] = [message_wire(m) for m in messages]
    return Fit(body, messages, pressure, FitReport(route.alias, budget, 0, estimate), estimate)
