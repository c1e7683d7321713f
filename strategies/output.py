"""The fit, with the reply's reservation settled: clamped to the route's output limit, shrunk
when the prompt leaves too little room for it, refused with the cap that would fit.

``fit`` takes the reservation as given (``strategies.policy.prompt_budget``); this module is the
rule around it (docs/fitting.md, "Output limits"):

1. the reservation is the client's cap clamped to the route's limit (``output_limit``), and the
   request is fitted with it — history is elided before the reply's room is touched, as the
   client asked for that room;
2. when nothing the policy allows fits beside that reservation, the request is fitted once more
   beside the floor (``reserve_floor``: ``min_output_reserve``, or the client's own smaller
   cap) and the reservation becomes all the room that fit leaves (``shrunk_output``);
3. when even the floor leaves no room but some smaller cap would, ``OutputReserveError`` says
   so and names that cap; when no cap would, the prompt itself is too long (``FitError``).

A request may also carry the smallest cap it can be sent with at all
(``ChatRequest.least_output``: a wire's rule; Anthropic's extended thinking needs
``max_tokens`` ≥ 1,025). The floor is never below it, so such a request is sent with at least
that much or refused: by the reservation (``OutputReserveError``, naming a cap of at least
``least``) when one that large would fit, by the prompt's length (``FitError``) when not — a
cap small enough to fit would be refused by the provider, so the prompt is what must give. A
client whose cap the route's limit clamps below it is refused with ``OutputFloorError`` (the
route cannot serve the request as asked).

The resulting ``OutputLimit`` rides on ``FitReport.output``; the proxy's wires write its
``sent`` cap into the provider's body and its gateway names a lowered cap in a header.
Pure and deterministic, like ``fit``.
"""

from __future__ import annotations

from dataclasses import replace

from pricing.bounds import Proof, TextBounds
from pricing.calibration import Correction
from pricing.messages import ChatRequest
from pricing.meter import Memo, Sizes
from pricing.route import Route
from strategies.fit import Fit, FitError, fit, fit_bounded, request_texts
from strategies.policy import (
    FitPolicy,
    OutputLimit,
    output_limit,
    output_room,
    reserve_floor,
    shrunk_output,
)

__all__ = [
    "OutputFloorError",
    "OutputReserveError",
    "bounded_output",
    "fit_output",
    "sampled_output",
]


class OutputReserveError(FitError):
    """The prompt fits the window, but not beside the reply's reservation, even shrunk to its
    floor: the refusal must name the reservation and the cap that would fit, not the prompt
    (a client that compacts its conversation on "prompt is too long" would gain nothing)."""

    def __init__(self, exc: FitError, limit: OutputLimit, floor: int, fits: int) -> None:
        super().__init__(exc.route, exc.estimate, exc.budget, exc.window, exc.team_limit)
        self.limit = limit
        self.floor = floor
        #: The largest output cap that would fit beside the prompt (≥ 1).
        self.fits = fits
        if limit.requested is not None:
            asked = f"this request's output cap is {limit.requested:,}"
        else:
            asked = f"this request sets no output cap and the route reserves {limit.reserve:,}"
        self.args = (
            f"route {exc.route!r}: the prompt (about {exc.estimate:,} tokens) fits the context "
            f"window of {exc.window:,} tokens only beside an output reservation of at most "
            f"{fits:,} tokens; {asked}, and routefit shrinks a reservation to no less than "
            f"{floor:,}. Set an output cap of {fits:,} or less",
        )


class OutputFloorError(FitError):
    """The route's output limit clamps the client's cap below the smallest cap the request can
    be sent with (``ChatRequest.least_output``): no reservation the route allows makes a valid
    request."""

    def __init__(self, route: Route, limit: OutputLimit, least: int) -> None:
        super().__init__(route.alias, 0, 0, route.context_window)
        self.limit = limit
        self.least = least
        self.args = (
            f"route {route.alias!r}: its output limit is {limit.route_limit:,} tokens, and this "
            f"request cannot be sent with an output cap below {least:,}",
        )


