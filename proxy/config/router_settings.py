"""LiteLLM's ``router_settings`` block → RouterSettings, validated whole.

The block is LiteLLM's, but unlike its other blocks it is read strictly: a router key changes
where a request goes and what happens when it fails, so one routefit does not implement is an
error naming it, never a warning (a config that asks for fallbacks must not load and then never
fall back). The values mean what they mean in LiteLLM's router (docs.litellm.ai, "Configuration
and defaults"); the defaults are its defaults.

``proxy.router`` implements the selection these settings describe; until the gateway uses it,
``proxy.config.loader`` refuses the settings that would change behaviour (``GATEWAY_ROUTES``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.config.reader import Reader, unknown_key

__all__ = [
    "ALLOWED_FAILS_POLICY_KEYS",
    "FAILURE_KINDS",
    "RETRY_POLICY_KEYS",
    "ROUTER_KEYS",
    "ROUTING_STRATEGIES",
    "RouterSettings",
    "read_router_settings",
]

ROUTING_STRATEGIES = (
    "simple-shuffle",
    "least-busy",
    "latency-based-routing",
    "usage-based-routing-v2",
    "cost-based-routing",
)
#: The kinds of failure LiteLLM's per-kind policies name, by routefit's name for the kind
#: (``proxy.router.Failure``): LiteLLM's exception class → our kind.
FAILURE_KINDS: Mapping[str, str] = {
    "BadRequestError": "bad_request",
    "AuthenticationError": "auth",
    "TimeoutError": "timeout",
    "RateLimitError": "rate_limit",
    "ContentPolicyViolationError": "content_policy",
    "InternalServerError": "server",
}
RETRY_POLICY_KEYS = frozenset(f"{name}Retries" for name in FAILURE_KINDS)
ALLOWED_FAILS_POLICY_KEYS = frozenset(f"{name}AllowedFails" for name in FAILURE_KINDS)
ROUTER_KEYS = frozenset(
    {
        "routing_strategy",
        "num_retries",
        "retry_after",
        "allowed_fails",
        "cooldown_time",
        "timeout",
        "fallbacks",
        "context_window_fallbacks",
        "default_fallbacks",
        "retry_policy",
        "allowed_fails_policy",
    }
)


@dataclass(frozen=True, slots=True)
class RouterSettings:
    """The router's knobs as LiteLLM names them; ``written`` keeps which keys the file set, so
    the loader can tell a default from a request for a feature."""

    routing_strategy: str = "simple-shuffle"
    num_retries: int = 0
    #: Seconds to wait at least before a retry (LiteLLM's ``retry_after``).
    retry_after: float = 0.0
    #: Failures a deployment may have within a minute; one more cools it down.
    allowed_fails: int = 3
    cooldown_time: float = 5.0
    #: Seconds for a provider's answer; None: each route's own timeout.
    timeout: float | None = None
    fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    context_window_fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default_fallbacks: tuple[str, ...] = ()
    #: Failure kind (``FAILURE_KINDS`` values) → retries for that kind, over ``num_retries``.
    retry_policy: Mapping[str, int] = field(default_factory=dict)
    #: Failure kind → failures allowed within a minute, over ``allowed_fails``.
    allowed_fails_policy: Mapping[str, int] = field(default_factory=dict)
    written: frozenset[str] = frozenset()


def _seconds(value: Any, where: str, rd: Reader) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise rd.error(where, "must be a number of seconds >= 0")
    if not math.isfinite(value):
        raise rd.error(where, "must be finite")
    return float(value)


def _aliases(value: Any, where: str, aliases: Sequence[str], rd: Reader) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]  # LiteLLM's context_window_fallbacks also take one name
    if not isinstance(value, list) or not value:
        raise rd.error(where, "must be a non-empty list of model names")
    out: list[str] = []
    for i, name in enumerate(value):
        rd.string(name, f"{where}[{i}]")
        if name not in aliases:
            raise rd.error(f"{where}[{i}]", f"{name!r} is not a model_name of model_list")
        if name in out:
            raise rd.error(f"{where}[{i}]", f"{name!r} is listed twice")
        out.append(name)
    return tuple(out)


def _fallback_map(
    value: Any, where: str, aliases: Sequence[str], rd: Reader
) -> dict[str, tuple[str, ...]]:
    """LiteLLM's format: ``[{"alias": ["fallback1", ...]}, ...]`` (one mapping with several
    aliases is read the same way)."""
    if not isinstance(value, list):
        raise rd.error(where, 'must be a list like [{"alias": ["fallback", ...]}]')
    out: dict[str, tuple[str, ...]] = {}
    for i, item in enumerate(value):
        block = rd.mapping(item, f"{where}[{i}]")
        for alias, targets in block.items():
            at = f"{where}[{i}].{alias}"
            if alias not in aliases:
                raise rd.error(at, f"{alias!r} is not a model_name of model_list")
            if alias in out:
                raise rd.error(at, f"{alias!r} has fallbacks twice")
            chain = _aliases(targets, at, aliases, rd)
            if alias in chain:
                raise rd.error(at, f"{alias!r} falls back to itself")
            out[str(alias)] = chain
    return out


def _per_kind(
    value: Any, where: str, suffix: str, known: frozenset[str], rd: Reader
) -> dict[str, int]:
    block = rd.mapping(value, where)
    out: dict[str, int] = {}
    for key, count in block.items():
        if key not in known:
            raise rd.error(f"{where}.{key}", unknown_key(key, known))
        out[FAILURE_KINDS[str(key)[: -len(suffix)]]] = rd.integer(count, f"{where}.{key}")
    return out


def read_router_settings(value: Any, aliases: Sequence[str], rd: Reader) -> RouterSettings:
    """Validate ``router_settings`` against the model names of ``model_list``."""
    where = "router_settings"
    block = rd.resolve(rd.mapping(value, where), where)
    for key in block:
        if key not in ROUTER_KEYS:
            raise rd.error(
                f"{where}.{key}",
                f"LiteLLM router key not implemented by routefit ({unknown_key(key, ROUTER_KEYS)})",
            )
    strategy = block.get("routing_strategy", "simple-shuffle")
    if strategy not in ROUTING_STRATEGIES:
        raise rd.error(
            f"{where}.routing_strategy", f"must be one of {', '.join(ROUTING_STRATEGIES)}"
        )
    timeout = block.get("timeout")
    return RouterSettings(
        routing_strategy=strategy,
        num_retries=rd.integer(block.get("num_retries", 0), f"{where}.num_retries"),
        retry_after=_seconds(block.get("retry_after", 0), f"{where}.retry_after", rd),
        allowed_fails=rd.integer(block.get("allowed_fails", 3), f"{where}.allowed_fails"),
        cooldown_time=_seconds(block.get("cooldown_time", 5), f"{where}.cooldown_time", rd),
        timeout=None if timeout is None else rd.number(timeout, f"{where}.timeout"),
        fallbacks=_fallback_map(block.get("fallbacks") or [], f"{where}.fallbacks", aliases, rd),
        context_window_fallbacks=_fallback_map(
            block.get("context_window_fallbacks") or [],
            f"{where}.context_window_fallbacks",
            aliases,
            rd,
        ),
        default_fallbacks=()
        if not block.get("default_fallbacks")
        else _aliases(block["default_fallbacks"], f"{where}.default_fallbacks", aliases, rd),
        retry_policy=_per_kind(
            block.get("retry_policy"), f"{where}.retry_policy", "Retries", RETRY_POLICY_KEYS, rd
        ),
        allowed_fails_policy=_per_kind(
            block.get("allowed_fails_policy"),
            f"{where}.allowed_fails_policy",
            "AllowedFails",
            ALLOWED_FAILS_POLICY_KEYS,
            rd,
        ),
        written=frozenset(str(k) for k in block),
    )
