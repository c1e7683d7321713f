"""Pricing one admitted request: price and fit → anchor.

Reading, authenticating, parsing, the route and the team's permission are the intake's
(``proxy.intake``); ``Preparer.estimate`` starts from what it admitted. Everything here runs
before a byte goes to the provider and is routefit's own overhead. Three
ways to reach the figures the request goes on, cheapest first:

* **proved by a bound** (bodies over ``_BOUND_ABOVE``): a cheap upper bound (``pricing.bounds``)
  under the budget lets the request go untouched at once, and the exact fit is counted in a
  thread meanwhile (``Preparer.exact`` swaps it in once the provider answered). A bound over the
  budget is first tightened by counting the biggest texts in part (``pricing.bounds.Proof``):
  a new prompt whose bytes exceed the budget is proved by counting a fraction of it;
* **counted** (every other request): the exact fit, anchored on the provider's own count of a
  prefix when one is known — and fitted once more when that anchor says the estimate was low;
* **refitted** after the provider itself refused for context length and stated its count
  (``Preparer.refit``, driven by the gateway).

A body over ``proxy.fairness.THREAD_ABOVE`` is decoded, parsed and priced in a worker thread,
one of a bounded number per team (``proxy.fairness``): the event loop serves every other
request meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace

import anyio

from pricing.bounds import Proof
from pricing.calibration import Correction, anchored_estimate
from pricing.messages import ChatRequest, message_wire
from pricing.meter import measure
from pricing.route import Route
from proxy.budgets import Held
from proxy.calibrator import Calibrator, prefix_keys
from proxy.config import Config, RouteConfig, Upstream
from proxy.fairness import THREAD_ABOVE, Fairness
from proxy.fetch import ImageSizer, image_urls
from proxy.metrics import Metrics
from proxy.teams import Team, TeamDirectory
from proxy.wires import Wire
from strategies.fit import Fit, FitError
from strategies.output import bounded_output, fit_output
from strategies.policy import FitPolicy

__all__ = ["Job", "Prepared", "Preparer"]

log = logging.getLogger("routefit")

#: Bodies above this size are priced and fitted in a worker thread so that one huge request
#: does not stall every other request on the event loop (the tokenizers release the GIL).
_THREAD_ABOVE = THREAD_ABOVE
#: Bodies above this size are first proved to fit by a cheap upper bound (``pricing.bounds``);
#: when the proof holds they go at once and are counted exactly in a thread meanwhile, and the
#: answer waits only for the later of the provider and the count, so its headers, calibration
#: and metrics are exact. Smaller ones cost less to count (and are mostly cached) than twice.
_BOUND_ABOVE = 16 * 1024

Sizes = dict[str, tuple[int, int]]
Anchored = tuple[int, list[bytes], bool]


@dataclass(frozen=True, slots=True)
class Job:
    """What fitting one request needs, whichever way it is fitted."""

    wire: Wire
    request: ChatRequest
    rc: RouteConfig
    policy: FitPolicy
    #: Image sizes fetched for this request (URL images, when the route allows fetching).
    sizes: Sizes
    #: ``rc.route`` as priced for the team (``Route.scope``: its memoised counts are its own).
    priced: Route
    #: The team whose prompt this is (anchors are its own), None without teams.
    scope: str | None = None
    #: Whose pricing threads this request uses (``proxy.fairness.caller``).
    who: str = "-"
    #: The body's decoded size: over ``_THREAD_ABOVE`` every fit of it runs in a thread.
    size: int = 0

    def fit(self, correction: Correction) -> Fit:
        """The exact fit; the wire's own refusal when nothing the policy allows fits (an image
        that cannot be priced, found while pricing, is the client's ``RequestError``)."""
        try:
            return fit_output(self.request, self.priced, self.policy, correction, self.sizes)
        except FitError as exc:
            raise self.wire.overflow(exc) from None


@dataclass(slots=True)
class Prepared:
    """A request priced and fitted, ready to forward."""

    job: Job
    team: Team | None
    fitted: Fit
    estimate: int
    started: float
    #: Chained digests of the fitted message prefixes (anchor keys).
    keys: list[bytes]
    anchored: bool = False
    held: Held | None = None
    #: The request went to the provider (at least once): from then on its prompt is billed
    #: there, whatever happens to the answer.
    forwarded: bool = False
    #: The route's upstream with the key this request must carry (``ProviderKeys``).
    upstream: Upstream | None = None
    #: On the bounded path: the exact fit, counted in a thread while the request is forwarded;
    #: ``fitted`` and ``estimate`` are bounds until ``Preparer.exact`` replaces them.
    exact: asyncio.Future[Fit] | None = field(default=None)

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


