"""The Starlette application: module-level endpoints over one typed ``AppState``.

Endpoints: ``POST /v1/chat/completions`` (and ``/chat/completions``), ``GET /v1/models``,
``POST /routefit/fit`` (dry run), ``GET /healthz`` (the process answers), ``GET /readyz`` (it can
serve: route tokenizers loaded; ``tasks`` counts live asyncio tasks), ``GET /metrics``
(Prometheus), ``GET /openapi.json`` (``proxy.openapi``). A client wire's endpoints are one
gateway call each with its ``proxy.wires`` module: ``serve`` (forwarded), ``count`` (a count
endpoint), ``fit_only`` (the dry run); a new wire is its module plus its entry in ``WIRES``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pricing.tokenizers import get_tokenizer
from proxy import modelmap, responses_api
from proxy.budgets import Budgets
from proxy.calibrator import Calibrator
from proxy.config import Config, load_config
from proxy.drain import cut_after, on_terminate
from proxy.errors import ProxyError, error_response
from proxy.fetch import ImageSizer
from proxy.gateway import Gateway, reply_error
from proxy.health import HEALTH_ROUTES
from proxy.local_provider import attach
from proxy.metrics import Metrics
from proxy.middleware import Guard
from proxy.openapi import build_openapi
from proxy.provider_keys import ProviderKeys
from proxy.providers import Transport
from proxy.records import page, query
from proxy.responses_store import Keeper
from proxy.serve_settings import DEFAULTS, ServeSettings, handed_over
from proxy.state import AppState
from proxy.store import ObservedStore, Store, StoreUnavailable, connect_store
from proxy.transports import Bounds, RetryPolicy, provider_table
from proxy.transports import start as start_providers
from proxy.ui import Dashboard
from proxy.wires import ANTHROPIC_WIRE, CHAT_WIRE, GEMINI_WIRE, RESPONSES_WIRE, Wire
from proxy.wires.base import Counting

__all__ = ["create_app", "create_app_from_env"]

log = logging.getLogger("routefit")


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _client(request: Request) -> str:
    """The client's address as the server resolved it (a trusted proxy's X-Forwarded-For):
    whose admin-key failures are counted (``proxy.throttle``)."""
    return request.client.host if request.client is not None else "unknown"


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.routefit
    return state


# -- client wires ----------------------------------------------------------------------------


async def serve(request: Request, wire: Wire) -> Response:
    """POST on one of a client wire's ``paths`` (``wire_routes`` binds ``wire``): the gateway's
    whole path, with the stored conversation of a wire whose API keeps them."""
    state = _state(request)
    return await state.gateway.serve(request, wire, _stored(state) if wire.stored else None)


async def count(request: Request, wire: Counting) -> Response:
    """POST on a client wire's ``count_paths`` (Anthropic's ``count_tokens``)."""
    return await _state(request).gateway.count(request, wire)


def wire_routes(wire: Wire) -> list[Route]:
    """A client wire's routes, from the paths it declares: registering a wire is this one call
    in ``ROUTES`` (``?beta=true``, as Claude Code sends it, is accepted and ignored)."""
    routes = [Route(path, partial(serve, wire=wire), methods=["POST"]) for path in wire.paths]
    if isinstance(wire, Counting):
        routes += [Route(p, partial(count, wire=wire), methods=["POST"]) for p in wire.count_paths]
    return routes


async def response_get(request: Request) -> Response:
    state = _state(request)
    return await responses_api.retrieve(request, state.teams, state.store)


async def response_delete(request: Request) -> Response:
    state = _state(request)
    return await responses_api.delete(request, state.teams, state.store)


async def response_input_items(request: Request) -> Response:
    state = _state(request)
    return await responses_api.input_items_list(request, state.teams, state.store)


async def root(request: Request) -> Response:
    """HEAD / and GET /: Claude Code probes the base URL before its first request."""
    return _json({"service": "routefit"})


def _stored(state: AppState) -> Keeper:
    """One Responses request's stored conversation (``proxy.responses_store``)."""
    return Keeper(state.store, state.config.settings.responses_ttl_seconds)


async def fit_only(request: Request) -> Response:
    """POST /routefit/fit: the fitted request and its report; nothing is forwarded.
    ``?wire=`` names the client wire whose body it is (``chat`` by default; ``messages``,
    ``responses``: a Responses body's ``previous_response_id`` resolved as creating it would)."""
    state = _state(request)
    wire = _BY_NAME.get(request.query_params.get("wire", "chat"))
    if wire is None:
        names = ", ".join(_BY_NAME)
        return error_response(ProxyError(400, f"wire must be one of {names}", param="wire"))
    session = _stored(state) if wire.stored else None
    return await state.gateway.fit_only(request, wire, session)


