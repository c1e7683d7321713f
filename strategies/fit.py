"""fit: a priced conversation and a route's budget in, the request to send out.

Transparent when the request fits: the client's body goes out as is. Otherwise the policy's
strategies run in order (default: cap oversized tool outputs → offload old images → elide whole
middle units), each only when the previous ones were not enough, with cache-stable cut points
(``strategies.elide``). The result is verified by measuring it again with the meter; a request
that cannot be made to fit raises FitError instead of being forwarded to fail at the provider.

Pure and deterministic: same request, route, policy and correction → the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pricing.bounds import Proof, bound_pressure
from pricing.calibration import (
    DEFAULTED,
    FEATURES,
    IMAGES,
    Correction,
    message_features,
    pressure_features,
)
from pricing.content import CLASSES, PROSE
from pricing.messages import ChatRequest, Message, TextPart, message_wire
from pricing.meter import Memo, Pressure, Sizes, measure_message, measure_messages
from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from strategies.cap import cap_oversized
from strategies.elide import Plan, UnitCosts, elision_marker, plan, plan_max
from strategies.offload import offload_images, placeholder_for
from strategies.policy import FitPolicy, OutputLimit, prompt_budget
from strategies.units import Unit, answers_tool_round, group_units, protected_units

__all__ = ["Fit", "FitError", "FitReport", "fit", "fit_bounded"]


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
    #: The reply's reservation (``strategies.output``); None when ``fit`` ran on its own.
    output: OutputLimit | None = None

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
            f"{limit}; the protected messages (system, first and last user message, newest "
            f"turn) alone do not fit"
        )


def _team_limit(route: Route, policy: FitPolicy, request: ChatRequest, budget: int) -> int | None:
    """The team's ``max_prompt_tokens`` when it, not the window, set ``budget``."""
    if policy.max_prompt_tokens is None:
        return None
    window_budget = prompt_budget(
        route.context_window,
        route.max_output_tokens,
        replace(policy, max_prompt_tokens=None),
        request.max_output_tokens,
    )
    return budget if budget < window_budget else None


def _estimate(pressure: Pressure, correction: Correction) -> int:
    return correction.price_pressure(pressure)


@dataclass(slots=True)
class _Job:
    """One fit: its inputs, and what it has already priced (each message once per request,
    however many plans are tried)."""

    request: ChatRequest
    route: Route
    policy: FitPolicy
    correction: Correction
    sizes: Sizes | None
    budget: int
    memo: Memo = field(default_factory=Memo)
    placeholders: dict[int, int] = field(default_factory=dict)
    offloaded: dict[int, Message] = field(default_factory=dict)
    _units: tuple[tuple[Message, ...], tuple[Unit, ...], list[UnitCosts]] | None = None

    def measure(self, messages: Sequence[Message]) -> Pressure:
        return measure_messages(messages, self.request.tools, self.route, self.sizes, self.memo)

    def placeholder_tokens(self, message: Message) -> int:
        """Tokens of the placeholders that would replace the message's images."""
        n = self.placeholders.get(id(message))
        if n is None:
            tok = get_tokenizer(self.route.tokenizer)
            n = sum(tok.count(placeholder_for(part, self.route)) for part in message.images)
            self.placeholders[id(message)] = n
        return n

    def units(
        self, messages: tuple[Message, ...], pressure: Pressure
    ) -> tuple[tuple[Unit, ...], list[UnitCosts]]:
        """Units and their costs, computed once per version of the message list."""
        if self._units is None or self._units[0] is not messages:
            units = group_units(messages)
            self._units = (messages, units, _unit_costs(self, messages, units, pressure))
        return self._units[1], self._units[2]

    def offload(self, message: Message) -> Message:
        found = self.offloaded.get(id(message))
        if found is None:
            found = self.offloaded[id(message)] = offload_images(message, self.route)
        return found


