"""One request's path, the same for every client wire:
prepare (``proxy.preparation``: read, parse, route, team, price and fit, anchor) → budget →
forward (transport) → answer in the client's wire → usage hook.

Everything before forwarding is routefit's own overhead and is measured as such. What the provider
says afterwards flows back through ``Gateway.on_usage`` (metrics and calibration, no I/O) and the
budget settlement, which runs after the response has been sent: the client never waits for the
store on the way out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

import anyio
import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from proxy.budgets import Budgets, rate_limit_headers
from proxy.calibrator import Calibrator
from proxy.config import Config, RouteConfig, Upstream
from proxy.disconnect import CLIENT_CLOSED, until_disconnect
from proxy.errors import ProxyError
from proxy.fetch import ImageSizer
from proxy.inline import inline_images
from proxy.metrics import Metrics
from proxy.overflow import provider_count
from proxy.preparation import Prepared, Preparer
from proxy.provider_keys import ProviderKeys
from proxy.streaming import SSEResponse
from proxy.teams import TeamDirectory
from proxy.transports import EventStream, Leg, Outbound, Transports
from proxy.usage import Usage
from proxy.wires import Outcome, Wire
from strategies.fit import FitReport
from strategies.policy import output_reserve

__all__ = ["Gateway"]

log = logging.getLogger("routefit")
T = TypeVar("T")

#: After a provider overflow the correction is scaled to the provider's count and this much
#: more: the refit gets one more attempt, and the part the count does not pin down (what the
#: cut removes and the marker adds) is priced by the scaled weights.
_REFIT_SLACK = 1.02


class Gateway:
    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        transports: Transports,
        calibrator: Calibrator,
        budgets: Budgets,
        sizer: ImageSizer,
        keys: ProviderKeys,
        on_fit: Callable[[FitReport], None] | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.transports = transports
        self.calibrator = calibrator
        self.budgets = budgets
        self.sizer = sizer
        self.keys = keys
        #: Told of every fit that is forwarded (the dashboard's recent reports).
        self.on_fit = on_fit
        self.teams = TeamDirectory(config.teams, config.settings.admin_key_hash)
        self.preparer = Preparer(config, self.teams, calibrator, sizer, metrics)
        self._legs: dict[tuple[str, str], Leg] = {}

    def leg(self, rc: RouteConfig, wire: Wire) -> Leg:
        """The transport and provider wire for this route and client wire (chosen once)."""
        key = (rc.route.alias, wire.name)
        found = self._legs.get(key)
        if found is None:
            found = self._legs[key] = self.transports.leg(rc.upstream, wire.name)
        return found

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

    # -- serving ---------------------------------------------------------------------------

    async def serve(self, request: Request, wire: Wire) -> Response:
        """The whole path for one request in ``wire``; every failure in the wire's shape."""
        route = "-"
        p: Prepared | None = None
        try:
            p = await self.preparer.prepare(request, wire)
            route = p.rc.route.alias
            p.upstream = self.keys.upstream(p.rc, request.headers)  # provider_key_missing
            if self.on_fit is not None:
                self.on_fit(p.fitted.report)
            # Every completion the request can produce may use the whole output reservation.
            reserve = p.request.choices * output_reserve(
                p.rc.route.max_output_tokens, p.policy, p.request.max_output_tokens
            )
            p.held = await self.budgets.reserve(p.team, p.rc, p.estimate, reserve)
            self._count_actions(p)
            self.metrics.overhead.observe(time.perf_counter() - p.started)
            return await self._forward(p, request)
        except ProxyError as err:
            if p is not None:
                await self.budgets.settle(p.held, None, released=True)
            return self._error(wire, route, err)
        except Exception:
            log.exception("internal error on %s", route)
            if p is not None:
                await self.budgets.settle(p.held, None, released=True)
            error = ProxyError(500, "routefit internal error", code="internal")
            return self._error(wire, route, error)
        except BaseException:  # cancelled: the drain deadline passed; the reservation goes
            if p is not None:
                with anyio.CancelScope(shield=True):
                    await self.budgets.settle(p.held, None, released=True)
            raise

    async def _forward(self, p: Prepared, request: Request) -> Response:
        leg = self.leg(p.rc, p.wire)
        route = p.rc.route.alias
        sent = time.perf_counter()
        if p.wire.streams(p.request):
            events = await self._send(p, leg, request, leg.transport.stream)
            self.metrics.upstream_latency.labels(route).observe(time.perf_counter() - sent)
            try:
                learnt = await self.preparer.exact(p)
            except BaseException:
                await events.aclose()
                raise
            return self._relay(p, leg, events, self.headers(p), learnt)
        completion = await self._send(p, leg, request, leg.transport.complete)
        self.metrics.upstream_latency.labels(route).observe(time.perf_counter() - sent)
        # A bounded request's exact count ran while the provider worked: it is (nearly always)
        # in by now, and the answer's headers, calibration and metrics use it.
        learnt = await self.preparer.exact(p)
        answer = p.wire.answer(p.request, completion, leg.wire)
        self.metrics.requests.labels(route, "200").inc()
        # Learnt and settled after the response is sent: the client waits for neither the
        # calibration nor the store (nothing awaits before ``on_usage`` runs, so a client's
        # next request still finds it learnt).
        after = BackgroundTask(self._after, p, answer.usage, learnt)
        return Response(
            answer.body, headers=self.headers(p), media_type="application/json", background=after
        )

    async def _after(self, p: Prepared, usage: Usage | None, learnt: bool) -> None:
        if learnt:
            self.on_usage(p, usage)
        if p.held is not None and usage is not None:
            await self.budgets.settle(p.held, usage, False)

    async def _send(
        self,
        p: Prepared,
        leg: Leg,
        request: Request,
        call: Callable[[Upstream, Outbound], Awaitable[T]],
    ) -> T:
        """Forward the fitted request; when the provider refuses it for context length and
        states its count, learn that count, refit and forward once more (a stream is opened
        before any byte goes to the client, so this holds for streams too)."""
        upstream = p.upstream or p.rc.upstream

        async def attempt() -> T:
            out = await self._outbound(p, leg, request)
            return await until_disconnect(request.receive, _from_upstream(call(upstream, out)))

        try:
            return await attempt()
        except ProxyError as err:
            counted = provider_count(err)
            if counted is None or not await self._refit(p, counted):
                raise
        self.metrics.overflow_refits.labels(p.rc.route.alias).inc()
        return await attempt()

    async def _outbound(self, p: Prepared, leg: Leg, request: Request) -> Outbound:
        out = p.wire.outbound(p.request, p.fitted, leg.wire, request.headers)
        if leg.transport is not self.transports.direct:
            # A translated request's URL images are fetched by routefit's fetcher, under the
            # route's policy (or refused), never by litellm inside this process.
            out = replace(out, body=await inline_images(out.body, p.rc, self.sizer))
        return out

    async def _refit(self, p: Prepared, counted: int) -> bool:
        """The provider counted ``counted`` tokens for what was sent: record that as an exact
        sample (and anchors) for the prompt, then fit again with the route's correction scaled
        by how far it was below the count. False when there is nothing to correct."""
        if not await self.preparer.exact(p):
            return False
        route = p.rc.route.alias
        if counted <= p.estimate:
            return False  # not an under-estimate of ours: the provider's 400 stands
        self.calibrator.observe(
            route, p.fitted.pressure, p.keys, p.estimate, p.anchored, counted, 0
        )
        self.metrics.estimate_error.labels(route).observe((p.estimate - counted) / counted)
        current = self.calibrator.correction(route)
        priced = current.price_pressure(p.fitted.pressure)
        # Only one more attempt: err a little high rather than be refused twice.
        corrected = current.scaled(max(1.0, counted / max(1, priced)) * _REFIT_SLACK)
        await self.preparer.refit(p, corrected)
        if self.on_fit is not None:
            self.on_fit(p.fitted.report)
        return True

    def _relay(
        self, p: Prepared, leg: Leg, events: EventStream, headers: dict[str, str], learnt: bool
    ) -> Response:
        outcome = Outcome()

        async def done(disconnected: bool) -> None:
            status = "200" if outcome.completed else ("499" if disconnected else "502")
            self.metrics.requests.labels(p.rc.route.alias, status).inc()
            if not outcome.completed:
                self.metrics.errors.labels("disconnect" if disconnected else "upstream").inc()
                await self.budgets.settle(p.held, None, released=True)
            if learnt:
                self.on_usage(p, outcome.usage)
            if outcome.usage is not None:
                await self.budgets.settle(p.held, outcome.usage, released=False)

        chunks = p.wire.relay(p.request, events, leg.wire, outcome)
        return SSEResponse(chunks, events, headers, done)

    # -- the dry run -----------------------------------------------------------------------

    async def fit_only(self, request: Request, wire: Wire) -> Response:
        """The fitted request and its report; nothing is forwarded."""
        try:
            p = await self.preparer.prepare(request, wire, bound=False)
        except ProxyError as err:
            return wire.error_response(err)
        except Exception:
            log.exception("internal error on a dry run")
            return wire.error_response(ProxyError(500, "routefit internal error", code="internal"))
        leg = self.leg(p.rc, wire)
        out = wire.outbound(p.request, p.fitted, leg.wire, {})
        payload = {"request": out.body, "report": p.fitted.report.as_dict()}
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
        self.metrics.cached_tokens.labels(route).inc(usage.cached_tokens)
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
            ("masked", r.masked, r.masked_tokens),
            ("elided_messages", r.elided_messages, r.elided_tokens),
        ):
            if count:
                self.metrics.fit_actions.labels(route, action).inc(count)
                self.metrics.fit_tokens_removed.labels(route, action).inc(tokens)

    def _error(self, wire: Wire, route: str, err: ProxyError) -> Response:
        self.metrics.requests.labels(route, str(err.status)).inc()
        self.metrics.errors.labels(_kind(err)).inc()
        return wire.error_response(err)


def _kind(err: ProxyError) -> str:
    """The ``kind`` label of routefit_errors_total."""
    if err.status == CLIENT_CLOSED:
        return "disconnect"
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
