"""Never forward keyless: a route whose provider key is unset answers ``provider_key_missing``.

A route's key usually comes from ``api_key: os.environ/NAME``. When NAME is unset, forwarding
anyway sends the request with no key, and the client gets the provider's "You didn't provide an
API key" — a message about a key the client never had to give. routefit answers instead, before
anything leaves, with an OpenAI-shaped error that names the variable to set; start-up logs a
WARNING per such route.

Exceptions: a route with ``routefit: {forward_client_key: true}`` forwards the client's own key
(BYOK). A route that names no key at all (a local vLLM, a litellm provider that reads its own
environment variable) is left alone: only an ``os.environ/NAME`` that resolved to nothing is a
known mistake.

Which header is the provider key (the same rule on every wire; the team key is always
``teams.presented_key``: ``Authorization: Bearer`` first, else ``x-api-key``):

- ``x-provider-key``, when sent, always (Claude Code: ``ANTHROPIC_CUSTOM_HEADERS``; Codex:
  ``env_http_headers``; any SDK: extra headers);
- open gateway (no teams, so no team key): the key the client presents — ``Authorization:
  Bearer`` (OpenAI SDKs, Codex, Claude Code with ``ANTHROPIC_AUTH_TOKEN``), ``x-api-key``
  (Anthropic SDK, Claude Code with ``ANTHROPIC_API_KEY``) or ``x-goog-api-key`` (the
  ``google-genai`` SDK, Gemini CLI: their only place for it), else Google's ``?key=`` query
  parameter (curl and REST clients of Gemini's own docs): the same places, in the same order,
  as a team key is read from on the Gemini wire (``teams.KeyPlaces``), so one key sent once is
  the provider key however the client sends it;
- gateway with teams: ``x-api-key`` beside an ``Authorization: Bearer`` team key (the Anthropic
  SDK with ``auth_token=<team key>, api_key=<provider key>``). A lone ``x-api-key`` or bearer is
  the team's routefit key and is never forwarded; so are ``x-goog-api-key`` and ``?key=``, the
  Gemini wire's places for the team key.

A provider key read from the query goes to the provider in its deployment's own auth header
(``x-goog-api-key`` for Gemini), never in a URL: routefit builds the provider's URL itself and
passes no client query on, and its request log and traces hold no URL.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import yaml

from proxy.config import ENV_PREFIX, Config, RouteConfig, Upstream
from proxy.errors import ProxyError

__all__ = [
    "KeySource",
    "MissingKey",
    "ProviderKeys",
    "key_sources",
    "missing_provider_keys",
    "provider_key_missing",
]

log = logging.getLogger("routefit")

#: The header a client sends its own provider key in when routefit has teams.
CLIENT_KEY_HEADER = "x-provider-key"
#: Google's query parameter for a key (``?key=``): the Gemini wire's last place for one.
GOOGLE_KEY_PARAM = "key"


@dataclass(frozen=True, slots=True)
class KeySource:
    """Where one route's provider key comes from, as the config file says."""

    env: str | None = None  # NAME of ``api_key: os.environ/NAME``
    forward_client_key: bool = False


@dataclass(frozen=True, slots=True)
class MissingKey:
    alias: str
    env: str

    def warning(self) -> str:
        return (
            f"route {self.alias!r} has no provider key: {self.env} is unset; its requests "
            f"are answered 'provider_key_missing' until {self.env} is set"
        )


def key_sources(model_list: Any) -> dict[str, list[KeySource]]:
    """Per alias, the key source of each of its ``model_list`` entries, in file order: its
    deployments, in the order the loader lists them (``Config.deployments``)."""
    out: dict[str, list[KeySource]] = {}
    if not isinstance(model_list, Sequence) or isinstance(model_list, str):
        return out
    for item in model_list:
        if not isinstance(item, Mapping) or not isinstance(item.get("model_name"), str):
            continue
        alias = item["model_name"]
        params = item.get("litellm_params")
        own = item.get("routefit")
        key = params.get("api_key") if isinstance(params, Mapping) else None
        env = (
            key[len(ENV_PREFIX) :] if isinstance(key, str) and key.startswith(ENV_PREFIX) else None
        )
        forward = isinstance(own, Mapping) and own.get("forward_client_key") is True
        out.setdefault(alias, []).append(KeySource(env, forward))
    return out


def by_deployment(
    config: Config, sources: Mapping[str, Sequence[KeySource]]
) -> dict[str, KeySource]:
    """Deployment id → the key source of its own entry (an alias's entries and its
    deployments are both in file order). Every deployment of an alias has its own key: one
    may be set and another not, one may forward the client's key."""
    out: dict[str, KeySource] = {}
    for alias in config.routes:
        found = sources.get(alias, ())
        for i, rc in enumerate(config.deployments(alias)):
            out[rc.deployment_id] = found[i] if i < len(found) else KeySource()
    return out


