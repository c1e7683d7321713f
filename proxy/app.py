"""The Starlette application: module-level endpoints over one typed ``AppState``.

Endpoints: ``POST /v1/chat/completions`` (and ``/chat/completions``), ``GET /v1/models``,
``POST /routefit/fit`` (dry run), ``GET /healthz`` (the process answers), ``GET /readyz`` (it can
serve: route tokenizers loaded; ``tasks`` counts live asyncio tasks), ``GET /metrics``
(Prometheus), ``GET /openapi.json`` (``proxy.openapi``), ``POST /routefit/reload`` (the config
file read again, ``proxy.reload``; SIGHUP does the same, ``proxy.hangup``). A client wire's
endpoints are one gateway call each with its ``proxy.wires`` module: ``serve`` (forwarded),
``count`` (a count endpoint), ``fit_only`` (the dry run); a new wire is its module plus its
entry in ``WIRES``.

Every handler reads what the config decides from the request's own generation
(``proxy.generation.pinned``): a reload never changes a request under way.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pricing.tokenizers import warm_up
from proxy import hangup, responses_api
from proxy.budgets import Budgets
from proxy.calibrator import Calibrator
from proxy.config import Config, ConfigError, load_config
from proxy.drain import cut_after, on_terminate
from proxy.embeddings import completions_refused
from proxy.embeddings import embeddings as forward_embeddings
from proxy.errors import ProxyError, error_response
from proxy.fetch import ImageSizer
from proxy.gateway import reply_error
from proxy.generation import (
    Generation,
    Live,
    Pin,
    Shared,
    build_generation,
    dispatched,
    pinned,
    retire,
)
from proxy.health import HEALTH_ROUTES
from proxy.local_provider import attach
from proxy.metrics import Metrics
from proxy.middleware import Guard
from proxy.origin import BrowserFence
from proxy.providers import Transport
from proxy.records import guard_access_log, page, query
from proxy.reload import checked, refused, summary
from proxy.reload import reload as reload_config
from proxy.responses_store import Keeper
from proxy.serve_settings import DEFAULTS, ServeSettings, handed_over
from proxy.state import AppState
from proxy.store import ObservedStore, Store, StoreUnavailable, connect_store
from proxy.teams import hash_key, presented_key
from proxy.transports import start as start_providers
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
    g = pinned(request)
    keeper = _stored(_state(request), g) if wire.stored else None
    return await g.gateway.serve(request, wire, keeper)


async def count(request: Request, wire: Counting) -> Response:
    """POST on a client wire's ``count_paths`` (Anthropic's ``count_tokens``; a Responses count
    resolves the stored conversation it continues, as creating it would)."""
    g = pinned(request)
    session = _stored(_state(request), g) if wire.stored else None
    return await g.gateway.count(request, wire, session)


def wire_routes(wire: Wire) -> list[Route]:
    """A client wire's routes, from the paths it declares: registering a wire is this one call
    in ``ROUTES`` (``?beta=true``, as Claude Code sends it, is accepted and ignored)."""
    routes = [Route(path, partial(serve, wire=wire), methods=["POST"]) for path in wire.paths]
    if isinstance(wire, Counting):
        routes += [Route(p, partial(count, wire=wire), methods=["POST"]) for p in wire.count_paths]
    return routes


async def response_get(request: Request) -> Response:
    return await responses_api.retrieve(request, pinned(request).teams, _state(request).store)


async def response_delete(request: Request) -> Response:
    return await responses_api.delete(request, pinned(request).teams, _state(request).store)


async def response_input_items(request: Request) -> Response:
    teams = pinned(request).teams
    return await responses_api.input_items_list(request, teams, _state(request).store)


async def root(request: Request) -> Response:
    """HEAD / and GET /: Claude Code probes the base URL before its first request."""
    return _json({"service": "routefit"})


def _stored(state: AppState, g: Generation) -> Keeper:
    """One Responses request's stored conversation (``proxy.responses_store``)."""
    settings = g.config.settings
    return Keeper(
        state.store,
        settings.responses_ttl_seconds,
        settings.max_body_bytes,
        team_bytes=settings.responses_store_bytes_per_team,
    )


