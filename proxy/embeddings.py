"""``POST /v1/embeddings`` (and ``/embeddings``): OpenAI's embeddings API, forwarded to the
route, priced and counted against the team's budget. There is nothing to fit: an input is
embedded whole or not at all.

The path: the team's key, the body (within ``max_body_bytes``), the route and the team's
permission for it, the route's provider key (BYOK too) — as for chat — then the inputs counted
by the route's tokenizer (token-id inputs count as themselves; a big body in one of the team's
pricing threads), that count reserved in every window of the team, the request forwarded, and the
reservation settled to the provider's ``usage.prompt_tokens`` when it is credible
(``proxy.usage.usage_fault``, a limit of the route's window per input), else to routefit's own
count. A provider's refusal (an input over the model's limit, a bad parameter) is relayed in
OpenAI's shape and releases the reservation: routefit does not refuse overlong inputs itself,
since a provider refusal costs nothing and the route's tokenizer may only approximate the
model's. A provider that stops answering after it had the request is charged routefit's count.

Which routes: those reached over the OpenAI wire (``transport: openai``: OpenAI and any
OpenAI-compatible base), at ``{api_base}/embeddings``, through the route's own passthrough
transport (its retries, bounds and connection pool); and those reached through litellm
(``transport: litellm``: Gemini, Vertex AI, Bedrock, Cohere, ...) through ``litellm.aembedding``
(``proxy.transports.litellm``). A route on Anthropic's API (which has no embeddings) answers
400 naming the routes that do serve them.

``/v1/completions`` (the legacy text completions API) is refused with a 404 in OpenAI's shape
that names what is served (``completions_refused``): forwarding it right would need its own
pricing, budget and stream relay for a prompt that cannot be fitted, for an API OpenAI keeps
only for older models.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import Response

from pricing.tokenizers import get_tokenizer
from proxy.body import read_json
from proxy.budgets import Held, rate_limit_headers
from proxy.config import RouteConfig
from proxy.errors import ProxyError, error_response
from proxy.exchange import CHAT, EMBEDDINGS, Completion, EventStream, Outbound, as_completion
from proxy.fairness import COUNT_THREAD_ABOVE, caller
from proxy.intake import body_share, permit, unknown_model
from proxy.providers import Deployment, Leg
from proxy.records import RequestRecord, cost_usd
from proxy.teams import Team, fingerprint, hash_key, presented_key
from proxy.usage import Usage, normalize_usage, usage_fault

if TYPE_CHECKING:
    from proxy.generation import Generation
    from proxy.state import AppState

__all__ = ["EMBEDDINGS", "completions_refused", "embeddings"]

log = logging.getLogger("routefit")

#: Failures after forwarding that leave the input billed at the provider.
_BILLED = frozenset({"upstream_timeout", "upstream_incomplete", "upstream_malformed"})
#: What is served, as the refusals name it.
SERVED = (
    "/v1/chat/completions, /v1/responses, /v1/messages, /v1/embeddings "
    "(and Gemini's generateContent)"
)


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    model: str
    #: Each input: a text, or token ids.
    inputs: tuple[str | tuple[int, ...], ...]


def parse(body: Any) -> EmbeddingRequest:
    """The model and inputs of an embeddings body; a 400 naming the field otherwise."""
    if not isinstance(body, dict):
        raise ProxyError(400, "expected a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ProxyError(400, "model is required", param="model", code="missing_model")
    value = body.get("input")

    def ids(v: Any) -> bool:
        return isinstance(v, list) and bool(v) and all(type(i) is int for i in v)

    items: list[Any]
    if isinstance(value, str) or ids(value):
        items = [value]
    elif isinstance(value, list) and value and all(isinstance(v, str) or ids(v) for v in value):
        items = value
    else:
        raise ProxyError(
            400,
            "input must be a string, an array of strings, an array of token ids, or an array "
            "of arrays of token ids",
            param="input",
        )
    inputs = tuple(v if isinstance(v, str) else tuple(v) for v in items)
    return EmbeddingRequest(model, inputs)


def count(
    rc: RouteConfig, inputs: Sequence[str | tuple[int, ...]], team: Team | None = None
) -> int:
    """The inputs' tokens as the route counts them (token ids are already tokens), in the
    team's own count-cache scope (``Route.scope``; docs/security.md, "Isolation of
    prompt-derived facts"): a count another team paid for never answers this one faster."""
    scope = team.id.encode() if team is not None else rc.route.scope
    tokenizer = get_tokenizer(rc.route.tokenizer, scope)
    return sum(len(i) if isinstance(i, tuple) else tokenizer.count(i) for i in inputs)


