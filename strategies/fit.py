"""fit: a priced conversation and a route's budget in, the request to send out.

Transparent when the request fits: the client's body goes out as is. Otherwise the policy's
strategies run in order (default: cap oversized tool outputs → offload old images → mask old
tool outputs → elide whole middle units), each only when the previous ones were not enough,
with cache-stable cut points (``strategies.elide``). The newest turn (everything since the
latest user message) is kept whole whenever it fits once masked; refusal is the last resort
(``_last_resort``): FitError only when the system prompt and the latest user message alone do
not fit. The result is verified by measuring it again with the meter.

Decisions recorded here (issue 31): what no cut may touch is the system prompt and the latest
user message, as the cap rule leaves them — the task (first user message) yields before them,
since the latest message is what the model must answer; before a call of the newest turn is
dropped its outputs are masked, oldest first, the newest unit's last; the last resort is
only for a policy that elides (a policy without ``elide`` asked for no elision, and is refused
instead). Masking and elision order follow measurements (bench/REPORT.md, section 5b).

Pure and deterministic: same request, route, policy and correction → the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pricing.bounds import Proof, bound_pressure
from pricing.calibration import (
    FEATURES,
    IMAGE_FEATURES,
    Correction,
    message_features,
    pressure_features,
)
from pricing.content import CLASSES, PROSE
from pricing.messages import ChatRequest, Message, TextPart, message_wire
from pricing.meter import (
    Memo,
    MessagePressure,
    Pressure,
    Sizes,
    measure_message,
    measure_messages,
)
from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from strategies.actions import Action, Actions
from strategies.elide import ELIDE, Plan, Schedule, UnitCosts, elision_marker, plan, plan_max
from strategies.mask import MASK, mask_output, tool_name
from strategies.offload import OFFLOAD, offload_images, placeholder_for
from strategies.policy import FitPolicy, OutputLimit, prompt_budget
from strategies.registry import STRATEGIES, by_name
from strategies.strategy import FitContext, FitState
from strategies.units import Unit, answers_tool_round, group_units, protected_units

__all__ = ["Fit", "FitError", "FitReport", "fit", "fit_bounded"]

_TOOL_ROLES = ("tool", "function")

#: Every registered strategy's label, in the registry's order: the report lists them all.
_LABELS = tuple(s.label for s in STRATEGIES)


def _actions(*done: Action) -> Actions:
    return Actions.tally(_LABELS, done)


#: A report's actions when nothing was done (every strategy listed, at zero).
NOTHING = _actions()


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

    @property
    def transparent(self) -> bool:
        return not self.actions.taken()

    def as_dict(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "budget": self.budget,
            "estimate_before": self.estimate_before,
            "estimate_after": self.estimate_after,
            "transparent": self.transparent,
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
    #: The ``tool_call_id`` of the last output that the previous request of the session had
    #: masked too: the sent prefix up to it is what both share after a mask step, where a wire
    #: with explicit cache breakpoints should read (None: nothing masked that long).
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
    masked: dict[int, tuple[Message, MessagePressure]] = field(default_factory=dict)
    _units: tuple[tuple[Message, ...], tuple[Unit, ...], list[UnitCosts]] | None = None

    def measure(self, messages: Sequence[Message]) -> Pressure:
        return measure_messages(messages, self.request.tools, self.route, self.sizes, self.memo)

    def placeholder_tokens(self, message: Message) -> int:
        """Tokens of the placeholders that would replace the message's images."""
        n = self.placeholders.get(id(message))
        if n is None:
            tok = get_tokenizer(self.route.tokenizer, self.route.scope)
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

    def _masked(
        self, messages: Sequence[Message], unit: Unit, i: int, price: MessagePressure
    ) -> tuple[Message, MessagePressure]:
        found = self.masked.get(id(messages[i]))
        if found is None:
            message = messages[i]
            name = tool_name(messages[unit.start : unit.end], message.tool_call_id)
            masked = mask_output(message, name, price.total)
            prev = messages[i - 1].role if i else None
            measured, _ = measure_message(masked, self.route, i, self.sizes, prev)
            found = self.masked[id(message)] = (masked, measured)
        return found

    def mask(
        self, messages: Sequence[Message], unit: Unit, i: int, price: MessagePressure
    ) -> Message:
        """Message ``i`` (a tool result of ``unit``) with its output masked."""
        return self._masked(messages, unit, i, price)[0]

    def mask_price(
        self, messages: Sequence[Message], unit: Unit, i: int, price: MessagePressure
    ) -> MessagePressure:
        return self._masked(messages, unit, i, price)[1]

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
        adapted_fit = _assemble(job, messages, pressure, before, _Tally(offloaded=adapted))
        return replace(adapted_fit, report=replace(adapted_fit.report, estimate_before=before))

    context = FitContext(route, policy, budget, job.measure)
    state = FitState(messages, pressure)
    best = before
    for n, name in enumerate(policy.strategies):
        state = by_name(name).apply(state, context)
        estimate, fitted = _compile(job, state, final=n == len(policy.strategies) - 1)
        best = min(best, estimate)
        if fitted is not None:
            # what the rewrites did, what the plan did, and the images the route cannot take
            done = (*state.done, *fitted.report.actions.values(), Action(OFFLOAD.label, adapted))
            report = FitReport(route.alias, budget, before, fitted.estimate, _actions(*done))
            return replace(fitted, report=report)
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