# -- routefit's own endpoints ----------------------------------------------------------------


async def models(request: Request) -> Response:
    state = _state(request)
    try:
        team = state.teams.authenticate(request.headers)
    except ProxyError as err:
        return error_response(err)
    data = [
        {"id": alias, "object": "model", "created": 0, "owned_by": rc.upstream.provider}
        for alias, rc in state.config.routes.items()
        if team is None or team.may_use(alias)
    ]
    return _json({"object": "list", "data": data})


async def team_usage(request: Request) -> Response:
    """GET /routefit/teams/{id}/usage: the admin key, or that team's own key."""
    state = _state(request)
    try:
        team = state.teams.usage_reader(
            request.headers, request.path_params["team"], _client(request)
        )
        windows = await state.budgets.usage(team)
    except ProxyError as err:
        return error_response(err)
    return _json(
        {
            "team": team.id,
            "windows": [
                {
                    "name": w.name,
                    "limit": w.limit,
                    "used": w.used,
                    "remaining": max(0, w.limit - w.used),
                    "reset_seconds": round(w.reset_seconds, 3),
                }
                for w in windows
            ],
        }
    )


async def requests_log(request: Request) -> Response:
    """GET /routefit/requests: the request log's records, newest first (``proxy.records``);
    the admin key reads any team's (every team's without ``team=``), a team key its own."""
    records = _state(request).gateway.records
    params = request.query_params
    try:
        teams = records.readable(request.headers, params.get("team"), _client(request))
        limit, route, status, since = query(params)
        found = await records.read(teams, limit, route, status, since)
    except ProxyError as err:
        return error_response(err)
    except StoreUnavailable as exc:
        return error_response(ProxyError(503, f"the store is unavailable: {exc}"))
    return Response(page(found), media_type="application/json")


async def openapi(request: Request) -> Response:
    return Response(_state(request).openapi, media_type="application/json")


async def calibration(request: Request) -> Response:
    state = _state(request)
    try:
        state.teams.authorize_admin(request.headers, _client(request))
    except ProxyError as err:
        return error_response(err)
    return _json(state.calibrator.report())


async def prometheus(request: Request) -> Response:
    return Response(_state(request).metrics.render(), media_type="text/plain; version=0.0.4")


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {
        404: f"unknown path {request.url.path}",
        405: f"method {request.method} not allowed on {request.url.path}",
    }
    err = ProxyError(
        exc.status_code,
        message.get(exc.status_code, str(exc.detail)),
        code="not_found" if exc.status_code == 404 else None,
        headers=exc.headers,
    )
    # under a wire's own paths, its clients read their own shape (Anthropic's on /v1/messages...)
    for wire in WIRES:
        if any(request.url.path.startswith(path) for path in _paths(wire)):
            return reply_error(wire, err)
    return error_response(err)


def _paths(wire: Wire) -> tuple[str, ...]:
    """Every path a wire's clients call (its count endpoint's too)."""
    return (*wire.paths, *wire.count_paths) if isinstance(wire, Counting) else wire.paths


#: The client wires: registering one is one entry here (its paths are its own, ``Wire.paths``).
WIRES: tuple[Wire, ...] = (CHAT_WIRE, RESPONSES_WIRE, ANTHROPIC_WIRE, GEMINI_WIRE)
_BY_NAME = {wire.name: wire for wire in WIRES}

