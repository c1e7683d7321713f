"""The planner's moves made real on one request: offloading images, masking tool outputs and
eliding units, placed by ``strategies.elide``'s cache-stable plans.

``fit_moves`` prices the units under every combination of the moves the policy allowed so far,
tries the replayed plan, then the most the policy allows (the newest turn kept whole, then its
newest outputs masked, then without the task, then cut into), builds the first that fits, and
when none does on the policy's last strategy, the last resort (``_last_resort``). ``Job`` is
one fit's inputs and what it has already priced, shared with ``strategies.fit``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from pricing.calibration import (
    FEATURES,
    IMAGE_FEATURES,
    Correction,
    message_features,
    pressure_features,
)
from pricing.capped import CapTooSmall, cap_message
from pricing.content import PROSE
from pricing.messages import ChatRequest, Message, TextPart, message_wire
from pricing.meter import (
    Memo,
    MessagePressure,
    Pressure,
    Sizes,
    measure_kept,
    measure_message,
    measure_messages,
    sent_as_audio,
)
from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from strategies.actions import Action, Actions
from strategies.cap import CAP
from strategies.elide import (
    ELIDE,
    Plan,
    Schedule,
    UnitCosts,
    elision_marker,
    masked_by,
    plan,
    plan_max,
)
from strategies.mask import MASK, mask_output, tool_names
from strategies.offload import OFFLOAD, offload_images, placeholder_for
from strategies.policy import FitPolicy
from strategies.result import NOTHING, Fit, FitReport, actions_of
from strategies.strategy import FitState
from strategies.units import Unit, answered_round, answered_rounds, group_units, protected_units

__all__ = ["Job", "adapt", "assemble", "fit_moves"]

_TOOL_ROLES = ("tool", "function")
#: Tries at capping the newest masked output to the room left (each re-prices the prompt;
#: the first usually fits, a correction weighing text above 1 may take another).
_SQUEEZES = 3


@dataclass(slots=True)
class Job:
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
    offloaded: dict[tuple[int, bool], Message] = field(default_factory=dict)
    masked: dict[int, tuple[Message, MessagePressure]] = field(default_factory=dict)
    #: Each unit's call names by id (``tool_names``), by the message list and the unit's start
    #: (the list kept with them, so its id is not another's while they are).
    names: dict[tuple[int, int], tuple[Sequence[Message], dict[str, str]]] = field(
        default_factory=dict
    )
    _units: tuple[tuple[Message, ...], tuple[Unit, ...], list[UnitCosts]] | None = None

    def measure(self, messages: Sequence[Message]) -> Pressure:
        return measure_messages(messages, self.request.tools, self.route, self.sizes, self.memo)

    def estimate(self, pressure: Pressure) -> int:
        return self.correction.price_pressure(pressure)

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
            call_id = message.tool_call_id
            names = self.tool_names(messages, unit) if call_id is not None else {}
            name = names.get(call_id, "tool") if call_id is not None else "tool"
            masked = mask_output(message, name, price.total)
            prev = messages[i - 1].role if i else None
            measured = measure_kept(masked, self.route, i, self.sizes, prev)
            # an output shorter than its placeholder ("OK", an exit code) is dearer masked:
            # it stays as it is (a function of the output alone, so stable turn to turn)
            found = (message, price) if measured.total >= price.total else (masked, measured)
            self.masked[id(message)] = found
        return found

    def tool_names(self, messages: Sequence[Message], unit: Unit) -> dict[str, str]:
        """The names of ``unit``'s calls by id, read once per unit of a message list: a unit of
        N calls and N outputs named each output by scanning the unit (N²: one turn of 8,000
        calls, 1.1 MB, spent seconds of CPU here; every output is priced masked as well)."""
        key = (id(messages), unit.start)
        found = self.names.get(key)
        if found is None or found[0] is not messages:
            found = self.names[key] = (messages, tool_names(messages[unit.start : unit.end]))
        return found[1]

    def mask(
        self, messages: Sequence[Message], unit: Unit, i: int, price: MessagePressure
    ) -> Message:
        """Message ``i`` (a tool result of ``unit``) with its output masked."""
        return self._masked(messages, unit, i, price)[0]

    def mask_price(
        self, messages: Sequence[Message], unit: Unit, i: int, price: MessagePressure
    ) -> MessagePressure:
        return self._masked(messages, unit, i, price)[1]

    def offload(self, message: Message, forced: bool = False) -> Message:
        """The message with its images offloaded: those whose placeholder is cheaper, or every
        one when ``forced`` (the route cannot take them: ``strategies.offload``)."""
        key = (id(message), forced)
        found = self.offloaded.get(key)
        if found is None:
            found = offload_images(message, self.route, self.sizes, forced=forced)
            self.offloaded[key] = found
        return found


def adapt(job: Job, messages: tuple[Message, ...]) -> tuple[tuple[Message, ...], Action]:
    """Images the route cannot take go as placeholders, whatever the budget: every image on a
    text-only route (``_text_only``); on a vision route the oldest beyond its image-count
    limit, in steps of ``image_offload_step`` so consecutive turns offload the same ones.
    Returns the messages and how many images became placeholders, as the offload's action (no
    tokens removed: the estimate before the fit is taken after them)."""
    route = job.route
    total = sum(len(m.images) for m in messages)
    if not total:
        return messages, Action(OFFLOAD.label)
    if not (route.supports_vision and route.image_rule.visual):
        return _text_only(job, messages)
    if total <= route.image_limits.max_images:
        return messages, Action(OFFLOAD.label)
    step = job.policy.image_offload_step
    excess = -(-(total - route.image_limits.max_images) // step) * step
    out = list(messages)
    done = 0
    for i, message in enumerate(out):
        if done >= excess:
            break
        if message.images:
            done += len(message.images)
            out[i] = job.offload(message, forced=True)
    return tuple(out), Action(OFFLOAD.label, done)


def _text_only(job: Job, messages: tuple[Message, ...]) -> tuple[tuple[Message, ...], Action]:
    """On a route that sees no pictures, every message with media it cannot take sends their
    placeholders (all of them: a message is offloaded whole); a message whose media are all
    audio the route takes as audio (chat ``input_audio`` parts: ``pricing.meter.sent_as_audio``)
    goes as it is."""
    out = list(messages)
    done = 0
    for i, message in enumerate(out):
        if any(not sent_as_audio(p, job.route) for p in message.images):
            done += len(message.images)
            out[i] = job.offload(message, forced=True)
    return tuple(out), Action(OFFLOAD.label, done)


def fit_moves(job: Job, state: FitState, final: bool) -> tuple[int, Fit | None]:
    """Plan offload/masking/elision with the moves allowed so far; (estimate, fit or None).

    ``final``: no strategy comes after this one, so the most aggressive plan is built even when
    its upper-bound estimate says it will not fit (the bound may be a few tokens pessimistic),
    and when even that overflows, the last resort (``_last_resort``) runs.
    """
    messages, pressure = state.messages, state.pressure
    estimate = job.estimate(pressure)
    if estimate <= job.budget:  # the rewrites alone were enough
        return estimate, assemble(job, messages, pressure, estimate)
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
    job: Job,
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
    it (its calls go only when the turn does not fit once masked, even without the task)."""
    plans = _plans(job, messages, units, pressure, costs, order)
    into = len(plans) - 1 if ELIDE.name in order else None
    out: list[tuple[int, Fit | None]] = []
    for n, candidate in enumerate(plans):
        # A plan's own estimate is an upper bound (markers at their widest, units rounded up):
        # build only the plans that can fit, and on the last strategy the last plan.
        last = final and n == len(plans) - 1
        if n == into:  # before the newest turn loses a call, its newest outputs are masked too
            # the plan before it was built already unless its bound was over the budget
            tried = out[-1][1] is not None
            out += (
                _mask_newest(job, messages, units, plans[n - 1], tried)
                if MASK.name in order
                else []
            )
            if out[-1][0] <= job.budget:
                break
            if MASK.name in order:
                out += _turn_without_task(job, messages, units)
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


