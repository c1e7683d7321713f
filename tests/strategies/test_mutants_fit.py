"""What the sampled mutation run of strategies/ let through (docs/mutation.md, 2026-12-04): a
bounded fit's report, the price of a bound under a fitted correction, and the correction kept
when the reply's reservation is shrunk."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpt4o_route import gpt4o_route

from pricing.calibration import FEATURES, FRAMING, Correction, _legacy
from pricing.messages import ChatRequest, parse_request
from pricing.route import Route
from strategies.fit import fit, fit_bounded
from strategies.output import fit_output
from strategies.policy import FitPolicy, output_limit, reserve_floor


def route(window: int, max_output: int = 4096) -> Route:
    return gpt4o_route(window, max_output)


def conversation(turns: int, cap: int | None = None) -> ChatRequest:
    messages = [{"role": "system", "content": "Be brief."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}: " + "alpha beta " * 20})
        messages.append({"role": "assistant", "content": f"answer {i}: " + "gamma " * 20})
    body: dict[str, Any] = {"model": "test", "messages": messages}
    if cap is not None:
        body["max_tokens"] = cap
    return parse_request(body)


def cheaper_framing() -> Correction:
    """The neutral weights but framing at half a token: no weight above the neutral one."""
    weights = list(_legacy(1.0, 1.0, 1.0))
    weights[FRAMING] = 0.5
    assert len(weights) == len(FEATURES)
    return Correction(samples=100, weights=tuple(weights))


def test_a_bounded_fit_reports_its_bound_before_and_after() -> None:
    request = conversation(3)
    bounded = fit_bounded(request, route(128_000), FitPolicy())
    assert bounded is not None
    # the transparent fit it stands for: nothing taken, the estimate before is the one after
    assert bounded.report.estimate_before == bounded.estimate
    assert bounded.report.estimate_after == bounded.estimate
    assert bounded.report.transparent


def test_a_correction_with_no_weight_above_neutral_never_raises_a_bound() -> None:
    """A bound prices text at the dearest class weight and every other feature at its weight
    (a negative one read as 0): framing at half a token lowers it by half the framing tokens,
    and the features neutral at 0 (messages, characters) stay at 0."""
    request = conversation(4)
    r = route(128_000)
    neutral = fit_bounded(request, r, FitPolicy())
    cheaper = fit_bounded(request, r, FitPolicy(), cheaper_framing())
    assert neutral is not None and cheaper is not None
    framing = neutral.pressure.framing
    assert framing >= 2
    # every weight neutral but framing's: the neutral price less half the framing (rounded up)
    assert cheaper.estimate == neutral.estimate - framing // 2


def test_the_reservation_shrunk_to_fit_keeps_the_routes_correction() -> None:
    """Fitted beside the floor (the requested reservation leaves no room), the request is
    priced with the route's correction, as ``fit`` prices it beside that floor."""
    policy = FitPolicy(min_output_reserve=256)
    request = conversation(6)
    correction = Correction(text=1.5, framing=1.25, samples=100)
    r = route(2_000, max_output=4_096)
    floor = reserve_floor(output_limit(r.max_output_tokens, policy, None), policy)
    at_floor = replace(request, max_output_tokens=floor)
    expected = fit(at_floor, r, policy, correction).estimate
    assert expected != fit(at_floor, r, policy).estimate  # the correction matters here
    fitted = fit_output(request, r, policy, correction)
    assert fitted.estimate == expected
    assert fitted.report.output is not None and fitted.report.output.reserve < 4_096
