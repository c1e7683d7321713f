"""One YAML file → routes, fit policies, upstreams and settings.

The file is a LiteLLM proxy config (``model_list`` with ``model_name``, ``litellm_params``,
``model_info``) so its users can bring theirs as is. routefit's own keys sit beside them: a
``routefit:`` block per model and a top-level ``routefit_settings:`` block. Every routefit key is
optional, with defaults from the model name and the model map litellm ships.

Errors name the file and the key path (``routes.yaml: model_list[2].routefit.tokenizer: ...``).
Keys routefit does not use are accepted with one warning each, so a LiteLLM config loads as is.
``os.environ/NAME`` values resolve from the environment; an unset variable becomes null with a
note in ``Config.missing_env`` (a missing provider key must not stop pricing or
``/routefit/fit`` from working).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pricing.calibration import CalibrationPolicy
from pricing.framing import default_framing, parse_framing
from pricing.images import default_image_rule, parse_image_rule
from pricing.route import ImageLimits, Route
from pricing.tokenizers import TokenizerError, default_tokenizer, parse_tokenizer_spec
from proxy import modelmap
from proxy.fetch import parse_fetch_policy
from proxy.store.settings import STORE_KEYS, StoreSettings, StoreSettingsError, parse_store_settings
from proxy.teams import Team, hash_key, parse_teams
from strategies.policy import FitPolicy

__all__ = ["Config", "ConfigError", "RouteConfig", "Settings", "Upstream", "load_config"]

ENV_PREFIX = "os.environ/"

# LiteLLM keys that routefit reads or knowingly ignores without a warning per key.
_LITELLM_PARAMS = {"model", "api_base", "api_key", "base_url", "timeout", "stream_timeout"}
_MODEL_INFO = {"max_input_tokens", "max_output_tokens", "max_tokens", "supports_vision"}
_ROUTEFIT_KEYS = {
    "tokenizer",
    "framing",
    "image_rule",
    "output_reserve",
    "safety_margin",
    "message_cap_tokens",
    "context_window",
    "transport",
    "image_limits",
    "fit",
    "upstream_timeout",
    "image_fetch",
}
_SETTINGS_KEYS = set(STORE_KEYS) | {
    "store",
    "max_body_bytes",
    "upstream_timeout",
    "teams",
    "admin_key",
    "budget_failure_mode",
    "calibration",
    "upstream_retries",
}
TRANSPORTS = ("openai", "litellm")
# litellm providers whose wire format is OpenAI's: routefit forwards to them directly.
OPENAI_COMPATIBLE = frozenset(
    {
        "openai",
        "deepseek",
        "hosted_vllm",
        "vllm",
        "openrouter",
        "groq",
        "together_ai",
        "fireworks_ai",
        "xai",
        "mistral",
        "perplexity",
        "deepinfra",
        "llamacpp",
        "lm_studio",
        "openai_compatible",
        "custom_openai",
    }
)
_DEFAULT_API_BASES = {
    "openai": "https://api.openai.com/v1",
    "deepseek": "https://api.deepseek.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "groq": "https://api.groq.com/openai/v1",
    "together_ai": "https://api.together.xyz/v1",
    "fireworks_ai": "https://api.fireworks.ai/inference/v1",
    "xai": "https://api.x.ai/v1",
    "mistral": "https://api.mistral.ai/v1",
    "deepinfra": "https://api.deepinfra.com/v1/openai",
    "perplexity": "https://api.perplexity.ai",
}


class ConfigError(ValueError):
    """A config mistake; the message names the file and the key path."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where and how a route's requests go."""

    model: str  # the litellm model string, e.g. "openai/gpt-4o"
    provider: str
    transport: str  # "openai" (direct passthrough) | "litellm" (translated)
    api_base: str | None
    api_key: str | None = field(repr=False)
    timeout: float
    #: Other litellm_params, forwarded to litellm on the translated path.
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def model_name(self) -> str:
        """The model name the provider expects (litellm's provider prefix removed)."""
        prefix = f"{self.provider}/"
        return self.model[len(prefix) :] if self.model.startswith(prefix) else self.model