def _compile(job: _Job, state: FitState, final: bool) -> tuple[int, Fit | None]:
    """Plan offload/masking/elision with the moves allowed so far; (estimate, fit or None).

    ``final``: no strategy comes after this one, so the most aggressive plan is built even when
    its upper-bound estimate says it will not fit (the bound may be a few tokens pessimistic),
    and when even that overflows, the last resort (``_last_resort``) runs.
    """
    messages, pressure = state.messages, state.pressure
    estimate = _estimate(pressure, job.correction)
    if estimate <= job.budget:  # the rewrites alone were enough
        return estimate, _assemble(job, messages, pressure, estimate)
    # in the policy's order (``Move.apply`` has left out moves the route does not allow)
    order = tuple(s for s in job.policy.strategies if s in state.moves)
    units, costs = job.units(messages, pressure)
    if order:
        for candidate_estimate, built in _candidates(
            job, messages, units, pressure, costs, order, final
        ):
            estimate = min(estimate, candidate_estimate)
            if built is not None and built.estimate <= job.budget:
                return built.estimate, built
    if final and ELIDE.name in job.policy.strategies:
        rescued = _last_resort(job, messages, units, pressure)
        if rescued is not None:
            return rescued.estimate, rescued
    return estimate, None


def _candidates(
    job: _Job,
    messages: tuple[Message, ...],
    units: Sequence[Unit],
    pressure: Pressure,
    costs: Sequence[UnitCosts],
    order: tuple[str, ...],
    final: bool,
) -> list[tuple[int, Fit | None]]:
    """The cache-stable plans, least aggressive first, each built when it can fit.

    The replayed plan first; when it overflows (a huge new turn), the most the policy allows
    with the longest head that fits — the pinned head, else a shorter prefix of it (still
    cached), down to the protected head — stopping elision at the newest turn, then cutting into
    it (its calls go only when the turn does not fit once masked)."""
    policy = job.policy
    overhead = job.correction.apply(0, pressure.tools + pressure.priming)
    marker = _marker_price(job.route, job.correction)
    schedule = Schedule(
        order,
        policy.low_water,
        policy.checkpoint_quantum,
        policy.image_offload_step,
        policy.pin_fraction,
        policy.mask_water,
    )
    replayed = plan(costs, overhead=overhead, budget=job.budget, marker=marker, schedule=schedule)
    plans = [replayed]
    for into_turn in (False, True) if ELIDE.name in order else (False,):
        plans.append(
            plan_max(
                costs,
                overhead=overhead,
                marker=marker,
                offload=OFFLOAD.name in order,
                elide=ELIDE.name in order,
                mask=MASK.name in order,
                head=replayed.head,
                floor=_protected_head(costs),
                budget=job.budget,
                into_turn=into_turn,
            )
        )
    out: list[tuple[int, Fit | None]] = []
    for n, candidate in enumerate(plans):
        # A plan's own estimate is an upper bound (markers at their widest, units rounded up):
        # build only the plans that can fit, and on the last strategy the last plan.
        last = final and n == len(plans) - 1
        if n == 2:  # before the newest turn loses a call, its newest outputs are masked too
            out += _mask_newest(job, messages, units, plans[1]) if MASK.name in order else []
            if out[-1][0] <= job.budget:
                break
        if candidate.estimate > job.budget and not last:
            out.append((candidate.estimate, None))
            continue
        states, masks, offload = _plan_states(messages, units, candidate)
        built = _build(job, messages, units, states, masks, offload)
        if n == 0:
            built = replace(built, settled_mask=_settled(messages, units, masks, candidate))
        out.append((built.estimate, built))
        if built.estimate <= job.budget:
            break
    return out


def _settled(
    messages: Sequence[Message], units: Sequence[Unit], masks: frozenset[int], chosen: Plan
) -> str | None:
    """The call id of the last output masked both here and, by the replay, one unit earlier."""
    end = units[chosen.settled_mask - 1].end if chosen.settled_mask else 0
    settled = [i for i in masks if i < end]
    return messages[max(settled)].tool_call_id if settled else None


