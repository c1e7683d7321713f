"""Loading a kind's constants from config: typed, validated by explicit per-field checks.

Operators write rule constants in YAML, so every value arrives untyped. Each kind declares, in
``SCHEMA`` below, the check each of its constants needs (a non-negative integer, one that may be
null, a finite number, a flag, a name); a check either returns the value in its proper type or
raises a ValueError that names the constant, so a config error reads as one. The checks are
written out rather than derived from the dataclasses' annotations: what a constant may hold (a
budget of ``null`` means "none", a multiplier must be finite) is a rule of the config format,
not of Python's type system. A test keeps ``SCHEMA`` and the dataclasses' fields in step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from pricing.images.kinds import BY_KIND, DETAILS, KINDS, RuleConstants, Scalar

__all__ = ["SCHEMA", "build", "expand_aliases", "kind_class", "params_of"]

#: A check: (where, value) → the value in its type, or ValueError naming ``where``.
Check = Callable[[str, Any], Scalar]


def _present(where: str, value: Any) -> Any:
    if value is None:
        raise ValueError(f"{where} must not be null")
    return value


def count(where: str, value: Any) -> int:
    """A non-negative integer (``true`` is not 1)."""
    value = _present(where, value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where} must be a non-negative integer")
    return value


def count_or_none(where: str, value: Any) -> int | None:
    """A non-negative integer, or null for "no limit"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where} must be a non-negative integer or null")
    return value


def number(where: str, value: Any) -> float:
    """A finite non-negative number, as a float."""
    value = _present(where, value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{where} must be a non-negative number")
    if not math.isfinite(value):
        raise ValueError(f"{where} must be finite")
    return float(value)


def flag(where: str, value: Any) -> bool:
    """``true`` or ``false``, nothing truthy."""
    value = _present(where, value)
    if not isinstance(value, bool):
        raise ValueError(f"{where} must be true or false")
    return value


def name(where: str, value: Any) -> str:
    """A string (a preset's name, a level's name)."""
    value = _present(where, value)
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string")
    return value


def _patch_levels() -> dict[str, Check]:
    checks: dict[str, Check] = {}
    for level in DETAILS:
        checks[f"{level}_max_dim"] = count_or_none
        checks[f"{level}_patch_budget"] = count_or_none
    return checks


#: The check of every constant of every kind (kind → constant → check).
SCHEMA: Mapping[str, Mapping[str, Check]] = {
    "openai-tile": {
        "variant": name,
        "base": count,
        "tile": count,
        "max_dim": count,
        "short_side": count,
        "tile_size": count,
        "upscale_short_side": flag,
    },
    "openai-patch": {"variant": name, "multiplier": number, "patch": count, **_patch_levels()},
    "anthropic": {
        "variant": name,
        "max_edge": count,
        "token_limit": count,
        "pixels_per_token": count,
    },
    "gemini-tile": {
        "variant": name,
        "small_side": count,
        "tile_tokens": count,
        "crop_divisor": number,
        "min_crop": count,
        "max_crop": count,
    },
    "gemini-fixed": {
        "variant": name,
        "low": count,
        "medium": count,
        "high": count,
        "ultra_high": count,
        "default_level": name,
    },
    "deepseek-v4": {
        "variant": name,
        "max_tokens": count,
        "min_pixels": count,
        "max_width_ratio": count_or_none,
        "paired_rows": flag,
        "pad_to": count,
        "patch": count,
        "downsample": count,
        "max_passes": count,
    },
    "qwen-vl": {
        "variant": name,
        "factor": count,
        "min_pixels": count,
        "max_pixels": count,
        "max_aspect": count,
        "wrappers": count,
    },
    "pixtral": {"variant": name, "patch": count, "merge": count, "max_image_size": count},
    "llama4": {
        "variant": name,
        "tile": count,
        "max_tiles": count,
        "tile_tokens": count,
        "separator_tokens": count,
        "global_tokens": count,
    },
    "flat": {"tokens": count},
    "text-only": {},
}

#: Config shorthands that set one constant at every detail level.
_PER_LEVEL_ALIASES = {"max_dim": "_max_dim", "patch_budget": "_patch_budget"}


def kind_class(kind: str) -> type[RuleConstants]:
    """The dataclass of a kind; an unknown kind is a config error listing the known ones."""
    cls = BY_KIND.get(kind)
    if cls is None:
        raise ValueError(f"unknown image rule kind {kind!r} (known: {', '.join(KINDS)})")
    return cls


def expand_aliases(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Replace ``max_dim`` / ``patch_budget`` by the per-level constants they stand for.

    A per-level key given in the same spec wins over the alias (``max_dim: 2048`` with
    ``original_max_dim: 6000`` means 2048 except at ``original``).
    """
    names = SCHEMA[kind]
    out = dict(params)
    for alias, suffix in _PER_LEVEL_ALIASES.items():
        if alias in out and f"low{suffix}" in names:
            value = out.pop(alias)
            for level in DETAILS:
                out.setdefault(f"{level}{suffix}", value)
    return out


def _known_keys(kind: str) -> list[str]:
    names = set(SCHEMA[kind])
    aliases = {a for a, suffix in _PER_LEVEL_ALIASES.items() if f"low{suffix}" in names}
    return sorted(names | aliases)


def _preset(cls: type[RuleConstants], kind: str, variant: Any) -> Mapping[str, Scalar]:
    if not isinstance(variant, str) or variant not in cls.VARIANTS:
        known = ", ".join(cls.VARIANTS) or "none"
        raise ValueError(
            f"unknown variant {variant!r} for image rule kind {kind!r} (known: {known})"
        )
    return cls.VARIANTS[variant]


def build(kind: str, params: Mapping[str, Any]) -> RuleConstants:
    """A kind's constants: its defaults, then the named preset, then each given value checked."""
    cls = kind_class(kind)
    checks = SCHEMA[kind]
    given = expand_aliases(kind, params)
    unknown = sorted(set(given) - set(checks))
    if unknown:
        known = ", ".join(_known_keys(kind)) or "none"
        raise ValueError(
            f"unknown constant(s) {unknown} for image rule kind {kind!r} (known: {known})"
        )
    values: dict[str, Any] = {}
    if given.get("variant") is not None:
        values.update(_preset(cls, kind, given["variant"]))
    for key, value in given.items():
        values[key] = checks[key](f"{kind}.{key}", value)
    try:
        return cls(**values)
    except ValueError as exc:
        raise ValueError(f"image rule {kind!r}: {exc}") from None


def params_of(constants: RuleConstants) -> tuple[tuple[str, Scalar], ...]:
    """Every constant, in declaration order: the normal form two equal rules share."""
    return tuple((f.name, getattr(constants, f.name)) for f in fields(constants))
