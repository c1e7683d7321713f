"""Parsing a route's ``image_rule`` config entry into an ``ImageRule``.

Forms and their errors are in docs/images.md § Rules are data. A ``model:`` spec starts from the
catalogue's rule for that model name, so this is the one place both meet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pricing.images.catalogue import default_image_rule
from pricing.images.constants import expand_aliases
from pricing.images.kinds import KINDS
from pricing.images.rule import ImageRule

__all__ = ["parse_image_rule"]


def parse_image_rule(spec: str | Mapping[str, Any]) -> ImageRule:
    """An image rule from config; raise ValueError with a message fit for the operator.

    Accepted forms::

        image_rule: text-only              # or any kind name, with its default constants
        image_rule: flat:1500              # a fixed price per image
        image_rule: deepseek-v4:exp        # a kind and one of its named variants
        image_rule: model:gpt-5.4-mini     # the default rule of a model family
        image_rule: {kind: openai-patch, max_dim: 2048, patch_budget: 1536, multiplier: 1.62}
        image_rule: {model: claude-opus-4-7, token_limit: 5000}   # a preset, then overrides
    """
    if isinstance(spec, str):
        return _parse_string(spec.strip())
    if not isinstance(spec, Mapping):
        raise ValueError(
            "image rule must be a kind name (e.g. 'anthropic', 'flat:1500') or a mapping"
        )
    params = {str(k): v for k, v in spec.items()}
    model = params.pop("model", None)
    kind = params.pop("kind", None)
    if model is not None:
        if not isinstance(model, str) or not model:
            raise ValueError("image rule model must be a model name")
        base = default_image_rule(model, supports_vision=True)
        if kind is not None and kind != base.kind:
            raise ValueError(f"model {model!r} implies kind {base.kind!r}, not {kind!r}")
        if "variant" in params:  # the model picks the kind; the variant replaces its preset
            return ImageRule(base.kind, tuple(params.items()))
        overrides = expand_aliases(base.kind, params)
        return ImageRule(base.kind, tuple({**dict(base.params), **overrides}.items()))
    if not isinstance(kind, str):
        raise ValueError(f"image rule mapping needs a kind (known: {', '.join(KINDS)})")
    return ImageRule(kind, tuple(params.items()))


def _parse_string(spec: str) -> ImageRule:
    if spec.startswith("model:"):
        return default_image_rule(spec[6:].strip(), supports_vision=True)
    kind, sep, arg = spec.partition(":")
    if kind == "flat" and sep:
        try:
            tokens = int(arg)
        except ValueError:
            raise ValueError(f"flat image rule needs a whole number of tokens: {spec!r}") from None
        return ImageRule("flat", (("tokens", tokens),))
    if sep:
        return ImageRule(kind, (("variant", arg),))
    return ImageRule(kind)