def _mask_newest(
    job: _Job, messages: tuple[Message, ...], units: Sequence[Unit], chosen: Plan
) -> list[tuple[int, Fit | None]]:
    """``chosen`` (the newest turn kept whole, everything older masked or elided) with the
    newest unit's outputs masked too, oldest first, one more each time, until it fits."""
    states, masks, offload = _plan_states(messages, units, chosen)
    n = len(units)
    newest = [n - 1, n - 2] if answers_tool_round(messages, units, n - 1) else [n - 1]
    extra = [i for i in _outputs(messages, units, newest) if i not in masks]
    out: list[tuple[int, Fit | None]] = []
    for k in range(1, len(extra) + 1):
        built = _build(job, messages, units, states, masks | frozenset(extra[:k]), offload)
        out.append((built.estimate, built))
        if built.estimate <= job.budget:
            break
    return out or [(chosen.estimate, None)]


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
    masking = MASK.name in job.policy.strategies
    for u, unit in enumerate(units):
        features = [0] * len(FEATURES)
        masked: list[int] | None = None
        placeholders = count = 0
        fixed = user = False
        for i in range(unit.start, unit.end):
            m, p = messages[i], pressure.messages[i]
            own = message_features(p)
            features = [a + b for a, b in zip(features, own, strict=True)]
            if masking and m.role in _TOOL_ROLES:
                swap = message_features(job.mask_price(messages, unit, i, p))
                masked = masked or [0] * len(FEATURES)
                masked = [a + b - c for a, b, c in zip(masked, swap, own, strict=True)]
            if p.images:
                placeholders += job.placeholder_tokens(m)
                count += len(m.images)
            fixed |= m.role in ("system", "developer") or i == first_user
            user |= m.role == "user"
        offloaded = list(features)
        offloaded[PROSE] += placeholders  # the placeholder text replaces the image
        for j in IMAGE_FEATURES:  # every image token leaves with the image
            offloaded[j] = 0
        both = None
        if masked is not None:
            # Masked outputs lose their images with their text; other images stay or go (the
            # offloaded form has none left: the masked ones' negative shares must not price
            # other text below its count).
            together = [a + b for a, b in zip(offloaded, masked, strict=True)]
            for j in IMAGE_FEATURES:
                together[j] = 0
            both = price(together)
            masked_price = price([a + b for a, b in zip(features, masked, strict=True)])
        costs.append(
            UnitCosts(
                full=price(features),
                offloaded=price(offloaded),
                images=count,
                fixed=fixed,
                user=user,
                answers=answers_tool_round(messages, units, u),
                masked=None if masked is None else masked_price,
                masked_offloaded=both,
            )
        )
    return costs


def _marker_price(route: Route, correction: Correction) -> int:
    """An upper bound on one marker message's price (its numbers at their widest)."""
    marker = Message(role="user", parts=(TextPart(elision_marker(999_999, 999_999_999)),))
    price, _ = measure_message(marker, route, prev_role="tool")
    return correction.price(message_features(price))


def _marker_message(next_role: str | None, elided: int, tokens: int, first: bool) -> Message:
    # Alternate with what follows: before a user message the marker speaks as the assistant,
    # elsewhere as the user (after tool results or a user message, before an assistant turn).
    # First in the conversation (the last resort dropped the task) it speaks as the user: a
    # conversation opens with a user turn, and the user message after it merges with it.
    role = "assistant" if next_role == "user" and not first else "user"
    text = elision_marker(elided, tokens)
    return Message(role=role, parts=(TextPart(text),), wire={"role": role, "content": text})


#: What becomes of a unit: sent (its outputs maybe masked, its images maybe offloaded), elided.
KEPT, ELIDED = "keep", "elide"


def _outputs(messages: Sequence[Message], units: Sequence[Unit], us: Iterable[int]) -> list[int]:
    """Indices of the tool results in units ``us``, oldest first."""
    return [
        i
        for u in sorted(us)
        for i in range(units[u].start, units[u].end)
        if messages[i].role in _TOOL_ROLES
    ]


def _plan_states(
    messages: Sequence[Message], units: Sequence[Unit], chosen: Plan
) -> tuple[list[str], frozenset[int], list[bool]]:
    """A plan as per-unit states, the outputs to mask and offload flags, protection applied."""
    keep = protected_units(messages, units)
    n = len(units)
    newest = {n - 1, n - 2} if answers_tool_round(messages, units, n - 1) else {n - 1}
    elided = [chosen.head <= u < chosen.cut and u not in keep for u in range(n)]
    masked = [u for u in range(min(chosen.mask, n)) if u not in newest and not elided[u]]
    states = [ELIDED if e else KEPT for e in elided]
    offload = [u < chosen.offload and u not in keep for u in range(n)]
    return states, frozenset(_outputs(messages, units, masked)), offload


