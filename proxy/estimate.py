"""The estimate of one request: its price, its fit, and what the provider's figures teach.

``Estimator`` is the one owner: it prices and fits a parsed request, anchors it on the
provider's count of a prefix, swaps in the exact count of a request a bound let go, fits again
after the provider refused for context length and stated its own count, and learns from
credible usage. Its answers are frozen ``Estimate`` values, each replaced by a new one, never
changed: the gateway holds the current one and only reserves, forwards and answers.

Everything before forwarding is routefit's own overhead. Four ways to reach the figures a
request goes on, cheapest first:

* **proved by a bound** (bodies over ``_BOUND_ABOVE``): a cheap upper bound (``pricing.bounds``)
  under the budget lets the request go untouched at once; its exact fit is counted in a thread
  meanwhile and swapped in (``Estimator.exact``) for the answer's headers when it is in by then,
  else after the answer, which never waits for it, for the calibration, the request log and the
  settlement. That count is learning, paced to ``LEARN_SHARE`` of a core (``proxy.pace``): when
  the counts before it have taken their share it is not begun, and the request teaches nothing
  unless it comes to need its figures (the provider refused it for its window). A bound over
  the budget is first tightened by counting the biggest texts in part (``pricing.bounds.Proof``):
  a new prompt whose bytes exceed the budget is proved by counting a fraction of it;
* **guessed from a sample** (bodies over ``COUNTING`` that no bound proves without counting: new
  text whose bytes are over the budget, where a proof is nearly a count): a sample of the texts
  says it fits (``pricing.bounds.Proof.sampled``) and it is forwarded at once. A close call —
  the guess raised by its doubt (``Proof.doubt``: how much its pieces differ) over the budget —
  is counted meanwhile and its answer released only once that count proves it fits
  (``Estimator.confirmed``; the gateway's ``_ahead``); any other goes as a bound-proved request
  does, and should the provider refuse it for its window, the count judges then
  (``Gateway._send``);
* **counted** (every other request): the exact fit, anchored on the provider's own count of a
  prefix when one is known — and fitted once more when that anchor says the estimate was low;
* **refitted** (``Estimator.refit``) after the provider itself refused for context length and
  stated its count: the count is learnt, the correction raised to it, and the request fitted
  again the same way.

A body over ``proxy.fairness.COUNT_THREAD_ABOVE`` is priced, proved and fitted in a worker thread
(hashed too over ``THREAD_ABOVE``), one of a bounded number per caller (``proxy.fairness``): the
event loop serves every other request meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import anyio.to_thread

from pricing.bounds import Proof, TextBounds
from pricing.calibration import Correction, anchored_estimate
from pricing.messages import ChatRequest, Message, message_wire
from pricing.meter import Memo
from pricing.route import Route
from proxy.calibrator import Calibrator, prefix_keys
from proxy.config import Config, RouteConfig
from proxy.fairness import COUNT_THREAD_ABOVE as COUNTING
from proxy.fairness import Fairness, work_size
from proxy.fetch import ImageSizer
from proxy.image_sizes import Sizes, fetched_sizes
from proxy.metrics import Metrics
from proxy.pace import Pace
from proxy.providers import deployment
from proxy.teams import Team
from proxy.usage import Usage, usage_fault, usage_limit
from proxy.wires import Wire
from strategies.fit import Fit, FitError, as_sent, past_proving
from strategies.output import bounded_output, fit_output, sampled_output
from strategies.policy import FitPolicy, output_reserve

__all__ = ["Estimate", "Estimator", "Job"]

log = logging.getLogger("routefit")

#: Bodies above this size are first proved to fit by a cheap upper bound (``pricing.bounds``);
#: when the proof holds they go at once and are counted exactly in a thread meanwhile; an answer
#: that comes before the count goes out on the bound, and the exact figures serve the calibration,
#: the request log and the metrics after it. Smaller ones cost less to count (and are mostly
#: cached) than twice.
_BOUND_ABOVE = 16 * 1024
#: After a provider overflow the correction is scaled to the provider's count and this much
#: more: the refit gets one more attempt, and the part the count does not pin down (what the
#: cut removes and the marker adds) is priced by the scaled weights.
_REFIT_SLACK = 1.02
#: A request let go on a sample's guess is a close call when the guess raised by its doubt
#: (``pricing.bounds.Proof.doubt``: what its pieces' differences say it may be under the count)
#: comes within this share of its budget: its answer is held until the count proves it fits
#: (``Estimate.sampled``). Any other goes as a bound-proved request does. 0: the doubt alone
#: decides (at 1 every guess is held).
CLOSE_CALL = 0.0
#: The most of one core the exact counts of requests a bound or an unheld guess let go may take
#: (``proxy.pace``): no answer waits for them, they serve the calibration, the anchors and the
#: request log, and a provider that answers faster than routefit counts left each to the next
#: request (bench/REPORT.md 1z). One is begun beside the forward only when those before it
#: leave time; the others are begun only if their request comes to need them.
LEARN_SHARE = 0.25

#: (the fit, the prompt tokens to act on, its prefix keys, anchored?)
_Figures = tuple[Fit, int, tuple[bytes, ...], bool]


@dataclass(frozen=True, slots=True)
class Job:
    """What fitting one request needs, whichever way it is fitted."""

    wire: Wire
    request: ChatRequest
    rc: RouteConfig
    policy: FitPolicy
    #: Image sizes fetched for this request (URL images, when the route allows fetching).
    sizes: Sizes
    #: ``rc.route`` as priced for the team (``Route.scope``: its memoised counts are its own)
    #: and the leg (``Route.translated``: ``Estimator.route_priced``).
    priced: Route
    #: The team whose prompt this is (anchors are its own), None without teams.
    scope: str | None = None
    #: Whose pricing threads this request uses (``proxy.fairness.caller``).
    who: str = "-"
    #: The body's decoded size: over ``COUNT_THREAD_ABOVE`` it may be let go on a sample's guess.
    size: int = 0
    #: The size its work is judged by (``size``, or ``proxy.fairness.json_work``'s when more: a
    #: body of many small objects): over ``COUNT_THREAD_ABOVE`` every fit of it runs in a thread.
    work: int = 0
    #: What every fit of it has priced, by object (``pricing.meter.Memo``): a bound's pass
    #: leaves the messages the message memo had for the exact fit after it. One fit at a time
    #: (a proof's, then the exact one's: ``Proof`` is not thread-safe either).
    memo: Memo = field(default_factory=Memo, compare=False)

    def fit(self, correction: Correction) -> Fit:
        """The exact fit; the wire's own refusal when nothing the policy allows fits.

        A refusal needs knowing that the request cannot fit. A route that has not learnt its
        tokenizer prices with a prior meant to err high (``Correction.provisional``): when that
        leaves nothing that fits, the request is fitted at the meter's own count instead, and
        refused on that count only (``FitReport.on_meter``). The provider judges what it lets
        go; when it refuses for context length and states its count, the count is learnt and the
        request fitted again on it (``Estimator.refit``). A learnt route's interval (the weights'
        doubt about a request unlike their samples, ``Correction.for_request``) errs high on
        purpose too, and so does the prior's price of what none of its samples had: when they
        leave nothing that fits, the request is fitted and judged on the weights alone, then
        without that price (``Correction.surer``)."""
        surer: Correction | None = correction
        while surer is not None:
            try:
                fitted = fit_output(
                    self.request, self.priced, self.policy, surer, self.sizes, self.memo
                )
            except FitError as exc:
                refusal, surer = exc, surer.surer()
                continue
            if surer is correction or not correction.provisional:
                return fitted
            return replace(fitted, report=replace(fitted.report, on_meter=True))
        raise self.wire.overflow(refusal) from None

    def bounded(self, correction: Correction, proof: TextBounds) -> Fit | None:
        """The fit its bound proves (``strategies.output.bounded_output``), tightened by
        ``proof``; None when it proves none."""
        args = (self.priced, self.policy, correction, self.sizes, proof, self.memo)
        return bounded_output(self.request, *args)

    def sampled(self, correction: Correction, proof: Proof) -> Fit | None:
        """The fit a sample of its long texts guesses (``strategies.output.sampled_output``)."""
        args = (self.priced, self.policy, correction, self.sizes, proof, self.memo)
        return sampled_output(self.request, *args)

    def guessed(self, correction: Correction, proof: Proof) -> Fit | None:
        """The fit a sample guesses (``sampled``), looked at again while it is a close call
        (``_close``) or no fit: its texts past proving read for their bound (``Proof.reread``:
        a text of two kinds priced by its length doubts more), then a wider sample
        (``Proof.widened``: a few pieces more before the whole count is waited for)."""
        guess = self.sampled(correction, proof)
        if proof.rereadable and (guess is None or _close(guess.estimate, proof, guess)):
            guess = self.bounded(correction, proof.reread())
        if guess is not None and _close(guess.estimate, proof, guess):
            guess = self.bounded(correction, proof.widened())
        return guess


@dataclass(frozen=True, slots=True)
class _Later:
    """What a deferred exact count needs besides the request (``Estimate.job``): the correction
    it was let go on, and the proof whose pieces counted so far the count goes on from."""

    correction: Correction
    proof: Proof


@dataclass(frozen=True, slots=True)
class Estimate:
    """A request priced and fitted: the figures it goes on. Never changed: exact figures and a
    refit are new values (``Estimator.exact``, ``Estimator.refit``)."""

    job: Job
    team: Team | None
    #: ``time.perf_counter()`` when the request arrived (routefit's overhead counts from it).
    started: float
    fitted: Fit
    #: The prompt tokens to act on: anchored on the provider's count of a prefix the same team
    #: sent when one is known, else the calibrated estimate.
    tokens: int
    #: Chained digests of the fitted message prefixes (anchor keys).
    keys: tuple[bytes, ...]
    anchored: bool = False
    #: ``fitted`` and ``tokens`` are an upper bound (the bounded path) until ``Estimator.exact``
    #: answers the exact ones; a bound whose exact count failed stays one, and teaches nothing.
    bound: bool = False
    #: On the bounded path: the exact fit, counted in a thread while the request is forwarded.
    counting: asyncio.Future[Fit] | None = None
    #: Let go on a sample's guess, not a bound (``Estimator._guessed``): the bounded fit on the
    #: texts' exact counts (None: they prove nothing), counted in the thread that then counts
    #: the exact fit; no answer to the request is released before it (``Estimator.confirmed``).
    proving: asyncio.Future[Fit | None] | None = None
    #: On the bounded path, the exact fit the learning counts' pace did not begin (``Pace``,
    #: ``LEARN_SHARE``): begun only when the request needs its exact figures (the provider
    #: refused it for its window, ``Estimator.exact``); else it teaches nothing.
    later: _Later | None = None
    #: Let go on a sample's guess (held for its count or not): what ``tokens`` is until then.
    guessed: bool = False

    @property
    def sampled(self) -> bool:
        """Let go on a sample's guess, its answer held until a count confirms it."""
        return self.proving is not None

    @property
    def kind(self) -> str:
        """What ``tokens`` is: ``bound`` (an upper bound of the calibrated estimate, which the
        request was proved and reserved on), ``sampled`` (a sample's guess, until the exact
        count confirms it), ``anchored``, ``counted`` or ``meter`` (the meter's own count: the
        route's prior fitted nothing, ``Job.fit``)."""
        if self.sampled or (self.bound and self.guessed):
            return "sampled"
        if self.bound:
            return "bound"
        if self.anchored:
            return "anchored"
        return "meter" if self.fitted.report.on_meter else "counted"

    @property
    def wire(self) -> Wire:
        return self.job.wire

    @property
    def rc(self) -> RouteConfig:
        return self.job.rc

    @property
    def request(self) -> ChatRequest:
        return self.job.request

    @property
    def policy(self) -> FitPolicy:
        return self.job.policy

    @property
    def reserved_output(self) -> int:
        """Every completion the request can produce may use the whole output reservation."""
        request, route = self.job.request, self.job.rc.route
        return request.choices * output_reserve(
            route.max_output_tokens, self.job.policy, request.max_output_tokens
        )


