"""Offloading images: an old image is replaced on the wire by its placeholder text.

The placeholder is the same deterministic text a text-only route sends instead of an image
(``pricing.probe.placeholder``), so an offloaded image is priced exactly like one on a text-only
route, and the same image offloaded on two turns renders the same bytes.

Offloading is for room, so it never makes a request bigger: an image the route prices at no
more than its placeholder's text (a small picture under Claude's ⌈w·h/750⌉: a 16x16 icon is one
token, its placeholder about fifteen) stays an image (``saves_tokens``). The choice depends only
on the image and the route, so consecutive turns still offload the same images. Where the image
*must* go whatever it costs, every one is replaced: on a route that takes no pictures, and beyond
the number of images its provider accepts in one request (``offload_images(..., forced=True)``).
"""

from __future__ import annotations

from dataclasses import replace

from pricing.messages import ImagePart, Message, Part, TextPart, message_wire, render_content
from pricing.meter import Sizes, price_image
from pricing.probe import placeholder, probe
from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from strategies.actions import Label
from strategies.strategy import Move

__all__ = ["OFFLOAD", "offload_images", "placeholder_for", "saves_tokens"]


def placeholder_for(part: ImagePart, route: Route) -> str:
    return placeholder(probe(part.url, route.image_limits, route.scope), part.url)


def saves_tokens(part: ImagePart, route: Route, sizes: Sizes | None = None) -> bool:
    """Whether the route counts fewer tokens for ``part``'s placeholder than for the part itself
    (its pictures and any text it carries, as the meter prices them): only then does offloading
    it make room. Ties keep the image: the placeholder would cost as much and lose the picture."""
    price = price_image(part, route, sizes)
    tokens = get_tokenizer(route.tokenizer, route.scope).count(placeholder_for(part, route))
    return tokens < price.tokens + price.text


def offload_images(
    message: Message, route: Route, sizes: Sizes | None = None, *, forced: bool = False
) -> Message:
    """The message with its images replaced by their placeholder texts, other parts in place:
    every image when ``forced``, else those whose placeholder is cheaper (``saves_tokens``).
    The message itself when nothing is replaced."""
    if not message.images:
        return message
    forced = forced or not _visual(route)  # a route that sees no pictures gets none
    parts: list[Part] = [
        TextPart(placeholder_for(p, route))
        if isinstance(p, ImagePart) and (forced or saves_tokens(p, route, sizes))
        else p
        for p in message.parts
    ]
    if all(new is old for new, old in zip(parts, message.parts, strict=True)):
        return message
    wire = dict(message_wire(message))
    content = wire.get("content")
    if isinstance(content, list) and len(content) == len(parts):
        # Replace only the image entries, so fields on other parts (cache_control, ...) survive.
        wire["content"] = [
            {"type": "text", "text": new.text}
            if isinstance(old, ImagePart) and isinstance(new, TextPart)
            else entry
            for old, new, entry in zip(message.parts, parts, content, strict=True)
        ]
    else:
        wire["content"] = render_content(parts, keep_list=True)
    return replace(message, parts=tuple(parts), wire=wire)


def _visual(route: Route) -> bool:
    """Only a route that prices images as images has any to offload for room (a text-only
    route gets placeholders whatever the budget: ``strategies.fit``'s adaptation)."""
    return route.supports_vision and route.image_rule.visual


#: Old images become placeholders at the planner's offload points.
OFFLOAD = Move(
    "offload_images", Label("offloaded_images", "images", "offloaded", "image(s)"), _visual
)