async def fit_only(request: Request) -> Response:
    """POST /routefit/fit: the fitted request and its report; nothing is forwarded.
    ``?wire=`` names the client wire whose body it is (``chat`` by default; ``messages``,
    ``responses``: a Responses body's ``previous_response_id`` resolved as creating it would)."""
    g = pinned(request)
    wire = _BY_NAME.get(request.query_params.get("wire", "chat"))
    if wire is None:
        names = ", ".join(_BY_NAME)
        return error_response(ProxyError(400, f"wire must be one of {names}", param="wire"))
    session = _stored(_state(request), g) if wire.stored else None
    return await g.gateway.fit_only(request, wire, session)


# -- routefit's own endpoints ----------------------------------------------------------------


async def models(request: Request) -> Response:
    g = pinned(request)
    try:
        team = g.teams.authenticate(request.headers)
    except ProxyError as err:
        return error_response(err)
    data = [
        {"id": alias, "object": "model", "created": 0, "owned_by": rc.upstream.provider}
        for alias, rc in g.config.routes.items()
        if team is None or team.may_use(alias)
    ]
    return _json({"object": "list", "data": data})


async def team_usage(request: Request) -> Response:
    """GET /routefit/teams/{id}/usage: the admin key, or that team's own key."""
    try:
        team = pinned(request).teams.usage_reader(
            request.headers, request.path_params["team"], _client(request)
        )
        windows = await _state(request).budgets.usage(team)
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
    records = pinned(request).gateway.records
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


async def embeddings(request: Request) -> Response:
    """POST /v1/embeddings: forwarded, priced and budgeted (``proxy.embeddings``)."""
    return await forward_embeddings(request, _state(request), pinned(request))


async def openapi(request: Request) -> Response:
    """GET /openapi.json: ``model`` names the aliases the caller's key may use (every alias
    in open mode; none without a team's key: ``proxy.openapi``)."""
    g = pinned(request)
    aliases = list(g.config.routes)
    if not g.config.open:
        key = presented_key(request.headers)
        team = g.teams.team_for(key) if key else None
        aliases = [a for a in aliases if team is not None and team.may_use(a)]
    return Response(g.openapi.for_aliases(aliases), media_type="application/json")


async def calibration(request: Request) -> Response:
    try:
        pinned(request).teams.authorize_admin(request.headers, _client(request))
    except ProxyError as err:
        return error_response(err)
    return _json(_state(request).calibrator.report())


async def reload(request: Request) -> Response:
    """POST /routefit/reload (the admin key): the config file read again and served from now
    on (``proxy.reload``), or 422 with the loader's message and the running config kept. With
    ``--workers N`` this worker checks the file, then the parent passes SIGHUP to every worker
    (202: each reloads on its own, as for a SIGHUP sent to the parent)."""
    state = _state(request)
    try:
        pinned(request).teams.authorize_admin(request.headers, _client(request))
    except ProxyError as err:
        return error_response(err)
    try:
        if state.settings.workers > 1:
            try:
                await checked(state)
            except ConfigError as exc:
                refused(state, "POST /routefit/reload", exc)
                raise
            hangup.ask_parent()
            return _json({"reloaded": "every worker", "workers": state.settings.workers}, 202)
        g = await reload_config(state, "POST /routefit/reload")
    except ConfigError as exc:
        return error_response(ProxyError(422, str(exc), code="invalid_config"))
    return _json(summary(g))