def _plans(
    job: Job,
    messages: tuple[Message, ...],
    units: Sequence[Unit],
    pressure: Pressure,
    costs: Sequence[UnitCosts],
    order: tuple[str, ...],
) -> list[Plan]:
    """The replayed plan, then the most the policy allows: the verbatim head kept, then masked
    too (before any output of the newest unit is), then elision into the newest turn."""
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
        policy.verbatim_head,
        policy.offload_water,
        policy.image_head,
    )
    replayed = plan(
        costs,
        overhead=overhead,
        budget=job.budget,
        marker=marker,
        schedule=schedule,
        previous=_previous_request(messages, units),
    )
    steps = [(False, replayed.verbatim, replayed.vstart)]
    if replayed.verbatim > replayed.vstart:
        steps.append((False, 0, 0))
    if ELIDE.name in order:
        steps.append((True, 0, 0))
    return [
        replayed,
        *(
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
                verbatim=verbatim,
                vstart=vstart,
            )
            for into_turn, verbatim, vstart in steps
        ),
    ]


def _previous_request(messages: Sequence[Message], units: Sequence[Unit]) -> int:
    """How many units the previous request of the session had: those before the newest
    assistant turn (one turn may span several messages and units: a thinking block, a text, the
    tool calls), which the client appended with what answers it."""
    start = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), 0
    )
    while start > 0 and messages[start - 1].role == "assistant":
        start -= 1
    return sum(unit.end <= start for unit in units)