class Estimator:
    """Prices, fits, re-counts, refits and learns; the only writer of the calibration's
    samples from the request path (``Calibrator.observe``)."""

    def __init__(
        self,
        config: Config,
        calibrator: Calibrator,
        sizer: ImageSizer,
        metrics: Metrics,
        fairness: Fairness | None = None,
    ) -> None:
        self.calibrator = calibrator
        self.sizer = sizer
        self.metrics = metrics
        limits = config.settings.limits
        self.fairness = fairness or Fairness(
            limits.pricing_threads_per_team, limits.count_requests_per_minute
        )
        self.exact_headers = config.settings.exact_prompt_headers
        #: Where a sample reads in a text, the process's secret (``pricing.bounds.Proof``).
        self.sample_key = secrets.token_bytes(16)
        #: Paces the exact counts no request waits for (``exact``).
        self.pace = Pace(LEARN_SHARE)
        self._policies: dict[tuple[str, str], FitPolicy] = {}
        #: (team, deployment, client wire) → (the configured route, that route as priced for
        #: the team's requests in that wire: ``route_priced``).
        self._routes: dict[tuple[str | None, str, str], tuple[Route, Route]] = {}

    def policy_for(self, rc: RouteConfig, team: Team | None) -> FitPolicy:
        """The route's fit policy with the team's overrides and per-request prompt quota."""
        if team is None:
            return rc.policy
        key = (team.id, rc.calibration_key)
        policy = self._policies.get(key)
        if policy is None:
            policy = self._policies[key] = team.fit_policy(rc.policy)
        return policy

    def route_priced(self, rc: RouteConfig, team: Team | None, wire: str) -> Route:
        """The route as priced for ``team``'s requests in client wire ``wire``: scoped to the
        team (``Route.scope``), so the memo caches of prompt-derived facts (token counts, image
        probes) serve it only what it sent itself (without teams, every caller is one tenant);
        and for the leg they go on (``Route.translated``), known here from the deployment as
        the gateway will take it (``proxy.providers.Deployment.translates``). The estimate
        prices the request as that leg sends it: a translated leg writes a message's lead
        (``Message.lead``) before its text, a native one carries the field it stands for, and
        a price that left the lead out let the fit send more than it priced."""
        key = (team.id if team is not None else None, rc.deployment_id, wire)
        found = self._routes.get(key)
        if found is None or found[0] is not rc.route:
            priced = rc.route
            if team is not None:
                priced = replace(priced, scope=team.id.encode())
            if deployment(rc.deployment_id, rc.upstream).translates(wire):
                priced = replace(priced, translated=True)
            found = self._routes[key] = (rc.route, priced)
        return found[1]

    # -- the figures a request goes on -----------------------------------------------------

    async def estimate(
        self,
        wire: Wire,
        request: ChatRequest,
        rc: RouteConfig,
        team: Team | None,
        who: str,
        size: int,
        started: float,
        *,
        bound: bool = True,
        work: int = 0,
    ) -> Estimate:
        """``request`` (parsed from ``wire``, routed to ``rc``, its team's to use) priced and
        fitted; ``wire.overflow`` when nothing fits. ``who``: whose pricing threads it uses;
        ``size``: its decoded body's; ``started``: its arrival. ``bound``: a big request may be
        proved to fit by an upper bound and counted exactly while it is forwarded (the dry run
        wants the exact figures). ``work``: the size its work is judged by when more than
        ``size`` (``proxy.fairness.json_work``: a body of many small objects), which decides
        what runs in a thread; whether a bound is tried goes by ``size``."""
        size = work_size(request, size)  # a PDF or a recording: over the read threshold
        work = max(size, work)
        try:
            return await self._estimate(wire, request, rc, team, who, size, work, started, bound)
        finally:
            self.metrics.sync_memo_counters()

    async def count(
        self,
        wire: Wire,
        request: ChatRequest,
        rc: RouteConfig,
        team: Team | None,
        who: str,
        size: int,
        work: int = 0,
    ) -> int:
        """The calibrated estimate of the request as the client sent it, unfitted: what a count
        endpoint answers (in one of the caller's pricing threads when the body is big: its
        ``work``, ``proxy.fairness.json_work``, when more than its ``size``). Anchored
        like the fit's (``_anchor``) on the provider's count of a prefix the team sent: a count
        that ignored it answered the prior's price of a session the fit already priced at the
        provider's own count (832 tokens against 559 on a new route), and a client compacting
        on it (Claude Code) cut far too early."""
        priced = self.route_priced(rc, team, wire.name)
        size = work_size(request, max(size, work))
        scope = team.id if team is not None else None
        # its URL images sized as the fit of the same request sizes them (``proxy.image_sizes``)
        sizes = await fetched_sizes(self.sizer, rc, wire.name, request, scope)
        # priced and keyed as the fit prices and keys it before any cut: images the route
        # cannot take as the placeholders it sends (``strategies.fit.as_sent``)
        policy = self.policy_for(rc, team)
        messages, pressure = await self.fairness.run(
            who, size, as_sent, request, priced, policy, sizes, above=COUNTING
        )
        correction = self.calibrator.correction(rc.calibration_key)
        keys = await self.fairness.run(who, size, _message_keys, rc, messages, request.body, scope)
        hit = await self.calibrator.find_anchor(rc.calibration_key, keys)
        if hit is None:
            return correction.price_request(pressure)
        return anchored_estimate(hit[1], pressure, correction)

    async def _estimate(
        self,
        wire: Wire,
        request: ChatRequest,
        rc: RouteConfig,
        team: Team | None,
        who: str,
        size: int,
        work: int,
        started: float,
        bound: bool,
    ) -> Estimate:
        job = await self._job(wire, request, rc, team, who, size, work)
        alias = rc.route.alias
        correction = self.calibrator.correction(rc.calibration_key)
        proof: Proof | None = None
        if bound and size > _BOUND_ABOVE:
            past = past_proving(job.request, job.priced, job.policy, correction)
            proof = Proof(job.priced, self.sample_key, past)
            proved = await self._bounded(job, correction, team, started, proof)
            if proved is not None:
                self.metrics.fit_proofs.labels(alias, "sample" if proved.guessed else "bound").inc()
                return proved
        if bound:
            self.metrics.fit_proofs.labels(alias, "count").inc()
        # what a failed proof counted, the exact fit reuses (``Proof.complete``)
        figures = await self._settled(job, correction, floor=False, proof=proof)
        return Estimate(job, team, started, *figures)

    async def _job(
        self,
        wire: Wire,
        request: ChatRequest,
        rc: RouteConfig,
        team: Team | None,
        who: str,
        size: int,
        work: int,
    ) -> Job:
        scope = team.id if team is not None else None
        sizes = await fetched_sizes(self.sizer, rc, wire.name, request, scope)
        route = self.route_priced(rc, team, wire.name)
        policy = self.policy_for(rc, team)
        return Job(wire, request, rc, policy, sizes, route, scope, who, size, work)

    async def _bounded(
        self, job: Job, correction: Correction, team: Team | None, started: float, proof: Proof
    ) -> Estimate | None:
        """The request as its bound proves it, with its exact fit under way — when the bound
        (anchored on the provider's count of a prefix when one is known) is under the budget.
        A bound is ≥ the exact figure it stands for, so the exact path would not touch the body.

        A big body no bound proves without counting may be let go on a sample's guess instead
        (``_guessed``)."""
        # (an image that cannot be priced is the client's ``RequestError``: the gateway's 400)
        fitted = None
        if job.size > COUNTING:
            # What the bounds and the team's memo prove without counting, where the body is
            # (an agent's session, a document sent again: most big bodies are proved so; a
            # thread hop for them cost 10-17% more CPU). A proof that must count goes off the
            # loop, on from what this pass found.
            proof.may_count = False
            fitted = await self.fairness.run(job.who, job.work, job.bounded, correction, proof)
            proof.may_count = True
            if fitted is None:
                return await self._guessed(job, correction, team, started, proof)
        if fitted is None:
            fitted = await self.fairness.run(
                job.who, job.work, job.bounded, correction, proof, above=COUNTING
            )
        if fitted is None:
            return None
        return await self._let_go(job, fitted, correction, team, started, proof)

    async def _guessed(
        self, job: Job, correction: Correction, team: Team | None, started: float, proof: Proof
    ) -> Estimate | None:
        """A body over ``COUNTING`` that no bound proves without counting (new text near the
        window: a proof would count nearly all of it, 10-16 ms for 120k tokens, before
        forwarding): let go at once when a sample of its texts says it fits
        (``strategies.output.sampled_output``), counted exactly meanwhile, its answer released
        only once that count proves it fits (``Estimate.sampled``, ``proxy.gateway``). Else the
        proof counts as before; and when it cannot (no tokenizer to count with), so does the
        fit."""
        if proof.tok is not None:
            run = self.fairness.run
            guess = await run(job.who, job.work, job.guessed, correction, proof, above=COUNTING)
            if guess is not None:
                let_go = await self._let_go(job, guess, correction, team, started, proof, True)
                if let_go is not None:
                    return let_go
        run = self.fairness.run
        fitted = await run(job.who, job.work, job.bounded, correction, proof, above=COUNTING)
        if fitted is None:
            return None
        return await self._let_go(job, fitted, correction, team, started, proof)

    async def _let_go(
        self,
        job: Job,
        fitted: Fit,
        correction: Correction,
        team: Team | None,
        started: float,
        proof: Proof,
        sampled: bool = False,
    ) -> Estimate | None:
        """The estimate of a request its bound (or a sample) lets go, its exact fit under way in
        a thread; None when the provider's count of a prefix puts it over the budget."""
        # The bound prices all its text at the dearest class weight; an anchor prices only what
        # follows the anchored prefix. Acting on the larger of the two keeps both promises.
        tokens, keys, hit = await self._anchor(job, fitted, correction, floor=True)
        budget = fitted.report.budget
        if tokens > budget:
            return None
        close = sampled and _close(tokens, proof, fitted)
        later = _Later(correction, proof)
        figures = (job, team, started, fitted, tokens, keys, hit, True)
        if not close and not self.exact_headers:
            # only for learning: begun beside the forward when the pace allows, else only if
            # the request comes to need it (the provider refused it for its window)
            learning = self.pace.take()
            outcome = "counted" if learning else "skipped"
            self.metrics.learning_counts.labels(job.rc.route.alias, outcome).inc()
            if not learning:
                return Estimate(*figures, later=later, guessed=sampled)
            counting = self._count(job, later, None, side_by_side=False)
            began = time.perf_counter()
            counting.add_done_callback(lambda _: self.pace.done(time.perf_counter() - began))
            return Estimate(*figures, counting, guessed=sampled)
        proving: asyncio.Future[Fit | None] | None = None
        told: Callable[[Fit | None], None] | None = None
        if close:
            proving = asyncio.get_running_loop().create_future()
            told = _teller(proving)
        # in one thread, as before: counted on every thread, the close calls' answers came no
        # sooner (bench/REPORT.md 1z)
        counting = self._count(job, later, told, side_by_side=False)
        if proving is not None:  # and the proof, should the count fail before it is told
            counting.add_done_callback(lambda _: _settle(proving, None))
        return Estimate(*figures, counting, proving, guessed=sampled)

    def _count(
        self,
        job: Job,
        later: _Later,
        told: Callable[[Fit | None], None] | None,
        side_by_side: bool,
    ) -> asyncio.Future[Fit]:
        """The exact fit of a request a bound or a sample let go, begun in a thread."""
        counting = asyncio.ensure_future(
            anyio.to_thread.run_sync(
                _exact_fit,
                job,
                later.correction,
                later.proof,
                told,
                side_by_side,
                limiter=self.fairness.limiter(job.who),
            )
        )
        # A request that fails before its usage is learnt leaves this unread: read it anyway.
        counting.add_done_callback(lambda f: f.cancelled() or f.exception())
        return counting

    async def exact(self, e: Estimate, needed: bool = True) -> Estimate:
        """A bounded request's exact figures: a new estimate, no longer a bound — or still one,
        with nothing under way, when they could not be had (nothing is then learnt from the
        request). ``e`` itself when nothing is under way.

        Awaited once the provider answered (or refused the request): before the answer goes
        out only when the count, begun beside the forward, is in by then or the operator asked
        for exact headers; else after it, so the client never waits for the count. A count the
        learning pace did not begin (``Estimate.later``) begins here when the figures are
        ``needed`` (the provider refused the request for its window), on every counting thread
        (the request waits for it); after the answer, only to learn (``needed`` False), it is
        not, and the request stays a bound that teaches nothing."""
        if e.counting is None and e.later is not None:
            if not needed:
                return e
            counting = self._count(e.job, e.later, None, side_by_side=True)
            e = replace(e, counting=counting, later=None)
        if e.counting is None:
            return e
        try:
            fitted = await e.counting
        except Exception:
            log.exception("exact count of a bounded request failed on %s", e.rc.route.alias)
            return replace(e, counting=None)
        finally:
            self.metrics.sync_memo_counters()
        current = self.calibrator.correction(e.rc.calibration_key)
        tokens, keys, hit = await self._anchor(e.job, fitted, current, floor=False, was=e)
        return replace(
            e, fitted=fitted, tokens=tokens, keys=keys, anchored=hit, bound=False, counting=None
        )

    async def confirmed(self, e: Estimate) -> tuple[Estimate, bool]:
        """A request let go on a sample's guess (``Estimate.sampled``, or one let go unheld that
        the provider refused for its window: its count begins here), counted: True when the
        count lets it go as it was sent, else False and the figures of its exact fit, what goes
        instead.

        Proved, first: the bounded fit on its texts' exact counts (``_exact_fit``, a few ms
        after the count, before the exact fit) under the budget is as good a proof as a bound
        — the request then stands as a bound-proved one (its exact figures still under way).
        Else the exact fit judges: untouched, with the same output cap, the anchored count
        within the budget. A count that failed leaves the provider to judge what it was sent
        (True, still a bound: nothing is learnt from it)."""
        assert e.guessed
        proved = await e.proving if e.proving is not None else None
        current = self.calibrator.correction(e.rc.calibration_key)
        if proved is not None:
            tokens, keys, hit = await self._anchor(e.job, proved, current, floor=True, was=e)
            if tokens <= proved.report.budget:
                return replace(
                    e, proving=None, guessed=False, **_named((proved, tokens, keys, hit))
                ), True
        exact = await self.exact(replace(e, proving=None))
        sent, now = e.fitted.report, exact.fitted.report
        if exact.bound or (
            now.transparent and now.output == sent.output and exact.tokens <= now.budget
        ):
            return exact, True
        figures = await self._settled(e.job, current, floor=False)
        return replace(exact, **_named(figures)), False

    async def refit(self, e: Estimate, counted: int) -> Estimate | None:
        """The provider counted ``counted`` tokens for what ``e`` sent (its exact figures,
        after ``exact``): that is recorded as an exact sample (and anchors) for the prompt, and
        the request fitted again with the route's correction scaled by how far it was below the
        count. None when there is nothing to correct (the provider's refusal then stands)."""
        if e.counting is not None:
            raise ValueError("refit before the exact count is in (Estimator.exact)")
        route, key = e.rc.route.alias, e.rc.calibration_key
        if e.bound or counted <= e.tokens:
            return None  # no exact figures, or not an under-estimate of ours
        if counted > 2 * e.rc.route.context_window:
            # An overflow is a prompt a little over the window, or one we misjudged by a fraction
            # of it: a count beyond twice the window is not believed (and not learnt from).
            self._reject(route, "overflow count", f"{counted} tokens")
            return None
        self.calibrator.observe(key, e.fitted.pressure, e.keys, e.tokens, e.anchored, counted, 0)
        self.metrics.estimate_error.labels(route).observe((e.tokens - counted) / counted)
        current = self.calibrator.correction(key)
        if current.provisional:
            # A prior errs high on purpose, scaled it would err higher: the provider's count of
            # this request is the one thing known of the route, so the meter is scaled to it.
            current = Correction()
        # Only one more attempt: err a little high rather than be refused twice. The weights are
        # scaled to the count (the interval's doubt about this prompt is answered by it; on top
        # of the scaled weights it only errs higher, and gives way when it leaves nothing).
        priced = current.price_pressure(e.fitted.pressure)
        corrected = _tighter(current, counted, priced, _REFIT_SLACK)
        # The anchors just recorded give the head its true count; the tail is priced by the
        # corrected weights. Acting on the larger of the two keeps both promises.
        fitted, tokens, keys, hit = await self._settled(e.job, corrected, floor=True)
        return replace(e, fitted=fitted, tokens=tokens, keys=keys, anchored=hit)

    async def _settled(
        self, job: Job, correction: Correction, *, floor: bool, proof: Proof | None = None
    ) -> _Figures:
        """The fit under ``correction``, anchored — and, when the provider's count of a prefix
        puts it over the budget (the correction was low), the correction tightened by as much
        and the request fitted and anchored once more. ``floor``: act on no less than the fit's
        own estimate (a correction raised past the calibrator's prices the tail higher than the
        anchor does)."""
        fitted = await self._fit(job, correction, proof)
        tokens, keys, hit = await self._anchor(job, fitted, correction, floor=floor)
        if hit and tokens > fitted.report.budget:
            # scaled from what the fit was priced by: the meter's count when the prior fitted
            # nothing (a prior scaled to the anchor would price what follows it higher still)
            base = Correction() if fitted.report.on_meter else correction
            tighter = _tighter(base, tokens, fitted.estimate)
            fitted = await self._fit(job, tighter)
            tokens, keys, hit = await self._anchor(job, fitted, tighter, floor=floor)
        return fitted, tokens, keys, hit

    async def _anchor(
        self, job: Job, fitted: Fit, used: Correction, *, floor: bool, was: Estimate | None = None
    ) -> tuple[int, tuple[bytes, ...], bool]:
        """(tokens to act on, prefix keys, anchored?): anchored on the provider's count of a
        prefix the same team sent when one is known, else the calibrated estimate; ``floor``:
        no less than the fit's own estimate. ``used``: the correction ``fitted`` was made on,
        which prices what follows the anchor when the route's own is a provisional prior (the
        meter's count for a fit on it, the provider's count for a refit): a prior that left
        nothing fitting must not refuse through the anchor what the fit let go. ``was``: the
        estimate ``fitted`` replaces, whose keys serve when it sends the same messages (the
        exact fit of a request its bound let go, untouched: a long session's every request
        digested its 400 messages twice)."""
        # calibration and anchors are the deployment's own (another may count differently)
        where = job.rc.calibration_key
        if was is not None and _sends_alike(was.fitted, fitted) and was.keys:
            keys = was.keys
        else:
            # hashing every prefix of a big body: ~20 ms per 9 MB, off the loop
            keys = await self.fairness.run(job.who, job.work, _prefix_keys, job, fitted)
        hit = await self.calibrator.find_anchor(where, keys)
        if hit is None:
            return fitted.estimate, keys, False
        correction = self.calibrator.correction(where)
        if correction.provisional:
            correction = Correction() if fitted.report.on_meter else used
        tokens = anchored_estimate(hit[1], fitted.pressure, correction)
        return (max(tokens, fitted.estimate) if floor else tokens), keys, True

    async def _fit(self, job: Job, correction: Correction, proof: Proof | None = None) -> Fit:
        return await self.fairness.run(
            job.who, job.work, _counted_fit, job, correction, proof, above=COUNTING
        )

    # -- learning from the provider's figures ----------------------------------------------

    def credible(self, e: Estimate, usage: Usage | None) -> Usage | None:
        """``usage`` when it is credible (``proxy.usage.usage_fault``); else None, logged and
        counted as a rejected sample."""
        if usage is None:
            return None
        route = e.rc.route
        fault = usage_fault(usage, usage_limit(route, e.request.choices, e.reserved_output))
        if fault is None:
            return usage
        self._reject(route.alias, "usage", fault)
        return None

    def learn(self, e: Estimate, usage: Usage | None) -> None:
        """Provider usage (credible: ``credible``) into metrics and calibration (queued; never
        waits for the store). Nothing is learnt without usage, nor against a bound."""
        if e.bound or usage is None or usage.prompt_tokens <= 0 or usage.invalid:
            return
        if usage.tools_read:  # the count holds what the provider's tools read: not the prompt's
            return
        route = e.rc.route.alias
        self.metrics.estimated_tokens.labels(route).inc(e.tokens)
        self.metrics.actual_tokens.labels(route).inc(usage.prompt_tokens)
        self.metrics.cached_tokens.labels(route).inc(usage.cached_tokens)
        error = (e.tokens - usage.prompt_tokens) / usage.prompt_tokens
        self.metrics.estimate_error.labels(route).observe(error)
        self.calibrator.observe(
            e.rc.calibration_key,
            e.fitted.pressure,
            e.keys,
            e.tokens,
            e.anchored,
            usage.prompt_tokens,
            usage.cached_tokens,
        )

    def _reject(self, route: str, what: str, why: str) -> None:
        """A provider figure not believed: logged and counted, never learnt from."""
        self.metrics.samples.labels("rejected").inc()
        self.calibrator.rejected += 1
        log.warning("provider %s rejected on %s: %s", what, route, why)


