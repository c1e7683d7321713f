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

from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from proxy.budgets import Budgets, rate_limit_headers
from proxy.calibrator import Calibrator
from proxy.config import Config, RouteConfig
from proxy.disconnect import CLIENT_CLOSED, until_disconnect
from proxy.errors import ProxyError
from proxy.exchange import (
    Completion,
    EventStream,
    Outbound,
    Transient,
    as_completion,
    as_stream,
)
from proxy.fairness import THREAD_ABOVE as _THREAD_ABOVE
from proxy.fetch import ImageSizer
from proxy.inline import inline_images
from proxy.metrics import Metrics
from proxy.overflow import provider_count
from proxy.preparation import Prepared, Preparer
from proxy.provider_keys import ProviderKeys
from proxy.providers import Adapter, Leg, ProviderTable
from proxy.streaming import SSEResponse
from proxy.teams import TeamDirectory
from proxy.usage import Usage, usage_fault, usage_limit
from proxy.wires import Outcome, Wire
from proxy.wires.base import noting_relayed
from strategies.fit import FitReport
from strategies.policy import output_reserve

__all__ = ["Gateway"]

log = logging.getLogger("routefit")
T = TypeVar("T")

#: After a provider overflow the correction is scaled to the provider's count and this much
#: more: the refit gets one more attempt, and the part the count does not pin down (what the
#: cut removes and the marker adds) is priced by the scaled weights.
_REFIT_SLACK = 1.02
#: Failures after forwarding that leave the prompt billed at the provider: the client left,
#: the drain cut the request, the provider stopped answering or sent an answer routefit could
#: not use. An error status of the provider's own (a refusal) is not billed.
_BILLED = frozenset(
    {
        "client_closed",
        "shutting_down",
        "upstream_timeout",
        "upstream_incomplete",
        "upstream_malformed",
        "upstream_too_large",
    }
)