async def prometheus(request: Request) -> Response:
    """The metrics; with ``metrics_key`` set, only for that key or the admin key (guesses
    slowed as at every admin door: ``TeamDirectory.check_admin_key``)."""
    g = pinned(request)
    wanted = g.config.settings.metrics_key_hash
    if wanted is not None:
        key = presented_key(request.headers)
        if not key:
            err = ProxyError(401, "/metrics needs the metrics key", code="metrics_key_required")
            return error_response(err)
        if not hmac.compare_digest(hash_key(key), wanted):
            try:
                g.teams.check_admin_key(key, _client(request))
            except ProxyError as err:
                return error_response(err)
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
    return _refused(request.url.path, err)


def _refused(called: str, err: ProxyError) -> Response:
    """``err`` in the shape the clients of the path read: under a wire's own paths, that wire's
    (Anthropic's on /v1/messages...), anywhere under ``/v1beta`` Google's (no other API lives
    there: the SDK's ``models.list()``, ``models.get()``, files...), elsewhere OpenAI's."""
    for wire in WIRES:
        if any(_under(called, path) for path in _paths(wire)):
            return reply_error(wire, err)
    if called == _GOOGLE_ROOT or called.startswith(_GOOGLE_ROOT + "/"):
        return reply_error(GEMINI_WIRE, err)
    return error_response(err)


#: The root of Google's API: every path under it is a Gemini client's.
_GOOGLE_ROOT = "/v1beta"


def _paths(wire: Wire) -> tuple[str, ...]:
    """Every path a wire's clients call (its count endpoint's too)."""
    return (*wire.paths, *wire.count_paths) if isinstance(wire, Counting) else wire.paths


def _under(called: str, path: str) -> bool:
    """Whether ``called`` is under a wire's ``path``: its prefix, or, for a path with a
    parameter (``/v1beta/models/{model}:generateContent``), the same text up to the parameter
    and a method after it (``/v1beta/models/NAME:anyMethod``; NAME may hold ``/`` when the
    parameter is a ``path`` one, as Gemini's model names are)."""
    head, brace, param = path.partition("{")
    if not brace:
        return called.startswith(path)
    rest = called[len(head) :]
    slashed = param.partition("}")[0].endswith(":path")  # a parameter that may hold "/"
    return called.startswith(head) and ":" in rest and (slashed or "/" not in rest)


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
    Route("/v1/embeddings", embeddings, methods=["POST"]),
    Route("/embeddings", embeddings, methods=["POST"]),
    Route("/v1/completions", completions_refused, methods=["POST"]),
    Route("/completions", completions_refused, methods=["POST"]),
    Route("/routefit/fit", fit_only, methods=["POST"]),
    Route("/routefit/calibration", calibration, methods=["GET"]),
    Route("/routefit/teams/{team}/usage", team_usage, methods=["GET"]),
    Route("/routefit/requests", requests_log, methods=["GET"]),
    Route("/routefit/reload", reload, methods=["POST"]),
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
    """Every long-lived part of one app, wired once, and the first generation of what the
    config decides (``proxy.reload``). ``transport`` replaces the passthrough's HTTP client for
    every route (``proxy.transports.mock``): then no simulator is started for ``sim://``
    routes, the injected transport answers them too."""
    # sim:// routes → the in-process simulator's port (or, injected, to the transport)
    config, local = attach(config, serve=transport is None)
    metrics = Metrics()
    settings = config.settings
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
    shared = Shared(metrics, calibrator, budgets, ImageSizer(), transport)
    first = build_generation(1, config, shared)
    return AppState(
        Live(first),
        metrics,
        store,
        calibrator,
        budgets,
        shared.sizer,
        local,
        serve_settings,
        transport,
    )


