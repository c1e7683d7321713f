"""One ``model_list`` entry → a RouteConfig: the pricing route, its fit policy, its upstream."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pricing.route import Route
from proxy import modelmap
from proxy.config.deployments import DEPLOYMENT_PARAMS, ENTRY_LIMITS, read_deployment
from proxy.config.images import read_images
from proxy.config.policy import SHORTCUTS, read_route_policy
from proxy.config.reader import Reader
from proxy.config.router_settings import CONTEXT_CHOICES
from proxy.config.tokenizing import read_framing, read_tokenizer
from proxy.config.transport import Upstream, provider_of, read_upstream
from proxy.config.window import read_window
from proxy.fetch import ImageFetchPolicy
from strategies.policy import FitPolicy

__all__ = ["MODEL_INFO_KEYS", "ROUTEFIT_KEYS", "RouteConfig", "read_route"]

#: model_info keys routefit reads (``proxy.config.window``); others are LiteLLM's business (one
#: warning each).
MODEL_INFO_KEYS = frozenset(
    {
        "max_input_tokens",
        "max_output_tokens",
        "max_tokens",
        "supports_vision",
        "input_cost_per_token",
        "output_cost_per_token",
        "id",  # the deployment's id (proxy.config.deployments)
        "base_model",  # the model the map knows the deployment by (``_known_as``)
        "order",  # the deployment's priority (proxy.config.deployments)
        "rpm",  # the deployment's limits' third place (proxy.config.deployments)
        "tpm",
    }
)
ENTRY_KEYS = frozenset({"model_name", "litellm_params", "model_info", "routefit", *ENTRY_LIMITS})
ROUTEFIT_KEYS = frozenset(
    {
        "tokenizer",
        "framing",
        "image_rule",
        "context_window",
        "transport",
        "image_limits",
        "fit",
        "upstream_timeout",
        "image_fetch",
        "forward_client_key",  # read by proxy.provider_keys
        "context_fallback",
        *SHORTCUTS,
    }
)


@dataclass(frozen=True, slots=True)
class RouteConfig:
    """One deployment of an alias: everything a request needs to be priced, fitted and sent
    there. ``Config.route(alias)`` is the alias's first deployment; ``Config.deployments(alias)``
    all of them, in file order.

    Each deployment's samples and anchors are keyed by ``calibration_key``: the alias for the
    first deployment and for every other that counts as it does (the same pure ``Route`` —
    model, tokenizer, framing, window, image rule — and the same upstream model: one model in
    two regions is one count), ``alias@deployment_id`` for one that may count differently.
    Shared, the deployments learn from each other's samples, and an anchor found on one holds on
    the other: a team repeating its prompt reads the same ``x-routefit-prompt-tokens-kind``
    wherever a load-aware router sent it, so the header shows no pick that other teams' traffic
    decided (docs/security.md, "What routing shows a team").
    """

    route: Route
    policy: FitPolicy
    upstream: Upstream
    input_cost_per_token: float | None = None
    output_cost_per_token: float | None = None
    #: Whether and where the proxy may read URL images to size them (transport policy, so it
    #: lives here and not on the pure ``Route``).
    image_fetch: ImageFetchPolicy = field(default_factory=ImageFetchPolicy)
    #: LiteLLM's ``model_info.id`` when given, else derived from the entry
    #: (``proxy.config.deployments.derived_id``); unique in the file.
    deployment_id: str = ""
    #: simple-shuffle's relative weight (LiteLLM's ``litellm_params.weight``).
    weight: float = 1.0
    #: usage-based-routing-v2's limits per minute (``litellm_params.rpm``/``tpm``); None: none.
    rpm: int | None = None
    tpm: int | None = None
    #: LiteLLM's ``order``: the lowest order's deployments are tried first (None: after them).
    order: int | None = None
    #: Whether this is its alias's first deployment (the one ``Config.route`` answers).
    first: bool = True
    #: Whether it counts as its alias's first deployment does (``proxy.config.loader``): then
    #: it is calibrated with it.
    counts_as_first: bool = True
    #: ``keep_more`` or ``pay_less`` (``proxy.router.choose_window``), when a
    #: ``context_window_fallbacks`` alias holds more of a conversation this route would cut.
    context_fallback: str = "keep_more"

    @property
    def calibration_key(self) -> str:
        """What the router will key this deployment's calibration and anchors by."""
        if self.first or self.counts_as_first:
            return self.route.alias
        return f"{self.route.alias}@{self.deployment_id}"


def _model(value: Any, where: str, rd: Reader) -> None:
    """litellm's model string: ``provider/name`` with both parts (``openai/`` sent the model
    "" upstream; ``/gpt-4o`` made "" the provider, taken to litellm), or a map's bare name."""
    model = rd.string(value, where)
    provider, slash, name = model.partition("/")
    if slash and not (provider and name):
        raise rd.error(where, f"{model!r}: write provider/name (e.g. openai/gpt-4o)")
    if "*" in model:
        raise rd.error(where, _WILDCARD.format(model=model))


