"""The whole file: settings, then routes, then teams (which name routes), into one Config.

Every ``model_list`` entry is a deployment of its ``model_name``; ``Config.route(alias)`` is the
alias's first deployment (its facts stand for the alias where one set is needed: the intake's
checks, the dashboard), ``Config.deployments(alias)`` all of them, between which the gateway
routes (``proxy.routing``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from proxy import modelmap
from proxy.config.access import read_access
from proxy.config.deployments import derived_id
from proxy.config.reader import ConfigError, Reader
from proxy.config.router_settings import (
    LITELLM_ROUTER_KEYS,
    RouterSettings,
    read_litellm_router,
    read_router_settings,
)
from proxy.config.routes import RouteConfig, read_route
from proxy.config.settings import SETTINGS_KEYS, Settings, read_settings
from proxy.config.teams import read_teams
from proxy.teams import Team

__all__ = ["Config", "load_config", "parse_config"]

_TOP_KEYS = frozenset(
    {"model_list", "routefit_settings", "general_settings", "router_settings", "litellm_settings"}
)
#: ``litellm_settings`` keys routefit reads (the others are litellm's module settings: one
#: warning each): ``drop_params`` and those LiteLLM's router falls back to.
LITELLM_SETTINGS_USED = frozenset({"drop_params", *LITELLM_ROUTER_KEYS})


@dataclass(frozen=True, slots=True)
class Config:
    path: str
    #: Each alias's first deployment.
    routes: Mapping[str, RouteConfig]
    settings: Settings
    teams: tuple[Team, ...] = ()
    warnings: tuple[str, ...] = ()
    #: Keys whose ``os.environ/NAME`` was unset (resolved to null), e.g. a provider key that
    #: only matters once a request is forwarded; ``serve`` reports them at start-up.
    missing_env: tuple[str, ...] = ()
    #: Alias → every deployment of it, in file order (the first is ``routes[alias]``).
    deployment_table: Mapping[str, tuple[RouteConfig, ...]] = field(default_factory=dict)
    router: RouterSettings = field(default_factory=RouterSettings)
    #: Team id → its router settings, the global ones overridden key by key (LiteLLM's
    #: team-level router settings); teams without a block are absent.
    team_router: Mapping[str, RouterSettings] = field(default_factory=dict)
    #: ``model_list`` as written, its ``os.environ/NAME`` keys unresolved: where each
    #: deployment's key comes from (``proxy.provider_keys``), which the resolved routes lose.
    #: None: not known (a Config built by hand), read from ``path``.
    model_list: Any = field(default=None, repr=False, compare=False)

    def router_for(self, team: str | None) -> RouterSettings:
        """The router settings a request of ``team`` is routed by."""
        return self.team_router.get(team, self.router) if team is not None else self.router

    def route(self, alias: str) -> RouteConfig | None:
        return self.routes.get(alias)

    def deployments(self, alias: str) -> tuple[RouteConfig, ...]:
        """Every deployment of ``alias`` (empty for an unknown alias)."""
        found = self.deployment_table.get(alias)
        if found is not None:
            return found
        first = self.routes.get(alias)
        return () if first is None else (first,)

    def every_deployment(self) -> tuple[RouteConfig, ...]:
        """Every deployment of every alias, alias by alias in file order."""
        return tuple(rc for alias in self.routes for rc in self.deployments(alias))

    def mapped(self, fn: Callable[[RouteConfig], RouteConfig]) -> Config:
        """The config with ``fn`` applied to every deployment (``routes`` kept the first)."""
        table = {alias: tuple(map(fn, self.deployments(alias))) for alias in self.routes}
        return replace(
            self, routes={alias: found[0] for alias, found in table.items()}, deployment_table=table
        )

    @property
    def open(self) -> bool:
        """No auth asked for anywhere in the file: every request is admitted (local use)."""
        return not self.settings.access.auth_required


def _litellm_settings(block: Any, aliases: list[str], rd: Reader) -> tuple[bool, RouterSettings]:
    """``litellm_settings.drop_params`` (LiteLLM's switch, common in its configs) and the router
    settings LiteLLM's router takes from the block where ``router_settings`` has none
    (``fallbacks``, ``num_retries``, ...: read as a warning, a copied config never fell back);
    the block's other keys set litellm's module, which routefit does not: one warning each."""
    if block is None:
        return False, RouterSettings()
    block = rd.mapping(block, "litellm_settings")
    for key in block:
        if key not in LITELLM_SETTINGS_USED:
            rd.warn(f"litellm_settings.{key}", "not used by routefit; ignored")
    used = {key: value for key, value in block.items() if key in LITELLM_SETTINGS_USED}
    block = rd.resolve(used, "litellm_settings")
    drop = block.get("drop_params")
    drop = False if drop is None else rd.boolean(drop, "litellm_settings.drop_params")
    return drop, read_litellm_router(block, aliases, rd)


def _dropping(rc: RouteConfig) -> RouteConfig:
    return replace(rc, upstream=replace(rc.upstream, drop_params=True))


def _models(items: list[Any]) -> list[str]:
    """The model strings the entries name (``litellm_params.model``, ``base_model``),
    for one read of the model map (what is not a string is left for ``read_route`` to refuse)."""
    places = (
        ("litellm_params", "model"),
        ("model_info", "base_model"),
        ("litellm_params", "base_model"),
    )
    blocks = [
        (item.get(block), key)
        for item in items
        if isinstance(item, Mapping)
        for block, key in places
    ]
    found = [block.get(key) for block, key in blocks if isinstance(block, Mapping)]
    return [name for name in found if isinstance(name, str)]


def _deployments(
    items: Any, rd: Reader, default_timeout: float
) -> dict[str, tuple[RouteConfig, ...]]:
    """Alias → its deployments, each with a unique id (``model_info.id`` or derived)."""
    if not isinstance(items, list) or not items:
        raise rd.error("model_list", "must be a non-empty list of models")
    table: dict[str, list[RouteConfig]] = {}
    seen: dict[str, int] = {}
    occurrences: dict[tuple[str, str, object], int] = {}
    entries: dict[str, int] = {}  # alias → its first entry's index
    modelmap.prefetch(_models(items))
    for i, item in enumerate(items):
        rc = read_route(item, f"model_list[{i}]", rd, default_timeout)
        alias, model = rc.route.alias, rc.route.model
        if not rc.deployment_id:
            place = (alias, model, rc.upstream.api_base)
            occurrences[place] = occurrences.get(place, 0) + 1
            rc = replace(rc, deployment_id=derived_id(*place, occurrences[place] - 1))
        if rc.deployment_id in seen:
            raise rd.error(
                f"model_list[{i}].model_info.id",
                f"{rc.deployment_id!r} is also model_list[{seen[rc.deployment_id]}]'s id",
            )
        seen[rc.deployment_id] = i
        found = table.setdefault(alias, [])
        same = not found or _counts_alike(found[0], rc)
        found.append(replace(rc, first=not found, counts_as_first=same))
        entries.setdefault(alias, i)
    _calibration_keys_apart(table, entries, rd)
    weighted = {
        str(item.get("model_name"))
        for item in items
        if isinstance(item, Mapping)
        and isinstance(item.get("litellm_params"), Mapping)
        and item["litellm_params"].get("weight") is not None
    }
    return {
        alias: rcs if alias in weighted else _weighed_by_limits(rcs)
        for alias, rcs in ((alias, tuple(rcs)) for alias, rcs in table.items())
    }


def _weighed_by_limits(deployments: tuple[RouteConfig, ...]) -> tuple[RouteConfig, ...]:
    """An alias none of whose entries writes a ``weight``: LiteLLM's simple-shuffle then
    weighs its deployments by ``rpm``, else by ``tpm`` (its ``simple_shuffle``: the first of
    weight, rpm, tpm that any deployment sets; one without it weighs 0), so rpm 900 and rpm
    100 split the traffic 9 to 1. Each deployment's weight is that figure (``check`` shows
    it). Left at 1 each, the split was even, and the small deployment was rate-limited."""
    for limit in ("rpm", "tpm"):
        if any(getattr(rc, limit) is not None for rc in deployments):
            return tuple(replace(rc, weight=float(getattr(rc, limit) or 0)) for rc in deployments)
    return deployments


def _calibration_keys_apart(
    table: Mapping[str, list[RouteConfig]], entries: Mapping[str, int], rd: Reader
) -> None:
    """A deployment that counts unlike its alias's first learns under ``alias@id``; a
    ``model_name`` spelt the same would share its corrections and anchors (two tokenizers'
    samples in one fit), so the file must tell them apart."""
    for alias, found in table.items():
        for rc in found:
            key = rc.calibration_key
            if key != alias and key in entries:
                raise rd.error(
                    f"model_list[{entries[key]}].model_name",
                    f"{key!r} is also the calibration key of {alias!r}'s deployment "
                    f"{rc.deployment_id!r}: rename the model_name or that model_info.id",
                )


def _counts_alike(a: RouteConfig, b: RouteConfig) -> bool:
    """Whether two deployments of an alias count a prompt alike: the same pure route (model,
    tokenizer, framing, window, image rule; the alias is theirs both) and the same model
    upstream."""
    return a.route == b.route and a.upstream.model == b.upstream.model


def _team_routers(
    raw: Any, teams: tuple[Team, ...], base: RouterSettings, aliases: list[str], rd: Reader
) -> dict[str, RouterSettings]:
    """Each team's ``router_settings`` over the global block; its fallbacks stay within the
    routes the team may use."""
    out: dict[str, RouterSettings] = {}
    for i, (item, team) in enumerate(zip(raw or [], teams, strict=True)):
        if item.get("router_settings") is None:
            continue
        where = f"routefit_settings.teams[{i}].router_settings"
        mine = read_router_settings(item["router_settings"], aliases, rd, where, base)
        named = {*mine.default_fallbacks, *mine.fallbacks, *mine.context_window_fallbacks}
        for chain in (*mine.fallbacks.values(), *mine.context_window_fallbacks.values()):
            named.update(chain)
        outside = sorted(named - team.routes) if team.routes is not None else []
        if outside:
            raise rd.error(where, f"names {outside}, outside the team's routes")
        out[team.id] = mine
    return out


def _admin_key_apart(settings: Settings, teams: tuple[Team, ...], rd: Reader) -> None:
    """The admin key opens every team's usage, the calibration and the dashboard: a team key
    equal to it would hand that team's every holder all of it (and the admin key would spend
    that team's budget), which no file means on purpose."""
    admin = settings.admin_key_hash
    for i, team in enumerate(teams):
        if admin is not None and admin in team.key_hashes:
            raise rd.error(
                "routefit_settings.admin_key",
                f"is also routefit_settings.teams[{i}] ({team.id!r})'s key: give the admin "
                "its own key",
            )


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
    table = _deployments(data.get("model_list"), rd, settings.upstream_timeout)
    drop, litellm_router = _litellm_settings(data.get("litellm_settings"), list(table), rd)
    if drop:
        table = {alias: tuple(map(_dropping, found)) for alias, found in table.items()}
    router = read_router_settings(data.get("router_settings"), list(table), rd, base=litellm_router)
    routes = {alias: deployments[0] for alias, deployments in table.items()}
    teams = read_teams(raw.get("teams"), list(routes), rd)
    team_router = _team_routers(raw.get("teams"), teams, router, list(routes), rd)
    if any(access.master_key_hash in t.key_hashes for t in teams):
        raise rd.error("general_settings.master_key", "is also a team's key")
    _admin_key_apart(settings, teams, rd)
    return Config(
        path=path,
        routes=routes,
        settings=settings,
        teams=teams,
        warnings=tuple(rd.warnings),
        missing_env=tuple(rd.missing_env),
        deployment_table=table,
        router=router,
        team_router=team_router,
        model_list=data.get("model_list"),
    )


