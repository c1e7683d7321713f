"""An offloaded image's neighbours are left as the client sent them (mutation testing found the
fields beside an image unpinned: docs/mutation.md)."""

from __future__ import annotations

from test_fit import IMAGES, route

from pricing.messages import parse_request
from strategies.offload import offload_images


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