def _settled(
    messages: Sequence[Message], units: Sequence[Unit], masks: frozenset[int], chosen: Plan
) -> str | None:
    """The call id of the last output masked here before the first unit whose masking differs
    from the previous request's (``Plan.settled``): the prefix both share ends there, after a
    mask step as after a verbatim head is masked."""
    mask, verbatim, vstart = chosen.settled
    first = next(
        (u for u in range(len(units)) if chosen.masks(u) != masked_by(u, mask, verbatim, vstart)),
        len(units),
    )
    end = units[first].start if first < len(units) else len(messages)
    settled = [i for i in masks if i < end]
    return messages[max(settled)].tool_call_id if settled else None


def _mask_newest(
    job: Job, messages: tuple[Message, ...], units: Sequence[Unit], chosen: Plan, tried: bool
) -> list[tuple[int, Fit | None]]:
    """``chosen`` (the newest turn kept whole, everything older masked or elided), then with
    the newest unit's outputs masked too, oldest first, one more each time, until it fits.
    ``chosen`` is built first unless it was (``tried``): its own estimate is an upper bound
    (markers at their widest), so it may have been passed over while its exact price fits — the
    newest turn is kept whole whenever it fits."""
    states, masks, offload = _plan_states(messages, units, chosen)
    extra = [i for i in _outputs(messages, units, _newest(messages, units)) if i not in masks]
    return _masked_until_fit(job, messages, units, (states, offload), masks, extra, int(tried))


def _masked_until_fit(
    job: Job,
    messages: tuple[Message, ...],
    units: Sequence[Unit],
    plan: tuple[Sequence[str], Sequence[bool]],
    masks: frozenset[int],
    extra: Sequence[int],
    start: int,
) -> list[tuple[int, Fit | None]]:
    """Masking ``extra``'s outputs oldest first, one more each time from ``start`` on, until
    the prompt fits or all are masked: the builds that decide it, the last one the answer.

    Each step changes one message, but a build prices the whole prompt: building every step
    was quadratic in the turn's tool results (2,000 results in one turn on an 8k route, 18 s of
    CPU on the event loop to fit it). A prompt's estimate is linear in its messages'
    features, so each step's is predicted from the first build and the outputs' own prices, and
    only the first step predicted to fit (else the last) is built. Should its build disagree
    with the prediction (a message priced differently in its place), every step is built."""
    states, offload = plan

    def build(k: int) -> Fit:
        return _build(job, messages, units, states, masks | frozenset(extra[:k]), offload)

    first = build(start)
    if first.estimate <= job.budget or start >= len(extra):
        return [(first.estimate, _squeezed(job, messages, units, plan, masks, extra, start, first))]
    prices = job.measure(messages).messages
    unit_of = {i: unit for unit in units for i in range(unit.start, unit.end)}
    features = list(pressure_features(first.pressure))
    k, predicted, least = start, first.estimate, first.estimate
    while k < len(extra) and predicted > job.budget:
        i = extra[k]
        masked = message_features(job.mask_price(messages, unit_of[i], i, prices[i]))
        own = message_features(prices[i])
        features = [f + m - o for f, m, o in zip(features, masked, own, strict=True)]
        k += 1
        predicted = job.correction.price(features)
        least = min(least, predicted)  # a short output's placeholder may cost more than it
    built = build(k)
    if built.estimate == predicted:
        # the steps not built, by their least estimate (a refusal names the least)
        built = _squeezed(job, messages, units, plan, masks, extra, k, built)
        return [(first.estimate, first), (least, None), (built.estimate, built)]
    out: list[tuple[int, Fit | None]] = [(first.estimate, first)]
    for k in range(start + 1, len(extra) + 1):
        built = _squeezed(job, messages, units, plan, masks, extra, k, build(k))
        out.append((built.estimate, built))
        if built.estimate <= job.budget:
            break
    return out


