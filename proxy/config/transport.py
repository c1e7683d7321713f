"""Where a route's requests go: provider, transport, API base, key (as the config file says).

``Upstream.transport`` is the HTTP dialect routefit speaks to the provider: ``openai`` (an
OpenAI-compatible API: chat completions, and responses on OpenAI itself), ``anthropic``
(Anthropic's Messages API, by routefit's own client) or ``litellm`` (everything through
litellm's translation). Providers whose wire format is OpenAI's default to ``openai``,
``anthropic/`` models to ``anthropic``, every other provider to ``litellm``;
``routefit.transport`` overrides the choice per route. What that means per client wire (which
provider wire, which adapter) is ``proxy.providers``' table, built from this record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from proxy.config.reader import Reader

__all__ = [
    "DEFAULT_API_BASES",
    "LITELLM_PARAMS",
    "OPENAI_COMPATIBLE",
    "TRANSPORTS",
    "Upstream",
    "provider_of",
    "read_upstream",
]

TRANSPORTS = ("openai", "anthropic", "litellm")
#: litellm_params keys routefit reads itself; the others are forwarded to litellm as is.
LITELLM_PARAMS = frozenset(
    {"model", "api_base", "api_key", "base_url", "timeout", "stream_timeout", "base_model"}
)
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
DEFAULT_API_BASES = {
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


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where and how a route's requests go."""

    model: str  # the litellm model string, e.g. "openai/gpt-4o"
    provider: str
    transport: str  # "openai" | "anthropic" (routefit's own client) | "litellm" (translated)
    api_base: str | None
    api_key: str | None = field(repr=False)
    timeout: float
    #: Other litellm_params, forwarded to litellm on the translated path.
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: ``litellm_settings.drop_params``: litellm drops what the provider does not take rather
    #: than refuse the request, wherever a request goes through litellm (unless the route's own
    #: ``litellm_params.drop_params`` says otherwise). Not an ``extra``: a route with extras is
    #: translated by litellm always, and this must not take routes off routefit's own mapping.
    drop_params: bool = False
    #: Whether the route wrote its timeout (``litellm_params.timeout`` or
    #: ``routefit.upstream_timeout``): then ``router_settings.timeout`` does not replace it, as
    #: LiteLLM's router takes a deployment's own timeout before its router-wide one.
    own_timeout: bool = False
    #: ``litellm_params.stream_timeout``: a streamed request's timeout in place of ``timeout``,
    #: as LiteLLM reads it (a stream that must start fast, beside a long whole answer). None:
    #: ``timeout`` for both. Accepted and never applied before (2026-12-07).
    stream_timeout: float | None = None

    def timeout_for(self, stream: bool) -> float:
        """Seconds a request waits for the provider: connecting and each wait for bytes."""
        return self.stream_timeout if stream and self.stream_timeout is not None else self.timeout

    @property
    def model_name(self) -> str:
        """The model name the provider expects (litellm's provider prefix removed)."""
        prefix = f"{self.provider}/"
        return self.model[len(prefix) :] if self.model.startswith(prefix) else self.model


def provider_of(model: str, entry: Mapping[str, Any]) -> str:
    """litellm's provider: the model string's prefix, else the map's, else openai."""
    if "/" in model:
        return model.split("/", 1)[0]
    provider = entry.get("litellm_provider")
    return provider if isinstance(provider, str) else "openai"


def _transport(own: Mapping[str, Any], provider: str, where: str, rd: Reader) -> str:
    transport = own.get("transport")
    if transport is None:
        if provider in OPENAI_COMPATIBLE:
            return "openai"
        return "anthropic" if provider == "anthropic" else "litellm"
    if transport not in TRANSPORTS:
        raise rd.error(f"{where}.routefit.transport", f"must be one of {list(TRANSPORTS)}")
    return str(transport)