def _close(tokens: int, proof: Proof, fitted: Fit) -> bool:
    """Whether a guess of ``tokens`` is a close call: raised by its sample's doubt, over its
    budget (``CLOSE_CALL``)."""
    return tokens * (1 + proof.doubt) > (1 - CLOSE_CALL) * fitted.report.budget


def _named(figures: _Figures) -> dict[str, Any]:
    fitted, tokens, keys, hit = figures
    return {"fitted": fitted, "tokens": tokens, "keys": keys, "anchored": hit}


def _tighter(correction: Correction, actual: int, priced: int, slack: float = 1.0) -> Correction:
    """``correction`` scaled by how far ``priced`` fell below ``actual`` (never lowered), times
    ``slack``: the one way a correction found low is tightened before fitting again."""
    return correction.scaled(max(1.0, actual / max(1, priced)) * slack)


def _sends_alike(a: Fit, b: Fit) -> bool:
    """Whether two fits send the same messages with the same body: the same objects (a
    transparent fit passes the request's own through), so the same prefix keys."""
    return a.messages is b.messages and a.body is b.body


def _prefix_keys(job: Job, fitted: Fit) -> tuple[bytes, ...]:
    """Chained digests of the fitted prefixes, in the team's own scope (anchors are its own).
    A message with images is keyed with their details too: a Gemini request's media_resolution
    is outside its messages, and the same message at another level is another count."""
    return _message_keys(job.rc, fitted.messages, fitted.body, job.scope)


