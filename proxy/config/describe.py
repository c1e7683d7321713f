"""A loaded config as plain data: what ``routefit check`` prints. Never a key or a password."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from proxy.config.loader import Config
from proxy.config.routes import RouteConfig
from proxy.teams import Team
from strategies.policy import FitPolicy

__all__ = ["describe", "redact_url"]


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
    }


def _team(team: Team) -> dict[str, Any]:
    quotas = {k: v for k, v in asdict(team.quotas).items() if v is not None}
    return {
        "id": team.id,
        "keys": len(team.key_hashes),
        "routes": sorted(team.routes) if team.routes is not None else "all",
        "quotas": quotas,
        "fit": {k: _plain(v) for k, v in team.policy_overrides.items()},
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
        "store": store,
        "warnings": list(config.warnings),
        "missing_env": list(config.missing_env),
    }