#: LiteLLM's wildcard routing (``model_name: openai/*``, ``model: openai/*``: any requested
#: model of the provider, sent as requested) is not implemented: routefit prices and fits each
#: request by its route's model (window, tokenizer, image rule), known at load. Loaded as
#: written, the alias was the literal text (every ``openai/gpt-4o`` request a 404) and the
#: provider would have been sent the model ``*``.
_WILDCARD = (
    "{model!r}: LiteLLM's wildcard routing is not implemented by routefit (each route is "
    "priced and fitted for its own model): write one entry per model"
)


def _read_info(info: Mapping[str, Any], where: str, rd: Reader) -> Mapping[str, Any]:
    """model_info with the keys routefit reads resolved (``max_input_tokens:
    os.environ/WINDOW`` was read as the text ``os.environ/WINDOW`` and refused); LiteLLM's other
    keys are left as written, their variables none of routefit's business."""
    rd.loose(info, MODEL_INFO_KEYS, f"{where}.model_info")
    return {
        key: rd.resolve(value, f"{where}.model_info.{key}") if key in MODEL_INFO_KEYS else value
        for key, value in info.items()
    }


def _blocks(
    item: Mapping[str, Any], where: str, rd: Reader
) -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]:
    """(litellm_params, model_info, routefit), environment references resolved; checks keys."""
    rd.shared(item, ENTRY_KEYS, {"routefit"}, where)
    params = rd.resolve(
        rd.mapping(item.get("litellm_params"), f"{where}.litellm_params"), f"{where}.litellm_params"
    )
    _model(params.get("model"), f"{where}.litellm_params.model", rd)
    info = _read_info(rd.mapping(item.get("model_info"), f"{where}.model_info"), where, rd)
    own = rd.strict(item.get("routefit"), ROUTEFIT_KEYS, f"{where}.routefit")
    if own.get("forward_client_key") is not None:  # read as ``is True``: "yes" would be off
        rd.boolean(own["forward_client_key"], f"{where}.routefit.forward_client_key")
    return params, info, rd.resolve(own, f"{where}.routefit")


def _context_fallback(value: Any, where: str, rd: Reader) -> str:
    if value is None:
        return "keep_more"
    if value not in CONTEXT_CHOICES:
        raise rd.error(where, f"must be one of {', '.join(CONTEXT_CHOICES)}")
    return str(value)


def _known_as(
    model: str, info: Mapping[str, Any], params: Mapping[str, Any], where: str, rd: Reader
) -> str:
    """The model name the route's defaults are read for: ``model_info.base_model`` (else
    ``litellm_params.base_model``, LiteLLM's older place for it) when written, else the model
    sent. LiteLLM reads a deployment's map facts by its ``base_model`` (an Azure deployment's
    name, ``azure/my-gpt4o-prod``, is the operator's, in no map): ignored, such a route took
    the assumed 128k window, a 4,096-token output limit, no vision (images refused from a
    gpt-4o) and no price (free to ``usd_per_month``). The upstream still gets
    ``litellm_params.model``. A ``base_model`` the map does not know names nothing routefit
    can read, so it is refused rather than left to the assumed window."""
    block, base = "model_info", info.get("base_model")
    if base is None:
        block, base = "litellm_params", params.get("base_model")
    if base is None:
        return model
    at = f"{where}.{block}.base_model"
    name = rd.string(base, at)
    if not modelmap.lookup(name, modelmap.prefix(name)):
        raise rd.error(at, f"{name!r} is not in litellm's model map (write a model it lists)")
    return name


def read_route(item: Any, where: str, rd: Reader, default_timeout: float) -> RouteConfig:
    """``where`` is the entry's path (``model_list[i]``)."""
    item = rd.mapping(item, where)
    alias = rd.string(item.get("model_name"), f"{where}.model_name")
    if "*" in alias:
        raise rd.error(f"{where}.model_name", _WILDCARD.format(model=alias))
    params, info, own = _blocks(item, where, rd)
    model = str(params["model"])
    known = _known_as(model, info, params, where, rd)
    entry = modelmap.lookup(known, modelmap.prefix(known))
    provider = provider_of(model, entry)
    rf = f"{where}.routefit"
    window = read_window(own, info, entry, known, where, rd, params)
    tokenizer = read_tokenizer(own, known, rf, rd)
    images = read_images(own, known, window.supports_vision, rf, rd)
    route = Route(
        alias=alias,
        model=model,
        provider=provider,
        context_window=window.context_window,
        max_output_tokens=window.max_output_tokens,
        tokenizer=tokenizer,
        framing=read_framing(own, known, tokenizer, provider, rf, rd),
        image_rule=images.rule,
        supports_vision=window.supports_vision,
        image_limits=images.limits,
    )
    facts = read_deployment(item, params, info, where, rd)
    sent = {k: v for k, v in params.items() if k not in DEPLOYMENT_PARAMS}
    return RouteConfig(
        route=route,
        policy=read_route_policy(own, rf, rd),
        upstream=read_upstream(sent, own, provider, default_timeout, where, rd),
        input_cost_per_token=window.input_cost_per_token,
        output_cost_per_token=window.output_cost_per_token,
        image_fetch=images.fetch,
        deployment_id=facts.id,
        context_fallback=_context_fallback(
            own.get("context_fallback"), f"{rf}.context_fallback", rd
        ),
        weight=facts.weight,
        rpm=facts.rpm,
        tpm=facts.tpm,
        order=facts.order,
    )
