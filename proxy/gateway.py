"""One request's path, the same for every client wire:
intake (``proxy.intake``: read, authenticate, parse, route, permit) → estimate
(``proxy.estimate``: price and fit, anchor) → budget → forward (transport) → answer in the
client's wire → usage hook.

The estimate is the estimator's: the gateway holds the current ``Estimate`` of each request (in
its ``Flight``, beside the budget it holds), replaces it when exact figures or a refit give a new
one, and only reserves, forwards and answers.

What every wire would otherwise repeat is here, once: a client's mistake or a refusal as the
wire's error body (``reply_error``), how a stream ends when it cannot end normally (``_ended``:
the wire supplies only its error event's shape), and the count endpoint (``Gateway.count``).

Everything before forwarding is routefit's own overhead and is measured as such. What the provider
says afterwards flows back through ``Estimator.learn`` (metrics and calibration, no I/O) and the
budget settlement, which runs after the response has been sent: the client never waits for the
store on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

import anyio
import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from pricing.messages import ChatRequest, RequestError
from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from proxy import router
from proxy.budgets import Budgets, Held, rate_limit_headers
from proxy.calibrator import Calibrator
from proxy.config import Config, RouteConfig, Upstream
from proxy.disconnect import CLIENT_CLOSED, until_disconnect
from proxy.errors import ProxyError
from proxy.estimate import Estimate, Estimator, Job
from proxy.exchange import (
    CHAT,
    RESPONSES,
    UNREADABLE,
    Completion,
    EventStream,
    Outbound,
    StreamBroken,
    Transient,
    as_completion,
    as_stream,
    unreadable,
)
from proxy.exchange.sse import event_data, event_name, is_done
from proxy.fairness import COUNT_THREAD_ABOVE, Fairness
from proxy.fetch import ImageSizer
from proxy.inline import Client, inline_images
from proxy.intake import Admitted, Intake, Session, query_of
from proxy.metrics import Metrics
from proxy.overflow import is_overflow, provider_count
from proxy.provider_keys import ProviderKeys
from proxy.providers import Adapter, Leg, ProviderTable
from proxy.records import Records, Ticket
from proxy.routing import Attempts, Routing, client_deadline
from proxy.streaming import SSEResponse
from proxy.teams import Team, TeamDirectory
from proxy.tracing import provider_traceparent, traces_from_env
from proxy.transports.provider_errors import Scrubbed, keepalive, redact, stream_error
from proxy.usage import Usage
from proxy.wires import Outcome, Wire
from proxy.wires.base import (
    CHAT_CAPS,
    Answer,
    Counting,
    StreamFailed,
    call_objects,
    client_terms,
    delta_fields,
    renamed_cap,
    room_capped,
)
from strategies.fit import Fit, FitReport

__all__ = ["Gateway", "reply_error"]

log = logging.getLogger("routefit")
T = TypeVar("T")

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


@dataclass(slots=True)
class Flight:
    """One request on its way through the gateway: its current estimate (a value, replaced when
    ``Estimator.exact`` or ``Estimator.refit`` gives a new one) and what the gateway itself holds
    for it."""

    estimate: Estimate
    #: Its request-log record under way (``proxy.records``).
    ticket: Ticket
    held: Held | None = None
    #: The request went to the provider (at least once): from then on its prompt is billed
    #: there, whatever happens to the answer.
    forwarded: bool = False
    #: The route's upstream with the key this request must carry (``ProviderKeys``).
    upstream: Upstream | None = None
    #: The request's attempts over its alias's deployments (``proxy.routing``).
    attempts: Attempts | None = None

    @property
    def sent_upstream(self) -> Upstream:
        """The upstream the request goes to, with the key it carries (whose every trace the
        provider's words are scrubbed of before a client reads them)."""
        return self.upstream or self.rc.upstream

    @property
    def own_key(self) -> bool:
        """The request carries the client's own provider key (a forward_client_key route)."""
        return self.upstream is not None and self.upstream.api_key != self.rc.upstream.api_key

    @property
    def job(self) -> Job:
        return self.estimate.job

    @property
    def wire(self) -> Wire:
        return self.estimate.wire

    @property
    def rc(self) -> RouteConfig:
        return self.estimate.rc

    @property
    def request(self) -> ChatRequest:
        return self.estimate.request

    @property
    def team(self) -> Team | None:
        return self.estimate.team

    @property
    def started(self) -> float:
        return self.estimate.started

    @property
    def fitted(self) -> Fit:
        return self.estimate.fitted


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
        limits = config.settings.limits
        #: Per-caller pricing threads and count/dry-run rate (``proxy.fairness``).
        self.fairness = Fairness(limits.pricing_threads_per_team, limits.count_requests_per_minute)
        self.intake = Intake(config, self.teams, self.fairness)
        self.estimator = Estimator(config, calibrator, sizer, metrics, self.fairness)
        #: Which deployment each attempt goes to, and their shared health (``proxy.routing``).
        self.routing = Routing(config, budgets.store, metrics)
        #: The request log: one record per request to its sinks (``proxy.records``).
        self.records = Records(config.settings.request_log, budgets.store, self.teams)
        self.records.private = self.routing.hides_deployment
        traced = traces_from_env({a: rc.route.provider for a, rc in config.routes.items()})
        if traced is not None:
            self.records.add(*traced)
            self.records.traced = True

    def leg(self, rc: RouteConfig, wire: Wire) -> Leg:
        """The deployment, provider wire and transport for this route and client wire: one
        lookup in the provider table (its paths were chosen at start-up)."""
        return self.providers.leg(rc.deployment_id, wire.name)

    def headers(
        self, p: Estimate, held: Held | None = None, attempts: Attempts | None = None
    ) -> dict[str, str]:
        headers = {
            "x-routefit-route": p.rc.route.alias,
            "x-routefit-budget": str(p.fitted.report.budget),
            "x-routefit-prompt-tokens": str(p.tokens),
            "x-routefit-prompt-tokens-kind": p.kind,
            "x-routefit-actions": p.fitted.report.actions.header(),
        }
        output = p.fitted.report.output
        if output is not None and output.lowered:
            # the client's output cap and the one sent: clamped to the route's output limit,
            # or shrunk to the room the prompt leaves (docs/fitting.md, "Output limits")
            headers["x-routefit-output-clamped"] = output.describe()
        if held is not None:
            headers.update(rate_limit_headers(held.windows))
        if attempts is not None:
            headers.update(attempts.headers())
        return headers

    # -- serving ---------------------------------------------------------------------------

    async def serve(self, request: Request, wire: Wire, session: Session | None = None) -> Response:
        """The whole path for one request in ``wire``; every failure in the wire's shape.
        ``session``: a stateful API's (Responses' stored conversation), resolved in the intake
        and told of a 200 answer before it goes out."""
        response = await self._serve(request, wire, session)
        if session is not None and response.status_code == 200:
            return await session.answered(response)
        return response

    async def _serve(self, request: Request, wire: Wire, session: Session | None) -> Response:
        route = "-"
        a: Admitted | None = None
        p: Flight | None = None
        attempts: Attempts | None = None
        t = self.records.ticket(request, wire, "serve")
        try:
            a = await self.intake.admit(request, wire, session)
            t.admitted(a.rc, a.team)
            route = a.rc.route.alias  # a refusal while pricing (an overflow) counts on its route
            deadline = client_deadline(request.headers, a.started)
            attempts = await self.routing.start(a.rc, a.team, a.size // 4, deadline)
            failure: ProxyError | None = None  # the last provider failure
            refusal: ProxyError | None = None  # the first deployment's refusal to fit it
            while True:
                try:
                    p = await self._prepared(a, attempts, t, request)
                    attempts = p.attempts or attempts  # a context-window fallback's
                except _Unfit as unfit:
                    # this deployment cannot take the request (its window, image rule...): the
                    # next one; else a provider's failure stands, or the first refusal
                    refusal = refusal or unfit.err
                    if attempts.unfit(unfit.err):
                        continue
                    raise (failure or refusal) from None
                try:
                    return await self._forward(p, request)
                except ProxyError as failed:
                    if failed.origin != "upstream":
                        raise
                    failure = failed
                    try:
                        again = await attempts.failed(failed, p.own_key, request.receive)
                    except ProxyError:
                        # the client left (or the drain cut) during the backoff: no attempt
                        # more, and the failed one settled as any failed attempt is (below),
                        # by its own failure, not as one the client left
                        await self._unanswered(p, failed)
                        raise
                    if not again:
                        raise
                # another attempt, on a deployment priced and fitted for it: this one is
                # settled as any request without an answer — released when the provider
                # refused it or never had it, its prompt charged when the provider had it (a
                # timeout, an answer routefit could not use): the provider bills that prompt
                await self._unanswered(p, failure)
                p = None
        except Exception as exc:
            err = _refusal(exc, route, wire, a)
            if attempts is not None and isinstance(exc, ProxyError):
                err = attempts.explain(err, p is not None and p.own_key, wire.name)
            if p is not None:
                # a failure of routefit's own (not a refusal) after forwarding is billed
                mine = not isinstance(exc, ProxyError | RequestError)
                await self._unanswered(p, None if mine else err)
            response = self._error(wire, route, err)
            if attempts is not None and p is not None:
                response.headers.update(attempts.headers())
            streamed = p is not None and p.wire.streams(p.request)
            e = p.estimate if p is not None else None
            response.background = self.records.later(
                self.records.refused(t, err, e, stream=streamed)
            )
            return response
        except BaseException:  # cancelled: the drain deadline passed
            if p is not None:
                with anyio.CancelScope(shield=True):
                    await self._unanswered(p, None)
            raise

    async def _prepared(
        self, a: Admitted, attempts: Attempts, t: Ticket, request: Request
    ) -> Flight:
        """The request priced, fitted and reserved for the current attempt's deployment, by its
        own route facts (tokenizer, framing, window, image rule, output limit, prices,
        calibration): what is fitted for one deployment is never sent to another."""
        rc = attempts.upstream_timeout(attempts.rc)
        first = attempts.plan.current.number == 1
        try:
            estimate = await self.estimator.estimate(
                a.wire, a.request, rc, a.team, a.who, a.size, a.started, work=a.work
            )
        except ProxyError as err:
            if not first:
                raise _Unfit(err) from None
            try:  # held by a context-window fallback, else by another deployment of the alias
                estimate, attempts = await self._window(a, attempts, None, err)
            except ProxyError as refused:
                raise _Unfit(refused) from None
        else:
            if first:
                estimate, attempts = await self._window(a, attempts, estimate, None)
        p = Flight(estimate, t, attempts=attempts)
        if first:
            t.phase("fit", t.started)
        try:
            # Google's clients may send their key as ``?key=`` (the Gemini wire's own place)
            query = query_of(request) if a.wire.keys.query else None
            p.upstream = self.keys.upstream(p.rc, request.headers, query)
        except ProxyError as err:
            if err.code != "provider_key_missing":
                raise
            # routefit holds no key for this deployment: the alias's next one may have its own
            raise _Unfit(err) from None
        if self.on_fit is not None:
            self.on_fit(p.fitted.report)
        reserving = time.perf_counter()
        await self._reserve(p)
        if first:
            t.phase("budget", reserving)
            self.metrics.overhead.observe(time.perf_counter() - p.started)
        self._count_actions(p)
        return p

    async def _window(
        self, a: Admitted, attempts: Attempts, chosen: Estimate | None, refused: ProxyError | None
    ) -> tuple[Estimate, Attempts]:
        """A context-window fallback decided (``router.choose_window``): when the chosen
        deployment would cut the conversation (or cannot hold it at all: ``refused``) and the
        alias has ``context_window_fallbacks`` the team may use, the request is priced for each
        of those aliases' first deployment, by its own route facts, and goes where the route's
        ``context_fallback`` says — the larger window (``keep_more``) or, only when cheaper as
        sent, the cut (``pay_less``); a request the chosen deployment refuses goes to the one
        holding most. The answer says which: ``x-routefit-context`` fits / kept / cut."""
        policy = attempts.plan.policy
        names = [
            n
            for n in router.wider(attempts.alias, policy)
            if (a.team is None or a.team.may_use(n)) and self.config.route(n) is not None
        ]
        if not names:
            if refused is not None:
                raise refused
            assert chosen is not None
            return chosen, attempts
        if chosen is not None and chosen.sampled:
            # a guess is no measure of what this window would cut: the count decides (only on
            # aliases with fallbacks to weigh; the others forward while they are counted)
            chosen, _ = await self.estimator.confirmed(chosen)
        here = _candidate(attempts.rc, chosen)
        if chosen is not None and here.kept >= 1.0:
            attempts.context = "fits"
            return chosen, attempts
        options: list[tuple[router.Candidate, Attempts, Estimate]] = []
        for name in names:
            other = await self.routing.start(
                self.config.routes[name], a.team, a.size // 4, attempts.deadline
            )
            rc = other.upstream_timeout(other.rc)
            try:
                e = await self.estimator.estimate(
                    a.wire, a.request, rc, a.team, a.who, a.size, a.started, work=a.work
                )
            except ProxyError:
                continue  # it cannot hold it either
            options.append((_candidate(other.rc, e), other, e))
        choice = attempts.rc.context_fallback if chosen is not None else "keep_more"
        pick, word = router.choose_window(here, [o[0] for o in options], choice)
        log.info(
            "routing %s: the conversation (%d tokens) %s on %s (budget %d); context_fallback "
            "%s: %s %s",
            attempts.alias,
            here.tokens,
            "is refused" if chosen is None else "would be cut",
            here.id,
            here.budget,
            choice,
            word,
            pick.id,
        )
        if word != "kept":
            if refused is not None:
                raise refused
            assert chosen is not None
            attempts.context = word
            return chosen, attempts
        _, other, e = next(o for o in options if o[0] is pick)
        other.context = "kept"
        return e, other

    async def _unanswered(self, p: Flight, err: ProxyError | None) -> None:
        """Settle a request that ends without an answer: released when the provider never had
        it or refused it (a refusal is not billed); charged its prompt when it had been
        forwarded and then the client left, the drain cut it, routefit failed, or the provider
        stopped answering (the provider bills a prompt it received)."""
        billed = p.forwarded and (
            err is None or (not isinstance(err, Transient) and err.code in _BILLED)
        )
        usage = Usage(p.estimate.tokens, 0) if billed else None
        await self.budgets.settle(p.held, usage, released=usage is None)

    async def _reserve(self, p: Flight) -> None:
        """Hold the team's budget for the prompt as estimated and the whole output reservation."""
        e = p.estimate
        p.held = await self.budgets.reserve(e.team, e.rc, e.tokens, e.reserved_output)

    async def _forward(self, p: Flight, request: Request) -> Response:
        leg = self.leg(p.rc, p.wire)
        route = p.rc.route.alias
        sent = time.perf_counter()
        if p.attempts is not None:
            p.attempts.began(p.estimate.tokens)
        if p.wire.streams(p.request):
            # nothing reaches the client before the provider's first event: a stream that
            # breaks before it is another attempt's to answer
            try:
                events = as_stream(await self._send(p, leg, request))
            except ProxyError as err:
                _failed_attempt(p, sent, err)
                raise
            self._answered(p, sent)
            try:
                headers = await self._told(p)
            except BaseException:
                await events.aclose()
                raise
            return self._relay(p, leg, events, headers)
        try:
            completion = as_completion(await self._send(p, leg, request))
        except ProxyError as err:
            _failed_attempt(p, sent, err)
            raise
        self._answered(p, sent)
        # a big answer is read (translated, its usage found) off the loop, as a big body is
        size = len(completion.body)
        answer = await self.fairness.run(p.job.who, size, _read_answer, p, completion, leg)
        self.metrics.requests.labels(route, "200").inc()
        # Learnt and settled after the response is sent: the client waits for neither the
        # calibration nor the store (nothing awaits before ``Estimator.learn`` runs unless a
        # bound-proved request's count is still under way, so a client's next request
        # nearly always finds it learnt).
        text = partial(_answer_text, answer)  # read only when it is needed
        after = BackgroundTask(self._after, p, answer.usage, text)
        headers = await self._told(p)
        return Response(
            answer.body, headers=headers, media_type="application/json", background=after
        )

    def _answered(self, p: Flight, sent: float) -> None:
        self.metrics.upstream_latency.labels(p.rc.route.alias).observe(time.perf_counter() - sent)
        p.ticket.phase("provider", sent, deployment=p.rc.deployment_id)
        if p.attempts is not None:
            p.attempts.answered()

    async def _told(self, p: Flight) -> dict[str, str]:
        """The answer's headers: on the exact figures when a bound-proved request's count, begun
        beside the forward, is already in (the usual case: a provider reads a big prompt more
        slowly than routefit counts it), else on the bound the request was proved and reserved
        on (``x-routefit-prompt-tokens-kind: bound``): the answer waits for the count only when
        the operator asked for ``exact_prompt_headers``."""
        counting = p.estimate.counting
        if counting is not None and (counting.done() or self.config.settings.exact_prompt_headers):
            await self._exact(p)
        return self.headers(p.estimate, p.held, p.attempts)

    async def _exact(self, p: Flight, needed: bool = True) -> bool:
        """The request's exact figures in place of its bound (``Estimator.exact``); False when
        they could not be had, or were only for learning and the pace skipped them (``needed``
        False): nothing is then learnt from it."""
        p.estimate = await self.estimator.exact(p.estimate, needed)
        return not p.estimate.bound

    async def _after(
        self, p: Flight, usage: Usage | None, text: Callable[[], str] | None = None
    ) -> None:
        """Learn from the provider's usage and settle the team's reservation to it — when it is
        credible (``Estimator.credible``). One that is not teaches nothing, and the team is
        charged what routefit reserved: its own prompt estimate plus the output reservation
        (docs/security.md, "Untrusted provider usage"). Then the request's record (status 200:
        a whole answer or a finished stream) goes to the request log's sinks. ``text``: the
        generated text the client was given (read only when the provider's output count is
        not used: ``_settle_answered``)."""
        learnt = await self._exact(p, needed=False)
        streamed = p.wire.streams(p.request)
        record = self.records.served(p.ticket, p.estimate, 200, usage, stream=streamed)
        try:
            await self._settle_answered(p, usage, learnt, text)
        finally:
            await self.records.emit(record)

    async def _settle_answered(
        self, p: Flight, usage: Usage | None, learnt: bool, text: Callable[[], str] | None = None
    ) -> None:
        """Settle an answered request. Its output is never charged below the generated text
        routefit itself handed the client whenever the provider's count is not what is charged
        (none, not credible, or 0 for an answer that has text): otherwise a provider that
        omits or zeroes its output count, or an uncapped answer longer than the reservation,
        would give away the output routefit can prove it relayed. The text is counted only
        then, so an honest answer costs no second count."""
        checked = self.estimator.credible(p.estimate, usage)
        if checked is not None and checked.prompt_tokens <= 0:
            # no provider answers a prompt it read none of: counts of 0 (or null, read as 0)
            # are no count, and settling to them would give the answer away
            log.warning(
                "provider usage on %s states no prompt tokens: charging the reservation",
                p.rc.route.alias,
            )
            checked = None
        generated: int | None = None
        if checked is not None and checked.completion_tokens <= 0:
            generated = await _generated_tokens(p, text)
            if generated > 0:
                # an answer with text was generated: 0 output tokens is no count either
                log.warning(
                    "provider usage on %s states no output tokens for an answer of %d: "
                    "charging the reservation",
                    p.rc.route.alias,
                    generated,
                )
                checked = None
        if checked is not None and learnt:
            self.estimator.learn(p.estimate, checked)
        charged = checked
        if checked is None:
            if generated is None:
                generated = await _generated_tokens(p, text)
            reserved = p.estimate.reserved_output
            if usage is not None or generated > reserved:
                # no usage at all keeps the reservation as reserved, unless the answer
                # relayed is longer than it (an uncapped request: the provider's default cap)
                charged = Usage(p.estimate.tokens, max(reserved, generated))
        if p.held is not None and charged is not None:
            await self.budgets.settle(p.held, charged, False)

    async def _send(self, p: Flight, leg: Leg, request: Request) -> Completion | EventStream:
        """Forward the fitted request; when the provider refuses it for context length and
        states its count, learn that count, refit and forward once more. A stream is primed
        (``_primed``) before any byte goes to the client, so this holds for streams too, and
        for a refusal a provider states in its stream rather than as a status (a Responses
        ``response.failed``, an OpenAI-compatible server's error chunk)."""
        # the deployment as this request reaches it (with the client's own key, on BYOK routes)
        target = leg.deployment.keyed(p.sent_upstream)

        async def attempt() -> Completion | EventStream:
            out = await self._outbound(p, leg, request)
            if p.attempts is not None and p.attempts.retrying:
                out = replace(out, retry=False)  # the router retries, deployment by deployment
            p.forwarded = True
            sent = leg.transport.send(target, out)
            answer = await until_disconnect(request.receive, _from_upstream(sent))
            if not out.stream:
                return answer
            primed = _primed(as_stream(answer), leg.wire, p.sent_upstream.api_key)
            return await until_disconnect(request.receive, primed)

        try:
            if p.estimate.sampled:
                ahead = await self._ahead(p, attempt)
                if ahead is not None:
                    return ahead
                # the count found that the request needed its fit: the fit goes instead
            return await attempt()
        except ProxyError as err:
            # a guess let go unheld (its doubt left it under the budget) that the provider
            # refused for its window: the count it went without judges now, as a held one's does
            unheld = p.estimate.guessed and p.estimate.bound and is_overflow(err)
            if unheld and not await self._confirmed(p):
                return await attempt()  # the fit goes instead
            counted = provider_count(err)
            if counted is None or not await self._refit(p, counted):
                raise
        self.metrics.overflow_refits.labels(p.rc.route.alias).inc()
        return await attempt()

    async def _ahead(
        self, p: Flight, attempt: Callable[[], Awaitable[Completion | EventStream]]
    ) -> Completion | EventStream | None:
        """A request let go on a sample's guess (``Estimate.sampled``), forwarded while it is
        counted: the provider's answer (or refusal) once the count proves that the request goes
        as it was sent (``Estimator.confirmed``); None when it does not (the attempt is
        cancelled if still under way, its answer dropped if not: the exact fit goes instead).
        The answer waits for the count only when the provider answers first, which a provider
        reading a prompt this big seldom does; a refusal for context length from the provider
        is judged the same way, so that what it teaches is about what it was sent."""
        proving = p.estimate.proving
        assert proving is not None
        sending = asyncio.ensure_future(attempt())
        try:
            await asyncio.wait((sending, proving), return_when=asyncio.FIRST_COMPLETED)
            if _gone(sending):
                return await sending  # the client left, the drain cut it: nothing goes again
            if not await self._confirmed(p):
                await _dropped(sending)
                return None
        except BaseException:
            await _dropped(sending)
            raise
        return await sending

    async def _confirmed(self, p: Flight) -> bool:
        """Whether the count lets a sampled request go as it was sent; its figures (a bound the
        count proved, or those of its exact fit) in place of the guess. The team's quota is
        then held to those figures when they are over the guess it was reserved on (always
        when it missed: the fit goes instead): the hold is made anew, the team's 429 when its
        quota cannot hold it — the answer to a request the quota would have refused is not
        relayed, as the answer to one its fit would have cut is not.

        The provider has the prompt that went on the guess by then, and bills it: an attempt
        the count disproved is abandoned and charged that prompt (its estimate before the fit
        that goes instead), as any attempt the provider had is (docs/security.md, "Charging on
        every exit"); a request whose proved figures the quota cannot hold is refused and
        charged the prompt all the same. Released instead, a guess made cheap by a crafted text
        bought a provider call for nothing."""
        guessed = p.estimate.tokens
        p.estimate, confirmed = await self.estimator.confirmed(p.estimate)
        e = p.estimate
        if not confirmed:
            self.metrics.fit_proofs.labels(p.rc.route.alias, "sample_missed").inc()
            self._count_actions(p)  # the fit's, counted as when it is made before forwarding
            if self.on_fit is not None:
                self.on_fit(p.fitted.report)
        if confirmed and e.tokens <= guessed:
            return True
        # the guess's hold goes first, so that it does not count against the new one: released
        # when the same prompt is held anew, settled at the abandoned attempt's prompt if not
        sent = e.tokens if confirmed else e.fitted.report.estimate_before
        abandoned = None if confirmed else Usage(sent, 0)
        await self.budgets.settle(p.held, abandoned, released=confirmed)
        try:
            p.held = await self.budgets.reserve(e.team, p.rc, e.tokens, e.reserved_output)
        except ProxyError:
            if confirmed:
                await self.budgets.charge(e.team, p.rc, Usage(sent, 0))
            raise
        return confirmed

    async def _outbound(self, p: Flight, leg: Leg, request: Request) -> Outbound:
        out = shaped(p.wire, p.request, p.fitted, leg, request.headers)
        t = p.ticket
        told = provider_traceparent(t.traceparent, self.records.traced, t.provider_traceparent)
        t.provider_traceparent = told
        if told is not None:
            out = replace(out, headers={**out.headers, "traceparent": told})
        if leg.adapter is not Adapter.PASSTHROUGH:
            # A translated request's URL images are fetched by routefit's fetcher, under the
            # route's policy (or refused), never by litellm inside this process.
            client = Client(p.wire, p.request)  # a refusal names the part as it wrote it
            inlined = await inline_images(out.body, p.rc, self.sizer, client, p.job.scope or "")
            out = replace(out, body=inlined)
        return out

    async def _refit(self, p: Flight, counted: int) -> bool:
        """The provider counted ``counted`` tokens for what was sent: the request's exact
        figures first, then the estimator learns the count and fits again
        (``Estimator.refit``). False when there is nothing to correct."""
        await self._exact(p)
        refitted = await self.estimator.refit(p.estimate, counted)
        if refitted is None:
            return False
        p.estimate = refitted
        if self.on_fit is not None:
            self.on_fit(refitted.fitted.report)
        return True

    def _relay(self, p: Flight, leg: Leg, events: EventStream, headers: dict[str, str]) -> Response:
        outcome = Outcome()

        async def done(disconnected: bool) -> None:
            status = "200" if outcome.completed else ("499" if disconnected else "502")
            self.metrics.requests.labels(p.rc.route.alias, status).inc()
            if not outcome.completed:
                self.metrics.errors.labels("disconnect" if disconnected else "upstream").inc()
            if outcome.completed:
                await self._after(p, outcome.usage, outcome.relayed_text)
                return
            learnt = await self._exact(p, needed=False)
            # Only what the provider itself reported, and credibly, is learnt from (its prompt
            # count is exact even when the stream did not finish); a guess never becomes a sample.
            seen = self.estimator.credible(p.estimate, outcome.usage)
            if learnt and seen is not None:
                self.estimator.learn(p.estimate, seen)
            code = "client_closed" if disconnected else "upstream_incomplete"
            record = self.records.served(
                p.ticket, p.estimate, int(status), outcome.usage, stream=True, error_code=code
            )
            try:
                await self.budgets.settle(p.held, await self._unfinished(p, seen, outcome), False)
            finally:
                await self.records.emit(record)

        # a provider's error mid-stream reaches the client without the key it may echo
        scrubbed = Scrubbed(events, leg.wire, p.sent_upstream.api_key)
        chunks = p.wire.relay(p.request, scrubbed, leg.wire, outcome)
        return SSEResponse(_ended(p.wire, p.request, chunks, outcome), events, headers, done)

    async def _unfinished(self, p: Flight, seen: Usage | None, outcome: Outcome) -> Usage:
        """What a stream that did not finish (the client left, the provider broke off, the drain
        cut it) is charged: the provider bills the prompt it read and what it generated.

        Prompt: the provider's own count when its stream stated one (Anthropic's
        ``message_start``), else routefit's estimate of the prompt it forwarded. Output: the
        larger of the provider's count so far and the relayed text counted by the route's
        tokenizer (text the provider generated but nobody relayed is not known, and not
        charged). ``seen`` is the provider's usage so far, when credible."""
        estimated = p.estimate.tokens
        prompt = seen.prompt_tokens if seen is not None and seen.prompt_tokens > 0 else estimated
        output = seen.completion_tokens if seen is not None else 0
        text = outcome.relayed_text()
        if text:
            output = max(output, await _count_relayed(p.job.priced, text))
        cached = seen.cached_tokens if seen is not None else 0
        tools = seen.tool_prompt_tokens if seen is not None else 0
        return Usage(prompt, output, min(cached, prompt), tool_prompt_tokens=tools)

    # -- the dry run -----------------------------------------------------------------------

    async def fit_only(
        self, request: Request, wire: Wire, session: Session | None = None
    ) -> Response:
        """The fitted request and its report; nothing is forwarded (nor stored: ``session``
        only resolves what the request continues)."""
        t = self.records.ticket(request, wire, "fit")
        a: Admitted | None = None
        try:
            a = await self.intake.admit(request, wire, session, rated=True)
            p = await self.estimator.estimate(
                wire, a.request, a.rc, a.team, a.who, a.size, a.started, bound=False, work=a.work
            )
        except Exception as exc:
            return self._refused(wire, t, _refusal(exc, "a dry run", wire, a))
        t.phase("fit", t.started)
        leg = self.leg(p.rc, wire)

        def written() -> bytes:
            out = shaped(wire, p.request, p.fitted, leg, {})
            return orjson.dumps({"request": out.body, "report": p.fitted.report.as_dict()})

        try:
            # a big body is written back in one of the caller's pricing threads, as it was
            # priced; what the provider's wire cannot say is the client's 400, as when sent
            body = await self.fairness.run(p.job.who, p.job.size, written)
        except Exception as exc:
            return self._refused(wire, t, _refusal(exc, "a dry run", wire, a))
        done = self.records.later(self.records.served(t, p, 200))
        return Response(
            body, headers=self.headers(p), media_type="application/json", background=done
        )

    # -- the count endpoint ----------------------------------------------------------------

    async def count(
        self, request: Request, wire: Counting, session: Session | None = None
    ) -> Response:
        """A count endpoint (Anthropic's ``count_tokens``): routefit's calibrated estimate of
        the request as the client sent it, on its route — the number the fit acts on —
        answered without the provider, held to the caller's count rate. ``session`` resolves
        the stored conversation a Responses count continues (nothing is stored)."""
        t = self.records.ticket(request, wire, "count")
        a: Admitted | None = None
        try:
            a = await self.intake.admit(request, wire, session, rated=True, counting=True)
            tokens = await self.estimator.count(
                wire, a.request, a.rc, a.team, a.who, a.size, a.work
            )
        except Exception as exc:
            return self._refused(wire, t, _refusal(exc, "a count", wire, a))
        t.phase("fit", t.started)
        headers = {"x-routefit-route": a.rc.route.alias, "x-routefit-prompt-tokens": str(tokens)}
        team = a.team.id if a.team is not None else None
        done = self.records.later(self.records.counted(t, a.rc, team, tokens))
        return Response(
            wire.counted(tokens), headers=headers, media_type="application/json", background=done
        )

    def _refused(self, wire: Wire, t: Ticket, err: ProxyError) -> Response:
        """A count's or a dry run's refusal, its record written after it is sent."""
        response = reply_error(wire, err)
        response.background = self.records.later(self.records.refused(t, err))
        return response

    # -- after the provider answered -------------------------------------------------------

    def _count_actions(self, p: Flight) -> None:
        route = p.rc.route.alias
        for action in p.fitted.report.actions.taken():
            self.metrics.fit_actions.labels(route, action.name).inc(action.count)
            self.metrics.fit_tokens_removed.labels(route, action.name).inc(action.tokens)

    def _error(self, wire: Wire, route: str, err: ProxyError) -> Response:
        self.metrics.requests.labels(route, str(err.status)).inc()
        self.metrics.errors.labels(_kind(err)).inc()
        return reply_error(wire, err)


def shaped(
    wire: Wire, request: ChatRequest, fitted: Fit, leg: Leg, headers: Mapping[str, str]
) -> Outbound:
    """The fitted request as the provider of ``leg`` gets it, but for what only sending does
    (a traceparent; a translated request's URL images fetched and inlined): the dry run shows
    this body, which showed the wire's own before (a Messages client's ``max_tokens`` where a
    gpt-5 route is sent ``max_completion_tokens``, a cap above the room the fit left)."""
    out = wire.outbound(request, fitted, leg.wire, headers)
    if leg.wire == CHAT and wire.name != CHAT:
        # a wire's translation to chat: its cap in the field this provider takes it in
        out = replace(out, body=renamed_cap(out.body, leg.deployment.chat_cap))
    if leg.adapter is not Adapter.PASSTHROUGH:
        # a translated request carries the output cap the fit left room for, not the
        # translation's default
        out = replace(out, body=room_capped(out.body, fitted, CHAT_CAPS))
    return out


def reply_error(wire: Wire, err: ProxyError) -> Response:
    """``err`` as ``wire``'s clients read it: its status and headers, the wire's body."""
    return Response(
        wire.error_body(err),
        status_code=err.status,
        headers=err.headers,
        media_type="application/json",
    )


def _refusal(exc: Exception, where: str, wire: Wire, admitted: Admitted | None) -> ProxyError:
    """What the client is told of a failure: a refusal as it is, a mistake in its body
    (``RequestError``, from the wire's parse or found while pricing) as a 400 naming the field,
    anything else as routefit's internal error (logged). Found once the wire had parsed the
    request (``admitted``), it is pricing's, in chat's terms: the wire names the field as its
    client wrote it (``proxy.wires.base.client_terms``)."""
    if isinstance(exc, ProxyError):
        return exc
    if isinstance(exc, RequestError):
        message, param = exc.message, exc.param
        if admitted is not None:
            message, param = client_terms(wire, admitted.request, message, param)
        return ProxyError(400, message, param=param)
    log.exception("internal error on %s", where)
    return ProxyError(500, "routefit internal error", code="internal")


async def _ended(
    wire: Wire, request: ChatRequest, chunks: AsyncGenerator[bytes, None], outcome: Outcome
) -> AsyncGenerator[bytes, None]:
    """The wire's events as they go out, each one's generated text noted in ``outcome`` first
    (what was generated is billed whether or not the client read it) — and the stream's end:
    one that breaks off, that the provider fails in its own words, or that stops before the
    provider's end marker ends with the wire's error event (``Wire.stream_error``)."""
    message: str | None = None
    outcome.generated = wire.generated
    try:
        async for chunk in chunks:
            outcome.relay(chunk)
            yield chunk
    except StreamBroken as exc:
        message = f"the upstream stream broke off before it was complete: {exc}"
    except StreamFailed as exc:
        message = str(exc)
    except UNREADABLE:  # an event of a shape its wire does not promise (``_read_answer``)
        log.warning("upstream: an event the %s wire cannot read", wire.name, exc_info=True)
        message = "the upstream stream sent an event routefit cannot read"
    finally:
        await chunks.aclose()
    if message is None and not (outcome.completed or outcome.failed):
        message = "the upstream stream ended before it was complete"
    if message is not None:
        # a provider's words (its error, its break) never carry a key to the client
        yield wire.stream_error(request, outcome, redact(message))


def _kind(err: ProxyError) -> str:
    """The ``kind`` label of routefit_errors_total."""
    if err.status == CLIENT_CLOSED:
        return "disconnect"
    if err.origin == "upstream":
        return "upstream"
    if err.code == "context_length_exceeded":
        return "fit"
    if err.code in ("rate_limit_exceeded", "request_over_quota", "store_unavailable"):
        return "budget"
    return "internal" if err.status >= 500 else "client"


async def _generated_tokens(p: Flight, text: Callable[[], str] | None) -> int:
    """The tokens of the generated text the client was given (``text``), by the route's
    tokenizer; 0 when there is none."""
    found = text() if text is not None else ""
    return await _count_relayed(p.job.priced, found) if found else 0


#: Where a whole answer carries generated text, in any client wire: chat's message
#: ``content`` / ``reasoning_content`` (``reasoning`` where vLLM, Groq or OpenRouter answer) /
#: ``refusal`` and tool-call ``arguments``, a custom tool call's ``input`` (chat's and
#: Responses'), Messages', Gemini's and Responses' ``text`` parts, Messages' ``thinking``. Only
#: string values match: a ``content`` list, Responses' ``text`` settings object or a Messages
#: ``tool_use`` ``input`` object does not (``_call_objects`` reads the latter); no answer echoes
#: its prompt.
_ANSWER_TEXT = delta_fields(
    "content", "reasoning_content", "reasoning", "refusal", "arguments", "input", "text",
    "thinking",
)  # fmt: skip


def _answer_text(answer: Answer) -> str:
    """The generated text of a whole answer, read as a stream's relayed events are: its
    strings (``_ANSWER_TEXT``), then each call's arguments that are an object rather than a
    string (``_call_objects``)."""
    outcome = Outcome(generated=_ANSWER_TEXT)
    outcome.relay(answer.body)
    for args in _call_objects(answer.body):
        outcome.note(args)
    return outcome.relayed_text()


def _call_objects(body: bytes) -> list[str]:
    """``call_objects`` of a whole answer; read only when the provider's output count is not
    used."""
    try:
        return call_objects(orjson.loads(body))
    except orjson.JSONDecodeError:
        return []


async def _count_relayed(route: Route, text: str) -> int:
    """``text``'s tokens by the route's tokenizer (off the loop when long), in the team's own
    count-cache scope (an answer derives from its prompt); its UTF-8 bytes, a bound on any
    byte-level tokenizer's count, if the tokenizer fails."""
    try:
        tokenizer = get_tokenizer(route.tokenizer, route.scope)
        if len(text) > COUNT_THREAD_ABOVE:
            return await anyio.to_thread.run_sync(tokenizer.count, text)
        return tokenizer.count(text)
    except Exception:
        log.exception("counting a relayed answer failed; charging its bytes")
        return len(text.encode())


def _candidate(rc: RouteConfig, e: Estimate | None) -> router.Candidate:
    """``rc``'s deployment as a window candidate for the conversation ``e`` priced there (None:
    it refused it: holds none of it)."""
    if e is None:
        return router.Candidate(rc.deployment_id, 0, 1, rc.input_cost_per_token)
    report = e.fitted.report
    return router.Candidate(
        rc.deployment_id, report.budget, report.estimate_before, rc.input_cost_per_token
    )


def _read_answer(p: Flight, completion: Completion, leg: Leg) -> Answer:
    """The provider's whole answer as the client's wire's. Nothing a provider says is taken on
    faith: an answer the wire cannot read (translate, or find its usage in) is the provider's
    malformed answer -- a 502 in the client's shape, billed like one -- not routefit's internal
    error. Logged with its traceback: a translation's own mistake would show the same way.
    Read in a pricing thread over ``THREAD_ABOVE`` bytes (``Gateway._forward``): a provider's
    16 MB answer of 200,000 tool calls, translated for a Messages client, held the event loop
    ~650 ms here; ``max_provider_body_bytes`` lets one be 64 MiB."""
    try:
        return p.wire.answer(p.request, completion, leg.wire)
    except UNREADABLE:
        model = p.rc.route.alias
        log.warning(
            "upstream %s: an answer the %s wire cannot read", model, p.wire.name, exc_info=True
        )
        raise unreadable(model) from None


def _failed_attempt(p: Flight, sent: float, err: ProxyError) -> None:
    """A provider attempt that failed before its answer: a phase of its own in the request's
    record (and a span in its trace), naming its deployment and its error."""
    if err.origin == "upstream":
        code = err.code or str(err.status)
        p.ticket.phase("provider", sent, deployment=p.rc.deployment_id, error=code)


class _Unfit(Exception):
    """An attempt's deployment refused the request before it was sent (it cannot be fitted
    there): ``err`` is that refusal."""

    def __init__(self, err: ProxyError) -> None:
        super().__init__(err.message)
        self.err = err


class _Primed:
    """A provider's event stream whose first events (its opening and its first answer event)
    are already in hand."""

    def __init__(self, head: list[bytes], rest: AsyncIterator[bytes], source: EventStream):
        self._head = head
        self._rest = rest
        self._source = source

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self._head:
            yield event
        async for event in self._rest:
            yield event

    async def aclose(self) -> None:
        await self._source.aclose()


#: The events a Responses stream opens with before the model has read the input: they carry
#: no output, and OpenAI reports an overflow only after them (``response.failed``, code
#: ``context_length_exceeded``, in a 200 stream: docs/simulator.md).
_OPENING = frozenset({"response.created", "response.in_progress", "response.queued"})


def _opening(wire: str, event: bytes) -> bool:
    """Whether ``event`` (in provider ``wire``) only opens a Responses stream: held back with
    the answer until the stream says whether it answers at all."""
    if wire != RESPONSES:
        return False
    name = event_name(event)
    if name is not None:
        return name.decode("utf-8", "replace") in _OPENING
    try:
        obj = orjson.loads(event_data(event) or b"")
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and obj.get("type") in _OPENING


async def _primed(events: EventStream, wire: str, secret: str | None = None) -> EventStream:
    """``events`` (in provider wire ``wire``) with its first answer event read (past keep-alives,
    dropped, and a Responses stream's opening events, held: ``_opening``): a stream that breaks
    (or stalls past the read timeout, or ends) before it, or whose first answer event is none --
    the provider's own error event (``stream_error``: what the same error as a status would be,
    its message scrubbed of ``secret`` and anything key-like) or a bare ``[DONE]`` -- is the
    provider's failure before any byte reached the client, as ``ProxyError`` of the upstream:
    another attempt may answer it, and a refusal is the client's as it would be as a status."""
    rest = aiter(events)
    head: list[bytes] = []
    try:
        first = await anext(rest)
        while (opening := _opening(wire, first)) or keepalive(wire, first):
            if opening:
                head.append(first)  # relayed once the stream is known to answer
            first = await anext(rest)
    except StopAsyncIteration:
        # it ended before any event: no answer, and nothing reached the client either
        await events.aclose()
        raise _no_answer("the upstream stream ended before its first event") from None
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await events.aclose()  # the client left, or the stream broke: drop the connection
        if not isinstance(exc, StreamBroken):
            raise
        timed_out = "timeout" in str(exc).lower()
        err = ProxyError(
            504 if timed_out else 502,
            f"the upstream stream broke off before its first event: {redact(str(exc), secret)}",
            code="upstream_timeout" if timed_out else "upstream_unreachable",
        )
        err.origin = "upstream"
        raise err from None
    failed = stream_error(wire, first, secret)
    if failed is None and is_done(event_data(first)):
        failed = _no_answer("the upstream stream ended ([DONE]) before any answer")
    if failed is not None:
        with anyio.CancelScope(shield=True):
            await events.aclose()
        failed.origin = "upstream"
        raise failed
    return _Primed([*head, first], rest, events)


def _gone(sending: asyncio.Future[Completion | EventStream]) -> bool:
    """Whether an attempt ended for a reason of the client's or routefit's (not the
    provider's)."""
    if not sending.done() or sending.cancelled():
        return False
    err = sending.exception()
    return err is not None and not (isinstance(err, ProxyError) and err.origin == "upstream")


async def _dropped(sending: asyncio.Future[Completion | EventStream]) -> None:
    """An attempt whose answer will not be used: cancelled while under way, its stream closed
    (and a completion read already simply dropped) when it is in."""
    if not sending.done():
        sending.cancel()
        with contextlib.suppress(BaseException):
            await sending
        return
    if sending.cancelled() or sending.exception() is not None:
        return
    answer = sending.result()
    if not isinstance(answer, Completion):
        await answer.aclose()


def _no_answer(message: str) -> ProxyError:
    """A stream that ended before it answered anything: the provider had the prompt (billed)."""
    err = ProxyError(502, message, code="upstream_incomplete")
    err.origin = "upstream"
    return err


async def _from_upstream(call: Awaitable[T]) -> T:
    """Await a transport call, marking its errors as the upstream's."""
    try:
        return await call
    except ProxyError as err:
        err.origin = "upstream"
        raise