def _route(g: Generation, model: str) -> RouteConfig:
    rc = g.config.route(model)
    if rc is None:
        raise unknown_model(model)
    return rc


#: The transports that carry embeddings: the OpenAI wire's passthrough, litellm's aembedding.
_EMBEDS = ("openai", "litellm")


def _target(g: Generation, rc: RouteConfig) -> Leg:
    """The route's leg for chat: the passthrough on the OpenAI wire, else litellm."""
    leg = g.providers.leg(rc.deployment_id, CHAT)  # the alias's first deployment
    if rc.upstream.transport not in _EMBEDS:
        served = [a for a, r in g.config.routes.items() if r.upstream.transport in _EMBEDS]
        raise ProxyError(
            400,
            f"model {rc.route.alias!r} does not serve embeddings: routefit forwards "
            "/v1/embeddings to routes on the OpenAI wire or through litellm (transport openai "
            "or litellm); here: " + (", ".join(served) or "none"),
            param="model",
            code="unsupported_model",
        )
    return leg


def _embedding_deployment(d: Deployment) -> Deployment:
    """The deployment with its embeddings endpoint beside its chat one (a passthrough's; a
    litellm deployment has no URLs: litellm knows its provider's)."""
    if CHAT not in d.urls:
        return d
    url = d.urls[CHAT].removesuffix("/chat/completions") + "/embeddings"
    return Deployment(
        d.name, d.upstream, d.native, {**d.urls, EMBEDDINGS: url}, d.auth, d.adapter, d.bounds
    )


def _charged(data: Any, estimate: int, rc: RouteConfig, inputs: int) -> Usage:
    """The provider's prompt count when credible, else routefit's own count. A count of 0 (or
    null, read as 0) is no count: no provider embeds inputs it read none of, and settling to
    it would give the embeddings away (as ``Gateway._settle_answered`` rules for answers)."""
    usage = normalize_usage(data.get("usage") if isinstance(data, dict) else None)
    credible = usage is not None and usage_fault(usage, rc.route.context_window * inputs) is None
    if usage is not None and credible and usage.prompt_tokens > 0:
        return Usage(usage.prompt_tokens, 0)
    log.warning("embeddings on %s: no credible usage; charged routefit's count", rc.route.alias)
    return Usage(estimate, 0)


@dataclass(slots=True)
class _Trip:
    """One embeddings request on its way: what its record and its settlement need."""

    arrived: float
    started: float
    key_id: str | None
    traceparent: str | None
    team: Team | None = None
    rc: RouteConfig | None = None
    tokens: int = 0
    held: Held | None = None
    forwarded: bool = False
    upstream_ms: float | None = None

    @property
    def route(self) -> str:
        return self.rc.route.alias if self.rc is not None else "-"


def _trip(request: Request) -> _Trip:
    key = presented_key(request.headers)
    return _Trip(
        time.time(),
        time.perf_counter(),
        fingerprint(hash_key(key)) if key else None,
        request.headers.get("traceparent"),
    )


async def embeddings(request: Request, state: AppState, g: Generation) -> Response:
    """The whole path (module doc); every failure in OpenAI's shape; one request-log record."""
    trip = _trip(request)
    try:
        response = await _serve(request, state, g, trip)
    except ProxyError as err:
        response = await _failed(state, g, trip, err)
    except Exception:
        log.exception("internal error on an embeddings request")
        internal = ProxyError(500, "routefit internal error", code="internal")
        response = await _failed(state, g, trip, internal)
    except BaseException:  # cancelled (the drain's deadline): billed once the provider had it
        with anyio.CancelScope(shield=True):
            charged = Usage(trip.tokens, 0) if trip.forwarded else None
            await state.budgets.settle(trip.held, charged, not trip.forwarded)
        raise
    return response


