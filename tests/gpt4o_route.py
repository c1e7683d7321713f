"""A gpt-4o route (o200k_base, OpenAI framing, gpt-4o's image rule) of a given window and
output limit: the pure core's tests price and fit against it."""

from __future__ import annotations

from pricing.framing import default_framing
from pricing.images import default_image_rule
from pricing.route import Route


def gpt4o_route(
    window: int = 128_000, max_output: int = 4096, *, vision: bool = True, alias: str = "test"
) -> Route:
    return Route(
        alias=alias,
        model="gpt-4o",
        context_window=window,
        max_output_tokens=max_output,
        tokenizer="o200k_base",
        framing=default_framing("gpt-4o", "o200k_base"),
        image_rule=default_image_rule("gpt-4o", vision),
        supports_vision=vision,
    )
