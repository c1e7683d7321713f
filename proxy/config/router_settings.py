"""LiteLLM's ``router_settings`` block → RouterSettings, validated whole.

The block is LiteLLM's, but unlike its other blocks it is read strictly: a router key changes
where a request goes and what happens when it fails, so one routefit does not implement is an
error naming it, never a warning (a config that asks for fallbacks must not load and then never
fall back). The values mean what they mean in LiteLLM's router (docs.litellm.ai, "Configuration
and defaults"); the defaults are its defaults.

``proxy.router`` implements the selection these settings describe and ``proxy.routing`` drives it
for each request. The keys LiteLLM's router also reads from ``litellm_settings`` (its module
globals: ``fallbacks``, ``context_window_fallbacks``, ``num_retries``, ``request_timeout``,
``allowed_fails``) are read there too (``read_litellm_router``), as the base ``router_settings``
overrides key by key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.config.reader import Reader, scalar, unknown_key

__all__ = [
    "ALLOWED_FAILS_POLICY_KEYS",
    "CONTEXT_CHOICES",
    "FAILURE_KINDS",
    "LITELLM_ROUTER_KEYS",
    "RETRY_POLICY_KEYS",
    "ROUTER_KEYS",
    "ROUTING_STRATEGIES",
    "RouterSettings",
    "read_litellm_router",
    "read_router_settings",
]

#: A route's choice when the conversation must be cut on its deployment but a
#: ``context_window_fallbacks`` candidate holds more of it (``routefit.context_fallback``):
#: send it to the larger window, or fit it to the smaller one when that costs less.
CONTEXT_CHOICES = ("keep_more", "pay_less")
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
    value = scalar(value)  # an os.environ/NAME value is text
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


#: LiteLLM's generic fallback group: ``fallbacks: [{"*": [...]}]`` serves every alias without
#: its own chain, which is ``default_fallbacks`` (``_generic``).
GENERIC = "*"


def _fallback_map(
    value: Any, where: str, aliases: Sequence[str], rd: Reader, generic: bool = False
) -> dict[str, tuple[str, ...]]:
    """LiteLLM's format: ``[{"alias": ["fallback1", ...]}, ...]`` (one mapping with several
    aliases is read the same way). ``generic``: ``"*"`` may key the chain of every other alias
    (LiteLLM's generic fallback; ``_generic`` moves it to ``default_fallbacks``)."""
    if not isinstance(value, list):
        raise rd.error(where, 'must be a list like [{"alias": ["fallback", ...]}]')
    out: dict[str, tuple[str, ...]] = {}
    for i, item in enumerate(value):
        block = rd.mapping(item, f"{where}[{i}]")
        for alias, targets in block.items():
            at = f"{where}[{i}].{alias}"
            if alias == GENERIC and not generic:
                raise rd.error(
                    at,
                    "LiteLLM's generic '*' chain is read in fallbacks only (routefit's "
                    "context_window_fallbacks name each alias)",
                )
            if alias not in aliases and alias != GENERIC:
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


def _strategy(value: Any, where: str, aliases: Sequence[str], rd: Reader) -> str:
    if value not in ROUTING_STRATEGIES:
        raise rd.error(where, f"must be one of {', '.join(ROUTING_STRATEGIES)}")
    return str(value)


_Read = Callable[[Any, str, Sequence[str], Reader], Any]
#: Each key's reader: (value, its path, the model names, the reader) → the field's value.
_READERS: Mapping[str, _Read] = {
    "routing_strategy": _strategy,
    "num_retries": lambda v, at, _, rd: rd.integer(v, at),
    "retry_after": lambda v, at, _, rd: _seconds(v, at, rd),
    "allowed_fails": lambda v, at, _, rd: rd.integer(v, at),
    "cooldown_time": lambda v, at, _, rd: _seconds(v, at, rd),
    "timeout": lambda v, at, _, rd: rd.number(v, at),
    "fallbacks": lambda v, at, names, rd: _fallback_map(v, at, names, rd, generic=True),
    "context_window_fallbacks": _fallback_map,
    "default_fallbacks": lambda v, at, names, rd: _aliases(v, at, names, rd) if v else (),
    "retry_policy": lambda v, at, _, rd: _per_kind(v, at, "Retries", RETRY_POLICY_KEYS, rd),
    "allowed_fails_policy": lambda v, at, _, rd: _per_kind(
        v, at, "AllowedFails", ALLOWED_FAILS_POLICY_KEYS, rd
    ),
}
#: LiteLLM's switch for checking, before a call, that a deployment's window holds the prompt
#: (and skipping the ones that do not): routefit always does (a deployment that cannot take the
#: request is skipped, ``router.SKIPPED``; a request known to overflow is never sent). Read so
#: that a LiteLLM config loads; ``false`` is a warning, since routefit checks all the same.
PRE_CALL_CHECKS = "enable_pre_call_checks"
ROUTER_KEYS = frozenset({*_READERS, PRE_CALL_CHECKS})
#: ``litellm_settings`` keys LiteLLM's router falls back to where ``router_settings`` leaves
#: its own out (its Router: ``fallbacks or litellm.fallbacks``, ``timeout or
#: litellm.request_timeout``, ...): the ``litellm_settings`` name → the router key it sets.
LITELLM_ROUTER_KEYS: Mapping[str, str] = {
    "num_retries": "num_retries",
    "request_timeout": "timeout",
    "allowed_fails": "allowed_fails",
    "fallbacks": "fallbacks",
    "context_window_fallbacks": "context_window_fallbacks",
}


def read_litellm_router(
    block: Mapping[str, Any], aliases: Sequence[str], rd: Reader
) -> RouterSettings:
    """The router settings ``litellm_settings`` gives (its block resolved), each checked at its
    own path: LiteLLM's proxy docs put retries, timeouts and fallbacks there as often as in
    ``router_settings``, which overrides them key by key."""
    values: dict[str, Any] = {}
    for key, name in LITELLM_ROUTER_KEYS.items():
        if block.get(key) is not None:
            values[name] = _READERS[name](block[key], f"litellm_settings.{key}", aliases, rd)
    values = _generic(values, "litellm_settings", rd)
    return RouterSettings(**values, written=frozenset(values))


def _generic(values: dict[str, Any], where: str, rd: Reader) -> dict[str, Any]:
    """A ``"*"`` chain in ``fallbacks`` is LiteLLM's generic fallback: tried for any alias
    without a chain of its own, which routefit calls ``default_fallbacks``. It was refused as
    "'*' is not a model_name"; a block writing both says one thing twice (an error)."""
    chains = values.get("fallbacks", {})
    if GENERIC not in chains:
        return values
    if values.get("default_fallbacks"):
        raise rd.error(
            f"{where}.fallbacks", "'*' and default_fallbacks both name the generic chain; keep one"
        )
    return {
        **values,
        "fallbacks": {alias: chain for alias, chain in chains.items() if alias != GENERIC},
        "default_fallbacks": chains[GENERIC],
    }


def read_router_settings(
    value: Any,
    aliases: Sequence[str],
    rd: Reader,
    where: str = "router_settings",
    base: RouterSettings | None = None,
) -> RouterSettings:
    """Validate a router block against the model names of ``model_list``. ``base``: what a key
    left out keeps (a team's block overrides the global one key by key, as LiteLLM's team-level
    router settings do); ``written`` names this block's keys and ``base``'s."""
    block = rd.resolve(rd.mapping(value, where), where)
    values: dict[str, Any] = {}
    for key, given in block.items():
        if key == PRE_CALL_CHECKS:
            if given is not None and not rd.boolean(given, f"{where}.{key}"):
                rd.warn(f"{where}.{key}", "routefit checks every deployment's window all the same")
            continue
        if key not in _READERS:
            raise rd.error(
                f"{where}.{key}",
                f"LiteLLM router key not implemented by routefit ({unknown_key(key, ROUTER_KEYS)})",
            )
        if given is not None:  # null: the default, as LiteLLM reads it
            values[key] = _READERS[key](given, f"{where}.{key}", aliases, rd)
    values = _generic(values, where, rd)
    base = base or RouterSettings()
    return replace(base, **values, written=base.written | frozenset(map(str, block)))