def _message_keys(
    rc: RouteConfig, messages: Sequence[Message], body: Mapping[str, Any], scope: str | None
) -> tuple[bytes, ...]:
    """``_prefix_keys`` of a fit's messages or of a request as the fit begins from it (a count
    endpoint's, ``as_sent``: a request that fits unchanged is its own fit, so both find the
    same anchor)."""
    wire = [
        [message_wire(m), [p.detail for p in m.images]] if m.images else message_wire(m)
        for m in messages
    ]
    tools: Any = body.get("tools")
    context = [body[k] for k in PROVIDER_CONTEXT if body.get(k) is not None]
    if context:  # the provider's count includes what these name: another prompt's anchors
        tools = [tools, *context]
    long = [m.long for m in messages]
    return tuple(prefix_keys(rc.calibration_key, rc.upstream.model, tools, wire, scope, long))


#: Body fields naming a prefix the provider keeps and counts in the prompt it reports: Gemini's
#: ``cachedContent``, a Responses ``prompt`` template or ``conversation``. The same messages
#: with another (or none) are another count: an anchor learnt with a 900-token cache priced the
#: same contents sent without it at 1,066 tokens where Google counted 166.
PROVIDER_CONTEXT = ("cachedContent", "cached_content", "prompt", "conversation")


def _counted_fit(job: Job, correction: Correction, proof: Proof | None) -> Fit:
    """The exact fit; the texts a failed proof counted in part are counted to the end first,
    on every counting thread (the request waits for it)."""
    if proof is not None:
        proof.complete()
    return job.fit(correction)


def _exact_fit(
    job: Job,
    correction: Correction,
    proof: Proof,
    told: Callable[[Fit | None], None] | None,
    side_by_side: bool,
) -> Fit:
    """The exact fit of a request its proof let go: the texts the proof counted in part are
    counted to the end first (the fit then finds their whole counts memoised), on every
    counting thread when a request waits for them (``side_by_side``), else in this one (the
    other cores are the provider's and the other requests'). ``told``: a request let go on a
    sample's guess is told, as soon as they are counted, whether the bounded fit on those
    counts proves it (None when not), before the exact fit is made."""
    proof.complete(side_by_side=side_by_side)
    if told is not None:
        try:
            told(job.bounded(correction, proof))
        except Exception:
            told(None)
            raise
    return job.fit(correction)


def _teller(future: asyncio.Future[Fit | None]) -> Callable[[Fit | None], None]:
    """A function a worker thread tells ``future``'s result with, once (on its loop)."""
    loop = future.get_loop()

    def told(fitted: Fit | None) -> None:
        loop.call_soon_threadsafe(_settle, future, fitted)

    return told


def _settle(future: asyncio.Future[Fit | None], fitted: Fit | None) -> None:
    if not future.done():
        future.set_result(fitted)
