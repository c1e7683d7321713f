"""The router's policy: which deployment each attempt of one request goes to.

Pure and clocked, so every decision can be replayed and tested: the caller passes the time
(``now``, seconds), the deployments' state as plain values (``Health``: in flight, latency
average, this minute's usage, recent failures, cooldown) and a seeded ``random.Random``; nothing
here reads a clock, the store or the network. The shell (the gateway, once it routes) reads the
shared health from the store, asks ``plan`` for the first attempt, fits and prices the request
for that attempt's deployment, sends it, reports the outcome to ``advance`` for the next attempt,
and writes ``began``/``ended``/``failed`` back.

The order of attempts, as LiteLLM's router has it: the strategy's pick first; on a retryable
failure (``RETRYABLE``) up to ``num_retries`` retries within the alias, each on a deployment not
yet tried when there is one, else the same one again; then the alias's ``fallbacks`` (or the
``default_fallbacks``), each with its own deployments and retries. A provider's 401/403 is the
deployment's fault, not the client's: the deployment is cooled down and the next one tried
(spending no retry), and it is never tried again in that request; so is a provider's 404 saying
the deployment's model is not there (``not_found``: a deployment misconfigured while its
siblings work is what an alias of several deployments is for), counted towards a cooldown like
any deployment failure. A provider's ``retry-after`` on a retryable failure cools its deployment
for that long (``failed``'s ``hint``): every request before then would be refused the same way.
Nothing is retried once a byte has reached the client. Cooling-down deployments go last, the
soonest to recover first, so cooldowns alone never cause an outage.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from proxy.config.router_settings import CONTEXT_CHOICES, ROUTING_STRATEGIES, RouterSettings
from proxy.config.routes import RouteConfig

__all__ = [
    "ATTEMPTS_HEADER",
    "CONTEXT_CHOICES",
    "DEPLOYMENT_HEADER",
    "RETRYABLE",
    "SKIPPED",
    "Attempt",
    "Backoff",
    "Candidate",
    "Deployment",
    "Health",
    "Outcome",
    "Plan",
    "Policy",
    "advance",
    "began",
    "choose_window",
    "classify",
    "cooling",
    "ended",
    "failed",
    "headers",
    "holding",
    "plan",
    "rank",
    "usage",
    "wait",
    "wider",
]

Kind = Literal[
    "connection",
    "timeout",
    "rate_limit",
    "server",
    "auth",
    "not_found",
    "bad_request",
    "content_policy",
]
#: The outcome of a deployment that could not take the request (its window, its image rule,
#: its missing key): nothing was sent; on to the next deployment as after a refused key, but
#: not an attempt the client is told of.
SKIPPED = "skipped"
#: Failures worth another attempt: the provider's or the network's, not the request's.
RETRYABLE: frozenset[str] = frozenset({"connection", "timeout", "rate_limit", "server"})
#: Failures of the deployment itself, not of the request nor of the moment: its key refused
#: (``auth``), its model not there (``not_found``). The next deployment is tried at once, spending
#: no retry, and this one never again in the request.
_DEPLOYMENT_FAULTS = frozenset({"auth", "not_found"})
#: Kinds counted by LiteLLM's per-kind policies under another kind's name.
_POLICY_KIND = {"connection": "server"}
#: Kinds that never cool a deployment down unless ``allowed_fails_policy`` names them: the
#: request's fault, not the deployment's.
_REQUEST_FAULTS = frozenset({"bad_request", "content_policy"})
_MINUTE = 60.0
Reason = Literal["first", "retry", "next_deployment", "fallback"]


def classify(status: int | None, *, timed_out: bool = False, content_policy: bool = False) -> Kind:
    """A provider's answer → the kind of failure (``status`` None: no answer at all)."""
    if status is None:
        return "timeout" if timed_out else "connection"
    if status == 408 or timed_out:
        return "timeout"
    if status == 429:
        return "rate_limit"
    if status in (401, 402, 403):  # 402: the account behind the key cannot pay (DeepSeek,
        return "auth"  # OpenRouter): the deployment's, as a refused key is
    if status == 409 or status >= 500:  # 529: Anthropic's "overloaded"
        return "server"
    return "content_policy" if content_policy else "bad_request"