def fit_output(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None = None,
    sizes: Sizes | None = None,
    memo: Memo | None = None,
) -> Fit:
    """``fit`` with the reservation settled (``FitReport.output``); FitError (or its
    ``OutputReserveError``, ``OutputFloorError``) when nothing fits. ``memo``: ``fit``'s."""
    limit = output_limit(route.max_output_tokens, policy, request.max_output_tokens)
    least = request.least_output
    if limit.requested is not None and limit.requested < least:
        least = 0  # the client's own cap is too small: its request goes as it came
    if _clamped_below(limit, least):
        raise OutputFloorError(route, limit, least)
    try:
        # prompt_budget clamps the client's cap itself: the request goes as it came
        return _with(fit(request, route, policy, correction, sizes, memo), limit)
    except FitError as exc:
        floor = reserve_floor(limit, policy, least)
        if exc.team_limit is not None:
            raise  # the team's prompt quota binds: no reservation would help
        if floor >= limit.reserve:
            raise _refusal(exc, limit, floor, policy, least) from None
        low = replace(request, max_output_tokens=floor)  # same messages and body objects
        try:
            fitted = fit(low, route, policy, correction, sizes, memo)
        except FitError as again:
            raise _refusal(again, limit, floor, policy, least) from None
    shrunk = shrunk_output(limit, route.context_window, policy, fitted.estimate, least)
    if shrunk is None:  # only when the floor leaves a budget of 0 and the prompt is empty
        refused = FitError(route.alias, fitted.estimate, fitted.report.budget, route.context_window)
        raise _refusal(refused, limit, floor, policy, least)
    return _with(fitted, shrunk)


def _clamped_below(limit: OutputLimit, least: int) -> bool:
    """Whether the route's limit took the client's cap below the request's least (a client's
    own smaller cap is its own to send: the provider's refusal is relayed)."""
    return limit.lowered and limit.reserve < least


def bounded_output(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None = None,
    sizes: Sizes | None = None,
    proof: TextBounds | None = None,
    memo: Memo | None = None,
) -> Fit | None:
    """``fit_bounded`` with the (clamped) reservation on its report; a bound proves only a
    transparent fit beside the whole reservation, so nothing is ever shrunk here."""
    limit = output_limit(route.max_output_tokens, policy, request.max_output_tokens)
    if _clamped_below(limit, request.least_output):
        return None  # refused by ``fit_output``
    fitted = fit_bounded(request, route, policy, correction, sizes, proof, memo)
    return None if fitted is None else _with(fitted, limit)


def sampled_output(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None = None,
    sizes: Sizes | None = None,
    proof: Proof | None = None,
    memo: Memo | None = None,
) -> Fit | None:
    """``bounded_output`` on a guess: the long texts a proof could not bound under the budget
    priced from a sample of them (``Proof.sampled``). Not a proof: what it lets go is forwarded
    while it is counted, and answered only once the count proves it fits (``proxy.gateway``)."""
    if proof is None:
        return None
    guess = proof.sampled(request_texts(request, memo))
    return bounded_output(request, route, policy, correction, sizes, guess, memo)


def _with(fitted: Fit, limit: OutputLimit) -> Fit:
    return replace(fitted, report=replace(fitted.report, output=limit))


def _refusal(
    exc: FitError, limit: OutputLimit, floor: int, policy: FitPolicy, least: int = 0
) -> FitError:
    """The reservation's refusal when a smaller cap would let the prompt fit (one the request
    can be sent with: at least ``least``), else ``exc``."""
    if exc.team_limit is not None:
        return exc
    fits = output_room(exc.window, policy, exc.estimate)
    if fits < max(1, least):
        return exc
    return OutputReserveError(exc, limit, floor, fits)