@dataclass(frozen=True, slots=True)
class RouteConfig:
    route: Route
    policy: FitPolicy
    upstream: Upstream
    input_cost_per_token: float | None = None
    output_cost_per_token: float | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    redis_url: str | None = None
    #: Embedded store file (SQLite); ":memory:" keeps nothing across restarts.
    store_path: str = "routefit.sqlite3"
    max_body_bytes: int = 32 * 1024 * 1024
    upstream_timeout: float = 600.0
    #: SHA-256 of the key for routefit's own endpoints (usage, calibration); None = none.
    admin_key_hash: bytes | None = field(default=None, repr=False)
    #: When the store cannot answer a budget check: "open" admits (and counts it), "closed"
    #: answers 503. Open by default: a Redis outage should not take every team offline.
    budget_failure_mode: str = "open"
    #: Retries (with backoff) of an upstream failure before any byte reached the client.
    upstream_retries: int = 0
    calibration: CalibrationPolicy = field(default_factory=CalibrationPolicy)
    #: The store and its Redis topology (``proxy.store.settings``).
    store: StoreSettings = field(default_factory=StoreSettings)
    #: Seconds between reloads of every route's samples from the store.
    calibration_refresh: float = 5.0
    #: Seconds a prefix anchor lives in the store.
    anchor_ttl: float = 3600.0
    raw: Mapping[str, Any] = field(default_factory=dict)


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


