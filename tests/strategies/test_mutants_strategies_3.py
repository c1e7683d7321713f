"""What a third mutation run of strategies/ let through (docs/mutation.md, seed 20261211): the
last resort keeps the system prompt and masks the newest turn's outputs before dropping its
calls, a developer message is protected, only the images of offloaded units become placeholders
and the report counts them all, and the most aggressive plan keeps its head without a budget."""

from __future__ import annotations

from typing import Any

from gpt4o_route import gpt4o_route
from test_fit import png

from pricing.messages import parse_request
from pricing.meter import measure
from strategies.elide import UnitCosts, plan_max
from strategies.fit import fit
from strategies.mask import MASK_PREFIX
from strategies.policy import FitPolicy, prompt_budget


def _text(n: int, seed: int) -> str:
    return " ".join(f"survivor{(seed * 31 + i) % 89} careful words" for i in range(n))


def _price(messages: list[dict[str, Any]], route: Any) -> int:
    return measure(parse_request({"model": "t", "messages": messages}), route).total


# -- _last_resort: the system prompt stays, the newest turn is masked before it goes ----------


def test_the_last_resort_keeps_the_system_prompt_and_the_newest_turn_masked() -> None:
    """Refusal is the last resort (docs/fitting.md): when the task cannot stay beside the
    latest user message, the last resort keeps the system prompt, the latest user message and
    the newest turn with its outputs masked — no cut touches the system prompt, and the turn's
    calls stay answered while masking is enough."""
    r = gpt4o_route(window=4_000)
    policy = FitPolicy()
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, 256)
    ids = [f"call_{k}" for k in range(8)]
    calls = [
        {"id": i, "type": "function", "function": {"name": "cat", "arguments": "{}"}} for i in ids
    ]
    system = {"role": "system", "content": "You are an agent."}
    task = {"role": "user", "content": "Task: " + _text(1_000, 1)}
    latest = {"role": "user", "content": "Now read every log."}
    turn: list[dict[str, Any]] = [{"role": "assistant", "content": "Reading.", "tool_calls": calls}]
    turn += [
        {"role": "tool", "tool_call_id": i, "content": _text(125, k)} for k, i in enumerate(ids)
    ]
    messages = [system, task, {"role": "assistant", "content": "Sure."}, latest, *turn]
    assert _price([system, task, latest], r) > budget  # the task cannot stay
    assert _price([system, latest, *turn], r) > budget  # nor the turn's outputs verbatim
    req = parse_request({"model": "t", "messages": messages, "max_tokens": 256})
    fitted = fit(req, r, policy)
    assert fitted.estimate <= budget
    out = fitted.body["messages"]
    assert out[0] == system  # the system prompt, byte for byte
    assert out[1]["content"].startswith("[routefit: 2 earlier messages")  # task and reply
    assert out[2] == latest
    assert out[3].get("tool_calls") == calls  # the turn kept
    assert [m["tool_call_id"] for m in out[4:]] == ids  # every call answered
    masked = [m["content"].startswith(MASK_PREFIX) for m in out[4:]]
    assert any(masked) and masked == sorted(masked, reverse=True)  # as needed, oldest first


# -- protected_units: a developer message is protected like a system one ------------------------


def test_a_developer_message_in_the_middle_is_never_elided() -> None:
    """System and developer messages are protected (docs/fitting.md): a developer message sent
    between older turns stays, byte for byte, while the turns around it are elided
    (drop-oldest: ``pin_fraction`` 0)."""
    developer = {"role": "developer", "content": "Answer in French from now on."}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Task: summarise the logs."}]
    for t in range(12):
        messages.append({"role": "assistant", "content": _text(60, t)})
        messages.append({"role": "user", "content": f"Step {t}: " + _text(20, t + 50)})
        if t == 3:
            messages.append(developer)
    r = gpt4o_route(window=2_000, max_output=256)
    fitted = fit(parse_request({"model": "t", "messages": messages}), r, FitPolicy(pin_fraction=0))
    assert fitted.report.actions["elided_messages"].count > 0
    out = fitted.body["messages"]
    assert out.count(developer) == 1
    assert out[-1] == messages[-1]


# -- _build: only the images of units the plan offloads become placeholders -------------------


def test_an_image_of_the_latest_user_message_stays_when_older_turns_are_elided() -> None:
    """Images of protected units stay (docs/fitting.md): a fit that elides older turns and
    offloads no image sends the latest user message's image as it came."""
    latest = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": png(64, 64, 1)}},
        ],
    }
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Task: describe pictures."}]
    for t in range(12):
        messages.append({"role": "assistant", "content": _text(60, t)})
        messages.append({"role": "user", "content": f"Step {t}: " + _text(20, t + 50)})
    messages.append({"role": "assistant", "content": "Send the next one."})
    messages.append(latest)
    r = gpt4o_route(window=2_000, max_output=256)
    fitted = fit(parse_request({"model": "t", "messages": messages}), r, FitPolicy())
    assert fitted.report.actions["elided_messages"].count > 0
    assert fitted.report.actions["offloaded_images"].count == 0
    assert fitted.body["messages"][-1] == latest


def test_the_report_counts_every_image_offloaded_across_messages() -> None:
    """The report's ``offloaded_images`` counts the images that went as placeholders — here the
    images of three older user messages, one each, as the body sent shows them."""

    def shown(t: int) -> dict[str, Any]:
        return {
            "role": "user",
            "content": [
                {"type": "text", "text": f"Look at picture {t}."},
                {"type": "image_url", "image_url": {"url": png(1024, 1024, t)}},
            ],
        }

    messages: list[dict[str, Any]] = [{"role": "user", "content": "Task: describe pictures."}]
    for t in range(3):
        messages += [{"role": "assistant", "content": "Send one."}, shown(t)]
    messages += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks."}]
    r = gpt4o_route(window=2_000, max_output=256)
    fitted = fit(parse_request({"model": "t", "messages": messages}), r, FitPolicy())
    sent = [
        part
        for m in fitted.body["messages"]
        if isinstance(m["content"], list)
        for part in m["content"]
    ]
    placeholders = sum(
        1 for p in sent if p["type"] == "text" and p["text"].startswith("[image omitted")
    )
    assert placeholders == 3 and not any(p["type"] == "image_url" for p in sent)
    assert fitted.report.actions["offloaded_images"].count == placeholders


# -- plan_max: without a budget there is nothing to shrink the head for -------------------------


def test_the_most_plan_keeps_the_given_head_when_no_budget_is_given() -> None:
    """``plan_max``: the head shrinks (down to ``floor``) only to fit ``budget``; given a floor
    but no budget, the plan keeps the head it was given."""
    unit = UnitCosts(100, 100, 0, fixed=False, user=False)
    units = [unit] * 6
    common = {"overhead": 0, "marker": 0, "offload": False, "elide": True, "head": 3}
    assert plan_max(units, **common).head == 3
    assert plan_max(units, **common, floor=1).head == 3
    assert plan_max(units, **common, floor=1, budget=10**6).head == 3
    assert plan_max(units, **common, floor=1, budget=1).head == 1  # shrunk to the floor
