"""Output limits (strategies.policy / strategies.output): a client's cap is clamped to the
route's limit; the reservation is shrunk, never below its floor, before a request is refused;
a refusal that the reservation causes says so and names the cap that would fit."""

from __future__ import annotations

import pytest
from gpt4o_route import gpt4o_route
from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.messages import parse_request
from pricing.route import Route
from strategies.fit import FitError, fit
from strategies.output import OutputReserveError, fit_output
from strategies.policy import (
    FitPolicy,
    minimum_window,
    output_limit,
    prompt_budget,
    reserve_floor,
    safety_margin,
    shrunk_output,
)


def route(window: int, max_output: int) -> Route:
    return gpt4o_route(window, max_output)


def request(words: int, cap: int | None, history: int = 0):
    messages: list[dict] = [{"role": "system", "content": "Be brief."}]
    for i in range(history):
        messages.append({"role": "user", "content": f"old question {i} " + "delta " * 40})
        messages.append({"role": "assistant", "content": f"old answer {i} " + "gamma " * 40})
    messages.append({"role": "user", "content": "alpha " * words})
    body: dict = {"model": "test", "messages": messages}
    if cap is not None:
        body["max_tokens"] = cap
    return parse_request(body)


# -- the arithmetic ------------------------------------------------------------------------


@given(
    st.integers(1, 200_000), st.one_of(st.none(), st.integers(1, 400_000)), st.integers(1, 10**6)
)
def test_the_reservation_never_exceeds_the_route_limit(max_output, requested, window):
    policy = FitPolicy()
    limit = output_limit(max_output, policy, requested)
    assert limit.reserve <= max_output
    if requested is not None:
        assert limit.reserve == min(requested, max_output)
        assert limit.lowered == (requested > max_output)
        assert limit.sent == limit.reserve
    else:
        assert limit.sent is None and not limit.lowered
    # the budget is the window's rest beside the clamped reservation
    margin = safety_margin(window, policy)
    assert prompt_budget(window, max_output, policy, requested) == max(
        0, window - limit.reserve - margin
    )


@given(
    st.integers(1, 64_000),
    st.integers(1, 400_000),
    st.integers(500, 300_000),
    st.integers(0, 300_000),
    st.integers(1, 8192),
)
def test_shrinking_leaves_room_for_the_prompt_and_keeps_the_floor(
    max_output, requested, window, prompt, floor
):
    policy = FitPolicy(min_output_reserve=floor)
    limit = output_limit(max_output, policy, requested)
    shrunk = shrunk_output(limit, window, policy, prompt)
    room = window - safety_margin(window, policy) - prompt
    if shrunk is None:
        assert room < reserve_floor(limit, policy)
        return
    assert reserve_floor(limit, policy) <= shrunk.reserve <= limit.reserve
    assert prompt + shrunk.reserve + safety_margin(window, policy) <= window
    # as large as it may be: the whole room, or the clamped cap when that is smaller
    assert shrunk.reserve == min(limit.reserve, room)


def test_min_output_reserve_is_validated_by_name():
    assert FitPolicy.parse({"min_output_reserve": 256}).min_output_reserve == 256
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="min_output_reserve"):
            FitPolicy.parse({"min_output_reserve": bad})


def test_minimum_window_is_the_floor_the_margin_and_a_minimal_prompt():
    # a 500-token window cannot serve a route whose reply floor is 1,024 (issue 31's example)
    assert minimum_window(16_384, FitPolicy(), 500) == 1024 + 32 + 16
    # a route that reserves little by policy needs little
    assert minimum_window(16_384, FitPolicy(output_reserve=100), 500) == 100 + 32 + 16


# -- the fit -------------------------------------------------------------------------------


def test_a_cap_above_the_route_limit_is_clamped():
    fitted = fit_output(request(10, 32_000), route(128_000, 16_384), FitPolicy())
    out = fitted.report.output
    assert out is not None and (out.requested, out.reserve, out.sent) == (32_000, 16_384, 16_384)
    assert out.describe() == "32000->16384"
    assert fitted.report.budget == 128_000 - 16_384 - 1280


