"""Masking a turn's outputs one more at a time (``strategies.moves._masked_until_fit``).

The newest turn's outputs are masked oldest first, one more each time, until the prompt fits;
so is the last resort's turn. Building every step re-priced the whole prompt each time: one
turn of 2,000 tool results on an 8k route took 18 s of CPU, on the event loop, to fit. The
steps are now priced from their outputs' own features and only the one predicted to fit is
built; these tests hold it to what building every step chose.
"""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fit import route
from test_mask import agent_conversations, words

from pricing.calibration import FEATURES, Correction
from pricing.messages import parse_request
from strategies import moves
from strategies.fit import FitError, fit
from strategies.policy import FitPolicy


def _every_step(job, messages, units, plan, masks, extra, start):  # type: ignore[no-untyped-def]
    """The reference: build every step until one fits (its newest mask squeezed to the room)."""
    states, offload = plan
    out = []
    for k in range(start, len(extra) + 1):
        built = moves._build(job, messages, units, states, masks | frozenset(extra[:k]), offload)
        built = moves._squeezed(job, messages, units, plan, masks, extra, k, built)
        out.append((built.estimate, built))
        if built.estimate <= job.budget:
            break
    return out


def _sent(body: dict, r, policy: FitPolicy, correction: Correction | None) -> str:
    try:
        result = fit(parse_request(copy.deepcopy(body)), r, policy, correction)
    except FitError as exc:
        return f"refused: {exc}"
    return json.dumps(result.body, sort_keys=True)


CORRECTIONS = [
    None,
    Correction(samples=30, weights=tuple(1.0 + 0.07 * (j % 5) for j in range(len(FEATURES)))),
    Correction(samples=30, weights=tuple(0.9 if j % 3 else 2.5 for j in range(len(FEATURES)))),
]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=agent_conversations(),
    window=st.integers(900, 9000),
    correction=st.sampled_from(CORRECTIONS),
)
def test_each_fit_is_what_building_every_step_gave(messages, window, correction):
    r = route(window)
    policy = FitPolicy()
    body = {"model": "t", "messages": messages, "max_tokens": 256}
    predicted = _sent(body, r, policy, correction)
    original = moves._masked_until_fit
    moves._masked_until_fit = _every_step  # type: ignore[assignment]
    try:
        stepped = _sent(body, r, policy, correction)
    finally:
        moves._masked_until_fit = original
    assert predicted == stepped


def _wide_turn(results: int) -> dict:
    """One assistant message calling ``results`` tools, all answered, after a short task."""
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        for i in range(results)
    ]
    messages = [
        {"role": "user", "content": "Task: " + words(20, 1)},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *(
            {"role": "tool", "tool_call_id": f"c{i}", "content": words(40, i)}
            for i in range(results)
        ),
    ]
    return {"model": "t", "messages": messages, "max_tokens": 256}


def test_a_wide_turn_is_built_a_bounded_number_of_times(monkeypatch) -> None:
    builds = 0
    build = moves._build

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal builds
        builds += 1
        return build(*args, **kwargs)

    monkeypatch.setattr(moves, "_build", counted)
    result = fit(parse_request(_wide_turn(400)), route(4000), FitPolicy())
    assert result.report.estimate_after <= result.report.budget
    assert builds <= 12, builds