ROUTES = [
    *(route for wire in WIRES for route in wire_routes(wire)),
    Route("/v1/responses/{response_id}", response_get, methods=["GET"]),
    Route("/v1/responses/{response_id}", response_delete, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/input_items", response_input_items, methods=["GET"]),
    Route("/", root, methods=["GET", "HEAD"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/models", models, methods=["GET"]),
    Route("/routefit/fit", fit_only, methods=["POST"]),
    Route("/routefit/calibration", calibration, methods=["GET"]),
    Route("/routefit/teams/{team}/usage", team_usage, methods=["GET"]),
    Route("/routefit/requests", requests_log, methods=["GET"]),
    *HEALTH_ROUTES,  # /healthz, /readyz and LiteLLM's /health family (proxy.health)
    Route("/metrics", prometheus, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
]

# -- wiring and lifespan ---------------------------------------------------------------------


def build_state(
    config: Config,
    store: Store | None = None,
    transport: Transport | None = None,
    serve_settings: ServeSettings = DEFAULTS,
) -> AppState:
    """Every long-lived part of one app, wired once from the config. ``transport`` replaces the
    passthrough's HTTP client for every route (``proxy.transports.mock``): then no simulator
    is started for ``sim://`` routes, the injected transport answers them too."""
    # sim:// routes → the in-process simulator's port (or, injected, to the transport)
    config, local = attach(config, serve=transport is None)
    modelmap.release()  # the routes are read: their entries stay, the whole map goes
    metrics = Metrics()
    settings = config.settings
    providers = provider_table(
        {rc.deployment_id: rc.upstream for rc in config.every_deployment()},
        RetryPolicy(settings.upstream_retries),
        on_retry=lambda reason: metrics.upstream_retries.labels(reason).inc(),
        bounds=Bounds(settings.limits.max_provider_body_bytes, settings.limits.max_sse_event_bytes),
        http=transport,
    )
    store = (
        ObservedStore(store, metrics)
        if store is not None
        else connect_store(settings.store, metrics)
    )
    calibrator = Calibrator(
        store,
        metrics,
        settings.calibration,
        refresh_seconds=settings.calibration_refresh,
        anchor_ttl=settings.anchor_ttl,
    )
    budgets = Budgets(store, metrics, settings.budget_failure_mode)
    sizer = ImageSizer()
    keys = ProviderKeys.from_file(config, teams_open=config.open)
    gateway = Gateway(config, metrics, providers, calibrator, budgets, sizer, keys)
    dashboard = Dashboard(config, metrics, calibrator, budgets, gateway.teams)
    gateway.on_fit = dashboard.record
    return AppState(
        config,
        metrics,
        providers,
        store,
        calibrator,
        budgets,
        sizer,
        gateway,
        keys,
        dashboard,
        orjson.dumps(build_openapi(config)),
        local,
        serve_settings,
    )


async def _load_tokenizers(state: AppState) -> None:
    """Tokenizer files take ~0.5 s to load: loaded before /readyz says yes, in a thread, rather
    than on the event loop under the first request."""
    specs = sorted({rc.route.tokenizer for rc in state.config.every_deployment()})

    def preload() -> None:
        for spec in specs:
            get_tokenizer(spec).count("warm up")

    try:
        await asyncio.to_thread(preload)
    except Exception as exc:
        state.readiness.error = str(exc)
        log.error("cannot load a route tokenizer: %s", exc)
    else:
        state.readiness.tokenizers = True


def _log_start(state: AppState) -> None:
    config = state.config
    log.info("store: %s", state.store.name)
    if state.teams.open:
        log.warning(
            "no teams configured (nor an admin or master key): routefit is running OPEN "
            "(every request admitted, no budgets; /readyz says auth=open)"
        )
    elif not state.teams.has_keys:
        log.warning("auth is configured but no key is set: every request will answer 401")
    for warning in config.warnings:
        log.warning("%s", warning)
    for key in config.missing_env:
        log.info("unset environment variable for %s: null", key)
    log.info("routefit ready: %d route(s) from %s", len(config.routes), config.path)


def _drain(state: AppState, loop: asyncio.AbstractEventLoop) -> None:
    state.readiness.draining = True
    seconds = state.settings.drain_seconds
    cut_after(loop, seconds)
    log.info("SIGTERM: draining for up to %g s (not ready; in-flight requests finish)", seconds)


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    state: AppState = app.state.routefit
    loading = asyncio.get_running_loop().create_task(_load_tokenizers(state))
    if state.local is not None:
        state.local.start()
    state.keys.log_warnings()
    start_providers(state.providers)
    exact = {rc.calibration_key: rc.route.exact_text for rc in state.config.every_deployment()}
    state.calibrator.start(exact)
    _log_start(state)
    loop = asyncio.get_running_loop()
    on_terminate(lambda: _drain(state, loop))
    try:
        yield
    finally:
        loading.cancel()
        await state.calibrator.stop()
        await asyncio.to_thread(state.gateway.records.close)  # traces batched: exported
        await state.providers.aclose()
        await state.sizer.aclose()
        await state.store.close()
        if state.local is not None:
            await state.local.stop()


def create_app(
    config: Config,
    store: Store | None = None,
    transport: Transport | None = None,
    settings: ServeSettings = DEFAULTS,
) -> Starlette:
    """The app over ``config``; ``store`` replaces what the config names (tests), ``transport``
    (e.g. ``proxy.transports.mock.asgi_transport``) carries every provider request in place of
    the network (``build_state``), ``settings`` are ``routefit serve``'s limits
    (``proxy.serve_settings``)."""
    state = build_state(config, store, transport, settings)
    app = Starlette(
        routes=[*ROUTES, *state.dashboard.routes()],
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
        middleware=[Middleware(Guard, limits=settings.read_limits())],
    )
    app.router.redirect_slashes = False  # never a redirect built from the client's Host
    app.state.routefit = state
    return app


def create_app_from_env() -> Starlette:
    """uvicorn's factory in each worker of ``routefit serve --workers N``: the config path and
    settings the command handed over (one record: ``proxy.serve_settings``)."""
    path, settings = handed_over()
    return create_app(load_config(path), settings=settings)