def test_a_tiny_prompt_beside_a_cap_larger_than_the_window_is_shrunk_not_refused():
    # issue 31: "needs about 8 prompt tokens ... budget is 0" — the reply's cap was the problem
    r = route(3000, 16_384)
    with pytest.raises(FitError):
        fit(request(3, 32_000), r, FitPolicy())
    fitted = fit_output(request(3, 32_000), r, FitPolicy())
    out = fitted.report.output
    assert out is not None and out.lowered
    assert fitted.estimate + out.reserve + 32 == 3000  # all the room the prompt leaves
    assert fitted.report.transparent


def test_history_is_elided_before_the_reply_is_shrunk():
    # the protected messages fit beside the client's whole cap: its reply keeps that room
    r = route(8192, 4096)
    fitted = fit_output(request(200, 4096, history=60), r, FitPolicy())
    assert fitted.report.actions["elided_messages"].count > 0
    out = fitted.report.output
    assert out is not None and out.reserve == 4096 and not out.lowered


def test_a_prompt_that_fits_only_beside_a_cap_below_the_floor_names_the_cap():
    r = route(8192, 4096)
    with pytest.raises(OutputReserveError) as info:
        fit_output(request(7500, 4096), r, FitPolicy())
    exc = info.value
    assert 1 <= exc.fits < 1024 and exc.floor == 1024
    assert exc.estimate + exc.fits + safety_margin(8192, FitPolicy()) == 8192
    assert f"Set an output cap of {exc.fits:,} or less" in str(exc)
    assert "output reservation" in str(exc)


def test_a_client_cap_below_the_floor_is_not_shrunk_but_named():
    r = route(8192, 4096)
    with pytest.raises(OutputReserveError) as info:
        fit_output(request(7900, 600), r, FitPolicy())
    assert info.value.floor == 600 and info.value.fits < 600


def test_a_prompt_longer_than_the_window_is_the_prompts_refusal():
    with pytest.raises(FitError) as info:
        fit_output(request(9000, 4096), route(8192, 4096), FitPolicy())
    assert not isinstance(info.value, OutputReserveError)


def test_the_teams_prompt_quota_is_not_blamed_on_the_reservation():
    policy = FitPolicy(max_prompt_tokens=1000)
    with pytest.raises(FitError) as info:
        fit_output(request(2000, 4096), route(128_000, 16_384), policy)
    assert not isinstance(info.value, OutputReserveError)
    assert info.value.team_limit == 1000


@settings(max_examples=60, deadline=None)
@given(
    words=st.integers(1, 9000),
    cap=st.one_of(st.none(), st.integers(1, 40_000)),
    window=st.integers(600, 12_000),
    max_output=st.integers(256, 16_384),
    floor=st.integers(1, 4096),
)
def test_the_reservation_never_makes_a_request_refuse_that_a_floor_reserve_fits(
    words, cap, window, max_output, floor
):
    """Never refuse while a reservation down to the floor would fit; when served, the prompt
    and the reply's cap fit the window together; when refused for the reservation, the cap
    named is what the window leaves."""
    policy = FitPolicy(min_output_reserve=floor)
    r = route(window, max_output)
    req = request(words, cap)
    limit = output_limit(max_output, policy, cap)
    margin = safety_margin(window, policy)
    try:
        fitted = fit_output(req, r, policy)
    except OutputReserveError as exc:
        assert 1 <= exc.fits < reserve_floor(limit, policy)
        assert exc.estimate + exc.fits + margin == window
        return
    except FitError:
        assert window - margin - _core(words, r) < 1  # no positive cap would fit
        return
    out = fitted.report.output
    assert out is not None
    assert reserve_floor(limit, policy) <= out.reserve <= limit.reserve
    assert fitted.estimate + out.reserve + margin <= window


def _core(words: int, r: Route) -> int:
    """What the request's prompt takes when the whole window is left to it."""
    try:
        return fit(
            request(words, None), r, FitPolicy(output_reserve=0, safety_margin=0), None
        ).estimate
    except FitError as exc:
        return exc.estimate
