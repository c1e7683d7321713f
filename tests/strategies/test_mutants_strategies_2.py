"""What a second mutation run of strategies/ let through: a bound tightened by its proof, a
conversation whose first unit goes, the units fixed whatever the prefix, a masked output priced
beside the output before it, the non-negative integer knobs, and the report's keys."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from gpt4o_route import gpt4o_route

from pricing.bounds import Proof
from pricing.calibration import Correction
from pricing.framing import Framing
from pricing.images import default_image_rule
from pricing.messages import ChatRequest, parse_request
from pricing.route import Route
from strategies.fit import fit, fit_bounded
from strategies.moves import Job, adapt
from strategies.policy import FitPolicy, OutputLimit, prompt_budget
from strategies.result import FitReport


def request(messages: list[dict[str, Any]]) -> ChatRequest:
    return parse_request({"model": "test", "messages": messages})


# -- fit_bounded: the proof's tightened bound is the one priced ---------------------------------


def test_a_bound_over_the_budget_is_tightened_into_a_fit() -> None:
    """A prompt whose cheap bound (its bytes) is over the budget but whose tokens fit is proved
    by counting part of it: the pressure is re-bounded with the proof's tightened bounds."""
    # a text of this test's own, so that no count of it is memoised (it would be its own bound)
    text = " ".join(f"survivor{i % 83} tightened prose" for i in range(6_000))
    req = request([{"role": "user", "content": text}])
    size = len(text.encode())
    r = gpt4o_route(window=int(size / 1.2) + 4096 + size // 100)
    policy = FitPolicy()
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, None)
    assert budget < size  # the bytes do not fit
    assert fit_bounded(req, r, policy) is None  # so no cheap bound proves it
    bounded = fit_bounded(req, r, policy, proof=Proof(r))
    assert bounded is not None
    assert bounded.report.transparent and bounded.body == req.body
    exact = fit(req, r, policy)
    assert exact.estimate <= bounded.estimate <= budget


# -- _build: the first unit elided --------------------------------------------------------------


def test_without_a_system_prompt_the_task_can_go_first() -> None:
    """Refusal is the last resort: with no system prompt, a task too big to keep beside the
    latest user message is elided, and the marker standing in for it opens the conversation
    as the user."""
    task = "Task: " + "alpha beta gamma delta " * 400
    req = request(
        [
            {"role": "user", "content": task},
            {"role": "assistant", "content": "Done. " + "epsilon " * 20},
            {"role": "user", "content": "Now say hi."},
        ]
    )
    fitted = fit(req, gpt4o_route(window=1_600, max_output=256), FitPolicy())
    assert fitted.estimate <= fitted.report.budget
    assert [m.role for m in fitted.messages] == ["user", "user"]
    marker = fitted.body["messages"][0]["content"]
    assert marker.startswith("[routefit: 2 earlier messages")
    assert fitted.messages[-1] is req.messages[-1]
    assert fitted.report.actions["elided_messages"].count == 2


# -- _unit_costs: what is fixed ------------------------------------------------------------------


def test_system_developer_and_the_first_user_message_are_fixed_units() -> None:
    """``UnitCosts.fixed``: protected whatever the prefix — system and developer messages and
    the first user message (the task); no other unit."""
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "The task."},
        {"role": "assistant", "content": "Working."},
        {"role": "developer", "content": "Use metric units."},
        {"role": "user", "content": "Go on."},
        {"role": "assistant", "content": "Going."},
        {"role": "user", "content": "Done?"},
    ]
    req = request(messages)
    r = gpt4o_route()
    policy = FitPolicy()
    job = Job(req, r, policy, Correction(), None, 100_000)
    sent, _ = adapt(job, req.messages)
    _, costs = job.units(sent, job.measure(sent))
    assert [c.fixed for c in costs] == [True, True, False, True, False, False, False]
    assert [c.user for c in costs] == [m["role"] == "user" for m in messages]


# -- Job._masked: a masked output is priced where it stands ------------------------------------


def deepseek_framed(spec: str, window: int) -> Route:
    """DeepSeek's template (consecutive tool outputs joined by a newline) on a tokenizer where
    a newline is ``spec``'s count of it (``framing: deepseek`` in config, any tokenizer)."""
    return Route(
        alias="ds",
        model="deepseek-chat",
        context_window=window,
        max_output_tokens=256,
        tokenizer=spec,
        framing=Framing(family="deepseek", per_message=0, per_name=0, priming=2),
        image_rule=default_image_rule("deepseek-chat", False),
        supports_vision=False,
    )


def parallel_calls(rounds: int) -> ChatRequest:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Task: read the files."},
    ]
    for r in range(rounds):
        ids = [f"call_{r}_{k}" for k in range(3)]
        calls = [
            {"id": i, "type": "function", "function": {"name": "read", "arguments": "{}"}}
            for i in ids
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        for i in ids:
            messages.append({"role": "tool", "tool_call_id": i, "content": "line\n" * 150})
    messages.append({"role": "user", "content": "Summarise."})
    return request(messages)


@pytest.mark.parametrize("spec", ["heuristic:0.5", "heuristic:4"])
def test_masking_alone_removes_what_the_report_says(spec: str) -> None:
    """Only masking ran: the prompt fell by exactly the tokens the report says masking removed,
    each masked output priced as it is sent — after the output before it, whose template joins
    them (DeepSeek's, where the newline between two outputs may be more than one token)."""
    req = parallel_calls(4)
    policy = FitPolicy(strategies=("mask",))
    wide = fit(req, deepseek_framed(spec, 1_000_000), policy)
    # a window whose budget is about half the prompt: its outputs must be masked, several
    fitted = fit(req, deepseek_framed(spec, wide.estimate // 2 + 512), policy)
    masked = fitted.report.actions["masked"]
    assert fitted.report.estimate_before > fitted.report.budget
    assert masked.count > 1
    assert fitted.estimate <= fitted.report.budget
    assert fitted.report.estimate_before - fitted.report.estimate_after == masked.tokens


# -- FitPolicy.parse: the non-negative integer knobs --------------------------------------------


@pytest.mark.parametrize(
    "key", ["output_reserve", "safety_margin", "message_cap_tokens", "max_prompt_tokens"]
)
@pytest.mark.parametrize("bad", [-1, -4096, 2.5, "5"])
def test_an_integer_knob_below_zero_or_not_an_integer_is_refused(key: str, bad: object) -> None:
    with pytest.raises(ValueError, match=rf"^{key} must be a non-negative integer$"):
        FitPolicy.parse({key: bad})
    assert getattr(FitPolicy.parse({key: 0}), key) == 0


# -- FitReport.as_dict: the dry run's and the CLI's keys -----------------------------------------


def test_the_reports_dict_names_its_fields() -> None:
    """``/routefit/fit`` and ``routefit fit --json`` show the report by its fields' names, the
    reply's reservation by its own (``sent`` included)."""
    output = OutputLimit(requested=32_000, route_limit=16_384, reserve=16_384)
    report = FitReport("test", 1_000, 1_200, 900, output=output)
    shown = report.as_dict()
    names = [f.name for f in fields(FitReport)]
    assert sorted(shown) == sorted([*names, "transparent"])
    for name in names[:4]:
        assert shown[name] == getattr(report, name)
    assert shown["output"] == {
        "requested": 32_000,
        "route_limit": 16_384,
        "reserve": 16_384,
        "sent": output.sent,
    }
    assert sorted(shown["output"]) == sorted([*(f.name for f in fields(OutputLimit)), "sent"])