class _Loader:
    def __init__(self, path: str, environ: Mapping[str, str]) -> None:
        self.path = path
        self.environ = environ
        self.warnings: list[str] = []
        self.missing_env: list[str] = []

    def error(self, where: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {where}: {message}")

    def warn(self, where: str, message: str) -> None:
        self.warnings.append(f"{self.path}: {where}: {message}")

    def resolve(self, value: Any, where: str) -> Any:
        """Resolve ``os.environ/NAME`` references anywhere in a value."""
        if isinstance(value, str) and value.startswith(ENV_PREFIX):
            name = value[len(ENV_PREFIX) :]
            if name not in self.environ:
                self.missing_env.append(f"{where} ({name})")
                return None
            return self.environ[name]
        if isinstance(value, Mapping):
            return {k: self.resolve(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(where, "must be a mapping")
        return value

    def integer(self, value: Any, where: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(where, f"must be an integer >= {minimum}")
        return value

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise self.error(where, "must be a positive number")
        return float(value)

    def unknown(self, block: Mapping[str, Any], known: set[str], where: str) -> None:
        for key in block:
            if key not in known:
                self.warn(f"{where}.{key}", "not used by routefit; ignored")


def _provider(model: str, entry: Mapping[str, Any]) -> str:
    if "/" in model:
        return model.split("/", 1)[0]
    provider = entry.get("litellm_provider")
    return provider if isinstance(provider, str) else "openai"


def _route_config(item: Any, where: str, ld: _Loader, settings: Settings) -> RouteConfig:
    item = ld.mapping(item, where)
    alias = item.get("model_name")
    if not isinstance(alias, str) or not alias:
        raise ld.error(f"{where}.model_name", "must be a non-empty string")
    params = ld.resolve(
        ld.mapping(item.get("litellm_params"), f"{where}.litellm_params"), f"{where}.litellm_params"
    )
    model = params.get("model")
    if not isinstance(model, str) or not model:
        raise ld.error(f"{where}.litellm_params.model", "must be a non-empty string")
    info = ld.mapping(item.get("model_info"), f"{where}.model_info")
    own = ld.resolve(ld.mapping(item.get("routefit"), f"{where}.routefit"), f"{where}.routefit")
    ld.unknown(info, _MODEL_INFO, f"{where}.model_info")
    ld.unknown(own, _ROUTEFIT_KEYS, f"{where}.routefit")
    for key in item:
        if key not in ("model_name", "litellm_params", "model_info", "routefit"):
            ld.warn(f"{where}.{key}", "not used by routefit; ignored")

    entry = modelmap.lookup(model, model.split("/", 1)[0] if "/" in model else None)
    provider = _provider(model, entry)

    def pick(key: str, *sources: Mapping[str, Any]) -> Any:
        for source in sources:
            if source.get(key) is not None:
                return source[key]
        return None

    rf = f"{where}.routefit"
    window_raw = pick("context_window", own) or pick("max_input_tokens", info, entry)
    if window_raw is None:
        window_raw = 128_000
        ld.warn(
            f"{where}.model_info.max_input_tokens",
            f"model {model!r} is not in litellm's model map; assuming a 128000-token window",
        )
    window = ld.integer(window_raw, f"{where}.model_info.max_input_tokens", 1)
    max_out_raw = pick("max_output_tokens", info, entry) or pick("max_tokens", info, entry)
    max_output = ld.integer(max_out_raw or 4096, f"{where}.model_info.max_output_tokens", 1)
    vision_raw = pick("supports_vision", info, entry)
    vision = bool(vision_raw) if vision_raw is not None else False

    try:
        tokenizer = parse_tokenizer_spec(str(own.get("tokenizer") or default_tokenizer(model)))
    except TokenizerError as exc:
        raise ld.error(f"{rf}.tokenizer", str(exc)) from None
    try:
        framing = default_framing(model, tokenizer, provider)
        if own.get("framing") is not None:
            framing = parse_framing(own["framing"], framing)
    except ValueError as exc:
        raise ld.error(f"{rf}.framing", str(exc)) from None
    try:
        rule = (
            parse_image_rule(own["image_rule"])
            if own.get("image_rule") is not None
            else default_image_rule(model, vision)
        )
    except ValueError as exc:
        raise ld.error(f"{rf}.image_rule", str(exc)) from None
    try:
        fetch_policy = parse_fetch_policy(own.get("image_fetch"))
    except ValueError as exc:
        raise ld.error(f"{rf}.image_fetch", str(exc)) from None
    limits = _image_limits(
        ld.mapping(own.get("image_limits"), f"{rf}.image_limits"), f"{rf}.image_limits", ld
    )

    fit_raw = dict(ld.mapping(own.get("fit"), f"{rf}.fit"))
    for key in ("output_reserve", "safety_margin", "message_cap_tokens"):
        if own.get(key) is not None:
            fit_raw[key] = own[key]
    try:
        policy = FitPolicy.parse(fit_raw)
    except ValueError as exc:
        raise ld.error(rf, str(exc)) from None

    transport = own.get("transport")
    if transport is None:
        transport = "openai" if provider in OPENAI_COMPATIBLE else "litellm"
    elif transport not in TRANSPORTS:
        raise ld.error(f"{rf}.transport", f"must be one of {list(TRANSPORTS)}")
    api_base = params.get("api_base") or params.get("base_url")
    if transport == "openai" and not api_base:
        api_base = _DEFAULT_API_BASES.get(provider)
        if api_base is None:
            raise ld.error(
                f"{where}.litellm_params.api_base",
                f"required for provider {provider!r} on the openai transport",
            )
    timeout = own.get("upstream_timeout") or params.get("timeout") or settings.upstream_timeout
    extra = {k: v for k, v in params.items() if k not in _LITELLM_PARAMS}

    route = Route(
        alias=alias,
        model=model,
        provider=provider,
        context_window=window,
        max_output_tokens=max_output,
        tokenizer=tokenizer,
        framing=framing,
        image_rule=rule,
        supports_vision=vision,
        image_limits=limits,
        image_fetch=fetch_policy,
    )
    upstream = Upstream(
        model=model,
        provider=provider,
        transport=transport,
        api_base=str(api_base).rstrip("/") if api_base else None,
        api_key=params.get("api_key"),
        timeout=ld.number(timeout, f"{rf}.upstream_timeout"),
        extra=extra,
    )
    return RouteConfig(
        route=route,
        policy=policy,
        upstream=upstream,
        input_cost_per_token=_cost(pick("input_cost_per_token", info, entry)),
        output_cost_per_token=_cost(pick("output_cost_per_token", info, entry)),
    )


def _cost(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _image_limits(raw: Mapping[str, Any], where: str, ld: _Loader) -> ImageLimits:
    known = set(ImageLimits.__dataclass_fields__)
    values = {}
    for key, value in raw.items():
        if key not in known:
            raise ld.error(f"{where}.{key}", f"unknown image limit (known: {sorted(known)})")
        values[key] = ld.integer(value, f"{where}.{key}", 1)
    return ImageLimits(**values)


def _settings(raw: Mapping[str, Any], ld: _Loader, environ: Mapping[str, str]) -> Settings:
    where = "routefit_settings"
    raw = ld.resolve(raw, where)
    ld.unknown(raw, _SETTINGS_KEYS, where)
    try:
        store = parse_store_settings(raw, where, environ)
    except StoreSettingsError as exc:
        raise ld.error(exc.where, exc.message) from None
    max_body = ld.integer(
        raw.get("max_body_bytes", 32 * 1024 * 1024), f"{where}.max_body_bytes", 1024
    )
    timeout = ld.number(raw.get("upstream_timeout", 600.0), f"{where}.upstream_timeout")
    mode = raw.get("budget_failure_mode", "open")
    if mode not in ("open", "closed"):
        raise ld.error(f"{where}.budget_failure_mode", "must be 'open' or 'closed'")
    admin = raw.get("admin_key")
    if admin is not None and (not isinstance(admin, str) or not admin):
        raise ld.error(f"{where}.admin_key", "must be a non-empty string")
    retries = ld.integer(raw.get("upstream_retries", 0), f"{where}.upstream_retries")
    cal = dict(ld.mapping(raw.get("calibration"), f"{where}.calibration"))
    refresh = ld.number(cal.pop("refresh_seconds", 5.0), f"{where}.calibration.refresh_seconds")
    anchor_ttl = ld.number(cal.pop("anchor_ttl", 3600.0), f"{where}.calibration.anchor_ttl")
    known = set(CalibrationPolicy.__dataclass_fields__)
    for key, value in cal.items():
        if key not in known:
            raise ld.error(
                f"{where}.calibration.{key}",
                f"unknown key (known: {sorted(known | {'refresh_seconds', 'anchor_ttl'})})",
            )
        if key in ("min_samples", "window"):
            ld.integer(value, f"{where}.calibration.{key}", 1)
        else:
            ld.number(value, f"{where}.calibration.{key}")
    try:
        calibration = CalibrationPolicy(**cal)
    except (TypeError, ValueError) as exc:
        raise ld.error(f"{where}.calibration", str(exc)) from None
    return Settings(
        redis_url=store.redis_url,
        store_path=store.store_path,
        store=store,
        max_body_bytes=max_body,
        upstream_timeout=timeout,
        admin_key_hash=hash_key(admin) if admin else None,
        budget_failure_mode=mode,
        upstream_retries=min(retries, 5),
        calibration=calibration,
        calibration_refresh=refresh,
        anchor_ttl=anchor_ttl,
        raw=raw,
    )


def parse_config(
    data: Any, path: str = "<config>", environ: Mapping[str, str] | None = None
) -> Config:
    environ = os.environ if environ is None else environ
    ld = _Loader(path, environ)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping")
    for key in data:
        if key not in ("model_list", "routefit_settings"):
            ld.warn(str(key), "not used by routefit; ignored")
    settings = _settings(
        ld.mapping(data.get("routefit_settings"), "routefit_settings"), ld, environ
    )
    items = data.get("model_list")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{path}: model_list: must be a non-empty list of models")
    routes: dict[str, RouteConfig] = {}
    for i, item in enumerate(items):
        rc = _route_config(item, f"model_list[{i}]", ld, settings)
        alias = rc.route.alias
        if alias in routes:
            # LiteLLM load-balances duplicate names; routefit routes each alias to one target.
            ld.warn(
                f"model_list[{i}].model_name",
                f"duplicate alias {alias!r}; routefit uses the first entry only",
            )
            continue
        routes[alias] = rc
    try:
        teams = parse_teams(settings.raw.get("teams"), list(routes))
        for i, team in enumerate(teams):
            try:
                FitPolicy.parse(team.fit)
            except ValueError as exc:
                raise ValueError(f"teams[{i}].fit: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: routefit_settings.{exc}") from None
    return Config(
        path=path,
        routes=routes,
        settings=settings,
        teams=tuple(teams),
        warnings=tuple(ld.warnings),
        missing_env=tuple(ld.missing_env),
    )


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate a config file; raise ConfigError naming the file and key."""
    path = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise ConfigError(f"{path}: {where}invalid YAML: {problem}") from None
    return parse_config(data, path, environ)