class Preparer:
    def __init__(
        self,
        config: Config,
        teams: TeamDirectory,
        calibrator: Calibrator,
        sizer: ImageSizer,
        metrics: Metrics,
        fairness: Fairness | None = None,
    ) -> None:
        self.config = config
        self.teams = teams
        self.calibrator = calibrator
        self.sizer = sizer
        self.metrics = metrics
        limits = config.settings.limits
        self.fairness = fairness or Fairness(
            limits.pricing_threads_per_team, limits.count_requests_per_minute
        )
        self._policies: dict[tuple[str, str], FitPolicy] = {}
        #: (team, alias) → (the configured route, that route scoped to the team).
        self._routes: dict[tuple[str, str], tuple[Route, Route]] = {}

    def policy_for(self, rc: RouteConfig, team: Team | None) -> FitPolicy:
        """The route's fit policy with the team's overrides and per-request prompt quota."""
        if team is None:
            return rc.policy
        key = (team.id, rc.route.alias)
        policy = self._policies.get(key)
        if policy is None:
            policy = self._policies[key] = team.fit_policy(rc.policy)
        return policy

    def route_priced(self, rc: RouteConfig, team: Team | None) -> Route:
        """The route as priced for ``team``: scoped to it (``Route.scope``), so the memo caches
        of prompt-derived facts (token counts, image probes) serve it only what it sent itself.
        Without teams, every caller is one tenant: the route as configured."""
        if team is None:
            return rc.route
        key = (team.id, rc.route.alias)
        found = self._routes.get(key)
        if found is None or found[0] is not rc.route:
            found = self._routes[key] = (rc.route, replace(rc.route, scope=team.id.encode()))
        return found[1]

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
    ) -> Prepared:
        """Priced and fitted (``proxy.intake`` admitted it); ``bound``: a big request may be
        proved to fit by an upper bound and counted exactly while it is forwarded (the dry run
        wants the exact figures)."""
        try:
            job = await self._job(wire, request, rc, team, who, size)
            return await self._prepare(job, team, started, bound)
        finally:
            self.metrics.sync_count_cache()

    async def count(
        self, request: ChatRequest, rc: RouteConfig, team: Team | None, who: str, size: int
    ) -> int:
        """The calibrated estimate of the request as the client sent it, unfitted: what a count
        endpoint answers (in one of the caller's pricing threads when the body is big)."""
        pressure = await self.fairness.run(who, size, measure, request, self.route_priced(rc, team))
        return self.calibrator.correction(rc.route.alias).price_pressure(pressure)

    async def _prepare(self, job: Job, team: Team | None, started: float, bound: bool) -> Prepared:
        alias = job.rc.route.alias
        correction = self.calibrator.correction(alias)
        threaded = job.size > _THREAD_ABOVE
        proof: Proof | None = None
        if bound and job.size > _BOUND_ABOVE:
            proof = Proof(job.priced)
            proved = await self._bounded(job, correction, team, started, proof, threaded)
            if proved is not None:
                self.metrics.fit_proofs.labels(alias, "bound").inc()
                return proved
        if bound:
            self.metrics.fit_proofs.labels(alias, "count").inc()
        # what a failed proof counted, the exact fit reuses (``Proof.complete``)
        fitted = await self._fit(job, correction, threaded, proof)
        estimate, keys, hit = await self._anchor(job, fitted)
        if hit and estimate > fitted.report.budget:
            # The provider's own count of the prefix says the calibrated estimate was low: fit
            # once more with the correction scaled by how low it was, and anchor that fit.
            tighter = correction.scaled(estimate / max(1, fitted.estimate))
            fitted = await self._fit(job, tighter, threaded)
            estimate, keys, hit = await self._anchor(job, fitted)
        return Prepared(job, team, fitted, estimate, started, keys, hit)

    async def _job(
        self,
        wire: Wire,
        parsed: ChatRequest,
        rc: RouteConfig,
        team: Team | None,
        who: str,
        size: int,
    ) -> Job:
        scope = team.id if team is not None else None
        sizes: Sizes = {}
        if rc.image_fetch.enabled:
            sizes = await self.sizer.sizes(image_urls(parsed), rc.image_fetch, scope or "")
        route = self.route_priced(rc, team)
        return Job(wire, parsed, rc, self.policy_for(rc, team), sizes, route, scope, who, size)

    async def _bounded(
        self,
        job: Job,
        correction: Correction,
        team: Team | None,
        started: float,
        proof: Proof,
        threaded: bool,
    ) -> Prepared | None:
        """The request as its bound proves it, with its exact fit under way — when the bound
        (anchored on the provider's count of a prefix when one is known) is under the budget.
        A bound is ≥ the exact figure it stands for, so the exact path would not touch the body."""
        args = (job.request, job.priced, job.policy, correction, job.sizes, proof)
        # a proof may count (part of) the texts: off the loop where a fit would be
        if threaded:
            limiter = self.fairness.limiter(job.who)
            fitted = await anyio.to_thread.run_sync(bounded_output, *args, limiter=limiter)
        else:
            fitted = bounded_output(*args)
        if fitted is None:
            return None
        anchored, keys, hit = await self._anchor(job, fitted)
        # The bound prices all its text at the dearest class weight; an anchor prices only what
        # follows the anchored prefix. Acting on the larger of the two keeps both promises.
        estimate = max(anchored, fitted.estimate)
        if estimate > fitted.report.budget:
            return None
        exact = asyncio.ensure_future(
            anyio.to_thread.run_sync(
                _exact_fit, job, correction, proof, limiter=self.fairness.limiter(job.who)
            )
        )
        # A request that fails before its usage is learnt leaves this unread: read it anyway.
        exact.add_done_callback(lambda f: f.cancelled() or f.exception())
        return Prepared(job, team, fitted, estimate, started, keys, hit, exact=exact)

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
            self.metrics.sync_count_cache()
        p.estimate, p.keys, p.anchored = await self._anchor(p.job, p.fitted)
        return True

    async def refit(self, p: Prepared, corrected: Correction) -> None:
        """Fit ``p`` again with a correction the provider's own count has raised."""
        fitted = await self._fit(p.job, corrected, p.job.size > _THREAD_ABOVE)
        anchored, keys, hit = await self._anchor(p.job, fitted)
        # The anchors just recorded give the head its true count; the tail is priced by the
        # corrected weights. Acting on the larger of the two keeps both promises.
        estimate = max(anchored, fitted.estimate)
        if estimate > fitted.report.budget:
            tighter = corrected.scaled(estimate / max(1, fitted.estimate))
            fitted = await self._fit(p.job, tighter, p.job.size > _THREAD_ABOVE)
            anchored, keys, hit = await self._anchor(p.job, fitted)
            estimate = max(anchored, fitted.estimate)
        p.fitted, p.estimate, p.keys, p.anchored = fitted, estimate, keys, hit

    async def _anchor(self, job: Job, fitted: Fit) -> Anchored:
        """(estimate to act on, prefix keys, anchored?): anchored on the provider's count of a
        prefix the same team sent when one is known, else the calibrated estimate."""
        alias = job.rc.route.alias
        if job.size > _THREAD_ABOVE:  # hashing every prefix of a big body: ~20 ms per 9 MB
            limiter = self.fairness.limiter(job.who)
            keys = await anyio.to_thread.run_sync(_prefix_keys, job, fitted, limiter=limiter)
        else:
            keys = _prefix_keys(job, fitted)
        hit = await self.calibrator.find_anchor(alias, keys)
        if hit is None:
            return fitted.estimate, keys, False
        correction = self.calibrator.correction(alias)
        return anchored_estimate(hit[1], fitted.pressure, correction), keys, True

    async def _fit(
        self, job: Job, correction: Correction, threaded: bool, proof: Proof | None = None
    ) -> Fit:
        if threaded:
            limiter = self.fairness.limiter(job.who)
            return await anyio.to_thread.run_sync(
                _counted_fit, job, correction, proof, limiter=limiter
            )
        return _counted_fit(job, correction, proof)


def _prefix_keys(job: Job, fitted: Fit) -> list[bytes]:
    """Chained digests of the fitted prefixes, in the team's own scope (anchors are its own)."""
    rc = job.rc
    wire = [message_wire(m) for m in fitted.messages]
    tools = fitted.body.get("tools")
    return prefix_keys(rc.route.alias, rc.upstream.model, tools, wire, job.scope)


def _counted_fit(job: Job, correction: Correction, proof: Proof | None) -> Fit:
    """The exact fit; the texts a failed proof counted in part are counted to the end first,
    on every counting thread (the request waits for it)."""
    if proof is not None:
        proof.complete()
    return job.fit(correction)


def _exact_fit(job: Job, correction: Correction, proof: Proof) -> Fit:
    """The exact fit of a request its proof let go: the texts the proof counted in part are
    counted to the end first (the fit then finds their whole counts memoised)."""
    proof.complete(side_by_side=False)
    return job.fit(correction)
