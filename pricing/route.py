"""Route: everything pricing needs to know about one target (provider + model).

A route is a plain value built from config (``proxy.config``); pricing never looks anything up
behind its back. Transport facts (API base, keys) and what the proxy may fetch for a route
(``proxy.fetch.ImageFetchPolicy``) are not here: they belong to the proxy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pricing.framing import Framing, is_openai_model
from pricing.images import ImageRule, text_only

__all__ = ["ImageLimits", "Route"]


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """Per-route limits on images a request may carry (checked before any pixel is touched)."""

    max_images: int = 500
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 178_956_970  # Pillow's decompression-bomb threshold
    #: What an image of unknown size costs when the rule has no upper bound.
    max_image_tokens: int = 10_000


@dataclass(frozen=True, slots=True)
class Route:
    alias: str
    model: str
    provider: str = "openai"
    context_window: int = 128_000
    max_output_tokens: int = 4_096
    tokenizer: str = "o200k_base"
    framing: Framing = field(default_factory=Framing)
    image_rule: ImageRule = field(default_factory=text_only)
    supports_vision: bool = False
    image_limits: ImageLimits = field(default_factory=ImageLimits)
    #: Whose prompts this route prices (the proxy's team; empty: one tenant, no teams). It
    #: changes no price: it keys the memo caches of prompt-derived facts (token counts, image
    #: probes), so nothing one tenant sent shows, even as a faster count, to another
    #: (docs/security.md, "Isolation of prompt-derived facts").
    scope: bytes = b""
    #: Whether the request is priced for a leg its client's wire translates to chat completions
    #: (the provider does not speak that wire): a message's ``lead`` (``Message.lead``: what the
    #: client's wire said in a field chat has no twin for) is then sent before its text, and
    #: priced. Like ``scope``, set per request by the proxy (``proxy.estimate``), where the leg
    #: is known; as configured, False: a native leg carries the field itself.
    translated: bool = False

    @property
    def exact_text(self) -> bool:
        """Whether text on this route is counted with the provider's own published rules."""
        if not self.framing.exact:
            return False
        if self.framing.family == "deepseek":
            return self.tokenizer == "deepseek"
        return self.tokenizer in ("o200k_base", "cl100k_base") and is_openai_model(self.model)