@dataclass(frozen=True, slots=True)
class Deployment:
    """What the policy needs of one deployment; its route facts stay on its RouteConfig."""

    id: str
    alias: str
    weight: float = 1.0
    rpm: int | None = None
    tpm: int | None = None
    #: USD per token, prompt and output together (cost-based-routing); None: unknown, last.
    cost_per_token: float | None = None
    #: LiteLLM's ``order`` (None: none written, after every ordered deployment).
    order: int | None = None

    @classmethod
    def of(cls, rc: RouteConfig) -> Deployment:
        prices = (rc.input_cost_per_token, rc.output_cost_per_token)
        cost = None if None in prices else sum(p for p in prices if p is not None)
        return cls(rc.deployment_id, rc.route.alias, rc.weight, rc.rpm, rc.tpm, cost, rc.order)


@dataclass(frozen=True, slots=True)
class Health:
    """One deployment's shared state (the store's, once the gateway routes)."""

    in_flight: int = 0
    #: Exponentially weighted average of answer latencies, seconds; None: none seen yet.
    latency: float | None = None
    #: The minute (``int(now // 60)``) the usage counts belong to; older counts read as 0.
    minute: int = -1
    requests: int = 0
    tokens: int = 0
    #: (time, kind) of the failures in the last minute.
    failures: tuple[tuple[float, str], ...] = ()
    cooldown_until: float = 0.0


@dataclass(frozen=True, slots=True)
class Policy:
    strategy: str = "simple-shuffle"
    num_retries: int = 0
    #: Seconds waited at least before retrying the same deployment (LiteLLM's ``retry_after``).
    retry_after: float = 0.0
    allowed_fails: int = 3
    cooldown_time: float = 5.0
    fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default_fallbacks: tuple[str, ...] = ()
    context_window_fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    retry_policy: Mapping[str, int] = field(default_factory=dict)
    allowed_fails_policy: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.strategy not in ROUTING_STRATEGIES:
            raise ValueError(f"unknown routing strategy {self.strategy!r}")

    @classmethod
    def of(cls, settings: RouterSettings) -> Policy:
        return cls(
            strategy=settings.routing_strategy,
            num_retries=settings.num_retries,
            retry_after=settings.retry_after,
            allowed_fails=settings.allowed_fails,
            cooldown_time=settings.cooldown_time,
            fallbacks=settings.fallbacks,
            default_fallbacks=settings.default_fallbacks,
            context_window_fallbacks=settings.context_window_fallbacks,
            retry_policy=settings.retry_policy,
            allowed_fails_policy=settings.allowed_fails_policy,
        )

    def retries_for(self, kind: str) -> int:
        """Retries a failure of this kind earns (auth moves on without spending one)."""
        named = self.retry_policy.get(_POLICY_KIND.get(kind, kind))
        if named is not None:
            return named
        return self.num_retries if kind in RETRYABLE else 0

    def allowed_for(self, kind: str) -> int | None:
        """Failures of this kind allowed within a minute; None: they never cool down."""
        named = self.allowed_fails_policy.get(_POLICY_KIND.get(kind, kind))
        if named is not None:
            return named
        if kind == "auth":
            return 0  # a refused key stays refused: cool down at once
        return None if kind in _REQUEST_FAULTS else self.allowed_fails


# --- health: pure transitions the shell writes back to the store ------------------------------


def cooling(health: Health, now: float) -> bool:
    return now < health.cooldown_until