def fit(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None = None,
    sizes: Sizes | None = None,
) -> Fit:
    """Compile ``request`` to fit ``route``; raise FitError when it cannot."""
    budget = prompt_budget(
        route.context_window, route.max_output_tokens, policy, request.max_output_tokens
    )
    job = _Job(request, route, policy, correction or Correction(), sizes, budget)
    messages, adapted = _adapt(job, request.messages)
    pressure = job.measure(messages)
    before = _estimate(pressure, job.correction)
    if before <= budget:
        if not adapted:
            report = FitReport(route.alias, budget, before, before)
            return Fit(request.body, request.messages, pressure, report, before)
        adapted_fit = _assemble(job, messages, pressure, before, offloaded=adapted)
        return replace(adapted_fit, report=replace(adapted_fit.report, estimate_before=before))

    capped = capped_tokens = 0
    active: set[str] = set()
    best = before
    for n, strategy in enumerate(policy.strategies):
        active.add(strategy)
        if strategy == "cap":
            result = cap_oversized(messages, pressure.messages, route, policy, budget)
            if result.capped:
                messages = result.messages
                capped, capped_tokens = result.capped, result.removed_tokens
                pressure = job.measure(messages)
        final = n == len(policy.strategies) - 1
        estimate, fitted = _compile(job, messages, pressure, active, final)
        best = min(best, estimate)
        if fitted is not None:
            r = fitted.report
            report = FitReport(
                route.alias,
                budget,
                before,
                fitted.estimate,
                capped,
                capped_tokens,
                r.offloaded_images + adapted,
                r.offloaded_tokens,
                r.elided_messages,
                r.elided_tokens,
            )
            return Fit(fitted.body, fitted.messages, fitted.pressure, report, fitted.estimate)
    limit = _team_limit(route, policy, request, budget)
    raise FitError(route.alias, best, budget, route.context_window, limit)


def fit_bounded(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None = None,
    sizes: Sizes | None = None,
    proof: Proof | None = None,
) -> Fit | None:
    """The transparent fit, proved by a cheap upper bound (``pricing.bounds``) instead of an
    exact count; None when nothing is proved (no bound for the tokenizer, images to adapt, or
    the bound over the budget), and ``fit`` must run. ``proof``: a bound over the budget may be
    tightened by counting the biggest texts in part (``Proof.tighten``).

    What it returns is what ``fit`` would return (the client's body, untouched) except that
    ``estimate`` and ``pressure`` are bounds: ≥ the exact ones, part by part."""
    budget = prompt_budget(
        route.context_window, route.max_output_tokens, policy, request.max_output_tokens
    )
    images = sum(len(m.images) for m in request.messages)
    if images and not (
        route.supports_vision
        and route.image_rule.visual
        and images <= route.image_limits.max_images
    ):
        return None  # _adapt would offload some: only the exact path knows which
    pressure = bound_pressure(request.messages, request.tools, route, sizes, proof)
    if pressure is None:
        return None
    estimate = _bound_estimate(pressure, correction or Correction())
    if estimate > budget and proof is not None:
        texts = [p.text for m in request.messages for p in m.parts if isinstance(p, TextPart)]
        while estimate > budget and proof.tighten(texts, estimate - budget):
            pressure = bound_pressure(request.messages, request.tools, route, sizes, proof)
            assert pressure is not None
            estimate = _bound_estimate(pressure, correction or Correction())
    if estimate > budget:
        return None
    report = FitReport(route.alias, budget, estimate, estimate)
    return Fit(request.body, request.messages, pressure, report, estimate)


def _bound_estimate(pressure: Pressure, correction: Correction) -> int:
    """The calibrated price of a bound, itself a bound of the exact estimate: the bound does not
    know the text's content classes, so all its text is priced at the dearest class weight, and
    a negative weight (a feature that lowered the fitted count) is read as 0."""
    features = pressure_features(pressure)
    if correction.neutral:
        return correction.price(features)
    weights = correction.vector
    classes = range(len(CLASSES))
    text = sum(features[i] for i in classes)
    dearest = correction.dearest_text  # per-character weights included: a bound has no profile
    rest = sum(
        max(0.0, w) * x
        for j, (w, x) in enumerate(zip(weights, features, strict=True))
        if j not in classes
    )
    return math.ceil(text * dearest + rest - 1e-9)


