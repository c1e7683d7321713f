"""fit: a priced conversation and a route's budget in, the request to send out.

Transparent when the request fits: the client's body goes out as is. Otherwise the policy's
strategies run in order (``strategies.registry``; default: cap oversized tool outputs → offload
old images → mask old tool outputs → elide whole middle units), each a ``Strategy`` applied to
the fit's state (``strategies.strategy``) only when the previous ones were not enough; after
each, the planner's moves allowed so far are placed at cache-stable cut points
(``strategies.moves``, ``strategies.elide``). The newest turn (everything since the latest user
message) is kept whole whenever it fits once masked; refusal is the last resort
(``strategies.moves``): FitError only when the system prompt and the latest user message alone
do not fit. The result is verified by measuring it again with the meter.

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
from dataclasses import replace

from pricing.bounds import TextBounds, bound_pressure
from pricing.calibration import Correction, pressure_features
from pricing.messages import ChatRequest, Message, TextPart
from pricing.meter import Memo, Pressure, Sizes
from pricing.route import Route
from strategies.actions import Action
from strategies.moves import Job, adapt, assemble, fit_moves
from strategies.policy import FitPolicy, prompt_budget
from strategies.registry import by_name
from strategies.result import Fit, FitError, FitReport, actions_of
from strategies.strategy import FitContext, FitState

__all__ = [
    "Fit",
    "FitError",
    "FitReport",
    "as_sent",
    "fit",
    "fit_bounded",
    "past_proving",
    "request_texts",
]


def _budget(request: ChatRequest, route: Route, policy: FitPolicy) -> int:
    """The request's prompt budget on ``route`` (``prompt_budget``: its window less the output
    it asks for, clamped, and the margin; the team's cap)."""
    return prompt_budget(
        route.context_window, route.max_output_tokens, policy, request.max_output_tokens
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


def fit(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None = None,
    sizes: Sizes | None = None,
    memo: Memo | None = None,
) -> Fit:
    """Compile ``request`` to fit ``route``; raise FitError when it cannot. ``memo``: what was
    priced of the request already, by object (a bound's pass, an earlier fit of it)."""
    job, messages, adapted, pressure = _adapted(request, route, policy, correction, sizes, memo)
    budget = job.budget
    # the request's interval, one factor for every part and cut of it (``for_request``)
    features = pressure_features(pressure)
    job.correction = job.correction.for_request(features)
    before = job.correction.price(features)
    if before <= budget:
        if not adapted.count:
            report = FitReport(route.alias, budget, before, before)
            return Fit(request.body, request.messages, pressure, report, before)
        adapted_fit = assemble(job, messages, pressure, before, actions_of(adapted))
        return replace(adapted_fit, report=replace(adapted_fit.report, estimate_before=before))

    context = FitContext(route, policy, budget, job.measure)
    state = FitState(messages, pressure)
    best = before
    for n, name in enumerate(policy.strategies):
        state = by_name(name).apply(state, context)
        estimate, fitted = fit_moves(job, state, final=n == len(policy.strategies) - 1)
        best = min(best, estimate)
        if fitted is not None:
            # what the rewrites did, what the plan did, and the images the route cannot take
            done = (*state.done, *fitted.report.actions.values(), adapted)
            report = FitReport(route.alias, budget, before, fitted.estimate, actions_of(*done))
            return replace(fitted, report=report)
    limit = _team_limit(route, policy, request, budget)
    raise FitError(route.alias, best, budget, route.context_window, limit)


def as_sent(
    request: ChatRequest, route: Route, policy: FitPolicy, sizes: Sizes | None = None
) -> tuple[tuple[Message, ...], Pressure]:
    """The messages ``fit`` begins from and their pressure, before any cut: the request with
    the images the route cannot take as the placeholders it sends whatever the budget
    (``adapt``). A count endpoint prices these, not the client's images: on a text-only route
    a count of the images undercut the fitted estimate of the same request (50 tokens against
    63 for one PNG). And it looks the provider's count of a prefix up under these messages'
    keys, as the fit's anchor is: under the images' keys a continuation's count missed the
    anchor its fit found (123 tokens against 83)."""
    _, messages, _, pressure = _adapted(request, route, policy, None, sizes, None)
    return messages, pressure


def _adapted(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None,
    sizes: Sizes | None,
    memo: Memo | None,
) -> tuple[Job, tuple[Message, ...], Action, Pressure]:
    """A fit's job and where every fit begins: the messages with the images the route cannot
    take as placeholders (``adapt``), what that did, and their pressure."""
    budget = _budget(request, route, policy)
    job = Job(request, route, policy, correction or Correction(), sizes, budget, memo or Memo())
    messages, adapted = adapt(job, request.messages)
    return job, messages, adapted, job.measure(messages)


def fit_bounded(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None = None,
    sizes: Sizes | None = None,
    proof: TextBounds | None = None,
    memo: Memo | None = None,
) -> Fit | None:
    """The transparent fit, proved by a cheap upper bound (``pricing.bounds``) instead of an
    exact count; None when nothing is proved (no bound for the tokenizer, images to adapt, or
    the bound over the budget), and ``fit`` must run. ``proof``: a bound over the budget may be
    tightened by counting the biggest texts in part (``Proof.tighten``).

    What it returns is what ``fit`` would return (the client's body, untouched) except that
    ``estimate`` and ``pressure`` are bounds: ≥ the exact ones, part by part — unless ``proof``
    is a sample's guess (``pricing.bounds.Sampled``), which proves nothing (``sampled_output``)."""
    budget = _budget(request, route, policy)
    images = sum(len(m.images) for m in request.messages)
    if images and not (
        route.supports_vision
        and route.image_rule.visual
        and images <= route.image_limits.max_images
    ):
        return None  # adapt would offload some: only the exact path knows which
    correction = correction or Correction()
    bound = (request.messages, request.tools, route, sizes, proof, not correction.neutral)
    pressure = bound_pressure(*bound, memo=memo)
    if pressure is None:
        return None
    estimate = _bound_estimate(pressure, correction)
    if estimate > budget and proof is not None:
        texts = request_texts(request, memo)
        while estimate > budget and proof.tighten(texts, estimate - budget):
            pressure = bound_pressure(*bound, memo=memo)
            assert pressure is not None
            estimate = _bound_estimate(pressure, correction)
    if estimate > budget:
        return None
    report = FitReport(route.alias, budget, estimate, estimate)
    return Fit(request.body, request.messages, pressure, report, estimate)


def past_proving(
    request: ChatRequest, route: Route, policy: FitPolicy, correction: Correction | None = None
) -> int | None:
    """The UTF-8 length past which no text of ``request`` leaves its bound under the budget
    (``pricing.bounds.Proof.past``): a byte-level bound is at least half a text's bytes, and a
    token of text is priced at least at the correction's least weight (``_bound_estimate``:
    every other part adds). None when text may cost next to nothing: any length may then
    fit."""
    budget = _budget(request, route, policy)
    least = (correction or Correction()).least_text
    most = 2 * budget / least if least > 0 else math.inf  # (a weight of 1e-300: past any)
    return math.floor(most) if math.isfinite(most) else None


def request_texts(request: ChatRequest, memo: Memo | None = None) -> list[str]:
    """The texts a proof counts, or a sample guesses: those of the request's messages but the
    ones ``memo`` holds (priced exactly, from the message memo: an agent's whole history but its
    newest turn). Counting those texts would change no price, and a session over its window
    counted pieces of its old tool outputs every turn until the proof gave up: 20 KB outputs
    read again, 12.9 ms of a 24-turn session's turn before forwarding."""
    texts: list[str] = []
    prev: str | None = None
    for i, m in enumerate(request.messages):
        if memo is None or memo.get(m, i, prev) is None:
            texts += [p.text for p in m.parts if isinstance(p, TextPart)]
        prev = m.role
    return texts


def _bound_estimate(pressure: Pressure, correction: Correction) -> int:
    """The calibrated price of a bound, itself a bound of the exact estimate: the bound's text
    (in the classes the meter puts it in), calls, images and per-character counts are each at
    or above the meter's (``pricing.bounds``), and a negative weight (a feature that lowered
    the fitted count) is read as 0. The interval the exact estimate adds is bounded the same
    way (``Correction.interval_bound``)."""
    features = pressure_features(pressure)
    if correction.neutral:
        return correction.price(features)
    priced = sum(max(0.0, w) * x for w, x in zip(correction.vector, features, strict=True))
    return math.ceil(priced + correction.interval_bound(features) - 1e-9)