def usage(health: Health, now: float) -> tuple[int, int]:
    """(requests, tokens) counted in the current minute."""
    if health.minute != int(now // _MINUTE):
        return 0, 0
    return health.requests, health.tokens


def began(health: Health, tokens: int, now: float) -> Health:
    """An attempt sent: one more in flight, counted against this minute's rpm/tpm."""
    requests, used = usage(health, now)
    return replace(
        health,
        in_flight=health.in_flight + 1,
        minute=int(now // _MINUTE),
        requests=requests + 1,
        tokens=used + max(0, tokens),
    )


def ended(health: Health, latency: float | None, alpha: float = 0.3) -> Health:
    """An attempt over (answered or not): one fewer in flight; an answer's latency averaged."""
    average = health.latency
    if latency is not None:
        average = latency if average is None else alpha * latency + (1 - alpha) * average
    return replace(health, in_flight=max(0, health.in_flight - 1), latency=average)


def failed(
    health: Health, kind: str, now: float, policy: Policy, hint: float | None = None
) -> Health:
    """A failure recorded; more than the kind's allowed failures within a minute cools the
    deployment down for ``cooldown_time``. ``hint``: the provider's own ``retry-after`` (seconds)
    on a retryable failure: the deployment cools down at least that long whatever the count,
    since every request sent there before then is refused the same way (a 429 saying "in 30 s"
    was tried again by every request of those 30 s, each an attempt spent and another 429)."""
    recent = (*(f for f in health.failures if now - f[0] < _MINUTE), (now, kind))
    until = health.cooldown_until
    if hint is not None and kind in RETRYABLE and 0 < hint < math.inf:
        until = max(until, now + hint)
    allowed = policy.allowed_for(kind)
    if allowed is None:
        return replace(health, failures=recent, cooldown_until=until)
    same = _POLICY_KIND.get(kind, kind)
    count = sum(1 for _, k in recent if _POLICY_KIND.get(k, k) == same)
    if count > allowed:
        until = max(until, now + policy.cooldown_time)
    return replace(health, failures=recent, cooldown_until=until)


# --- ranking: the strategy's order of one alias's deployments ---------------------------------


def _has_room(d: Deployment, h: Health, tokens: int, now: float) -> bool:
    requests, used = usage(h, now)
    rpm_ok = d.rpm is None or requests + 1 <= d.rpm
    return rpm_ok and (d.tpm is None or used + tokens <= d.tpm)


def _shuffle(ready: Sequence[Deployment], rng: random.Random) -> list[Deployment]:
    """Weighted sampling without replacement: the first pick is ``weight / total``. A weight
    of 0 (a deployment without the ``rpm`` its siblings are weighed by) is picked after every
    weighted one, and those left all at 0 evenly, as LiteLLM's ``random.choice`` does."""
    left, out = list(ready), []
    while left:
        total = sum(d.weight for d in left)
        if total <= 0:
            out.append(left.pop(rng.randrange(len(left))))
            continue
        point = rng.random() * total
        for i, d in enumerate(left):
            point -= d.weight
            if point < 0 or i == len(left) - 1:
                out.append(left.pop(i))
                break
    return out


def rank(
    deployments: Sequence[Deployment],
    health: Mapping[str, Health],
    policy: Policy,
    tokens: int,
    now: float,
    rng: random.Random,
) -> tuple[Deployment, ...]:
    """The alias's deployments in the order the strategy would try them: those cooling down
    last, the soonest to recover first. ``order`` comes before the strategy, as in LiteLLM
    (which picks among the lowest order's healthy deployments only): the ready ones are
    ranked by the strategy, then stably by order, so a higher order is reached once the
    lower's are tried or cooling down, and the strategy decides within one order."""
    h = {d.id: health.get(d.id, Health()) for d in deployments}
    ready = [d for d in deployments if not cooling(h[d.id], now)]
    cold = sorted(
        (d for d in deployments if cooling(h[d.id], now)), key=lambda d: h[d.id].cooldown_until
    )
    if policy.strategy == "simple-shuffle":
        return (*_by_order(_shuffle(ready, rng)), *cold)
    tie = {d.id: rng.random() for d in ready}
    keys = {
        "least-busy": lambda d: (h[d.id].in_flight, tie[d.id]),
        "latency-based-routing": lambda d: (h[d.id].latency or 0.0, tie[d.id]),
        "usage-based-routing-v2": lambda d: (
            not _has_room(d, h[d.id], tokens, now),
            usage(h[d.id], now)[1],
            tie[d.id],
        ),
        "cost-based-routing": lambda d: (
            math.inf if d.cost_per_token is None else d.cost_per_token,
            tie[d.id],
        ),
    }
    return (*_by_order(sorted(ready, key=keys[policy.strategy])), *cold)


def _by_order(ranked: Sequence[Deployment]) -> list[Deployment]:
    """``ranked`` stably sorted by ``order``, the unordered last: within one order the
    strategy's ranking stands (a weighted shuffle's subsequence is itself weighted)."""
    return sorted(ranked, key=lambda d: (d.order is None, d.order or 0))


# --- one request's attempts --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attempt:
    number: int  # 1-based: the attempts header
    deployment: Deployment
    reason: Reason


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended. ``kind`` None: answered. ``relayed``: a byte reached the client,
    so whatever happens next is the client's to see, never another attempt."""

    kind: str | None = None
    relayed: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    """One request's route through its alias and fallbacks; ``current`` is the attempt to make."""

    policy: Policy
    #: The alias's ranked deployments, then each fallback alias's.
    groups: tuple[tuple[Deployment, ...], ...]
    attempts: tuple[Attempt, ...]
    group: int = 0
    retries: int = 0
    #: Deployments refused for authentication in this request, or skipped as unable to take
    #: it: never tried again.
    refused: frozenset[str] = frozenset()
    #: Attempts skipped before anything was sent (``SKIPPED``): in the plan, not in the count
    #: of attempts the client is told.
    skipped: int = 0

    @property
    def current(self) -> Attempt:
        return self.attempts[-1]

    @property
    def sent(self) -> int:
        """Attempts that reached (or are reaching) a provider: the current one included."""
        return self.current.number - self.skipped


def _chain(alias: str, policy: Policy) -> tuple[str, ...]:
    after = policy.fallbacks.get(alias, policy.default_fallbacks)
    out = [alias]
    for name in after:
        if name not in out:
            out.append(name)
    return tuple(out)


def plan(
    alias: str,
    table: Mapping[str, Sequence[Deployment]],
    health: Mapping[str, Health],
    policy: Policy,
    tokens: int,
    now: float,
    rng: random.Random,
) -> Plan | None:
    """The first attempt for a request of ``alias`` (None: the alias has no deployment).
    ``table`` holds the aliases the request may use: the caller leaves out those its team may
    not, and a fallback to one of them is skipped."""
    groups = tuple(
        ranked
        for name in _chain(alias, policy)
        if (ranked := rank(table.get(name, ()), health, policy, tokens, now, rng))
    )
    if not table.get(alias) or not groups:
        return None
    return Plan(policy, groups, (Attempt(1, groups[0][0], "first"),))


def _within(p: Plan, reason: Reason, refused: frozenset[str]) -> Deployment | None:
    """The group's next deployment: untried first (in rank order), else the least tried."""
    tried = [a.deployment.id for a in p.attempts]
    open_ = [d for d in p.groups[p.group] if d.id not in refused]
    untried = [d for d in open_ if d.id not in tried]
    if untried:
        return untried[0]
    if reason == "next_deployment" or not open_:
        return None
    return min(open_, key=lambda d: tried.count(d.id))  # min keeps rank order among equals


def advance(p: Plan, outcome: Outcome, retry: bool = True) -> Plan | None:
    """The plan with its next attempt, or None when the last outcome is the answer.
    ``retry`` False: no retry within the alias (one that could not be waited for: ``wait``);
    on to the next deployment or fallback as when the retries are spent."""
    kind = outcome.kind
    if kind is None or outcome.relayed:
        return None
    skipped = p.skipped + (kind == SKIPPED)
    if kind == SKIPPED:
        kind = "auth"  # moves on the same way: to the next deployment, never this one again
    moving = kind in _DEPLOYMENT_FAULTS
    if kind not in RETRYABLE and not moving:
        # The request's own fault: its answer, unless retry_policy names the kind (LiteLLM's
        # BadRequestErrorRetries); never a fallback, which would fail the same way.
        if not retry or p.retries >= p.policy.retries_for(kind):
            return None
        found = _within(p, "retry", p.refused)
        if found is None:
            return None
        attempt = Attempt(p.current.number + 1, found, "retry")
        return replace(p, attempts=(*p.attempts, attempt), retries=p.retries + 1)
    refused = p.refused | {p.current.deployment.id} if moving else p.refused
    number = p.current.number + 1
    if moving:
        found = _within(p, "next_deployment", refused)
        if found is not None:
            return replace(
                p,
                attempts=(*p.attempts, Attempt(number, found, "next_deployment")),
                refused=refused,
                skipped=skipped,
            )
    elif retry and p.retries < p.policy.retries_for(kind):
        found = _within(p, "retry", refused)
        if found is not None:
            attempt = Attempt(number, found, "retry")
            return replace(p, attempts=(*p.attempts, attempt), retries=p.retries + 1)
    for group in range(p.group + 1, len(p.groups)):
        first = next((d for d in p.groups[group] if d.id not in refused), None)
        if first is not None:
            attempt = Attempt(number, first, "fallback")
            return replace(
                p,
                attempts=(*p.attempts, attempt),
                group=group,
                retries=0,
                refused=refused,
                skipped=skipped,
            )
    return None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Jittered exponential waits: retry ``k`` (0-based) of one deployment waits
    ``min(cap, base * 2**k) * (1 - jitter * u)``, at least the policy's ``retry_after`` and the
    provider's ``retry-after``; a wait over ``max_wait`` is not waited."""

    base: float = 0.1
    cap: float = 8.0
    jitter: float = 0.5
    max_wait: float = 30.0


def wait(
    p: Plan,
    retry_after: float | None,
    u: float,
    deadline: float | None = None,
    backoff: Backoff = Backoff(),
) -> float | None:
    """Seconds to wait before ``p.current``, given the ``retry-after`` its deployment's last
    failure still asks for (seconds left of it) and a uniform ``u`` in [0, 1); None: do not
    make the attempt (the wait passes ``max_wait`` or the client's ``deadline``, seconds left),
    the last failure is the answer. An attempt on a deployment not yet tried goes at once: the
    wait is for the deployment that failed, not the request — also when another deployment was
    tried in between (A, B, then A again: A's own backoff and ``retry-after``)."""
    ident = p.current.deployment.id
    same = sum(1 for attempt in p.attempts[:-1] if attempt.deployment.id == ident)
    if same == 0:
        return 0.0
    delay = min(backoff.cap, backoff.base * 2.0 ** (same - 1)) * (1.0 - backoff.jitter * u)
    delay = max(delay, p.policy.retry_after, retry_after or 0.0)
    if delay > backoff.max_wait or (deadline is not None and delay >= deadline):
        return None
    return delay


#: The response headers naming the deployment that answered and the attempts it took.
DEPLOYMENT_HEADER = "x-routefit-deployment"
ATTEMPTS_HEADER = "x-routefit-attempts"


def headers(p: Plan) -> dict[str, str]:
    """What the response says of its route: the answering deployment, the attempts made."""
    return {DEPLOYMENT_HEADER: p.current.deployment.id, ATTEMPTS_HEADER: str(p.sent)}


# --- context-window fallbacks: a decision input -------------------------------------------------


def holding(budgets: Mapping[str, int], tokens: Mapping[str, int] | int) -> tuple[str, ...]:
    """The candidates (deployment id → its prompt budget) that hold the conversation whole, in
    the order given. ``tokens`` is the request's estimate, per candidate when they count
    differently (each candidate's own tokenizer, framing and image rule: the caller prices the
    request for each) or one figure for all."""

    def need(name: str) -> int:
        return tokens if isinstance(tokens, int) else tokens[name]

    return tuple(name for name, budget in budgets.items() if need(name) <= budget)


def wider(alias: str, policy: Policy) -> tuple[str, ...]:
    """The aliases a conversation too long for ``alias`` may go to whole
    (``context_window_fallbacks``), in the configured order; ``holding`` says which do."""
    return policy.context_window_fallbacks.get(alias, ())


@dataclass(frozen=True, slots=True)
class Candidate:
    """One deployment the conversation may go to, priced for it: ``tokens`` counted by its own
    tokenizer and framing, ``budget`` its prompt budget, ``cost_per_token`` its prompt price."""

    id: str
    budget: int
    tokens: int
    cost_per_token: float | None = None

    @property
    def kept(self) -> float:
        """The share of the conversation it holds (1.0: whole)."""
        return 1.0 if self.tokens <= self.budget else self.budget / max(1, self.tokens)

    @property
    def cost(self) -> float:
        price = math.inf if self.cost_per_token is None else self.cost_per_token
        return min(self.tokens, self.budget) * price


def choose_window(
    chosen: Candidate, wider: Sequence[Candidate], choice: str
) -> tuple[Candidate, str]:
    """Where a conversation goes when ``chosen`` would cut it, and the word the response says:
    ``fits`` (no cut on ``chosen``), ``kept`` (a wider candidate holds more: the first holding
    it whole, else the one holding most), ``cut`` (it stays on ``chosen``, fitted). ``keep_more``
    takes the wider one whenever one holds more; ``pay_less`` only when it is cheaper as sent
    (a candidate's unknown price never is)."""
    if choice not in CONTEXT_CHOICES:
        raise ValueError(f"unknown context choice {choice!r}")
    if chosen.kept >= 1.0:
        return chosen, "fits"
    better = [c for c in wider if c.kept > chosen.kept]
    if not better:
        return chosen, "cut"
    if choice == "keep_more":
        return next((c for c in better if c.kept >= 1.0), max(better, key=lambda c: c.kept)), "kept"
    if chosen.cost_per_token is None:
        return chosen, "cut"  # nothing to compare: paying less cannot be shown
    cheapest = min(better, key=lambda c: c.cost)
    return (cheapest, "kept") if cheapest.cost < chosen.cost else (chosen, "cut")