class Gateway:
    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        providers: ProviderTable,
        calibrator: Calibrator,
        budgets: Budgets,
        sizer: ImageSizer,
        keys: ProviderKeys,
        on_fit: Callable[[FitReport], None] | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.providers = providers
        self.calibrator = calibrator
        self.budgets = budgets
        self.sizer = sizer
        self.keys = keys
        #: Told of every fit that is forwarded (the dashboard's recent reports).
        self.on_fit = on_fit
        access = config.settings.access
        self.teams = TeamDirectory(
            config.teams,
            config.settings.admin_key_hash,
            access.master_key_hash,
            auth_required=access.auth_required,
        )
        self.preparer = Preparer(config, self.teams, calibrator, sizer, metrics)
        #: Per-caller pricing threads and count/dry-run rate (``proxy.fairness``).
        self.fairness = self.preparer.fairness

    def leg(self, rc: RouteConfig, wire: Wire) -> Leg:
        """The deployment, provider wire and transport for this route and client wire: one
        lookup in the provider table (its paths were chosen at start-up)."""
        return self.providers.leg(rc.route.alias, wire.name)

    def headers(self, p: Prepared) -> dict[str, str]:
        headers = {
            "x-routefit-route": p.rc.route.alias,
            "x-routefit-budget": str(p.fitted.report.budget),
            "x-routefit-prompt-tokens": str(p.estimate),
            "x-routefit-actions": p.fitted.report.actions(),
        }
        output = p.fitted.report.output
        if output is not None and output.lowered:
            # the client's output cap and the one sent: clamped to the route's output limit,
            # or shrunk to the room the prompt leaves (docs/fitting.md, "Output limits")
            headers["x-routefit-output-clamped"] = output.describe()
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
            p.held = await self.budgets.reserve(p.team, p.rc, p.estimate, _reserve(p))
            self._count_actions(p)
            self.metrics.overhead.observe(time.perf_counter() - p.started)
            return await self._forward(p, request)
        except ProxyError as err:
            if p is not None:
                await self._unanswered(p, err)
            return self._error(wire, route, err)
        except Exception:
            log.exception("internal error on %s", route)
            if p is not None:
                await self._unanswered(p, None)
            error = ProxyError(500, "routefit internal error", code="internal")
            return self._error(wire, route, error)
        except BaseException:  # cancelled: the drain deadline passed
            if p is not None:
                with anyio.CancelScope(shield=True):
                    await self._unanswered(p, None)
            raise

    async def _unanswered(self, p: Prepared, err: ProxyError | None) -> None:
        """Settle a request that ends without an answer: released when the provider never had
        it or refused it (a refusal is not billed); charged its prompt when it had been
        forwarded and then the client left, the drain cut it, routefit failed, or the provider
        stopped answering (the provider bills a prompt it received)."""
        billed = p.forwarded and (
            err is None or (not isinstance(err, Transient) and err.code in _BILLED)
        )
        usage = Usage(p.estimate, 0) if billed else None
        await self.budgets.settle(p.held, usage, released=usage is None)

    async def _forward(self, p: Prepared, request: Request) -> Response:
        leg = self.leg(p.rc, p.wire)
        route = p.rc.route.alias
        sent = time.perf_counter()
        if p.wire.streams(p.request):
            events = as_stream(await self._send(p, leg, request))
            self.metrics.upstream_latency.labels(route).observe(time.perf_counter() - sent)
            try:
                learnt = await self.preparer.exact(p)
            except BaseException:
                await events.aclose()
                raise
            return self._relay(p, leg, events, self.headers(p), learnt)
        completion = as_completion(await self._send(p, leg, request))
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
        """Learn from the provider's usage and settle the team's reservation to it — when it is
        credible (``_credible``). One that is not teaches nothing, and the team is charged what
        routefit reserved: its own prompt estimate plus the output reservation
        (docs/security.md, "Untrusted provider usage")."""
        checked = self._credible(p, usage)
        if checked is not None and learnt:
            self.on_usage(p, checked)
        charged = checked
        if usage is not None and checked is None:
            charged = Usage(p.estimate, _reserve(p))
        if p.held is not None and charged is not None:
            await self.budgets.settle(p.held, charged, False)

    def _credible(self, p: Prepared, usage: Usage | None) -> Usage | None:
        """``usage`` when it is credible (``proxy.usage.usage_fault``); else None, logged and
        counted as a rejected sample."""
        if usage is None:
            return None
        fault = usage_fault(usage, usage_limit(p.rc.route, p.request.choices, _reserve(p)))
        if fault is None:
            return usage
        self._reject(p.rc.route.alias, "usage", fault)
        return None

    def _reject(self, route: str, what: str, why: str) -> None:
        """A provider figure not believed: logged and counted, never learnt from."""
        self.metrics.samples.labels("rejected").inc()
        self.calibrator.rejected += 1
        log.warning("provider %s rejected on %s: %s", what, route, why)

    async def _send(self, p: Prepared, leg: Leg, request: Request) -> Completion | EventStream:
        """Forward the fitted request; when the provider refuses it for context length and
        states its count, learn that count, refit and forward once more (a stream is opened
        before any byte goes to the client, so this holds for streams too)."""
        # the deployment as this request reaches it (with the client's own key, on BYOK routes)
        target = leg.deployment.keyed(p.upstream or p.rc.upstream)

        async def attempt() -> Completion | EventStream:
            out = await self._outbound(p, leg, request)
            p.forwarded = True
            sent = leg.transport.send(target, out)
            return await until_disconnect(request.receive, _from_upstream(sent))

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
        if leg.adapter is not Adapter.PASSTHROUGH:
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
        if counted > 2 * p.rc.route.context_window:
            # An overflow is a prompt a little over the window, or one we misjudged by a fraction
            # of it: a count beyond twice the window is not believed (and not learnt from).
            self._reject(route, "overflow count", f"{counted} tokens")
            return False
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
            if outcome.completed:
                await self._after(p, outcome.usage, learnt)
                return
            # Only what the provider itself reported, and credibly, is learnt from (its prompt
            # count is exact even when the stream did not finish); a guess never becomes a sample.
            seen = self._credible(p, outcome.usage)
            if learnt and seen is not None:
                self.on_usage(p, seen)
            await self.budgets.settle(p.held, await self._unfinished(p, seen, outcome), False)

        chunks = p.wire.relay(p.request, events, leg.wire, outcome)
        chunks = noting_relayed(chunks, outcome, p.wire.name)
        return SSEResponse(chunks, events, headers, done)

    async def _unfinished(self, p: Prepared, seen: Usage | None, outcome: Outcome) -> Usage:
        """What a stream that did not finish (the client left, the provider broke off, the drain
        cut it) is charged: the provider bills the prompt it read and what it generated.

        Prompt: the provider's own count when its stream stated one (Anthropic's
        ``message_start``), else routefit's estimate of the prompt it forwarded. Output: the
        larger of the provider's count so far and the relayed text counted by the route's
        tokenizer (text the provider generated but nobody relayed is not known, and not
        charged). ``seen`` is the provider's usage so far, when credible."""
        prompt = seen.prompt_tokens if seen is not None and seen.prompt_tokens > 0 else p.estimate
        output = seen.completion_tokens if seen is not None else 0
        text = outcome.relayed_text()
        if text:
            output = max(output, await _count_relayed(p.job.priced, text))
        cached = seen.cached_tokens if seen is not None else 0
        return Usage(prompt, output, min(cached, prompt))

    # -- the dry run -----------------------------------------------------------------------

    async def fit_only(self, request: Request, wire: Wire) -> Response:
        """The fitted request and its report; nothing is forwarded."""
        try:
            p = await self.preparer.prepare(request, wire, bound=False, rated=True)
        except ProxyError as err:
            return wire.error_response(err)
        except Exception:
            log.exception("internal error on a dry run")
            return wire.error_response(ProxyError(500, "routefit internal error", code="internal"))
        leg = self.leg(p.rc, wire)

        def written() -> bytes:
            out = wire.outbound(p.request, p.fitted, leg.wire, {})
            return orjson.dumps({"request": out.body, "report": p.fitted.report.as_dict()})

        # a big body is written back in one of the caller's pricing threads, as it was priced
        body = await self.fairness.run(p.job.who, p.job.size, written)
        return Response(body, headers=self.headers(p), media_type="application/json")

    # -- after the provider answered -------------------------------------------------------

    def on_usage(self, p: Prepared, usage: Usage | None) -> None:
        """Provider usage into metrics and calibration (queued; never waits for the store).

        No usage (a provider that omits it): nothing is learnt, and the budget reservation is
        not settled, so it stays charged as reserved — the conservative reading of "served,
        cost unknown"."""
        if usage is None or usage.prompt_tokens <= 0 or usage.invalid:
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


async def _count_relayed(route: Route, text: str) -> int:
    """``text``'s tokens by the route's tokenizer (off the loop when long), in the team's own
    count-cache scope (an answer derives from its prompt); its UTF-8 bytes, a bound on any
    byte-level tokenizer's count, if the tokenizer fails."""
    try:
        tokenizer = get_tokenizer(route.tokenizer, route.scope)
        if len(text) > _THREAD_ABOVE:
            return await anyio.to_thread.run_sync(tokenizer.count, text)
        return tokenizer.count(text)
    except Exception:
        log.exception("counting a relayed answer failed; charging its bytes")
        return len(text.encode())


async def _from_upstream(call: Awaitable[T]) -> T:
    """Await a transport call, marking its errors as the upstream's."""
    try:
        return await call
    except ProxyError as err:
        err.origin = "upstream"
        raise


def _reserve(p: Prepared) -> int:
    """Every completion the request can produce may use the whole output reservation."""
    return p.request.choices * output_reserve(
        p.rc.route.max_output_tokens, p.policy, p.request.max_output_tokens
    )