def _timeout(
    own: Mapping[str, Any], params: Mapping[str, Any], default: float, where: str, rd: Reader
) -> float:
    """The route's timeout, checked where it is written: a ``0`` is a mistake to name (an ``or``
    chain took it for "unset" and waited the default 600 s instead)."""
    if own.get("upstream_timeout") is not None:
        return rd.number(own["upstream_timeout"], f"{where}.routefit.upstream_timeout")
    if params.get("timeout") is not None:
        return rd.number(params["timeout"], f"{where}.litellm_params.timeout")
    return default


def _api_base(params: Mapping[str, Any], where: str, rd: Reader) -> str | None:
    """The written base, checked where it is written: ``api_base: 8000`` became the URL "8000"
    and ``localhost:8000/v1`` (no scheme) loaded, each failing every request instead."""
    for key in ("api_base", "base_url"):
        value = params.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise rd.error(f"{where}.litellm_params.{key}", "must be a URL (a string)")
        parts = urlsplit(value)
        if not parts.scheme or not parts.netloc:
            raise rd.error(
                f"{where}.litellm_params.{key}",
                f"{value!r} is not a URL: write scheme and host (http://host:port/v1)",
            )
        return value
    return None


def _api_key(params: Mapping[str, Any], where: str, rd: Reader) -> str | None:
    """A key is text: ``api_key: 12345`` stayed an integer no header can carry."""
    value = params.get("api_key")
    if value is not None and not isinstance(value, str):
        raise rd.error(f"{where}.litellm_params.api_key", "must be a string (quote it)")
    return value


#: litellm_params routefit reads elsewhere (LiteLLM's custom pricing: ``proxy.config.window``),
#: never handed to litellm: among the extras they took an ``anthropic/`` route's chat off
#: routefit's own mapping (``proxy.providers``: extras are litellm's to apply), where an OpenAI
#: hint the mapping drops was litellm's 400. routefit prices its spend itself.
_READ_ELSEWHERE = frozenset({"input_cost_per_token", "output_cost_per_token"})


def _unsent(extra: Mapping[str, Any], where: str, rd: Reader) -> None:
    """On the openai transport routefit sends the client's request itself: a litellm_params
    key only litellm applies (``temperature`` as the deployment's default, ``organization``,
    ``extra_headers``, ``max_retries``, ...) never reaches the provider. LiteLLM applies each,
    and routefit dropped them without a word; each is now one warning (``check`` and the
    start-up log), naming the way to have litellm apply it."""
    for key in extra:
        rd.warn(
            f"{where}.litellm_params.{key}",
            "not sent on the openai transport (routefit forwards the client's request "
            "itself; only litellm applies litellm_params): ignored. Set "
            "routefit.transport: litellm to have litellm apply it",
        )


def read_upstream(
    params: Mapping[str, Any],
    own: Mapping[str, Any],
    provider: str,
    default_timeout: float,
    where: str,
    rd: Reader,
) -> Upstream:
    """``params`` is the route's resolved litellm_params, ``own`` its routefit block; ``where``
    the route (``model_list[i]``)."""
    transport = _transport(own, provider, where, rd)
    api_base = _api_base(params, where, rd)
    if transport == "openai" and not api_base:
        api_base = DEFAULT_API_BASES.get(provider)
        if api_base is None:
            raise rd.error(
                f"{where}.litellm_params.api_base",
                f"required for provider {provider!r} on the openai transport",
            )
    model = str(params["model"])
    extra = {k: v for k, v in params.items() if k not in LITELLM_PARAMS | _READ_ELSEWHERE}
    if transport == "openai":
        _unsent(extra, where, rd)
    return Upstream(
        model=model,
        provider=provider,
        transport=transport,
        api_base=str(api_base).rstrip("/") if api_base else None,
        api_key=_api_key(params, where, rd),
        timeout=_timeout(own, params, default_timeout, where, rd),
        extra=extra,
        own_timeout=own.get("upstream_timeout") is not None or params.get("timeout") is not None,
        stream_timeout=_stream_timeout(params, where, rd),
    )


def _stream_timeout(params: Mapping[str, Any], where: str, rd: Reader) -> float | None:
    value = params.get("stream_timeout")
    return None if value is None else rd.number(value, f"{where}.litellm_params.stream_timeout")