_MERGE_TAG = "tag:yaml.org,2002:merge"
#: YAML's parser and the readers recurse: a file nested (or self-referencing) past Python's
#: limit is refused by name, not with a RecursionError traceback.
_TOO_DEEP = "{path}: nested too deeply (or an anchor refers to itself) to be a config"


def _duplicate_keys(node: yaml.Node, where: str, path: str, seen: set[int]) -> None:
    """Refuse a key written twice in one mapping. PyYAML keeps the last silently, so a second
    ``routefit_settings:`` block would drop the first one's ``admin_key`` (and open the
    gateway), a second ``quotas:`` a team's limits: the file must say one thing. Keys merged in
    with ``<<: *anchor`` are not written in the mapping and may be overridden, as YAML means."""
    if id(node) in seen:  # an alias: its node was checked where the anchor is
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _duplicate_keys(item, f"{where}[{i}]", path, seen)
    elif isinstance(node, yaml.MappingNode):
        lines: dict[tuple[str, object], int] = {}
        for key, value in node.value:
            if key.tag == _MERGE_TAG:
                _duplicate_keys(value, where, path, seen)
                continue
            name = key.value if isinstance(key, yaml.ScalarNode) else str(key.start_mark)
            at = f"{where}.{name}" if where else str(name)
            line = key.start_mark.line + 1
            if (key.tag, name) in lines:
                first = lines[key.tag, name]
                raise ConfigError(
                    f"{path}: line {line}: {at}: written twice (also at line {first}); "
                    "YAML would keep only the last silently: merge them into one"
                )
            lines[key.tag, name] = line
            _duplicate_keys(value, at, path, seen)


def _read_yaml(f: Any, path: str) -> Any:
    """The file's data, each mapping's keys checked for duplicates before it is built."""
    loader = yaml.SafeLoader(f)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _duplicate_keys(node, "", path, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate a config file; raise ConfigError naming the file and key."""
    path = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = _read_yaml(f, path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise ConfigError(f"{path}: {where}invalid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(_TOO_DEEP.format(path=path)) from None
    try:
        return parse_config(data, path, environ)
    except RecursionError:  # a self-referencing anchor (``&a [*a]``) where a reader walks it
        raise ConfigError(_TOO_DEEP.format(path=path)) from None
