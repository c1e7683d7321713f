"""The chat-completions path: read → parse → route → auth → price and fit → budget → forward.

Everything before forwarding is routefit's own overhead and is measured as such. What the provider
says afterwards flows back through ``Gateway.on_usage`` (metrics and calibration, no I/O) and the
budget settlement, which runs after the response has been sent: the client never waits for the
store on the way out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import anyio
import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from pricing.calibration import Correction, anchored_estimate
from pricing.messages import ChatRequest, RequestError, parse_request
from proxy.budgets import Budgets, Held, rate_limit_headers
from proxy.calibrator import Calibrator, prefix_keys
from proxy.config import Config, RouteConfig
from proxy.errors import ProxyError, error_response
from proxy.fetch import ImageSizer, image_urls
from proxy.metrics import Metrics
from proxy.streaming import SSEResponse
from proxy.teams import Team, TeamDirectory
from proxy.upstream import Upstreams, UpstreamStream
from proxy.usage import Usage
from strategies.fit import Fit, FitError, fit
from strategies.policy import FitPolicy, output_reserve

__all__ = ["Gateway", "Prepared"]

log = logging.getLogger("routefit")
T = TypeVar("T")

#: Bodies above this size are priced and fitted in a worker thread so that one huge request
#: does not stall every other request on the event loop (the tokenizers release the GIL).
_THREAD_ABOVE = 512 * 1024

#: Nesting orjson can write back (it reads deeper JSON than it writes).
_MAX_DEPTH = 254


@dataclass(slots=True)
class Prepared:
    """A request priced and fitted, ready to forward."""

    rc: RouteConfig
    team: Team | None
    policy: FitPolicy
    request: ChatRequest
    fitted: Fit
    estimate: int
    started: float
    size: int
    #: Chained digests of the fitted message prefixes (anchor keys).
    keys: list[bytes]
    anchored: bool = False
    held: Held | None = None


class Gateway:
    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        upstreams: Upstreams,
        calibrator: Calibrator,
        budgets: Budgets,
        sizer: ImageSizer,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.upstreams = upstreams
        self.calibrator = calibrator
        self.budgets = budgets
        self.sizer = sizer
        self.teams = TeamDirectory(config.teams, config.settings.admin_key_hash)
        self.max_body = config.settings.max_body_bytes
        self._policies: dict[tuple[str, str], FitPolicy] = {}

    # -- reading and preparing -------------------------------------------------------------

    async def read_json(self, request: Request) -> tuple[Any, int]:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            raise ProxyError(
                413,
                f"request body exceeds the limit of {self.max_body:,} bytes",
                code="request_too_large",
            )
        chunks = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise ProxyError(
                    413,
                    f"request body exceeds the limit of {self.max_body:,} bytes",
                    code="request_too_large",
                )
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw:
            raise ProxyError(
                400, "the request body is empty; expected a JSON object", code="invalid_json"
            )
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ProxyError(
                400, f"the request body is not valid JSON: {exc}", code="invalid_json"
            ) from None
        # orjson reads 1024 levels of nesting but writes only 254, and routefit writes the body
        # again (to forward it, to key anchors): refuse what it could not write, now rather than
        # as a 500 later. Writing costs microseconds (~0.1 ms for a 1 MB body).
        try:
            orjson.dumps(body)
        except TypeError:
            raise ProxyError(
                400,
                f"the request body is nested more than {_MAX_DEPTH} levels deep",
                code="invalid_json",
            ) from None
        return body, size

    def route_for(self, request: ChatRequest) -> RouteConfig:
        rc = self.config.route(request.model)
        if rc is None:
            if not request.model:
                raise ProxyError(400, "model is required", param="model", code="missing_model")
            raise ProxyError(
                404,
                f"The model '{request.model}' does not exist or you do not have access to it.",
                param="model",
                code="model_not_found",
            )
        return rc

    def policy_for(self, rc: RouteConfig, team: Team | None) -> FitPolicy:
        """The route's fit policy with the team's overrides and per-request prompt quota."""
        if team is None:
            return rc.policy
        key = (team.id, rc.route.alias)
        policy = self._policies.get(key)
        if policy is None:
            policy = FitPolicy.parse(team.fit, base=rc.policy)
            cap = team.quotas.max_prompt_tokens
            if cap is not None:
                current = policy.max_prompt_tokens
                policy = replace(
                    policy, max_prompt_tokens=cap if current is None else min(cap, current)
                )
            self._policies[key] = policy
        return policy

    async def prepare(self, request: Request) -> Prepared:
        started = time.perf_counter()
        team = self.teams.authenticate(request.headers)
        body, size = await self.read_json(request)
        try:
            parsed = parse_request(body)
        except RequestError as exc:
            raise ProxyError(400, exc.message, param=exc.param) from None
        rc = self.route_for(parsed)
        if team is not None and not team.may_use(rc.route.alias):
            raise ProxyError(
                403,
                f"team {team.id!r} may not use model {rc.route.alias!r}",
                param="model",
                code="model_not_allowed",
            )
        policy = self.policy_for(rc, team)
        sizes: dict[str, tuple[int, int]] = {}
        if rc.route.image_fetch.enabled:
            sizes = await self.sizer.sizes(image_urls(parsed), rc.route.image_fetch)
        correction = self.calibrator.correction(rc.route.alias)
        fitted = await self._fit(parsed, rc, policy, correction, sizes, size)
        estimate, keys, hit = await self._anchor(rc, fitted)
        if hit and estimate > fitted.report.budget:
            # The provider's own count of the prefix says the calibrated estimate was low:
            # fit again with the correction scaled by how low it was.
            tighter = correction.scaled(estimate / max(1, fitted.estimate))
            fitted = await self._fit(parsed, rc, policy, tighter, sizes, size)
            estimate, keys, hit = await self._anchor(rc, fitted)
        return Prepared(rc, team, policy, parsed, fitted, estimate, started, size, keys, hit)

    async def _anchor(self, rc: RouteConfig, fitted: Fit) -> tuple[int, list[bytes], bool]:
        """(estimate to act on, prefix keys, anchored?): anchored on the provider's count of a
        prefix when one is known, else the calibrated estimate."""
        alias = rc.route.alias
        wire = fitted.body.get("messages") or []
        keys = prefix_keys(alias, rc.upstream.model, fitted.body.get("tools"), wire)
        hit = await self.calibrator.find_anchor(alias, keys)
        if hit is None:
            return fitted.estimate, keys, False
        pr = fitted.pressure
        correction = self.calibrator.correction(alias)
        return anchored_estimate(hit[1], pr, correction), keys, True

    async def _fit(
        self,
        parsed: ChatRequest,
        rc: RouteConfig,
        policy: FitPolicy,
        correction: Correction,
        sizes: dict[str, tuple[int, int]],
        size: int,
    ) -> Fit:
        def run() -> Fit:
            try:
                return fit(parsed, rc.route, policy, correction, sizes)
            except RequestError as exc:  # an image that cannot be priced, found while pricing
                raise ProxyError(400, exc.message, param=exc.param) from None
            except FitError as exc:
                raise ProxyError(
                    400,
                    f"This model's maximum context length is {exc.window:,} tokens. {exc}",
                    param="messages",
                    code="context_length_exceeded",
                ) from None

        if size > _THREAD_ABOVE:
            return await anyio.to_thread.run_sync(run)
        return run()

    def headers(self, p: Prepared) -> dict[str, str]:
        headers = {
            "x-routefit-route": p.rc.route.alias,
            "x-routefit-budget": str(p.fitted.report.budget),
            "x-routefit-prompt-tokens": str(p.estimate),
            "x-routefit-actions": p.fitted.report.actions(),
        }
        if p.held is not None:
            headers.update(rate_limit_headers(p.held.windows))
        return headers

    # -- endpoints -------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        route = "-"
        p: Prepared | None = None
        try:
            p = await self.prepare(request)
            route = p.rc.route.alias
            reserve = output_reserve(
                p.rc.route.max_output_tokens, p.policy, p.request.max_output_tokens
            )
            p.held = await self.budgets.reserve(p.team, p.rc, p.estimate, reserve)
            self._count_actions(p)
            headers = self.headers(p)
            self.metrics.overhead.observe(time.perf_counter() - p.started)
            if p.request.body.get("stream"):
                return await self._stream(p, headers)
            sent = time.perf_counter()
            completion = await _from_upstream(self.upstreams.complete(p.rc.upstream, p.fitted.body))
            self.metrics.upstream_latency.labels(route).observe(time.perf_counter() - sent)
            self.on_usage(p, completion.usage)
            self.metrics.requests.labels(route, "200").inc()
            settle = None
            if p.held is not None and completion.usage is not None:
                # Settled after the response is sent: the client does not wait for the store.
                settle = BackgroundTask(self.budgets.settle, p.held, completion.usage, False)
            return Response(
                completion.body, headers=headers, media_type="application/json", background=settle
            )
        except ProxyError as err:
            if p is not None:
                await self.budgets.settle(p.held, None, released=True)
            return self._error(route, err)
        except Exception:
            log.exception("internal error on %s", route)
            if p is not None:
                await self.budgets.settle(p.held, None, released=True)
            return self._error(route, ProxyError(500, "routefit internal error", code="internal"))

    async def _stream(self, p: Prepared, headers: dict[str, str]) -> Response:
        options = p.request.body.get("stream_options")
        wants_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        sent = time.perf_counter()
        stream = await _from_upstream(
            self.upstreams.stream(p.rc.upstream, p.fitted.body, wants_usage)
        )
        self.metrics.upstream_latency.labels(p.rc.route.alias).observe(time.perf_counter() - sent)

        async def done(s: UpstreamStream, disconnected: bool) -> None:
            status = "200" if s.completed else ("499" if disconnected else "502")
            self.metrics.requests.labels(p.rc.route.alias, status).inc()
            if not s.completed:
                self.metrics.errors.labels("disconnect" if disconnected else "upstream").inc()
                await self.budgets.settle(p.held, None, released=True)
            self.on_usage(p, s.usage)
            if s.usage is not None:
                await self.budgets.settle(p.held, s.usage, released=False)

        return SSEResponse(stream, headers, done)

    async def fit_only(self, request: Request) -> Response:
        """POST /routefit/fit: the fitted request and its report; nothing is forwarded."""
        try:
            p = await self.prepare(request)
        except ProxyError as err:
            return error_response(err)
        except Exception:
            log.exception("internal error on /routefit/fit")
            return error_response(ProxyError(500, "routefit internal error", code="internal"))
        payload = {"request": p.fitted.body, "report": p.fitted.report.as_dict()}
        return Response(
            orjson.dumps(payload), headers=self.headers(p), media_type="application/json"
        )

    # -- after the provider answered -------------------------------------------------------

    def on_usage(self, p: Prepared, usage: Usage | None) -> None:
        """Provider usage into metrics and calibration (queued; never waits for the store).

        No usage (a provider that omits it): nothing is learnt, and the budget reservation is
        not settled, so it stays charged as reserved — the conservative reading of "served,
        cost unknown"."""
        if usage is None or usage.prompt_tokens <= 0:
            return
        route = p.rc.route.alias
        self.metrics.estimated_tokens.labels(route).inc(p.estimate)
        self.metrics.actual_tokens.labels(route).inc(usage.prompt_tokens)
        error = (p.estimate - usage.prompt_tokens) / usage.prompt_tokens
        self.metrics.estimate_error.labels(route).observe(error)
        self.calibrator.observe(
            route,
            p.fitted.pressure,
            p.keys,
            p.estimate,
            p.anchored,
            usage.prompt_tokens,
            usage.cached_tokens,
        )

    def _count_actions(self, p: Prepared) -> None:
        r = p.fitted.report
        route = p.rc.route.alias
        for action, count, tokens in (
            ("capped", r.capped, r.capped_tokens),
            ("offloaded_images", r.offloaded_images, r.offloaded_tokens),
            ("elided_messages", r.elided_messages, r.elided_tokens),
        ):
            if count:
                self.metrics.fit_actions.labels(route, action).inc(count)
                self.metrics.fit_tokens_removed.labels(route, action).inc(tokens)

    def _error(self, route: str, err: ProxyError) -> Response:
        self.metrics.requests.labels(route, str(err.status)).inc()
        self.metrics.errors.labels(_kind(err)).inc()
        return error_response(err)


def _kind(err: ProxyError) -> str:
    """The ``kind`` label of routefit_errors_total."""
    if err.origin == "upstream":
        return "upstream"
    if err.code == "context_length_exceeded":
        return "fit"
    if err.code in ("rate_limit_exceeded", "store_unavailable"):
        return "budget"
    return "internal" if err.status >= 500 else "client"


async def _from_upstream(call: Awaitable[T]) -> T:
    """Await a transport call, marking its errors as the upstream's."""
    try:
        return await call
    except ProxyError as err:
        err.origin = "upstream"
        raise
