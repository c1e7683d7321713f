"""The Starlette application, built by a factory from the config.

Endpoints: ``POST /v1/chat/completions`` (and ``/chat/completions``), ``GET /v1/models``,
``POST /routefit/fit`` (dry run), ``GET /healthz`` (the process answers), ``GET /readyz`` (it can
serve: store reachable, litellm loaded when a route needs it; ``tasks`` counts live asyncio
tasks), ``GET /metrics`` (Prometheus), ``GET /openapi.json`` (``proxy.openapi``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pricing.tokenizers import get_tokenizer
from proxy.budgets import Budgets
from proxy.calibrator import Calibrator
from proxy.chat import Gateway
from proxy.config import Config, load_config
from proxy.errors import ProxyError, error_response
from proxy.fetch import ImageSizer
from proxy.metrics import Metrics
from proxy.openapi import build_openapi
from proxy.store import ObservedStore, Store, connect_store
from proxy.upstream import RetryPolicy, Upstreams

__all__ = ["create_app", "create_app_from_env"]

log = logging.getLogger("routefit")

CONFIG_ENV = "ROUTEFIT_CONFIG"


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def create_app(config: Config, store: Store | None = None) -> Starlette:
    metrics = Metrics()
    needs_litellm = any(rc.upstream.transport == "litellm" for rc in config.routes.values())
    settings = config.settings
    upstreams = Upstreams(
        needs_litellm,
        retry=RetryPolicy(settings.upstream_retries),
        on_retry=lambda reason: metrics.upstream_retries.labels(reason).inc(),
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
    gateway = Gateway(config, metrics, upstreams, calibrator, budgets, sizer)
    teams = gateway.teams

    specs = sorted({rc.route.tokenizer for rc in config.routes.values()})
    loaded: dict[str, object] = {"done": False, "error": None}

    def preload() -> None:
        # Tokenizer files take ~0.5 s to load: do it before /readyz says yes, in a thread,
        # rather than on the event loop under the first request.
        for spec in specs:
            get_tokenizer(spec).count("warm up")

    async def load_tokenizers() -> None:
        try:
            await asyncio.to_thread(preload)
        except Exception as exc:
            loaded["error"] = str(exc)
            log.error("cannot load a route tokenizer: %s", exc)
        else:
            loaded["done"] = True

    background: list[asyncio.Task[None]] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        background.append(asyncio.get_running_loop().create_task(load_tokenizers()))
        upstreams.start()
        calibrator.start({alias: rc.route.exact_text for alias, rc in config.routes.items()})
        log.info("store: %s", store.name)
        if teams.open:
            log.warning("no teams configured: routefit is running OPEN (no keys, no budgets)")
        for warning in config.warnings:
            log.warning("%s", warning)
        for key in config.missing_env:
            log.info("unset environment variable for %s: null", key)
        log.info("routefit ready: %d route(s) from %s", len(config.routes), config.path)
        try:
            yield
        finally:
            await calibrator.stop()
            await upstreams.aclose()
            await sizer.aclose()
            await store.close()

    async def models(request: Request) -> Response:
        try:
            team = teams.authenticate(request.headers)
        except ProxyError as err:
            return error_response(err)
        data = [
            {"id": alias, "object": "model", "created": 0, "owned_by": rc.upstream.provider}
            for alias, rc in config.routes.items()
            if team is None or team.may_use(alias)
        ]
        return _json({"object": "list", "data": data})

    async def team_usage(request: Request) -> Response:
        """GET /routefit/teams/{id}/usage: the admin key, or that team's own key."""
        team_id = request.path_params["team"]
        try:
            if teams.open:
                raise ProxyError(404, "no teams are configured", code="not_found")
            caller = None
            try:
                teams.authorize_admin(request.headers)
            except ProxyError:
                caller = teams.authenticate(request.headers)
                if caller is None or caller.id != team_id:
                    raise ProxyError(
                        403, "a team key can only read its own usage", code="forbidden"
                    ) from None
            team = teams.teams.get(team_id)
            if team is None:
                raise ProxyError(404, f"unknown team {team_id!r}", code="not_found")
            states = await budgets.usage(team)
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
                    for w in states
                ],
            }
        )

    async def healthz(request: Request) -> Response:
        return _json({"status": "ok"})

    async def readyz(request: Request) -> Response:
        store_up = await store.ping()
        checks = {
            "tokenizers": bool(loaded["done"]),
            "litellm": upstreams.ready,
            "store": store_up,
        }
        # Ready once the route tokenizers are loaded. A store outage degrades service (last
        # known calibration; budgets per their failure mode) without stopping it. litellm,
        # when a route needs it, keeps loading in the background: requests to those routes
        # wait for it, requests to OpenAI-compatible routes are served at once.
        ready = bool(loaded["done"])
        body = {
            "status": "ready" if ready else "starting",
            "checks": checks,
            "store": store.name,
            # asyncio tasks alive in this worker: a leak check for operators and tests.
            "tasks": len(asyncio.all_tasks()),
        }
        if loaded["error"]:
            body["error"] = f"tokenizer: {loaded['error']}"
        return _json(body, 200 if ready else 503)

    openapi_doc = orjson.dumps(build_openapi(config))

    async def openapi(request: Request) -> Response:
        return Response(openapi_doc, media_type="application/json")

    async def calibration(request: Request) -> Response:
        try:
            teams.authorize_admin(request.headers)
        except ProxyError as err:
            return error_response(err)
        return _json(calibrator.report())

    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = {
            404: f"unknown path {request.url.path}",
            405: f"method {request.method} not allowed on {request.url.path}",
        }
        return error_response(
            ProxyError(
                exc.status_code,
                message.get(exc.status_code, str(exc.detail)),
                code="not_found" if exc.status_code == 404 else None,
            ),
            headers=exc.headers,
        )

    routes = [
        Route("/v1/chat/completions", gateway.chat, methods=["POST"]),
        Route("/chat/completions", gateway.chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/routefit/fit", gateway.fit_only, methods=["POST"]),
        Route("/routefit/calibration", calibration, methods=["GET"]),
        Route("/routefit/teams/{team}/usage", team_usage, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error}
    )
    app.state.gateway = gateway
    return app


def create_app_from_env() -> Starlette:
    """uvicorn factory: each worker process loads the config named by ROUTEFIT_CONFIG."""
    return create_app(load_config(os.environ[CONFIG_ENV]))