def _last_resort(
    job: _Job, messages: tuple[Message, ...], units: Sequence[Unit], pressure: Pressure
) -> Fit | None:
    """Refusal is the last resort: what no cut may touch is the system prompt and the latest
    user message (as the cap rule left them). When the cache-stable plans overflow, try, in
    order, keeping the task and the newest turn with every output masked; the same without the
    task; the latest user message with the newest unit masked; the core alone, with a marker,
    then without one. The first that fits is sent; None when even the bare core does not."""
    n = len(units)
    roles = [{m.role for m in messages[u.start : u.end]} for u in units]
    system = {u for u in range(n) if roles[u] & {"system", "developer"}}
    users = [u for u in range(n) if "user" in roles[u]]
    last = users[-1] if users else n - 1
    first = users[0] if users else last
    answered = n - 2 if answers_tool_round(messages, units, n - 1) else n - 1
    turn = set(range(min(last, answered), n))
    outputs = _outputs(messages, units, turn) if MASK.name in job.policy.strategies else []
    # The newest turn whole with the task, its outputs masked oldest first, one more each time;
    # then without the task; then the latest user message with the newest unit, masked.
    attempts = [({*turn, first}, frozenset(outputs[:k])) for k in range(len(outputs) + 1)]
    attempts.append((turn, frozenset(outputs)))
    newest = {n - 1, answered, last}
    attempts.append((newest, frozenset(_outputs(messages, units, newest) if outputs else ())))
    attempts.append(({last}, frozenset()))
    offload = [False] * n
    for kept, masks in attempts:
        states = [KEPT if u in system or u in kept else ELIDED for u in range(n)]
        built = _build(job, messages, units, states, masks, offload)
        if built.estimate <= job.budget:
            return built
    states = [KEPT if u in system or u == last else ELIDED for u in range(n)]
    built = _build(job, messages, units, states, frozenset(), offload, markers=False)
    return built if built.estimate <= job.budget else None


def _build(
    job: _Job,
    messages: tuple[Message, ...],
    units: Sequence[Unit],
    states: Sequence[str],
    masks: frozenset[int],
    offload: Sequence[bool],
    markers: bool = True,
) -> Fit:
    """The messages a per-unit plan sends: elided runs as one marker each, masked outputs as
    their placeholders, offloaded images as theirs."""
    out: list[Message] = []
    run_messages = run_tokens = 0
    tally = _Tally()
    prices = job.measure(messages).messages

    def flush(next_role: str | None) -> None:
        nonlocal run_messages, run_tokens
        if run_messages and markers:
            first = all(m.role in ("system", "developer") for m in out)
            out.append(_marker_message(next_role, run_messages, run_tokens, first))
        run_messages = run_tokens = 0

    for u, unit in enumerate(units):
        span = range(unit.start, unit.end)
        if states[u] == ELIDED:
            tokens = sum(prices[i].total for i in span)
            run_messages += len(span)
            run_tokens += tokens
            tally.elided += len(span)
            tally.elided_tokens += tokens
            continue
        flush(messages[unit.start].role)
        for i in span:
            message = messages[i]
            if i in masks:
                masked = job.mask(messages, unit, i, prices[i])
                tally.masked += 1
                tally.masked_tokens += max(
                    0, prices[i].total - job.mask_price(messages, unit, i, prices[i]).total
                )
                message = masked
            elif offload[u] and message.images:
                tally.offloaded += len(message.images)
                tally.offloaded_tokens += prices[i].images - job.placeholder_tokens(message)
                message = job.offload(message)
            out.append(message)
    flush(None)
    return _assemble(job, out, job.measure(out), None, tally)


@dataclass(slots=True)
class _Tally:
    """What a build did, for the report."""

    offloaded: int = 0
    offloaded_tokens: int = 0
    elided: int = 0
    elided_tokens: int = 0
    masked: int = 0
    masked_tokens: int = 0

    def actions(self) -> Actions:
        return _actions(
            Action(OFFLOAD.label, self.offloaded, self.offloaded_tokens),
            Action(MASK.label, self.masked, self.masked_tokens),
            Action(ELIDE.label, self.elided, self.elided_tokens),
        )


def _assemble(
    job: _Job,
    messages: Sequence[Message],
    pressure: Pressure,
    estimate: int | None,
    tally: _Tally | None = None,
) -> Fit:
    """The body to send: the client's, with the fitted messages (other fields untouched)."""
    if estimate is None:
        estimate = _estimate(pressure, job.correction)
    tally = tally or _Tally()
    body = dict(job.request.body)
    body["messages"] = [message_wire(m) for m in messages]
    report = FitReport(job.route.alias, job.budget, 0, estimate, tally.actions())
    return Fit(body, tuple(messages), pressure, report, estimate)
