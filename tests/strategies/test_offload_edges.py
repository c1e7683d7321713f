"""An offloaded image's neighbours are left as the client sent them (mutation testing found the
fields beside an image unpinned: docs/mutation.md); offloading stops at its own mark."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from test_fit import IMAGES, png, route

from pricing.messages import ChatRequest, parse_request
from strategies.fit import fit
from strategies.offload import offload_images
from strategies.policy import FitPolicy


def test_offloading_replaces_only_the_images_and_keeps_every_field_of_the_other_parts() -> None:
    marked = {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}}
    image = {"type": "image_url", "image_url": {"url": IMAGES[0]}}
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": [marked, image]}]}
    (message,) = parse_request(body).messages
    out = offload_images(message, route(8000))
    content = out.wire["content"]
    assert content[0] == marked  # the very entry, cache_control and all
    assert content[1]["type"] == "text" and content[1]["text"] == out.parts[1].text
    assert out.parts[0] == message.parts[0] and not out.images


def _screenshots(turns: int) -> ChatRequest:
    """A screenshot agent's conversation: every user turn a 1024² picture (765 tokens on
    gpt-4o) and a line of text, every answer a line."""
    messages: list[dict[str, object]] = []
    for i in range(turns):
        picture = {"type": "image_url", "image_url": {"url": png(1024, 1024, i)}}
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": f"step {i}"}, picture]}
        )
        messages.append({"role": "assistant", "content": f"clicked button {i}"})
    messages.append({"role": "user", "content": "and now?"})
    return parse_request({"model": "gpt-4o", "messages": messages})


def test_offload_water_is_where_offloading_brings_the_prompt() -> None:
    """Offloading stops once the prompt is at most ``offload_water`` of the budget (by default
    the elision's ``low_water``): a lower mark offloads more at once, so the steps that re-send
    the prompt from their first offloaded image come fewer (docs/fitting.md)."""
    request, r = _screenshots(16), route(12_000)
    plain = FitPolicy(image_head=0.0)  # the mark alone (the image head: below)
    default = fit(request, r, plain)
    low = fit(request, r, replace(plain, offload_water=0.5))
    budget = default.report.budget
    offloaded = (default.report.actions["offloaded_images"], low.report.actions["offloaded_images"])
    assert 0.5 * budget < default.estimate <= FitPolicy().low_water * budget
    assert low.estimate <= 0.5 * budget
    assert offloaded[1].count > offloaded[0].count > 0
    assert not low.report.actions["elided_messages"].count  # offloading alone got it there
    assert FitPolicy.parse({"offload_water": None}).offload_water is None
    for bad in ("low", 1.5, -0.1, True):
        with pytest.raises(ValueError, match="offload_water"):
            FitPolicy.parse({"offload_water": bad})


def test_the_image_head_keeps_its_images_and_offloading_starts_after_it() -> None:
    """With an image head (``image_head``, a fraction of the budget), the oldest images stay
    while later ones are offloaded: a step re-sends the tail after the head, not the prompt
    from its first image. Without one, the oldest go first."""
    request, r = _screenshots(16), route(12_000)
    plain = fit(request, r, FitPolicy(image_head=0.0))
    headed = fit(request, r, FitPolicy(image_head=0.5))

    def offloaded(fitted: Any) -> list[int]:
        return [i for i, m in enumerate(fitted.messages) if m.role == "user" and not m.images]

    assert headed.estimate <= headed.report.budget and plain.estimate <= plain.report.budget
    first_plain, first_headed = offloaded(plain)[0], offloaded(headed)[0]
    assert first_plain == 2  # the oldest went first (the task's own, message 0, is protected)
    assert first_headed > first_plain  # the head's pictures stayed
    assert all(m.images for m in headed.messages[:first_headed] if m.role == "user")


def test_an_image_cheaper_than_its_placeholder_reports_no_negative_tokens_removed() -> None:
    # Under Claude's rule a 16x16 picture costs less than its placeholder's text: offloading it
    # removes nothing, and the report (which feeds Prometheus counters, which refuse a negative
    # increment: a 500 on the Messages wire) must not say it removed fewer than 0 tokens.
    from pricing.framing import CLAUDE_TOOLS_PREAMBLE, Framing
    from pricing.images import default_image_rule
    from pricing.route import Route

    claude = Route(
        alias="claude",
        model="anthropic/claude-sonnet-4-5",
        provider="anthropic",
        context_window=4000,
        max_output_tokens=1024,
        tokenizer="o200k_base",
        framing=Framing(family="generic", tools_preamble=CLAUDE_TOOLS_PREAMBLE),
        image_rule=default_image_rule("claude-sonnet-4-5", True),
        supports_vision=True,
    )
    tiny = {"type": "image_url", "image_url": {"url": png(16, 16, 1)}}
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for _ in range(12):
        look = {"type": "text", "text": "look " + "word " * 300}
        messages.append({"role": "user", "content": [look, tiny]})
        messages.append({"role": "assistant", "content": "seen " + "word " * 300})
    messages.append({"role": "user", "content": "which was first?"})
    result = fit(parse_request({"messages": messages, "max_tokens": 256}), claude, FitPolicy())
    offloaded = result.report.actions["offloaded_images"]
    # ... and offloading it would add tokens, so it stays (strategies/offload.py, saves_tokens)
    assert offloaded.count == 0
    assert "image omitted" not in str(result.body)
    assert all(a.tokens >= 0 for a in result.report.actions.values())