def _turn_without_task(
    job: Job, messages: tuple[Message, ...], units: Sequence[Unit]
) -> list[tuple[int, Fit | None]]:
    """The system prompt and the newest turn whole (from the latest user message on),
    everything else elided, the task too, its outputs masked oldest first until it fits: tried
    before the turn loses a call. The task yields before the latest user message
    (``strategies.fit``), and so before the turn that message opened: an agent that no longer
    sees its own recent calls repeats them. Without this step a task that just did not fit
    beside the masked turn kept its place and the turn was elided down to its newest unit
    (docs/fitting.md, "Refusal is the last resort")."""
    system, _, _, turn = _turn_units(messages, units)
    states = [KEPT if u in system or u in turn else ELIDED for u in range(len(units))]
    outputs = _outputs(messages, units, turn)
    return _masked_until_fit(
        job, messages, units, (states, [False] * len(units)), frozenset(), outputs, 0
    )


def _turn_units(
    messages: Sequence[Message], units: Sequence[Unit]
) -> tuple[set[int], list[int], int, set[int]]:
    """The system units, the user units (oldest first), the tool round the conversation's tail
    answers (``answered_round``; else the newest unit) and the newest turn's units: from the
    latest user message (or that round, when earlier) on."""
    n = len(units)
    roles = [{m.role for m in messages[u.start : u.end]} for u in units]
    system = {u for u in range(n) if roles[u] & {"system", "developer"}}
    users = [u for u in range(n) if "user" in roles[u]]
    last = users[-1] if users else n - 1
    answered = answered_round(messages, units)
    answered = n - 1 if answered is None else answered
    return system, users, answered, set(range(min(last, answered), n))


def _squeezed(
    job: Job,
    messages: tuple[Message, ...],
    units: Sequence[Unit],
    plan: tuple[Sequence[str], Sequence[bool]],
    masks: frozenset[int],
    extra: Sequence[int],
    k: int,
    built: Fit,
) -> Fit:
    """``built`` with the last of its ``k`` masked outputs capped to the room left instead.

    The outputs masked last are the newest: what the agent just did, and the one thing it
    repeats when it cannot see it (a model shown only "output masked" for the call it made a
    moment ago calls it again). When masking it made the prompt fit with room to spare, it
    goes as much of itself as fits — capped in its rendered form, as the cap strategy cuts an
    oversized output — and stays masked only when no capped form fits beside the rest."""
    if not k or built.estimate > job.budget or CAP.name not in job.policy.strategies:
        return built
    i = extra[k - 1]
    if messages[i].role not in job.policy.cap_roles:
        return built
    states, offload = plan
    unit = next(u for u in units if u.start <= i < u.end)
    price = job.mask_price(messages, unit, i, job.measure(messages).messages[i])
    floor = price.text + price.framing
    limit = floor + job.budget - built.estimate
    taken = masks | frozenset(extra[: k - 1])
    for _ in range(_SQUEEZES):
        if limit <= floor:
            break
        try:
            capped = cap_message(messages[i], limit, job.route)
        except CapTooSmall:
            break
        if capped is None:
            break
        swapped = (*messages[:i], capped.message, *messages[i + 1 :])
        trial = _build(job, swapped, units, states, taken, offload)
        if trial.estimate <= job.budget:
            # one message capped, unless the cap strategy already counted it (a capped form)
            fresh = i < len(job.request.messages) and messages[i] is job.request.messages[i]
            cut = Action(CAP.label, int(fresh), capped.removed_tokens)
            actions = actions_of(*trial.report.actions.values(), cut)
            return replace(trial, report=replace(trial.report, actions=actions))
        limit -= trial.estimate - job.budget
    return built


def _newest(messages: Sequence[Message], units: Sequence[Unit]) -> list[int]:
    """The newest unit, and the tool round the conversation's tail answers (``answered_round``:
    the latest user message, with a note, a prefill or other user messages after the round):
    what a plan never masks (the newest turn's outputs go only in ``_mask_newest``, oldest
    first)."""
    n = len(units)
    answered = answered_round(messages, units)
    return [n - 1] if answered is None else [n - 1, answered]


def _protected_head(costs: Sequence[UnitCosts]) -> int:
    for i, unit in enumerate(costs):
        if unit.user:
            return min(i + 1, max(len(costs) - 1, 0))
    return 0


