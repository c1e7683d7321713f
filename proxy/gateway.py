"""One request's path, the same for every client wire:
read → parse (wire) → route → auth → price and fit → anchor → budget → forward (transport) →
answer in the client's wire → usage hook.

Everything before forwarding is routefit's own overhead and is measured as such. What the provider
says afterwards flows back through ``Gateway.on_usage`` (metrics and calibration, no I/O) and the
budget settlement, which runs after the response has been sent: the client never waits for the
store on the way out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import anyio
import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from pricing.calibration import Correction, anchored_estimate
from pricing.messages import ChatRequest, RequestError, message_wire
from proxy.body import read_json
from proxy.budgets import Budgets, Held, rate_limit_headers
from proxy.calibrator import Calibrator, prefix_keys
from proxy.config import Config, RouteConfig, Upstream
from proxy.disconnect import CLIENT_CLOSED, until_disconnect
from proxy.errors import ProxyError
from proxy.fetch import ImageSizer, image_urls
from proxy.inline import inline_images
from proxy.metrics import Metrics
from proxy.overflow import provider_count
from proxy.provider_keys import ProviderKeys
from proxy.streaming import SSEResponse
from proxy.teams import Team, TeamDirectory
from proxy.transports import EventStream, Leg, Outbound, Transports
from proxy.usage import Usage
from proxy.wires import Outcome, Wire
from strategies.fit import Fit, FitError, FitReport, fit, fit_bounded
from strategies.policy import FitPolicy, output_reserve

__all__ = ["Gateway", "Prepared"]

log = logging.getLogger("routefit")
T = TypeVar("T")

#: Bodies above this size are priced and fitted in a worker thread so that one huge request
#: does not stall every other request on the event loop (the tokenizers release the GIL).
_THREAD_ABOVE = 512 * 1024
#: Bodies above this size are first proved to fit by a cheap upper bound (``pricing.bounds``);
#: when the proof holds they go at once and are counted exactly in a thread meanwhile, and the
#: answer waits only for the later of the provider and the count, so its headers, calibration
#: and metrics are exact. Smaller ones cost less to count (and are mostly cached) than twice.
_BOUND_ABOVE = 16 * 1024
#: After a provider overflow the correction is scaled to the provider's count and this much
#: more: the refit gets one more attempt, and the part the count does not pin down (what the
#: cut removes and the marker adds) is priced by the scaled weights.
_REFIT_SLACK = 1.02


@dataclass(slots=True)
class Prepared:
    """A request priced and fitted, ready to forward."""

    wire: Wire
    rc: RouteConfig
    team: Team | None
    policy: FitPolicy
    request: ChatRequest
    fitted: Fit
    estimate: int
    started: float
    #: Chained digests of the fitted message prefixes (anchor keys).
    keys: list[bytes]
    anchored: bool = False
    held: Held | None = None
    #: The route's upstream with the key this request must carry (``ProviderKeys``).
    upstream: Upstream | None = None
    #: On the bounded path: the exact fit, counted in a thread while the request is forwarded;
    #: ``fitted`` and ``estimate`` are bounds until ``Gateway.exact`` replaces them.
    exact: asyncio.Future[Fit] | None = None
    #: Image sizes fetched for this request (a refit after a provider overflow reuses them).
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)


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
        self.keys = keys
        #: Told of every fit that is forwarded (the dashboard's recent reports).
        self.on_fit = on_fit
        self.metrics = metrics
        self.transports = transports
        self.calibrator = calibrator
        self.budgets = budgets
        self.sizer = sizer
        self.teams = TeamDirectory(config.teams, config.settings.admin_key_hash)
        self._policies: dict[tuple[str, str], FitPolicy] = {}
        self._legs: dict[tuple[str, str], Leg] = {}

    # -- preparing -------------------------------------------------------------------------

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
            policy = team.fit_policy(rc.policy)
            self._policies[key] = policy
        return policy

    def leg(self, rc: RouteConfig, wire: Wire) -> Leg:
        """The transport and provider wire for this route and client wire (chosen once)."""
        key = (rc.route.alias, wire.name)
        found = self._legs.get(key)
        if found is None:
            found = self._legs[key] = self.transports.leg(rc.upstream, wire.name)
        return found

    async def prepare(self, request: Request, wire: Wire, bound: bool = True) -> Prepared:
        """Priced and fitted; ``bound``: a big request may be proved to fit by an upper bound
        and counted exactly while it is forwarded (the dry run wants the exact figures)."""
        started = time.perf_counter()
        team = self.teams.authenticate(request.headers)
        body, size = await read_json(request, self.config.settings.max_body_bytes)
        try:
            parsed = wire.parse(body)
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
        if rc.image_fetch.enabled:
            sizes = await self.sizer.sizes(image_urls(parsed), rc.image_fetch)
        correction = self.calibrator.correction(rc.route.alias)
        threaded = size > _THREAD_ABOVE
        if bound and size > _BOUND_ABOVE:
            proved = await self._bounded(wire, parsed, rc, policy, correction, sizes)
            if proved is not None:
                self.metrics.fit_proofs.labels(rc.route.alias, "bound").inc()
                fitted, estimate, keys, hit, exact = proved
                return Prepared(
                    wire,
                    rc,
                    team,
                    policy,
                    parsed,
                    fitted,
                    estimate,
                    started,
                    keys,
                    hit,
                    exact=exact,
                    sizes=sizes,
                )
        if bound:
            self.metrics.fit_proofs.labels(rc.route.alias, "count").inc()
        fitted = await self._fit(wire, parsed, rc, policy, correction, sizes, threaded)
        estimate, keys, hit = await self._anchor(rc, fitted)
        if hit and estimate > fitted.report.budget:
            # The provider's own count of the prefix says the calibrated estimate was low: fit
            # once more with the correction scaled by how low it was, and anchor that fit.
            tighter = correction.scaled(estimate / max(1, fitted.estimate))
            fitted = await self._fit(wire, parsed, rc, policy, tighter, sizes, threaded)
            estimate, keys, hit = await self._anchor(rc, fitted)
        return Prepared(
            wire, rc, team, policy, parsed, fitted, estimate, started, keys, hit, sizes=sizes
        )

    async def _bounded(
        self,
        wire: Wire,
        parsed: ChatRequest,
        rc: RouteConfig,
        policy: FitPolicy,
        correction: Correction,
        sizes: dict[str, tuple[int, int]],
    ) -> tuple[Fit, int, list[bytes], bool, asyncio.Future[Fit]] | None:
        """(bounded fit, estimate, keys, anchored, exact fit under way) when the bound — anchored
        on the provider's count of a prefix when one is known — is under the budget; else None.
        A bound is ≥ the exact figure it stands for, so the exact path would not touch the body."""
        try:
            fitted = fit_bounded(parsed, rc.route, policy, correction, sizes)
        except RequestError as exc:
            raise ProxyError(400, exc.message, param=exc.param) from None
        if fitted is None:
            return None
        anchored, keys, hit = await self._anchor(rc, fitted)
        # The bound prices all its text at the dearest class weight; an anchor prices only what
        # follows the anchored prefix. Acting on the larger of the two keeps both promises.
        estimate = max(anchored, fitted.estimate)
        if estimate > fitted.report.budget:
            return None
        exact = asyncio.ensure_future(
            self._fit(wire, parsed, rc, policy, correction, sizes, threaded=True)
        )
        # A request that fails before its usage is learnt leaves this unread: read it anyway.
        exact.add_done_callback(lambda f: f.cancelled() or f.exception())
        return fitted, estimate, keys, hit, exact

    async def exact(self, p: Prepared) -> bool:
        """Replace a bounded request's figures by the exact ones (after forwarding it); False
        when they could not be had (nothing is then learnt from this request)."""
        if p.exact is None:
            return True
        try:
            p.fitted = await p.exact
        except Exception:
            log.exception("exact count of a bounded request failed on %s", p.rc.route.alias)
            return False
        finally:
            p.exact = None
        p.estimate, p.keys, p.anchored = await self._anchor(p.rc, p.fitted)
        return True

    async def _anchor(self, rc: RouteConfig, fitted: Fit) -> tuple[int, list[bytes], bool]:
        """(estimate to act on, prefix keys, anchored?): anchored on the provider's count of a
        prefix when one is known, else the calibrated estimate."""
        alias = rc.route.alias
        wire = [message_wire(m) for m in fitted.messages]
        keys = prefix_keys(alias, rc.upstream.model, fitted.body.get("tools"), wire)
        hit = await self.calibrator.find_anchor(alias, keys)
        if hit is None:
            return fitted.estimate, keys, False
        pr = fitted.pressure
        correction = self.calibrator.correction(alias)
        return anchored_estimate(hit[1], pr, correction), keys, True

    async def _fit(
        self,
        wire: Wire,
        parsed: ChatRequest,
        rc: RouteConfig,
        policy: FitPolicy,
        correction: Correction,
        sizes: dict[str, tuple[int, int]],
        threaded: bool,
    ) -> Fit:
        def run() -> Fit:
            try:
                return fit(parsed, rc.route, policy, correction, sizes)
            except RequestError as exc:  # an image that cannot be priced, found while pricing
                raise ProxyError(400, exc.message, param=exc.param) from None
            except FitError as exc:
                raise wire.overflow(exc) from None

        return await anyio.to_thread.run_sync(run) if threaded else run()

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
            p = await self.prepare(request, wire)
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
                learnt = await self.exact(p)
            except BaseException:
                await events.aclose()
                raise
            return self._relay(p, leg, events, self.headers(p), learnt)
        completion = await self._send(p, leg, request, leg.transport.complete)
        self.metrics.upstream_latency.labels(route).observe(time.perf_counter() - sent)
        # A bounded request's exact count ran while the provider worked: it is (nearly always)
        # in by now, and the answer's headers, calibration and metrics use it.
        learnt = await self.exact(p)
        answer = p.wire.answer(p.request, completion, leg.wire)
        self.metrics.requests.labels(route, "200").inc()
        if learnt:
            self.on_usage(p, answer.usage)
        settle = None
        if p.held is not None and answer.usage is not None:
            # Settled after the response is sent: the client does not wait for the store.
            settle = BackgroundTask(self.budgets.settle, p.held, answer.usage, False)
        return Response(
            answer.body, headers=self.headers(p), media_type="application/json", background=settle
        )

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
        if leg.transport is self.transports.translated:
            # litellm never fetches a URL: routefit's fetcher does, under the route's policy.
            out = replace(out, body=await inline_images(out.body, p.rc, self.sizer))
        return out

    async def _refit(self, p: Prepared, counted: int) -> bool:
        """The provider counted ``counted`` tokens for what was sent: record that as an exact
        sample (and anchors) for the prompt, then fit again with the route's correction scaled
        by how far it was below the count. False when there is nothing to correct."""
        if not await self.exact(p):
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
        fitted = await self._fit(p.wire, p.request, p.rc, p.policy, corrected, p.sizes, False)
        anchored, keys, hit = await self._anchor(p.rc, fitted)
        # The anchors just recorded give the head its true count; the tail is priced by the
        # corrected weights. Acting on the larger of the two keeps both promises.
        estimate = max(anchored, fitted.estimate)
        if estimate > fitted.report.budget:
            tighter = corrected.scaled(estimate / max(1, fitted.estimate))
            fitted = await self._fit(p.wire, p.request, p.rc, p.policy, tighter, p.sizes, False)
            anchored, keys, hit = await self._anchor(p.rc, fitted)
            estimate = max(anchored, fitted.estimate)
        p.fitted, p.estimate, p.keys, p.anchored = fitted, estimate, keys, hit
        if self.on_fit is not None:
            self.on_fit(fitted.report)
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
            p = await self.prepare(request, wire, bound=False)
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
