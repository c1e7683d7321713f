"""Health endpoints: routefit's own probes and the ones a LiteLLM user calls.

``/healthz`` and ``/readyz`` are routefit's (docs/operations.md). LiteLLM's proxy answers
``/health/liveliness`` (and ``/health/liveness``), ``/health/readiness`` and ``/health``; a
LiteLLM deployment's probes and scripts keep working against routefit, answered from the same
readiness rule as ``/readyz`` (one rule, two dialects):

- ``/health/liveliness``: ``"I'm alive!"`` (200), ``{"status": "shutting_down"}`` (503) once a
  SIGTERM started the drain — LiteLLM's answers.
- ``/health/readiness``: ``{"status": "healthy", "db": "connected"}`` (200) when ``/readyz``
  says ready; ``{"status": "shutting_down"}`` (503) while draining; 503 otherwise, with
  routefit's checks. ``db`` is routefit's store ("disconnected" when it does not answer).
- ``/health``: LiteLLM probes every model with a real call. routefit does not call providers
  from a health check (it costs money, and a failed provider is already visible per request in
  ``/metrics``): it reports each route the caller may use and whether routefit can forward to
  it — its provider key set, the client's own (BYOK), or none needed — in LiteLLM's shape
  (``healthy_endpoints`` / ``unhealthy_endpoints``). ``?model=ALIAS`` narrows it to one route
  and answers 503 when that route cannot be served, as LiteLLM does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.config import RouteConfig
from proxy.errors import ProxyError, error_response
from proxy.state import AppState
from proxy.transports import ready as providers_ready
from proxy.version import package_version

__all__ = ["HEALTH_ROUTES", "readiness"]


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.routefit
    return state


async def readiness(state: AppState) -> tuple[bool, dict[str, Any]]:
    """(ready, ``/readyz``'s body). Ready once the route tokenizers are loaded. A store outage
    degrades service (last known calibration; budgets per their failure mode) without stopping
    it. litellm, when a route needs it, keeps loading in the background: requests to those
    routes wait for it, requests to OpenAI-compatible routes are served at once."""
    store_ok = await state.store.ping()
    # Fail-closed budgets refuse every budgeted request while the store is away: not ready.
    closed = state.config.settings.budget_failure_mode == "closed" and not state.teams.open
    draining = state.readiness.draining
    ready = state.readiness.tokenizers and not draining and (store_ok or not closed)
    status = "draining" if draining else ("ready" if ready else "starting")
    body: dict[str, Any] = {
        "status": status,
        "checks": {
            "tokenizers": state.readiness.tokenizers,
            "litellm": providers_ready(state.providers),
            "store": store_ok,
        },
        "store": state.store.name,
        # "open": no auth configured, every request admitted (local use); "keys": a key needed.
        "auth": "open" if state.teams.open else "keys",
    }
    if state.config.settings.metrics_key_hash is None:
        # asyncio tasks alive in this worker: a leak check for operators and tests. Every
        # request in flight holds some, so it is traffic: with ``metrics_key`` set it is the
        # scraper's (as ``/metrics`` is), not every probe's (docs/security.md).
        body["tasks"] = len(asyncio.all_tasks())
    if state.readiness.error:
        body["error"] = f"tokenizer: {state.readiness.error}"
    return ready, body


async def healthz(request: Request) -> Response:
    return _json({"status": "ok"})


async def readyz(request: Request) -> Response:
    ready, body = await readiness(_state(request))
    return _json(body, 200 if ready else 503)


async def liveliness(request: Request) -> Response:
    if _state(request).readiness.draining:
        return _json({"status": "shutting_down"}, 503)
    return _json("I'm alive!")


async def health_readiness(request: Request) -> Response:
    state = _state(request)
    if state.readiness.draining:
        return _json({"status": "shutting_down"}, 503)
    ready, body = await readiness(state)
    db = "connected" if body["checks"]["store"] else "disconnected"
    if ready:
        return _json({"status": "healthy", "db": db, "version": package_version()})
    return _json({**body, "db": db}, 503)


def _key_status(state: AppState, rc: RouteConfig) -> str:
    """How the route's requests are authenticated upstream: ``set`` (the config's key),
    ``client`` (the caller's own, BYOK), ``none`` (no key named: a local server, a litellm
    provider reading its own variable), ``unset`` (its variable is unset: not served)."""
    alias = rc.route.alias
    source = state.keys.sources.get(alias)
    if source is not None and source.forward_client_key:
        return "client"
    if alias in state.keys.missing:
        return "unset"
    return "set" if rc.upstream.api_key is not None else "none"


def _endpoint(state: AppState, rc: RouteConfig) -> dict[str, Any]:
    key = _key_status(state, rc)
    entry: dict[str, Any] = {
        "model": rc.route.alias,
        "litellm_model": rc.upstream.model,
        "transport": rc.upstream.transport,
        "provider_key": key,
    }
    if key == "unset":
        entry["error"] = state.keys.missing[rc.route.alias].warning()
    return entry


async def health(request: Request) -> Response:
    """GET /health: every route the caller may use, and whether routefit can forward to it.
    The same key as ``/v1/models``; never a provider call."""
    state = _state(request)
    try:
        team = state.teams.authenticate(request.headers)
    except ProxyError as err:
        return error_response(err)
    routes = [
        rc for alias, rc in state.config.routes.items() if team is None or team.may_use(alias)
    ]
    wanted = request.query_params.get("model")
    if wanted is not None:
        routes = [rc for rc in routes if rc.route.alias == wanted]
        if not routes:
            return error_response(
                ProxyError(404, f"unknown model {wanted!r}", param="model", code="model_not_found")
            )
    entries = [_endpoint(state, rc) for rc in routes]
    healthy = [e for e in entries if e["provider_key"] != "unset"]
    unhealthy = [e for e in entries if e["provider_key"] == "unset"]
    body = {
        "healthy_endpoints": healthy,
        "unhealthy_endpoints": unhealthy,
        "healthy_count": len(healthy),
        "unhealthy_count": len(unhealthy),
        # No provider was called: see the module docstring (docs/operations.md, "Health").
        "probed": False,
    }
    return _json(body, 503 if wanted is not None and not healthy else 200)


HEALTH_ROUTES = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/health", health, methods=["GET"]),
    Route("/health/liveliness", liveliness, methods=["GET"]),
    Route("/health/liveness", liveliness, methods=["GET"]),
    Route("/health/readiness", health_readiness, methods=["GET"]),
]
