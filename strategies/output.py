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

The resulting ``OutputLimit`` rides on ``FitReport.output``; the proxy's wires write its
``sent`` cap into the provider's body and its gateway names a lowered cap in a header.
Pure and deterministic, like ``fit``.
"""

from __future__ import annotations

from dataclasses import replace

from pricing.bounds import Proof
from pricing.calibration import Correction
from pricing.messages import ChatRequest
from pricing.meter import Sizes
from pricing.route import Route
from strategies.fit import Fit, FitError, fit, fit_bounded
from strategies.policy import (
    FitPolicy,
    OutputLimit,
    output_limit,
    output_room,
    reserve_floor,
    shrunk_output,
)

__all__ = ["OutputReserveError", "bounded_output", "fit_output"]


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


def fit_output(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None = None,
    sizes: Sizes | None = None,
) -> Fit:
    """``fit`` with the reservation settled (``FitReport.output``); FitError (or its
    ``OutputReserveError``) when nothing fits."""
    limit = output_limit(route.max_output_tokens, policy, request.max_output_tokens)
    try:
        # prompt_budget clamps the client's cap itself: the request goes as it came
        return _with(fit(request, route, policy, correction, sizes), limit)
    except FitError as exc:
        floor = reserve_floor(limit, policy)
        if exc.team_limit is not None:
            raise  # the team's prompt quota binds: no reservation would help
        if floor >= limit.reserve:
            raise _refusal(exc, limit, floor, policy) from None
        low = replace(request, max_output_tokens=floor)  # same messages and body objects
        try:
            fitted = fit(low, route, policy, correction, sizes)
        except FitError as again:
            raise _refusal(again, limit, floor, policy) from None
    shrunk = shrunk_output(limit, route.context_window, policy, fitted.estimate)
    if shrunk is None:  # only when the floor leaves a budget of 0 and the prompt is empty
        refused = FitError(route.alias, fitted.estimate, fitted.report.budget, route.context_window)
        raise _refusal(refused, limit, floor, policy)
    return _with(fitted, shrunk)


def bounded_output(
    request: ChatRequest,
    route: Route,
    policy: FitPolicy,
    correction: Correction | None = None,
    sizes: Sizes | None = None,
    proof: Proof | None = None,
) -> Fit | None:
    """``fit_bounded`` with the (clamped) reservation on its report; a bound proves only a
    transparent fit beside the whole reservation, so nothing is ever shrunk here."""
    limit = output_limit(route.max_output_tokens, policy, request.max_output_tokens)
    fitted = fit_bounded(request, route, policy, correction, sizes, proof)
    return None if fitted is None else _with(fitted, limit)


def _with(fitted: Fit, limit: OutputLimit) -> Fit:
    return replace(fitted, report=replace(fitted.report, output=limit))


def _refusal(exc: FitError, limit: OutputLimit, floor: int, policy: FitPolicy) -> FitError:
    """The reservation's refusal when a smaller cap would let the prompt fit, else ``exc``."""
    if exc.team_limit is not None:
        return exc
    fits = output_room(exc.window, policy, exc.estimate)
    if fits < 1:
        return exc
    return OutputReserveError(exc, limit, floor, fits)
