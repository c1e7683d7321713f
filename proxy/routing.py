"""One request's attempts: the shell around ``proxy.router``'s policy.

``Routing`` (one per app) knows every alias's deployments and the store holding their shared
health; ``Routing.start`` reads that health (one pipelined store call) and asks ``router.plan``
for the first attempt. The ``Attempts`` it returns follows the request: the gateway prices, fits,
reserves and sends for ``Attempts.rc`` (the current deployment's own route facts, never another's),
and reports back — ``answered`` or ``failed``. ``failed`` classifies the provider's error
(``router.classify``), records it (a cooldown once a deployment fails more than its policy
allows), asks ``router.advance`` for the next attempt, waits ``router.wait``'s backoff and says
whether to go on. Nothing here decides a route: the policy is ``proxy.router``'s.

Decisions (docs/architecture.md, "Router"):

* An alias with one deployment and no fallbacks is not *routed*: no health is read or written
  for it (its only deployment is tried whatever its health), so a single-deployment route pays
  nothing for routing. Its retries (``num_retries``) still go through the plan, on the same
  deployment.
* The store failing never fails a request: the health then reads as empty (every deployment
  healthy) and writes are dropped (logged once per outage).
* ``num_retries`` left out of the file: a routed alias retries twice, as LiteLLM's router does
  by default (a LiteLLM config with two deployments fails over the same way here); an alias with
  one deployment keeps routefit's default of no retry (``upstream_retries`` is its knob), so a
  single-deployment route answers a provider's failure as it always did.
* In-flight counts, latency and usage are written only for the strategies that read them
  (least-busy, latency-based, usage-based), in the background; a failure and its cooldown are
  written before the next attempt, so the next request — on any replica — skips a deployment
  that just cooled down.
* A provider's 401/403 is the deployment's fault: answered 502 naming the deployment (never the
  key), and the deployment cooled down. On a route that forwards the client's own provider key
  the key is the client's, so its 401 is passed on as it is and cools nothing down.
* A provider's 404 saying the model (or deployment) is not there is the deployment's fault too
  (``router``'s ``not_found``): the alias's next deployment is tried at once; only a 404 about
  something else (a resource the request names) stays the request's answer.
* A provider's ``retry-after`` on a retryable failure cools the deployment that long (at most
  ``HEALTH_TTL``, as long as the store keeps it). A 429 of the client's own key (BYOK) is that
  client's quota: it is retried like any 429 but cools nothing down, as its 401 does not.
* The last failure is answered in a status the client's SDK reads (``Attempts.explain``):
  Anthropic's 529 "overloaded" is a 503 to an OpenAI or Gemini client (what those providers
  answer when overloaded), a provider's status outside HTTP's 5xx (a CDN's 520-527) a 502.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from proxy import router
from proxy.config import Config, RouteConfig
from proxy.config.router_settings import RouterSettings
from proxy.disconnect import until_disconnect
from proxy.errors import ProxyError
from proxy.exchange import Transient
from proxy.metrics import Metrics
from proxy.store import Store
from proxy.store.base import HEALTH_TTL, DeploymentHealth
from proxy.teams import Team
from proxy.transports.provider_errors import client_status
from proxy.types import Receive

__all__ = [
    "CONTEXT_HEADER",
    "LITELLM_NUM_RETRIES",
    "Attempts",
    "Routing",
    "client_deadline",
    "failure_kind",
]

log = logging.getLogger("routefit.routing")
T = TypeVar("T")

#: What a context-window fallback decided for the response (``router.choose_window``'s word).
CONTEXT_HEADER = "x-routefit-context"
#: The strategies that read what each attempt writes (in flight, latency, usage this minute).
_TRACKED = frozenset({"least-busy", "latency-based-routing", "usage-based-routing-v2"})
#: LiteLLM's router retries this many times unless told otherwise (openai's DEFAULT_MAX_RETRIES).
LITELLM_NUM_RETRIES = 2
#: Failures of the key rather than of the deployment: on a route forwarding the client's own key
#: (BYOK) they are that client's, and never count towards the deployment's cooldown (one
#: client's exhausted quota would otherwise move every other client off the deployment).
_KEY_FAULTS = frozenset({"rate_limit"})
#: Transport codes for failures where no answer came: the connection's, or the clock's.
_NO_ANSWER = {"upstream_unreachable": "connection", "upstream_timeout": "timeout"}


def failure_kind(err: ProxyError) -> str:
    """The router's kind of a provider failure (``router.classify``): no answer at all (a
    connection refused or reset before the answer, a timeout), an overloaded provider (529,
    Anthropic's ``overloaded_error`` whatever its status), or the provider's status."""
    code = err.code or ""
    if code in _NO_ANSWER:
        return router.classify(None, timed_out=_NO_ANSWER[code] == "timeout")
    if code in ("upstream_incomplete", "upstream_malformed", "upstream_too_large"):
        return "server"  # it answered, but not usably: the provider's fault, not the request's
    if err.type == "overloaded_error" or "overloaded" in err.message.lower():
        return "server"
    if err.status == 404 and _missing_model(err):
        return "not_found"
    return router.classify(err.status, content_policy=code == "content_policy_violation")


def _missing_model(err: ProxyError) -> bool:
    """A provider's 404 that says the model (or deployment) it was asked for is not there --
    OpenAI's ``model_not_found``, Anthropic's ``model: NAME``, Google's ``models/NAME is not
    found``, Azure's ``DeploymentNotFound`` -- or that has no error of its own (a wrong
    ``api_base`` path): the deployment's configuration, which its siblings may not share. A 404
    about a resource the request names is the request's, and answers it as before."""
    said = f"{err.code or ''} {err.type or ''} {err.message}".lower()
    return "model" in said or "deployment" in said or err.message.startswith("upstream returned")