async def _load_tokenizers(state: AppState) -> None:
    """Tokenizer files take ~0.5 s to load: loaded first, before the server listens and before
    the lifespan starts anything else, off the event loop (on a thread that ends: ``warm_up``,
    no thread that counts for requests may own an encoding's regex cache).

    Loading makes ~10-20 MiB of short-lived Python objects (a rank table, a JSON vocabulary).
    Whatever long-lived object is made meanwhile lands among them, and each allocator arena one
    lands in stays resident, mostly empty, for the worker's life: measured, with the server
    already answering probes and starting its parts during the load, an idle worker with an
    OpenAI and an Anthropic route held ~4 MiB more (bench/REPORT.md, 2b), and a calibrator
    loading a store's samples meanwhile would pin more. A failed load leaves the error for
    /readyz to report; the server still starts."""
    specs = sorted({rc.route.tokenizer for rc in state.config.every_deployment()})

    def preload() -> None:
        for spec in specs:
            warm_up(spec)

    try:
        await asyncio.to_thread(preload)
    except Exception as exc:
        state.readiness.error = str(exc)
        log.error("cannot load a route tokenizer: %s", exc)
    else:
        state.readiness.tokenizers = True


def _freeze_start_up() -> None:
    """What start-up built (configs, tokenizers' tables, imported modules, the providers'
    clients) lives as long as the process: out of the collector's sight, so a full collection
    under load walks only what requests made instead of every object routefit holds
    (compare_commits: 3-4% of the CPU of a small request). Once per process: a process that
    starts apps one after another (the tests) must not freeze the garbage of the earlier ones."""
    if not gc.get_freeze_count():
        gc.freeze()


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


def _reload_on_hangup(
    state: AppState, loop: asyncio.AbstractEventLoop, started: asyncio.Event
) -> Callable[[], None]:
    """SIGHUP reloads the config (``proxy.hangup``); returns what unhooks it. Taken from the
    start of the lifespan, so a signal during start-up (the tokenizers' load) is not lost; the
    reload itself waits until everything has ``started``."""
    running: set[asyncio.Task[None]] = set()

    async def hung_up() -> None:
        await started.wait()
        try:
            await reload_config(state, "SIGHUP")
        except ConfigError:
            pass  # logged at ERROR by the reload; the running config stays
        except Exception:
            log.exception("config reload (SIGHUP) failed; the running config stays")

    def signalled() -> None:
        task = loop.create_task(hung_up())
        running.add(task)
        task.add_done_callback(running.discard)

    return hangup.on_hangup(loop, signalled)


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    state: AppState = app.state.routefit
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    on_sighup = state.settings.reload_on_sighup
    unhook = _reload_on_hangup(state, loop, started) if on_sighup else None
    await _load_tokenizers(state)
    if state.local is not None:
        state.local.start()
    state.keys.log_warnings()
    start_providers(state.providers)
    deployments = state.config.every_deployment()
    exact = {rc.calibration_key: rc.route.exact_text for rc in deployments}
    state.calibrator.start(exact, {rc.calibration_key: rc.route.tokenizer for rc in deployments})
    _log_start(state)
    on_terminate(lambda: _drain(state, loop))
    if state.readiness.tokenizers:
        _freeze_start_up()
    started.set()
    try:
        yield
    finally:
        if unhook is not None:
            unhook()
        await state.calibrator.stop()
        for g in state.live.every():  # traces batched: exported; provider clients closed
            await retire(g)
        if state.transport is not None:
            await state.transport.aclose()
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
    guard_access_log()
    app = Starlette(
        routes=[*ROUTES, *dispatched(state.dashboard.routes())],
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
        # Pin outermost: a request holds its config generation until its response is done;
        # the fence reads that generation, inside Guard (a refusal leaves a body unread)
        middleware=[
            Middleware(Pin),
            Middleware(Guard, limits=settings.read_limits()),
            Middleware(BrowserFence, refuse=_refused),
        ],
    )
    app.router.redirect_slashes = False  # never a redirect built from the client's Host
    app.state.routefit = state
    return app


def create_app_from_env() -> Starlette:
    """uvicorn's factory in each worker of ``routefit serve --workers N``: the config path and
    settings the command handed over (one record: ``proxy.serve_settings``)."""
    hangup.ignore()  # until the lifespan takes SIGHUP: never the default (the end of the worker)
    path, settings = handed_over()
    return create_app(load_config(path), settings=settings)