def _unit_costs(
    job: Job, messages: Sequence[Message], units: Sequence[Unit], pressure: Pressure
) -> list[UnitCosts]:
    first_user = next((i for i, m in enumerate(messages) if m.role == "user"), None)
    costs = []
    price = job.correction.price
    masking = MASK.name in job.policy.strategies
    rounds = answered_rounds(messages, units)
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
                answers=rounds[u] is not None,
                masked=None if masked is None else masked_price,
                masked_offloaded=both,
                tail=0 if (r := rounds[u]) is None else u - r - 1,
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
    newest = _newest(messages, units)
    elided = [chosen.head <= u < chosen.cut and u not in keep for u in range(n)]
    masked = [u for u in range(n) if chosen.masks(u) and u not in newest and not elided[u]]
    states = [ELIDED if e else KEPT for e in elided]
    offload = [chosen.offloads(u) and u not in keep for u in range(n)]
    return states, frozenset(_outputs(messages, units, masked)), offload


def _last_resort(
    job: Job, messages: tuple[Message, ...], units: Sequence[Unit], pressure: Pressure
) -> Fit | None:
    """Refusal is the last resort: what no cut may touch is the system prompt and the latest
    user message (as the cap rule left them). When the cache-stable plans overflow, try, in
    order, keeping the task and the newest turn; the same without the task; the latest user
    message with the newest unit and the tool round the conversation's tail answers, with that
    tail (``answered_round``: preferred, never part of the core); each with its outputs masked
    oldest first until it fits (the last one masked capped to the room left instead,
    ``_squeezed``); then the round masked beside the core without the tail's other user
    messages, then those without the round; then the core alone, with a marker, then without
    one. The first that fits is sent; None when even the bare core does not."""
    n = len(units)
    system, users, answered, turn = _turn_units(messages, units)
    last = users[-1] if users else n - 1
    first = users[0] if users else last
    newest = {last, *range(answered, n)}  # with the round the tail answers, and the tail
    masking = MASK.name in job.policy.strategies
    offload = [False] * n
    attempts = [(turn | {first}, turn), (turn, turn), (newest, newest)]
    if answered < n - 1:  # what of the tail is not the core yields: its user messages, the round
        if newest - system - {last, answered}:
            attempts.append(({last, answered}, {answered}))
        attempts.append((newest - {answered}, set()))
    attempts.append(({last}, set()))
    for kept, masked in attempts:
        states = [KEPT if u in system or u in kept else ELIDED for u in range(n)]
        extra = _outputs(messages, units, masked) if masking else []
        tried = _masked_until_fit(job, messages, units, (states, offload), frozenset(), extra, 0)
        built = tried[-1][1]
        if built is not None and built.estimate <= job.budget:
            return built
    states = [KEPT if u in system or u == last else ELIDED for u in range(n)]
    built = _build(job, messages, units, states, frozenset(), offload, markers=False)
    return built if built.estimate <= job.budget else None


def _build(
    job: Job,
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
            if i in masks and (masked := job.mask(messages, unit, i, prices[i])) is not message:
                tally.masked += 1
                tally.masked_tokens += (
                    prices[i].total - job.mask_price(messages, unit, i, prices[i]).total
                )
                message = masked
            elif offload[u] and message.images:
                offloaded = job.offload(message)
                # an image priced at most its placeholder (a small one under Claude's rule)
                # stays: only the images replaced count, and tokens removed are never
                # negative (they feed counters)
                tally.offloaded += len(message.images) - len(offloaded.images)
                tally.offloaded_tokens += max(0, prices[i].images - job.placeholder_tokens(message))
                message = offloaded
            out.append(message)
    flush(None)
    return assemble(job, out, job.measure(out), None, tally.actions())


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
        return actions_of(
            Action(OFFLOAD.label, self.offloaded, self.offloaded_tokens),
            Action(MASK.label, self.masked, self.masked_tokens),
            Action(ELIDE.label, self.elided, self.elided_tokens),
        )


def assemble(
    job: Job,
    messages: Sequence[Message],
    pressure: Pressure,
    estimate: int | None,
    actions: Actions = NOTHING,
) -> Fit:
    """The body to send: the client's, with the fitted messages (other fields untouched)."""
    if estimate is None:
        estimate = job.estimate(pressure)
    body = dict(job.request.body)
    body["messages"] = [message_wire(m) for m in messages]
    report = FitReport(job.route.alias, job.budget, 0, estimate, actions)
    return Fit(body, tuple(messages), pressure, report, estimate)
