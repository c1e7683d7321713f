"""Properties of Responses items as fitting units: no orphan outputs or calls, reasoning kept with
the items it precedes and never altered, the same request always gives the same bytes."""

from __future__ import annotations

import copy

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pricing.framing import default_framing
from pricing.images import default_image_rule
from pricing.route import Route
from proxy.wires.responses_items import parse_responses, render_items
from strategies.fit import FitError, fit
from strategies.policy import FitPolicy

ROUTE = Route(
    alias="test",
    model="gpt-4o",
    context_window=6000,
    max_output_tokens=1024,
    tokenizer="o200k_base",
    framing=default_framing("gpt-4o", "o200k_base"),
    image_rule=default_image_rule("gpt-4o", True),
    supports_vision=True,
)


@st.composite
def turns(draw: st.DrawFn) -> list[dict]:
    items: list[dict] = [{"type": "message", "role": "developer", "content": "base prompt"}]
    n = draw(st.integers(1, 14))
    for t in range(n):
        words = draw(st.integers(1, 400))
        items.append({"role": "user", "content": f"turn {t} " + "lorem " * words})
        for k in range(draw(st.integers(0, 3))):
            cid = f"call_{t}_{k}"
            if draw(st.booleans()):
                secret = f"enc{t}{k}" * draw(st.integers(1, 50))
                items.append(
                    {
                        "type": "reasoning",
                        "id": f"rs_{t}_{k}",
                        "summary": [],
                        "encrypted_content": secret,
                    }
                )
            custom = draw(st.booleans())
            kind = "custom_tool_call" if custom else "function_call"
            call = {"type": kind, "call_id": cid, "name": "tool"}
            call["input" if custom else "arguments"] = "{}"
            items.append(call)
            out = "out " * draw(st.integers(1, 2500))
            items.append({"type": kind + "_output", "call_id": cid, "output": out})
        if draw(st.booleans()):
            items.append(
                {"type": "reasoning", "id": f"rs_{t}", "summary": [], "encrypted_content": "z"}
            )
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok"}],
            }
        )
    items.append({"role": "user", "content": "now"})
    return items


def _fitted(items: list[dict]) -> list:
    request = parse_responses({"model": "test", "input": items, "store": False})
    result = fit(request, ROUTE, FitPolicy())
    return render_items(request, result.messages)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns())
def test_units_survive_fitting(items):
    original = copy.deepcopy(items)
    try:
        out = _fitted(items)
    except FitError:
        return
    assert items == original  # the client's items are never mutated
    calls = [i["call_id"] for i in out if i.get("type") in ("function_call", "custom_tool_call")]
    outputs = [i["call_id"] for i in out if str(i.get("type", "")).endswith("_call_output")]
    assert sorted(calls) == sorted(outputs)  # no orphan outputs, no unanswered calls
    following = {i["id"]: items[n + 1] for n, i in enumerate(items) if i.get("type") == "reasoning"}
    for n, item in enumerate(out):
        if item.get("type") == "reasoning":
            assert item in original  # never altered
            assert out[n + 1] == following[item["id"]]  # still before what it preceded
    assert out[0] == items[0] and out[-1] == items[-1]  # developer message and the new turn
    assert orjson.dumps(_fitted(copy.deepcopy(items))) == orjson.dumps(out)  # deterministic


def test_a_request_that_fits_is_forwarded_as_the_client_sent_it():
    items = [{"role": "user", "content": "hi"}, {"type": "item_reference", "id": "x"}]
    request = parse_responses({"model": "test", "input": items})
    assert fit(request, ROUTE, FitPolicy()).body is request.body
