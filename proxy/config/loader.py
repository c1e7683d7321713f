"""The whole file: settings, then routes, then teams (which name routes), into one Config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from proxy.config.access import read_access
from proxy.config.reader import ConfigError, Reader
from proxy.config.routes import RouteConfig, read_route
from proxy.config.settings import SETTINGS_KEYS, Settings, read_settings
from proxy.config.teams import read_teams
from proxy.teams import Team

__all__ = ["Config", "load_config", "parse_config"]

_TOP_KEYS = frozenset({"model_list", "routefit_settings", "general_settings"})


@dataclass(frozen=True, slots=True)
class Config:
    path: str
    routes: Mapping[str, RouteConfig]
    settings: Settings
    teams: tuple[Team, ...] = ()
    warnings: tuple[str, ...] = ()
    #: Keys whose ``os.environ/NAME`` was unset (resolved to null), e.g. a provider key that
    #: only matters once a request is forwarded; ``serve`` reports them at start-up.
    missing_env: tuple[str, ...] = ()

    def route(self, alias: str) -> RouteConfig | None:
        return self.routes.get(alias)

    @property
    def open(self) -> bool:
        """No auth asked for anywhere in the file: every request is admitted (local use)."""
        return not self.settings.access.auth_required


def _routes(items: Any, rd: Reader, default_timeout: float) -> dict[str, RouteConfig]:
    if not isinstance(items, list) or not items:
        raise rd.error("model_list", "must be a non-empty list of models")
    routes: dict[str, RouteConfig] = {}
    for i, item in enumerate(items):
        rc = read_route(item, f"model_list[{i}]", rd, default_timeout)
        alias = rc.route.alias
        if alias in routes:
            # LiteLLM load-balances duplicate names; routefit routes each alias to one target.
            rd.warn(
                f"model_list[{i}].model_name",
                f"duplicate alias {alias!r}; routefit uses the first entry only",
            )
            continue
        routes[alias] = rc
    return routes


def parse_config(
    data: Any, path: str = "<config>", environ: Mapping[str, str] | None = None
) -> Config:
    """Validate already-parsed YAML; raise ConfigError naming ``path`` and the key path."""
    environ = os.environ if environ is None else environ
    rd = Reader(path, environ)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise rd.error("", "the top level must be a mapping")
    rd.shared(data, _TOP_KEYS, {"routefit_settings", "model_list"}, "")
    where = "routefit_settings"
    written = rd.strict(data.get(where), SETTINGS_KEYS, where)
    raw = rd.resolve(written, where)
    settings = read_settings(raw, rd, environ)
    access = read_access(raw, written, data.get("general_settings"), rd)
    settings = replace(settings, access=access)
    routes = _routes(data.get("model_list"), rd, settings.upstream_timeout)
    teams = read_teams(raw.get("teams"), list(routes), rd)
    if any(access.master_key_hash in t.key_hashes for t in teams):
        raise rd.error("general_settings.master_key", "is also a team's key")
    return Config(
        path=path,
        routes=routes,
        settings=settings,
        teams=teams,
        warnings=tuple(rd.warnings),
        missing_env=tuple(rd.missing_env),
    )


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate a config file; raise ConfigError naming the file and key."""
    path = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise ConfigError(f"{path}: {where}invalid YAML: {problem}") from None
    return parse_config(data, path, environ)
