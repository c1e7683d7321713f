"""A route's images: the token rule, the limits a request's images must keep, the fetch policy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pricing.images import ImageRule, default_image_rule, parse_image_rule
from pricing.route import ImageLimits
from proxy.config.reader import Reader, unknown_key
from proxy.fetch import ImageFetchPolicy, parse_fetch_policy

__all__ = ["RouteImages", "read_images"]

_LIMIT_KEYS = frozenset(ImageLimits.__dataclass_fields__)
_FETCH_KEYS = frozenset(ImageFetchPolicy.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class RouteImages:
    rule: ImageRule
    limits: ImageLimits
    fetch: ImageFetchPolicy


def _rule_keys(spec: Mapping[str, Any]) -> set[str] | None:
    """The keys an image rule mapping may hold for its kind (None when the kind is unknown):
    the kind's constants, plus ``max_dim`` / ``patch_budget`` where per-level ones exist."""
    try:
        kind = spec.get("kind")
        if not isinstance(kind, str):
            kind = default_image_rule(str(spec.get("model")), supports_vision=True).kind
        names = {name for name, _ in ImageRule(kind).params}
    except (TypeError, ValueError):
        return None
    aliases = {name.removeprefix("low_") for name in names if name.startswith("low_")}
    return names | aliases | {"kind", "model", "variant"}


def _read_rule(spec: Any, model: str, vision: bool, where: str, rd: Reader) -> ImageRule:
    if spec is None:
        return default_image_rule(model, vision)
    try:
        return parse_image_rule(spec)
    except ValueError as exc:
        # Name the mistyped constant and its closest spelling where the kind is known.
        known = _rule_keys(spec) if isinstance(spec, Mapping) else None
        if known is not None:
            for key in spec:
                if key not in known:
                    raise rd.error(f"{where}.image_rule.{key}", unknown_key(key, known)) from None
        raise rd.error(f"{where}.image_rule", str(exc)) from None


def _read_limits(raw: Any, where: str, rd: Reader) -> ImageLimits:
    block = rd.strict(raw, _LIMIT_KEYS, where)
    return ImageLimits(**{k: rd.integer(v, f"{where}.{k}", 1) for k, v in block.items()})


def _read_fetch(raw: Any, where: str, rd: Reader) -> ImageFetchPolicy:
    if raw is not None:
        block = rd.strict(raw, _FETCH_KEYS, where)
        if block.get("timeout_s") is not None:  # ``.nan`` passed ``<= 0``: no fetch finished
            rd.number(block["timeout_s"], f"{where}.timeout_s")
    try:
        return parse_fetch_policy(raw)
    except ValueError as exc:
        raise rd.error(where, str(exc)) from None


def read_images(
    own: Mapping[str, Any], model: str, vision: bool, where: str, rd: Reader
) -> RouteImages:
    """``where`` is the route's routefit block."""
    return RouteImages(
        rule=_read_rule(own.get("image_rule"), model, vision, where, rd),
        limits=_read_limits(own.get("image_limits"), f"{where}.image_limits", rd),
        fetch=_read_fetch(own.get("image_fetch"), f"{where}.image_fetch", rd),
    )