#: Request headers carrying the client's own timeout in seconds: the openai and anthropic SDKs
#: send theirs as ``x-stainless-timeout``; LiteLLM's proxy reads ``x-litellm-timeout``.
_DEADLINE_HEADERS = ("x-litellm-timeout", "x-stainless-timeout")


def client_deadline(headers: Mapping[str, str], started: float) -> float | None:
    """When the client gives up on this request (``time.perf_counter()`` seconds), from the
    timeout it says it keeps, counted from ``started``; None when it says none. A retry whose
    backoff would end past it is not waited for: the client would have hung up by then, so the
    last failure is answered while it still listens (a malformed value is no deadline)."""
    for name in _DEADLINE_HEADERS:
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw)
        except ValueError:
            continue
        if 0 < seconds < float("inf"):
            return started + seconds
    return None


def _health(h: DeploymentHealth) -> router.Health:
    return router.Health(
        h.in_flight, h.latency, h.minute, h.requests, h.tokens, h.failures, h.cooldown_until
    )


class Routing:
    """Every alias's deployments and the store of their shared health, for the app's life."""

    def __init__(
        self,
        config: Config,
        store: Store,
        metrics: Metrics,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        backoff: router.Backoff | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.metrics = metrics
        self.rng = rng or random.Random()
        self.clock = clock
        self.backoff = backoff or router.Backoff()
        every = config.every_deployment()
        #: Deployment id → its route facts.
        self.routes: dict[str, RouteConfig] = {rc.deployment_id: rc for rc in every}
        self.table: dict[str, tuple[router.Deployment, ...]] = {
            alias: tuple(router.Deployment.of(rc) for rc in config.deployments(alias))
            for alias in config.routes
        }
        self._policies: dict[tuple[int, bool], router.Policy] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        #: (router settings, alias) → the first plan of an alias that is not routed.
        self._single: dict[tuple[int, str], router.Plan] = {}
        self._observers: dict[str, tuple[Any, Any]] = {}
        self._down = False

    def policy(self, settings: RouterSettings, routed: bool) -> router.Policy:
        """The router's policy of ``settings``. A routed alias retries as LiteLLM's router does
        by default (``LITELLM_NUM_RETRIES``) unless the file says otherwise; an alias with one
        deployment keeps routefit's default of none, answering a provider's failure at once."""
        key = (id(settings), routed)
        found = self._policies.get(key)
        if found is None:
            found = router.Policy.of(settings)
            written = settings.written | self.config.router.written
            if routed and "num_retries" not in written:
                found = replace(found, num_retries=LITELLM_NUM_RETRIES)
            self._policies[key] = found
        return found

    def routed(self, alias: str, settings: RouterSettings) -> bool:
        """Whether a request of ``alias`` may reach more than one deployment."""
        chain = settings.fallbacks.get(alias, settings.default_fallbacks)
        return len(self.table.get(alias, ())) > 1 or bool(chain)

    async def start(
        self, rc: RouteConfig, team: Team | None, tokens: int, deadline: float | None = None
    ) -> Attempts:
        """The first attempt of a request the intake routed to ``rc``'s alias. ``tokens``: a
        guess of its size (usage-based routing's room), before it is priced for a deployment;
        ``deadline``: when the client gives up (``client_deadline``)."""
        settings = self.config.router_for(team.id if team is not None else None)
        alias = rc.route.alias
        single = self._single.get((id(settings), alias))
        if single is not None:  # one deployment, no fallbacks: the same first plan every time
            return Attempts(self, single, {}, False, settings.timeout, deadline)
        shared = self.routed(alias, settings)
        policy = self.policy(settings, shared)
        if not shared:
            deployments = self.table.get(alias) or (router.Deployment.of(rc),)
            plan = router.plan(alias, {alias: deployments}, {}, policy, tokens, 0.0, self.rng)
            assert plan is not None
            self._single[(id(settings), alias)] = plan
            return Attempts(self, plan, {}, False, settings.timeout, deadline)
        table = {
            name: deployments
            for name, deployments in self.table.items()
            if team is None or team.may_use(name)
        }
        table[alias] = self.table[alias]
        chain = (alias, *policy.fallbacks.get(alias, policy.default_fallbacks))
        health = await self.read([d.id for name in chain for d in table.get(name, ())])
        plan = router.plan(alias, table, health, policy, tokens, self.clock(), self.rng)
        if plan is None:  # the intake admitted the alias: it has its deployment
            raise ProxyError(500, f"no deployment for model {alias!r}", code="internal")
        attempts = Attempts(self, plan, health, shared, settings.timeout, deadline)
        attempts.private = self.hides_deployment(team.id if team is not None else None, alias)
        return attempts

    def hides_deployment(self, team: str | None, alias: str | None) -> bool:
        """Whether ``team`` is not told which of ``alias``'s deployments served it: when teams
        share the alias and its strategy picks by load (``_TRACKED``: in flight, latency, usage
        this minute), the pick is a function of every team's traffic, so naming it would show
        one team another's volume (docs/security.md, "What routing shows a team")."""
        if team is None or alias is None:
            return False  # routefit running open: one tenant
        settings = self.config.router_for(team)
        return settings.routing_strategy in _TRACKED and self.routed(alias, settings)

    def observers(self, alias: str, ident: str) -> tuple[Any, Any]:
        """The deployment's ``ok`` attempts counter and latency histogram (looked up once)."""
        found = self._observers.get(ident)
        if found is None:
            m = self.metrics
            found = self._observers[ident] = (
                m.deployment_attempts.labels(alias, ident, "ok"),
                m.deployment_latency.labels(alias, ident),
            )
        return found

    # -- the store: never a request's failure ------------------------------------------------

    async def read(self, ids: Sequence[str]) -> dict[str, router.Health]:
        try:
            found = await self.store.deployment_health(ids, self.clock())
        except Exception as exc:
            self._failed("read", exc)
            return {}
        self._recovered()
        return {id: _health(h) for id, h in found.items()}

    async def write(self, what: str, call: Callable[[], Awaitable[T]]) -> T | None:
        try:
            result = await call()
        except Exception as exc:
            self._failed(what, exc)
            return None
        self._recovered()
        return result

    def later(self, what: str, call: Callable[[], Awaitable[object]]) -> None:
        task: asyncio.Task[object] = asyncio.ensure_future(self.write(what, call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _failed(self, what: str, exc: Exception) -> None:
        if not self._down:
            self._down = True
            log.warning(
                "deployment health unavailable (%s: %s): routing as if every deployment were "
                "healthy until the store answers",
                what,
                exc,
            )

    def _recovered(self) -> None:
        if self._down:
            self._down = False
            log.warning("deployment health is back")


def _hint(err: ProxyError) -> float | None:
    """The provider's ``retry-after`` as a cooldown: seconds, at most as long as the store keeps
    a deployment's health; None when it said none."""
    wait = err.retry_after if isinstance(err, Transient) else None
    return None if wait is None else min(wait, float(HEALTH_TTL))


def _in_client_status(err: ProxyError, wire: str | None) -> ProxyError:
    """``err`` with a status the client's SDK reads (its message, code and headers kept; its
    type the status's own, the provider's naming a status the client is not given)."""
    status = err.status if wire is None else client_status(err.status, wire)
    if status == err.status:
        return err
    out = ProxyError(status, err.message, code=err.code, param=err.param, headers=err.headers)
    out.origin = err.origin
    return out


@dataclass(slots=True)
class Attempts:
    """One request's attempts, as ``router.Plan`` orders them."""

    routing: Routing
    plan: router.Plan
    health: Mapping[str, router.Health]
    #: The alias is routed: health is read and written (``Routing.routed``).
    shared: bool
    #: ``router_settings.timeout``: each attempt's upstream timeout where the route wrote none.
    timeout: float | None = None
    #: When the client gives up (``time.perf_counter()``; ``client_deadline``), if it said.
    deadline: float | None = None
    _sent: float = 0.0
    #: The plan as it stood at the last failed attempt (what answers when no other can).
    _answered_by: router.Plan | None = None
    #: A context-window fallback's decision (``router.choose_window``): fits, kept or cut.
    context: str | None = None
    #: The pick is another team's business too (``Routing.hides_deployment``): the answer does
    #: not name the deployment.
    private: bool = False
    #: Deployment id → until when (``time.perf_counter()``) its provider's ``retry-after``
    #: asked not to be sent again: honoured when it is retried after another was tried.
    _held: dict[str, float] = field(default_factory=dict)

    @property
    def deployment(self) -> str:
        return self.plan.current.deployment.id

    @property
    def rc(self) -> RouteConfig:
        """The current attempt's deployment's own route facts."""
        return self.routing.routes[self.deployment]

    @property
    def alias(self) -> str:
        return self.plan.current.deployment.alias

    def headers(self) -> dict[str, str]:
        out = router.headers(self.plan)
        if self.private:
            del out[router.DEPLOYMENT_HEADER]
        if self.context is not None:
            out[CONTEXT_HEADER] = self.context
        return out

    def upstream_timeout(self, rc: RouteConfig) -> RouteConfig:
        """``rc`` with the router's timeout, when ``router_settings`` sets one and the route
        wrote none of its own. LiteLLM resolves a call's timeout as the deployment's
        ``litellm_params.timeout``, then the router's: replacing every route's, a 600 s
        reasoning deployment under a router-wide 30 s timed its long answers out."""
        if self.timeout is None or rc.upstream.own_timeout:
            return rc
        return replace(rc, upstream=replace(rc.upstream, timeout=self.timeout))

    @property
    def retrying(self) -> bool:
        """Whether the router makes the retries of this request: a routed alias, or one whose
        ``num_retries`` (or ``retry_policy``) retries a provider's transient failure. Then the
        transport's own (``upstream_retries``) are not made: one layer of retries at a time."""
        policy = self.plan.policy
        return self.shared or any(policy.retries_for(kind) > 0 for kind in router.RETRYABLE)

    @property
    def tracked(self) -> bool:
        """Whether the alias's strategy reads in-flight counts, latency or usage: only then are
        they written (failures and cooldowns are written for every routed alias)."""
        return self.shared and self.plan.policy.strategy in _TRACKED

    def began(self, tokens: int) -> None:
        """The current attempt is being sent with ``tokens`` of prompt."""
        self._sent = time.perf_counter()
        if self.tracked:
            ident, now = self.deployment, self.routing.clock()
            store = self.routing.store
            self.routing.later("began", lambda: store.deployment_began(ident, tokens, now))

    def answered(self) -> None:
        """The current attempt's deployment answered (headers in: nothing more is retried)."""
        latency = time.perf_counter() - self._sent
        r = self.routing
        ident = self.deployment
        ok, latencies = r.observers(self.alias, ident)
        ok.inc()
        latencies.observe(latency)
        if self.tracked:
            average = router.ended(self.health.get(ident, router.Health()), latency).latency
            r.later("ended", lambda: r.store.deployment_ended(ident, average))

    async def failed(
        self, err: ProxyError, own_key: bool = False, receive: Receive | None = None
    ) -> bool:
        """The current attempt failed before a byte reached the client: recorded, and True
        when another attempt is to be made (after its backoff, waited here). ``own_key``: the
        request carried the client's own provider key (its 401 is the client's). ``receive``:
        the client's, watched during the backoff: a client that leaves (or the drain's cut)
        ends the wait with ``client_closed()`` (``shutting_down()``), no attempt made."""
        kind = failure_kind(err)
        if own_key and kind == "auth":
            kind = "bad_request"
        r, failed = self.routing, self.plan.current
        ident = failed.deployment.id
        r.metrics.deployment_attempts.labels(self.alias, ident, kind).inc()
        if self.tracked:
            r.later("ended", lambda: r.store.deployment_ended(ident, None))
        if self.shared and not (own_key and kind in _KEY_FAULTS):
            await self._record(ident, kind, _hint(err))
        nxt = router.advance(self.plan, router.Outcome(kind))
        if nxt is None:
            return False
        self._answered_by = self.plan
        retry_after = err.retry_after if isinstance(err, Transient) else None
        clock = time.perf_counter()
        if retry_after is not None and retry_after > 0:
            self._held[ident] = max(self._held.get(ident, 0.0), clock + retry_after)
        left = None if self.deadline is None else self.deadline - clock
        held = self._held.get(nxt.current.deployment.id)
        asked = None if held is None else max(0.0, held - clock)
        delay = router.wait(nxt, asked, r.rng.random(), left, r.backoff)
        if delay is None and nxt.current.reason == "retry":
            # a retry that cannot be waited for is not made: the fallbacks still may answer
            onward = router.advance(self.plan, router.Outcome(kind), retry=False)
            if onward is not None:
                held = self._held.get(onward.current.deployment.id)
                later = None if held is None else max(0.0, held - clock)
                if (
                    wait := router.wait(onward, later, r.rng.random(), left, r.backoff)
                ) is not None:
                    nxt, delay = onward, wait
        if delay is None:
            log.info(
                "routing %s: not retrying %s after %s (HTTP %s): the wait (retry-after %.1fs) "
                "is past the cap or the client's deadline (%s)",
                self.alias,
                ident,
                kind,
                err.status,
                asked or 0.0,
                "none" if left is None else f"{left:.2f}s left",
            )
            return False
        self.plan = nxt
        log.info(
            "routing %s: attempt %d on %s (%s) after %s on %s: HTTP %s %s; waiting %.2fs",
            failed.deployment.alias,
            nxt.sent,
            nxt.current.deployment.id,
            nxt.current.reason,
            kind,
            ident,
            err.status,
            err.code or "",
            delay,
        )
        if delay > 0:
            if receive is None:
                await asyncio.sleep(delay)
            else:
                await until_disconnect(receive, asyncio.sleep(delay))
        return True

    def unfit(self, err: ProxyError) -> bool:
        """The current deployment refused the request before it was sent (it cannot be fitted
        there): on to the next deployment or fallback, as after a refused key but recording
        nothing against the deployment; False when none is left (the last failed attempt's
        plan is current again: its failure is the answer)."""
        skipped = self.deployment
        nxt = router.advance(self.plan, router.Outcome(router.SKIPPED))
        if nxt is None:
            self.plan = self._answered_by or self.plan
            return False
        log.info(
            "routing %s: %s skipped, the request cannot go there (%s); attempt %d on %s",
            self.alias,
            skipped,
            err.message,
            nxt.sent,
            nxt.current.deployment.id,
        )
        self.plan = nxt
        return True

    async def _record(self, ident: str, kind: str, hint: float | None = None) -> None:
        """The failure in the shared health; a cooldown when it is one too many, or for the
        provider's ``retry-after`` (``hint``)."""
        r = self.routing
        now = r.clock()
        seen = await r.write("failed", lambda: r.store.deployment_failed(ident, kind, now))
        failures = seen or ()
        before = router.Health(failures=tuple(f for f in failures if f != (now, kind)))
        after = router.failed(before, kind, now, self.plan.policy, hint)
        if after.cooldown_until <= now:
            return
        r.metrics.deployment_cooldowns.labels(self.alias, ident).inc()
        log.info(
            "routing %s: %s cooled down for %gs after %d %s failure(s) within a minute",
            self.alias,
            ident,
            after.cooldown_until - now,
            len(after.failures),
            kind,
        )
        await r.write("cool", lambda: r.store.deployment_cool(ident, after.cooldown_until))

    def explain(
        self, err: ProxyError, own_key: bool = False, wire: str | None = None
    ) -> ProxyError:
        """The answer for the last attempt's failure: a provider refusing routefit's own key
        is the provider's fault (502, naming the deployment, never the key); a provider's
        status the client's SDK does not know (``wire``: the client's) is one it does
        (``provider_errors.client_status``)."""
        if err.origin != "upstream":
            return err
        if own_key or err.status not in (401, 403):
            return _in_client_status(err, wire)
        out = ProxyError(
            502,
            f"{'a deployment' if self.private else f'deployment {self.deployment!r}'} of model "
            f"{self.alias!r} refused routefit's "
            f"provider credentials (HTTP {err.status}); this is not your key's fault",
            code="upstream_auth_failed",
        )
        out.origin = "upstream"
        return out
