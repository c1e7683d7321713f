"""Offloading images: an old image is replaced on the wire by its placeholder text.

The placeholder is the same deterministic text a text-only route sends instead of an image
(``pricing.probe.placeholder``), so an offloaded image is priced exactly like one on a text-only
route, and the same image offloaded on two turns renders the same bytes.
"""

from __future__ import annotations

from dataclasses import replace

from pricing.messages import ImagePart, Message, Part, TextPart, message_wire, render_content
from pricing.probe import placeholder, probe
from pricing.route import Route
from strategies.actions import Label
from strategies.strategy import Move

__all__ = ["OFFLOAD", "offload_images", "placeholder_for"]


def placeholder_for(part: ImagePart, route: Route) -> str:
    return placeholder(probe(part.url, route.image_limits, route.scope), part.url)


def offload_images(message: Message, route: Route) -> Message:
    """The message with every image replaced by its placeholder text, other parts in place."""
    if not message.images:
        return message
    parts: list[Part] = [
        TextPart(placeholder_for(p, route)) if isinstance(p, ImagePart) else p
        for p in message.parts
    ]
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