def missing_provider_keys(
    config: Config, sources: Mapping[str, Sequence[KeySource]]
) -> dict[str, MissingKey]:
    """Deployment id → its missing key, for the deployments that would be forwarded keyless:
    the key names an unset variable and the deployment does not forward the client's key."""
    own = by_deployment(config, sources)
    missing: dict[str, MissingKey] = {}
    for rc in config.every_deployment():
        source = own[rc.deployment_id]
        keyless = rc.upstream.api_key is None and not source.forward_client_key
        if keyless and source.env is not None:
            missing[rc.deployment_id] = MissingKey(rc.route.alias, source.env)
    return missing


def provider_key_missing(alias: str, env: str) -> ProxyError:
    """The answer for a route without its key. 503 (routefit cannot serve the route as
    configured — not the client's fault, so not 401), with ``x-should-retry: false`` so the
    OpenAI SDKs do not retry what only the operator can fix."""
    return ProxyError(
        503,
        f"routefit has no provider key for model {alias!r}: set the environment variable "
        f"{env} where routefit runs, and restart it",
        code="provider_key_missing",
        param="model",
        headers={"x-should-retry": "false"},
    )


class ProviderKeys:
    """The request-path check: the upstream to forward to, with the key it must carry."""

    def __init__(
        self, config: Config, sources: Mapping[str, Sequence[KeySource]], teams_open: bool
    ) -> None:
        self.teams_open = teams_open
        #: Deployment id → its own entry's key source, and its missing key: what a request to
        #: that deployment needs.
        self._own = by_deployment(config, sources)
        self._missing = missing_provider_keys(config, sources)
        #: Per alias, as the dashboard and health endpoints show a route: its first entry's
        #: source, and a missing key when any of its deployments lacks one.
        self.sources = {alias: found[0] for alias, found in sources.items() if found}
        self.missing: dict[str, MissingKey] = {}
        for m in self._missing.values():
            self.missing.setdefault(m.alias, m)

    @classmethod
    def from_file(cls, config: Config, teams_open: bool) -> ProviderKeys:
        """The key sources of ``model_list`` as written (the routes keep the resolved key, not
        the variable it came from): the config's own copy, else its file's."""
        raw = config.model_list
        if raw is None:
            try:
                with open(config.path, encoding="utf-8") as f:
                    data = yaml.safe_load(f)
            except (OSError, yaml.YAMLError):
                data = None
            raw = data.get("model_list") if isinstance(data, Mapping) else None
        return cls(config, key_sources(raw), teams_open)

    def log_warnings(self) -> None:
        for m in self.missing.values():
            log.warning("%s", m.warning())

    def upstream(
        self,
        rc: RouteConfig,
        headers: Mapping[str, str],
        query: Mapping[str, str] | None = None,
    ) -> Upstream:
        """``rc.upstream``, or a copy carrying the client's key (``query``: the request's, for
        Google's ``?key=``); raises provider_key_missing."""
        alias = rc.route.alias
        source = self._own.get(rc.deployment_id)
        if source is not None and source.forward_client_key:
            key = self.client_key(headers, query)
            if key is None:
                raise ProxyError(
                    401,
                    f"model {alias!r} forwards your own provider key: send it as "
                    + (
                        "'Authorization: Bearer <key>', 'x-api-key: <key>', "
                        "'x-goog-api-key: <key>', '?key=<key>'"
                        if self.teams_open
                        else "'x-api-key: <key>' beside 'Authorization: Bearer <team key>'"
                    )
                    + f" or the {CLIENT_KEY_HEADER} header",
                    code="provider_key_required",
                )
            return replace(rc.upstream, api_key=key)
        missing = self._missing.get(rc.deployment_id)
        if missing is not None:
            raise provider_key_missing(alias, missing.env)
        return rc.upstream

    def client_key(
        self, headers: Mapping[str, str], query: Mapping[str, str] | None = None
    ) -> str | None:
        """The client's own provider key, by the rule in the module docstring."""
        explicit = headers.get(CLIENT_KEY_HEADER, "").strip()
        if explicit:
            return explicit
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        api_key = headers.get("x-api-key", "").strip()
        if self.teams_open:
            google = headers.get("x-goog-api-key", "").strip()
            in_query = (query.get(GOOGLE_KEY_PARAM) or "").strip() if query is not None else ""
            return bearer or api_key or google or in_query or None
        return api_key if bearer and api_key else None
