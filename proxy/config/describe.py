"""A loaded config as plain data: what ``routefit check`` prints. Never a key or a password.

``window_problems`` is what ``check`` refuses beyond the loader's errors: a route whose window
cannot hold its own output reserve (shrunk to its floor), safety margin and a minimal prompt —
loading it would succeed and every request to it that sets no smaller cap would be refused.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from proxy.config.loader import Config
from proxy.config.router_settings import RouterSettings
from proxy.config.routes import RouteConfig
from proxy.teams import Team
from strategies.policy import (
    MIN_PROMPT_TOKENS,
    FitPolicy,
    minimum_window,
    output_limit,
    reserve_floor,
    safety_margin,
)

__all__ = ["describe", "redact_url", "window_problems"]


def redact_url(url: str) -> str:
    """A store URL without its password (``redis://user:***@host:6379/0``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port is not None else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def _plain(value: Any) -> Any:
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _policy(policy: FitPolicy) -> dict[str, Any]:
    return {f.name: _plain(getattr(policy, f.name)) for f in fields(policy)}


def _route(rc: RouteConfig) -> dict[str, Any]:
    r, up = rc.route, rc.upstream
    return {
        "deployment_id": rc.deployment_id,
        "weight": rc.weight,
        "rpm": rc.rpm,
        "tpm": rc.tpm,
        "order": rc.order,
        "model": r.model,
        "provider": r.provider,
        "transport": up.transport,
        "api_base": up.api_base,
        "api_key_set": up.api_key is not None,
        "timeout_s": up.timeout,
        "context_window": r.context_window,
        "max_output_tokens": r.max_output_tokens,
        "tokenizer": r.tokenizer,
        "exact_text": r.exact_text,
        "framing": asdict(r.framing),
        "image_rule": {"kind": r.image_rule.kind, **dict(r.image_rule.params)},
        "supports_vision": r.supports_vision,
        "image_limits": asdict(r.image_limits),
        "image_fetch": {k: _plain(v) for k, v in asdict(rc.image_fetch).items()},
        "fit": _policy(rc.policy),
        "output": _output(rc, rc.policy),
    }


def _output(rc: RouteConfig, policy: FitPolicy) -> dict[str, int]:
    """The window's shares when a request sets no output cap (docs/fitting.md, "Output
    limits"): the reserve, the floor it may be shrunk to, the margin, the smallest window."""
    r = rc.route
    limit = output_limit(r.max_output_tokens, policy, None)
    return {
        "reserve": limit.reserve,
        "min_reserve": reserve_floor(limit, policy),
        "safety_margin": safety_margin(r.context_window, policy),
        "minimum_window": minimum_window(r.max_output_tokens, policy, r.context_window),
    }


def _policies(config: Config, rc: RouteConfig) -> list[tuple[str, FitPolicy]]:
    """The route's policy, and each team's that may use the route and overrides it."""
    found = [("", rc.policy)]
    for team in config.teams:
        if team.may_use(rc.route.alias) and team.policy_overrides:
            found.append((f" for team {team.id!r}", team.fit_policy(rc.policy)))
    return found


def window_problems(config: Config) -> tuple[list[str], list[str]]:
    """(errors, warnings) about routes' windows: an error when the window cannot hold the
    smallest reservation routefit would shrink to, the safety margin and a minimal prompt
    (every request that sets no smaller cap is refused); a warning when it holds that but
    not the whole default reserve (such requests get their reservation shrunk)."""
    errors: list[str] = []
    warnings: list[str] = []
    every = [rc for alias in config.routes for rc in config.deployments(alias)]
    for rc in every:
        alias, window = rc.route.alias, rc.route.context_window
        if not rc.first:
            alias = f"{alias}@{rc.deployment_id}"
        for who, policy in _policies(config, rc):
            out = _output(rc, policy)
            if window < out["minimum_window"]:
                errors.append(
                    f"{config.path}: route {alias!r}{who}: its context window of {window:,} "
                    f"tokens cannot hold its output reserve (at least {out['min_reserve']:,}), "
                    f"the safety margin ({out['safety_margin']:,}) and a minimal prompt "
                    f"({MIN_PROMPT_TOKENS}): {out['minimum_window']:,} tokens; every request "
                    f"that sets no smaller output cap would be refused. Raise the window "
                    f"(model_info.max_input_tokens) or lower output_reserve / "
                    f"fit.min_output_reserve / safety_margin"
                )
            elif window < out["reserve"] + out["safety_margin"] + MIN_PROMPT_TOKENS:
                warnings.append(
                    f"route {alias!r}{who}: its context window of {window:,} tokens cannot "
                    f"hold its whole output reserve ({out['reserve']:,}) beside a prompt; "
                    f"requests that set no output cap get theirs shrunk (to no less than "
                    f"{out['min_reserve']:,})"
                )
    return errors, warnings


def _team(team: Team) -> dict[str, Any]:
    quotas = {k: v for k, v in asdict(team.quotas).items() if v is not None}
    return {
        "id": team.id,
        "keys": len(team.key_hashes),
        "routes": sorted(team.routes) if team.routes is not None else "all",
        "quotas": quotas,
        "fit": {k: _plain(v) for k, v in team.policy_overrides.items()},
    }


def _router(config: Config) -> dict[str, Any]:
    """The router settings, and each team's where it overrides them."""

    def plain(settings: RouterSettings) -> dict[str, Any]:
        out = {f.name: _plain(getattr(settings, f.name)) for f in fields(settings)}
        out["fallbacks"] = {k: list(v) for k, v in settings.fallbacks.items()}
        out["context_window_fallbacks"] = {
            k: list(v) for k, v in settings.context_window_fallbacks.items()
        }
        out.pop("written")
        return out

    return {
        "settings": plain(config.router),
        "teams": {team: plain(settings) for team, settings in config.team_router.items()},
    }


def describe(config: Config) -> dict[str, Any]:
    """Everything the file resolves to, as JSON-ready data."""
    s = config.settings
    if s.redis_url:
        store: dict[str, Any] = {"kind": "redis", "url": redact_url(s.redis_url)}
    else:
        store = {"kind": "sqlite", "path": s.store_path}
    store["budget_failure_mode"] = s.budget_failure_mode
    return {
        "config": config.path,
        "routes": {alias: _route(rc) for alias, rc in config.routes.items()},
        "deployments": {
            alias: [_route(rc) for rc in config.deployments(alias)[1:]]
            for alias in config.routes
            if len(config.deployments(alias)) > 1
        },
        "router": _router(config),
        "teams": [_team(t) for t in config.teams],
        "mode": (
            "open (no teams, admin key or master key: every request admitted)"
            if config.open
            else "keys required"
        ),
        "admin_key_set": s.admin_key_hash is not None,
        "master_key_set": s.access.master_key_hash is not None,
        "tls": s.access.tls_certfile is not None,
        "trusted_proxies": list(s.access.trusted_proxies),
        # the Host names answered besides loopback names and IP addresses (proxy.origin)
        "allowed_hosts": list(s.access.allowed_hosts),
        "store": store,
        "warnings": list(config.warnings) + window_problems(config)[1],
        "missing_env": list(config.missing_env),
    }