async def _serve(request: Request, state: AppState, g: Generation, trip: _Trip) -> Response:
    trip.team = g.teams.authenticate(request.headers)
    share = body_share(g.gateway.fairness, g.config, caller(trip.team, request), request)
    body, _, work = await read_json(request, g.config.settings.max_body_bytes, share)
    who = caller(trip.team, request)
    fair = g.gateway.fairness
    parsed = await fair.run(who, work, parse, body)  # a big body's parse off the loop, as chat's
    rc = trip.rc = _route(g, parsed.model)
    permit(trip.team, rc)
    leg = _target(g, rc)
    upstream = g.keys.upstream(rc, request.headers)
    trip.tokens = await fair.run(
        who, work, count, rc, parsed.inputs, trip.team, above=COUNT_THREAD_ABOVE
    )
    _within_team_limit(trip.team, trip.tokens)
    trip.held = await state.budgets.reserve(trip.team, rc, trip.tokens, 0)
    target = _embedding_deployment(leg.deployment).keyed(upstream)
    sent = time.perf_counter()
    trip.forwarded = True
    answer = as_completion(await _send(leg, target, Outbound(EMBEDDINGS, body)))
    trip.upstream_ms = (time.perf_counter() - sent) * 1000
    state.metrics.upstream_latency.labels(trip.route).observe(trip.upstream_ms / 1000)
    charged = _charged(answer.data, trip.tokens, rc, len(parsed.inputs))
    await state.budgets.settle(trip.held, charged, False)
    state.metrics.requests.labels(trip.route, "200").inc()
    headers = {"x-routefit-route": trip.route, "x-routefit-prompt-tokens": str(trip.tokens)}
    if trip.held is not None:
        headers.update(rate_limit_headers(trip.held.windows))
    done = g.gateway.records.later(_record(trip, 200, charged))
    return Response(answer.body, headers=headers, media_type="application/json", background=done)


def _within_team_limit(team: Team | None, tokens: int) -> None:
    """A 400 when the inputs count more than the team's ``max_prompt_tokens``: the largest
    prompt one of its requests may send holds here too (embeddings went through at any size
    while every other wire held them to it), and with nothing to fit, over it is refused."""
    cap = team.quotas.max_prompt_tokens if team is not None else None
    if cap is not None and tokens > cap:
        raise ProxyError(
            400,
            f"This request exceeds your team's per-request prompt limit of {cap:,} tokens: "
            f"its inputs count {tokens:,} tokens.",
            param="input",
            code="context_length_exceeded",
        )


async def _failed(state: AppState, g: Generation, trip: _Trip, err: ProxyError) -> Response:
    """A refusal or failure: the reservation released, or charged routefit's count when the
    provider had the request and stopped answering; counted, recorded, answered."""
    billed = trip.forwarded and err.code in _BILLED
    charged = Usage(trip.tokens, 0) if billed else None
    await state.budgets.settle(trip.held, charged, not billed)
    state.metrics.requests.labels(trip.route, str(err.status)).inc()
    state.metrics.errors.labels(_kind(err)).inc()
    response = error_response(err)
    response.background = g.gateway.records.later(
        _record(trip, err.status, None, err.code or err.type)
    )
    return response


def _record(
    trip: _Trip, status: int, usage: Usage | None, error: str | None = None
) -> RequestRecord:
    """The request log's record (``proxy.records``): kind ``serve``, wire ``embeddings``."""
    rc = trip.rc
    return RequestRecord(
        id=uuid.uuid4().hex,
        time=trip.arrived,
        kind="serve",
        wire=EMBEDDINGS,
        status=status,
        latency_ms=(time.perf_counter() - trip.started) * 1000,
        team=trip.team.id if trip.team is not None else None,
        key_id=trip.key_id,
        route=rc.route.alias if rc is not None else None,
        deployment=rc.deployment_id if rc is not None else None,
        model=rc.upstream.model if rc is not None else None,
        error_code=error,
        prompt_estimate=trip.tokens or None,
        prompt_tokens=usage.prompt_tokens if usage is not None else None,
        output_tokens=0 if usage is not None else None,
        cost_usd=cost_usd(rc, usage) if rc is not None else None,
        upstream_ms=trip.upstream_ms,
        traceparent=trip.traceparent,
    )


async def _send(leg: Leg, target: Deployment, out: Outbound) -> Completion | EventStream:
    try:
        return await leg.transport.send(target, out)
    except ProxyError as err:
        err.origin = "upstream"
        raise


def _kind(err: ProxyError) -> str:
    if err.origin == "upstream":
        return "upstream"
    if err.code in ("rate_limit_exceeded", "request_over_quota", "store_unavailable"):
        return "budget"
    return "internal" if err.status >= 500 else "client"


async def completions_refused(request: Request) -> Response:
    """``/v1/completions``: not served (module doc), said in OpenAI's shape."""
    return error_response(
        ProxyError(
            404,
            "routefit does not serve the legacy completions API (/v1/completions): send the "
            f"prompt as a user message to /v1/chat/completions. Served: {SERVED}",
            code="unsupported_endpoint",
        )
    )