def _adapt(job: _Job, messages: tuple[Message, ...]) -> tuple[tuple[Message, ...], int]:
    """Images the route cannot take go as placeholders, whatever the budget: every image on a
    text-only route; on a vision route the oldest beyond its image-count limit, in steps of
    ``image_offload_step`` so consecutive turns offload the same ones. Returns the messages and
    how many images became placeholders."""
    route = job.route
    total = sum(len(m.images) for m in messages)
    if not total:
        return messages, 0
    if route.supports_vision and route.image_rule.visual:
        if total <= route.image_limits.max_images:
            return messages, 0
        step = job.policy.image_offload_step
        excess = -(-(total - route.image_limits.max_images) // step) * step
    else:
        excess = total
    out = list(messages)
    done = 0
    for i, message in enumerate(out):
        if done >= excess:
            break
        if message.images:
            done += len(message.images)
            out[i] = job.offload(message)
    return tuple(out), done


def _compile(
    job: _Job,
    messages: tuple[Message, ...],
    pressure: Pressure,
    active: set[str],
    final: bool,
) -> tuple[int, Fit | None]:
    """Plan offload/elision with the strategies active so far; (estimate, fit or None).

    ``final``: no strategy comes after this one, so the most aggressive plan is built even when
    its upper-bound estimate says it will not fit (the bound may be a few tokens pessimistic).
    """
    estimate = _estimate(pressure, job.correction)
    if estimate <= job.budget:  # capping alone was enough
        return estimate, _assemble(job, messages, pressure, estimate)
    route = job.route
    offload = "offload_images" in active and route.supports_vision and route.image_rule.visual
    elide = "elide" in active
    if not (offload or elide):
        return estimate, None
    units, costs = job.units(messages, pressure)
    overhead = job.correction.apply(0, pressure.tools + pressure.priming)
    marker = _marker_price(route, job.correction)
    policy = job.policy
    replayed = plan(
        costs,
        overhead=overhead,
        budget=job.budget,
        marker=marker,
        offload=offload,
        elide=elide,
        low_water=policy.low_water,
        quantum=policy.checkpoint_quantum,
        step=policy.image_offload_step,
        pin_fraction=policy.pin_fraction,
    )
    # When the replayed plan overflows (a huge new turn), try the most the policy allows with
    # the longest head that fits: the pinned head, else a shorter prefix of it (still cached),
    # down to the protected head.
    fallback = plan_max(
        costs,
        overhead=overhead,
        marker=marker,
        offload=offload,
        elide=elide,
        head=replayed.head,
        floor=_protected_head(costs),
        budget=job.budget,
    )
    candidates = [replayed, fallback]
    for n, candidate in enumerate(candidates):
        # A plan's own estimate is an upper bound (markers at their widest, units rounded up):
        # build only the plans that can fit, and on the last strategy the last plan.
        last = final and n == len(candidates) - 1
        if candidate.estimate > job.budget and not last:
            estimate = min(estimate, candidate.estimate)
            continue
        built = _build(job, messages, units, pressure, candidate)
        estimate = min(estimate, built.estimate)
        if built.estimate <= job.budget:
            return built.estimate, built
    return estimate, None


def _protected_head(costs: Sequence[UnitCosts]) -> int:
    for i, unit in enumerate(costs):
        if unit.user:
            return min(i + 1, max(len(costs) - 1, 0))
    return 0


def _unit_costs(
    job: _Job, messages: Sequence[Message], units: Sequence[Unit], pressure: Pressure
) -> list[UnitCosts]:
    first_user = next((i for i, m in enumerate(messages) if m.role == "user"), None)
    costs = []
    price = job.correction.price
    for u, unit in enumerate(units):
        features = [0] * len(FEATURES)
        placeholders = count = 0
        fixed = user = False
        for i in range(unit.start, unit.end):
            m, p = messages[i], pressure.messages[i]
            features = [a + b for a, b in zip(features, message_features(p), strict=True)]
            if p.images:
                placeholders += job.placeholder_tokens(m)
                count += len(m.images)
            fixed |= m.role in ("system", "developer") or i == first_user
            user |= m.role == "user"
        offloaded = list(features)
        offloaded[PROSE] += placeholders  # the placeholder text replaces the image
        offloaded[IMAGES] = offloaded[DEFAULTED] = 0
        costs.append(
            UnitCosts(
                full=price(features),
                offloaded=price(offloaded),
                images=count,
                fixed=fixed,
                user=user,
                answers=answers_tool_round(messages, units, u),
            )
        )
    return costs


def _marker_price(route: Route, correction: Correction) -> int:
    """An upper bound on one marker message's price (its numbers at their widest)."""
    marker = Message(role="user", parts=(TextPart(elision_marker(999_999, 999_999_999)),))
    price, _ = measure_message(marker, route, prev_role="tool")
    return correction.price(message_features(price))


def _marker_message(next_role: str | None, elided: int, tokens: int) -> Message:
    # Alternate with what follows: before a user message the marker speaks as the assistant,
    # elsewhere as the user (after tool results or a user message, before an assistant turn).
    role = "assistant" if next_role == "user" else "user"
    text = elision_marker(elided, tokens)
    return Message(role=role, parts=(TextPart(text),), wire={"role": role, "content": text})


def _build(
    job: _Job,
    messages: tuple[Message, ...],
    units: Sequence[Unit],
    pressure: Pressure,
    chosen: Plan,
) -> Fit:
    keep = protected_units(messages, units)
    out: list[Message] = []
    run_messages = run_tokens = 0
    elided = elided_tokens = offloaded = offloaded_tokens = 0
    prices = pressure.messages

    def flush(next_role: str | None) -> None:
        nonlocal run_messages, run_tokens
        if run_messages:
            out.append(_marker_message(next_role, run_messages, run_tokens))
            run_messages = run_tokens = 0

    for u, unit in enumerate(units):
        span = range(unit.start, unit.end)
        if chosen.head <= u < chosen.cut and u not in keep:
            tokens = sum(prices[i].total for i in span)
            run_messages += len(span)
            run_tokens += tokens
            elided += len(span)
            elided_tokens += tokens
            continue
        flush(messages[unit.start].role)
        for i in span:
            message = messages[i]
            if u < chosen.offload and u not in keep and message.images:
                offloaded += len(message.images)
                offloaded_tokens += prices[i].images - job.placeholder_tokens(message)
                message = job.offload(message)
            out.append(message)
    flush(None)
    return _assemble(
        job, out, job.measure(out), None, offloaded, offloaded_tokens, elided, elided_tokens
    )


def _assemble(
    job: _Job,
    messages: Sequence[Message],
    pressure: Pressure,
    estimate: int | None,
    offloaded: int = 0,
    offloaded_tokens: int = 0,
    elided: int = 0,
    elided_tokens: int = 0,
) -> Fit:
    """The body to send: the client's, with the fitted messages (other fields untouched)."""
    if estimate is None:
        estimate = _estimate(pressure, job.correction)
    body = dict(job.request.body)
    body["messages"] = [message_wire(m) for m in messages]
    report = FitReport(
        job.route.alias,
        job.budget,
        0,
        estimate,
        offloaded_images=offloaded,
        offloaded_tokens=offloaded_tokens,
        elided_messages=elided,
        elided_tokens=elided_tokens,
    )
    return Fit(body, tuple(messages), pressure, report, estimate)
