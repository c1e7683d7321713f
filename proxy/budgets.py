"""Team budgets: reserve before forwarding, settle to the provider's usage after.

The classic failure is check-then-increment: two replicas both see room and both admit. Here a
request *reserves* its worst case (calibrated prompt estimate + output reserve, and its cost at the
route's prices) against every window of the team in one atomic store operation — all windows or
none — and the reservation is settled to the actual usage when the response ends, or released
when the upstream fails or the client goes away. A team can therefore overshoot a quota by at most
what its requests in flight under-reserved — an uncapped request is held at the route's output
reservation but may be billed up to its output limit (docs/configuration.md, "quotas") — never
by the number of replicas.

When the store cannot answer, ``budget_failure_mode`` decides: ``open`` admits the request
unbudgeted (counted in metrics, logged once per outage), ``closed`` answers 503.

No reservation outlives its request (docs/security.md, "Charging on every exit"): a store call
runs to its end even when its caller is cancelled (the drain's deadline), a reservation the store
made for a caller that was cancelled meanwhile is released, and a settlement the store could not
take is kept (bounded) and made again once the store answers.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.config import RouteConfig
from proxy.errors import ProxyError
from proxy.metrics import Metrics
from proxy.store import BudgetWindow, Reservation, Store, StoreUnavailable, WindowState
from proxy.store.codec import MAX_AMOUNT
from proxy.teams import Team
from proxy.usage import Usage

__all__ = ["Budgets", "Held", "rate_limit_headers"]

log = logging.getLogger("routefit.budgets")

#: Settlements the store could not take, kept to be made again: beyond this many (an outage
#: that long), the oldest stay charged until their windows end, as they did before any retry.
UNSETTLED_CAP = 10_000

#: One settlement to make: (team id, reservation token, the amounts per window).
Settlement = tuple[str, str, list[tuple[BudgetWindow, int]]]


@dataclass(slots=True)
class Held:
    """A reservation held for one request, to settle or release exactly once."""

    team: Team
    rc: RouteConfig
    token: str
    amounts: list[tuple[BudgetWindow, int]]
    windows: tuple[WindowState, ...]
    settled: bool = False


def _micro_usd(rc: RouteConfig, prompt: int, completion: int) -> int:
    cost = prompt * (rc.input_cost_per_token or 0.0) + completion * (
        rc.output_cost_per_token or 0.0
    )
    return math.ceil(cost * 1e6)


def _amount(window: BudgetWindow, rc: RouteConfig, prompt: int, completion: int) -> int:
    if window.kind == "month":
        return _micro_usd(rc, prompt, completion)
    return prompt + completion


def _beyond(team: Team, needed: list[tuple[BudgetWindow, int]], prompt: int, output: int) -> None:
    """Refuse, as the client's error, a request that needs more than a window's whole limit:
    no wait could ever admit it, so a 429 with a retry-after (the window's end) would promise
    an admission that never comes, and a client that honours it retries forever. It is a 400 in
    the client's wire (``invalid_request_error``, Google's ``INVALID_ARGUMENT``) naming the
    window, its limit and what the request asked, so that the client can lower its output cap
    or its number of answers (chat's ``n``, Gemini's ``candidateCount``: each multiplies the
    output reservation). What passes is within every limit, so within the stores' bound
    (``MAX_AMOUNT``, the cap kept for a limit above it): an ``n`` of 10¹³ had raised their
    ``ValueError`` as a 500."""
    over = [(w, amount) for w, amount in needed if amount > w.limit]
    if not over:
        return
    asked = ", ".join(
        f"{_units(w, amount)} against its whole {w.name} limit of {_units(w, w.limit)}"
        for w, amount in over
    )
    raise ProxyError(
        400,
        f"team {team.id!r} could never admit this request: it needs {asked} ({prompt:,} "
        f"prompt tokens and {output:,} reserved for the output); lower the output cap or the "
        "number of answers",
        code="request_over_quota",
    )


def _units(window: BudgetWindow, amount: int) -> str:
    """``amount`` of ``window`` as a client reads it: tokens, or dollars (micro-USD)."""
    return f"${amount / 1e6:,.2f}" if window.kind == "month" else f"{amount:,} tokens"


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``1m30s``, ``6s``, ``250ms``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, secs = divmod(math.ceil(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return out + (f"{secs}s" if secs or not out else "")


def rate_limit_headers(windows: Sequence[WindowState]) -> dict[str, str]:
    """``x-ratelimit-*-tokens`` from the tightest token window (per minute, else per day)."""
    tokens = [w for w in windows if w.name in ("tokens_per_minute", "tokens_per_day")]
    if not tokens:
        return {}
    w = tokens[0]
    return {
        "x-ratelimit-limit-tokens": str(w.limit),
        "x-ratelimit-remaining-tokens": str(max(0, w.limit - w.used)),
        "x-ratelimit-reset-tokens": _duration(w.reset_seconds),
    }


class Budgets:
    def __init__(self, store: Store, metrics: Metrics, failure_mode: str = "open") -> None:
        self.store = store
        self.metrics = metrics
        self.failure_mode = failure_mode
        self._down = False
        self._unsettled: deque[Settlement] = deque(maxlen=UNSETTLED_CAP)
        self._tasks: set[asyncio.Task[None]] = set()
        self._retrying = False

    async def reserve(
        self, team: Team | None, rc: RouteConfig, prompt: int, output: int
    ) -> Held | None:
        """Reserve ``prompt + output`` tokens (and their cost) in every window of the team.

        Returns None when there is nothing to enforce (no team, no quotas, or the store is down
        in open mode); raises ProxyError 429 when over quota, 400 when over a window's whole
        limit (``_beyond``), 503 when down in closed mode.
        """
        if team is None:
            return None
        windows = team.quotas.windows()
        if not windows:
            return None
        needed = [(w, _amount(w, rc, prompt, output)) for w in windows]
        _beyond(team, needed, prompt, output)
        amounts = [(w, min(amount, MAX_AMOUNT)) for w, amount in needed]
        try:
            result = await self._reserved(team.id, amounts)
        except StoreUnavailable:
            self._unavailable()
            return None
        self._recovered()
        self._retry_unsettled()
        if not result.admitted or result.token is None:
            exhausted = [
                w.name
                for w, (win, amount) in zip(result.windows, needed, strict=True)
                if w.used + amount > win.limit
            ]
            retry = max(1, math.ceil(result.retry_after))
            raise ProxyError(
                429,
                f"team {team.id!r} is over its quota ({', '.join(exhausted) or 'budget'}): this "
                f"request needs about {prompt + output:,} tokens; retry in {retry}s",
                code="rate_limit_exceeded",
                headers={"retry-after": str(retry), **rate_limit_headers(result.windows)},
            )
        return Held(team, rc, result.token, amounts, result.windows)

    async def charge(self, team: Team | None, rc: RouteConfig, usage: Usage) -> None:
        """Charge ``usage`` spent without a hold that covers it: the provider read a prompt the
        team's quota then could not hold (a sampled request the count proved dearer than its
        guess). A hold of nothing is admitted in every window whatever its use (the stores
        refuse only a positive amount over the limit), then settled at ``usage``: a charge is
        a record of what was spent, not a request for room."""
        await self.settle(await self.reserve(team, rc, 0, 0), usage, False)

    async def settle(self, held: Held | None, usage: Usage | None, released: bool) -> None:
        """Settle to the actual usage, or release (amounts 0) when nothing was served."""
        if held is None or held.settled:
            return
        held.settled = True
        if released or usage is None:
            actual = [(w, 0) for w, _ in held.amounts]
        else:
            actual = [
                (w, _amount(w, held.rc, usage.billed_prompt, usage.completion_tokens))
                for w, _ in held.amounts
            ]
        # Shielded: a caller cancelled now (the drain's deadline) must not leave it half done.
        await asyncio.shield(self._spawn(self._settle((held.team.id, held.token, actual))))

    async def _reserved(self, team_id: str, amounts: list[tuple[BudgetWindow, int]]) -> Reservation:
        """The store's reservation, made whole even when the caller is cancelled while the store
        works: the store charges the team all the same (SQLite's thread, a Lua script already
        sent), and nobody would hold the token to release it until its window ends — a month,
        for a dollar quota. Such an orphan is released as soon as the store answers."""
        call = asyncio.ensure_future(self.store.reserve(team_id, amounts))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            call.add_done_callback(lambda done: self._orphaned(team_id, amounts, done))
            raise

    def _orphaned(
        self, team_id: str, amounts: list[tuple[BudgetWindow, int]], call: asyncio.Future[Any]
    ) -> None:
        if call.cancelled() or call.exception() is not None:
            return
        result: Reservation = call.result()
        if result.admitted and result.token is not None:
            self._spawn(self._settle((team_id, result.token, [(w, 0) for w, _ in amounts])))

    async def _settle(self, settlement: Settlement) -> None:
        """One settlement; kept for later when the store cannot take it now, so a blip does not
        hold a reservation for the rest of its window (the store's per-token marker makes a
        settlement made twice count once)."""
        team_id, token, actual = settlement
        try:
            await self.store.settle(team_id, token, actual)
        except StoreUnavailable:
            self.metrics.budget_failures.labels("settle").inc()
            self._unsettled.append(settlement)
            return
        self._retry_unsettled()

    def _retry_unsettled(self) -> None:
        """The store answered: the settlements it could not take before are made now, one at a
        time, off the request's path."""
        if self._unsettled and not self._retrying:
            self._retrying = True
            self._spawn(self._drain_unsettled())

    async def _drain_unsettled(self) -> None:
        try:
            while self._unsettled:
                team_id, token, actual = settlement = self._unsettled.popleft()
                try:
                    await self.store.settle(team_id, token, actual)
                except StoreUnavailable:
                    self._unsettled.appendleft(settlement)
                    return  # still away: the next answer from the store retries
                except Exception:
                    log.exception("dropping a settlement the store refuses for team %s", team_id)
        finally:
            self._retrying = False

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task held until it ends (the loop keeps only weak references)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def usage(self, team: Team) -> list[WindowState]:
        try:
            return await self.store.usage(team.id, team.quotas.windows())
        except StoreUnavailable:
            raise ProxyError(
                503, "the budget store is unavailable", code="store_unavailable"
            ) from None

    def _unavailable(self) -> None:
        self.metrics.budget_failures.labels(self.failure_mode).inc()
        if not self._down:
            self._down = True
            log.warning(
                "budget store unavailable: %s requests (budget_failure_mode=%s)",
                "admitting unbudgeted" if self.failure_mode == "open" else "refusing",
                self.failure_mode,
            )
        if self.failure_mode == "closed":
            raise ProxyError(
                503,
                "the budget store is unavailable and this deployment fails closed; retry shortly",
                code="store_unavailable",
                headers={"retry-after": "1"},
            )

    def _recovered(self) -> None:
        if self._down:
            self._down = False
            log.warning("budget store is back; budgets enforced again")
