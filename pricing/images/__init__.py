"""Image-token rules: what one image costs on a route, as that route's provider counts it.

Providers price images by wildly different algorithms (tiles, patches, pixel areas, fixed
levels, grid solvers) and revise their constants without notice, so a rule here is *data*: a
kind (the algorithm) plus its constants, every one overridable from config. The published
numbers are named presets per model family, so a provider's revision is a one-line change and
an operator can pin the old or the new figures per route.

Where two sources disagree (docs/images.md § Where sources disagree) both are kept as named
variants and the default is the conservative one: overestimating an image costs a little
budget, underestimating it sends a request that overflows.

The package, one concept per module:

- ``kinds``: the rule algorithms, one frozen dataclass of constants per kind, with presets;
- ``constants``: loading a kind's constants from config, each value checked explicitly;
- ``rule``: ``ImageRule``, the hashable value routes carry;
- ``catalogue``: the default rule of a model name;
- ``spec``: ``parse_image_rule``, the config entry.

Sizes come from ``pricing.probe`` (headers only) or from the proxy (fetched URL headers).
"""

from pricing.images.catalogue import default_image_rule
from pricing.images.kinds import (
    DETAILS,
    KINDS,
    UNKNOWN_VISION_TOKENS,
    Anthropic,
    DeepSeekV4,
    Flat,
    GeminiFixed,
    GeminiTile,
    Llama4,
    OpenAIPatch,
    OpenAITile,
    Pixtral,
    QwenVL,
    TextOnly,
)
from pricing.images.rule import ImageRule, text_only
from pricing.images.spec import parse_image_rule

__all__ = [
    "DETAILS",
    "KINDS",
    "UNKNOWN_VISION_TOKENS",
    "Anthropic",
    "DeepSeekV4",
    "Flat",
    "GeminiFixed",
    "GeminiTile",
    "ImageRule",
    "Llama4",
    "OpenAIPatch",
    "OpenAITile",
    "Pixtral",
    "QwenVL",
    "TextOnly",
    "default_image_rule",
    "parse_image_rule",
    "text_only",
]
