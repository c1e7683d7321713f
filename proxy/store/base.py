"""The store contract (async). Implementations: ``redis.RedisStore``, ``sqlite.SqliteStore``.

Keys are per route for calibration and per team for budgets and stored responses; the Redis
implementation hash-tags them (``{rf:route:<name>}`` / ``{rf:team:<id>}``) so every multi-key
operation stays in one Redis Cluster slot.

Failures: any operation may raise ``StoreUnavailable`` when the backend cannot be reached; callers
decide what that means (calibration keeps its last known state; budgets follow the configured
fail-open / fail-closed mode). Implementations must not hang: every call has a timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pricing.calibration import Anchor, Sample

__all__ = [
    "FAILURE_WINDOW",
    "HEALTH_TTL",
    "MONTH",
    "PERIODS",
    "AnchorWrite",
    "BudgetWindow",
    "DeploymentHealth",
    "Reservation",
    "Store",
    "StoreObserver",
    "StoreUnavailable",
    "WindowState",
    "anchor_keys",
    "check_request_cap",
    "check_response_args",
    "check_team_bytes",
    "deployment_tag",
    "requests_key",
    "response_key",
    "route_tag",
    "team_tag",
    "window_bucket",
]


class StoreUnavailable(Exception):
    """The backend did not answer (connection refused, timeout, ...)."""


@dataclass(frozen=True, slots=True)
class BudgetWindow:
    """One quota of a team: at most ``limit`` units per window.

    ``kind``: ``minute`` / ``day`` (fixed windows of 60 s / 86,400 s aligned to the epoch, UTC)
    or ``month`` (the UTC calendar month). ``unit``: ``tokens`` or ``micro_usd``.
    """

    name: str  # e.g. "tpm", "tpd", "usd_month"
    kind: str
    limit: int


@dataclass(frozen=True, slots=True)
class WindowState:
    name: str
    limit: int
    used: int  # settled + outstanding reservations in the current window
    reset_seconds: float  # until the current window ends


@dataclass(frozen=True, slots=True)
class Reservation:
    """The outcome of ``reserve``. ``token`` identifies the exact window buckets charged, so
    ``settle`` adjusts those buckets even if a window rolled over in between."""

    admitted: bool
    token: str | None  # None when not admitted
    windows: tuple[WindowState, ...]
    #: When not admitted: seconds until the first exhausted window resets.
    retry_after: float = 0.0


#: Seconds a deployment's failures count toward its cooldown (LiteLLM's "within a minute").
FAILURE_WINDOW = 60.0
#: Seconds a deployment's health outlives its last write: a replica that died with requests in
#: flight leaves its counts behind, and they must not make the deployment look busy for ever.
HEALTH_TTL = 600


@dataclass(frozen=True, slots=True)
class DeploymentHealth:
    """One deployment's shared health as the store holds it (``proxy.router.Health`` is the
    router's view of the same facts; the store does not import the router)."""

    in_flight: int = 0
    #: The answers' latency average, seconds; None: none seen yet.
    latency: float | None = None
    #: ``int(now // 60)`` of the usage counts below.
    minute: int = -1
    requests: int = 0
    tokens: int = 0
    #: (time, kind) of the failures within ``FAILURE_WINDOW``, oldest first.
    failures: tuple[tuple[float, str], ...] = ()
    cooldown_until: float = 0.0


#: One anchor to write: (route, prefix key, anchor).
AnchorWrite = tuple[str, bytes, Anchor]


class Store(Protocol):
    name: str
    #: Whether other processes see what this one writes (Redis: yes; the embedded store: no).
    #: Anchors a process wrote itself are answered from its memory; only a shared store is
    #: worth a round trip on a local miss.
    shared: bool

    # -- calibration -----------------------------------------------------------------------
    async def record_sample(self, sample: Sample) -> None:
        """Append a sample to the route's capped history (the newest N are kept)."""
        ...

    async def record_batch(
        self, samples: Sequence[Sample], anchors: Sequence[AnchorWrite], ttl: float
    ) -> None:
        """Samples and anchors together, in one round trip (the background writer batches)."""
        ...

    async def recent_samples(self, route: str, limit: int) -> list[Sample]:
        """The route's newest samples, oldest first, at most ``limit``."""
        ...

    async def put_anchor(self, route: str, key: bytes, anchor: Anchor, ttl: float) -> None: ...

    async def find_anchor(self, route: str, keys: Sequence[bytes]) -> tuple[int, Anchor] | None:
        """The first of ``keys`` (callers order them longest prefix first) that has an anchor,
        as (its index in ``keys``, the anchor), in one round trip."""
        ...

    # -- budgets ---------------------------------------------------------------------------
    async def reserve(self, team: str, windows: Sequence[tuple[BudgetWindow, int]]) -> Reservation:
        """Atomically: if every window has room for its amount, charge all of them; else
        charge none. ``windows`` pairs each window with the amount to reserve in it."""
        ...

    async def settle(
        self, team: str, token: str, windows: Sequence[tuple[BudgetWindow, int]]
    ) -> None:
        """Replace a reservation's amounts with the actual ones (0 releases it entirely)."""
        ...

    async def usage(self, team: str, windows: Sequence[BudgetWindow]) -> list[WindowState]: ...

    # -- stored responses (the Responses wire's ``previous_response_id``) --------------------
    async def put_response(
        self,
        team: str,
        response_id: str,
        data: bytes,
        ttl_seconds: int,
        team_bytes: int | None = None,
    ) -> bool:
        """Store (or replace) a team's response for ``ttl_seconds`` (>= 1); True when stored.

        ``team_bytes`` bounds the bytes of the team's live records together, atomically on
        every replica (None: unbounded). At the bound the team's records nearest their expiry
        (its oldest: one TTL for all) are evicted, oldest first, until the new one fits: one
        team never fills a store every team's budgets share. A record larger than the bound by
        itself is not stored (False) and evicts nothing."""
        ...

    async def response_bytes(self, team: str) -> int:
        """The bytes of the team's live stored responses as the bound counts them (expired
        records released)."""
        ...

    async def get_response(self, team: str, response_id: str) -> bytes | None:
        """The team's stored response, or None when absent or expired (another team's
        response of the same id is never visible)."""
        ...

    async def delete_response(self, team: str, response_id: str) -> bool:
        """Forget a stored response; True when one was there (and not expired)."""
        ...

    # -- the request log (``proxy.records``) ---------------------------------------------------
    async def record_request(self, team: str, data: bytes, cap: int) -> None:
        """Append one request's record (opaque bytes) to the team's list, keeping its newest
        ``cap`` (>= 1): the list is bounded whatever the traffic."""
        ...

    async def record_requests(self, items: Sequence[tuple[str, bytes]], cap: int) -> None:
        """``record_request`` for each (team, record) of ``items``, in order, in one write (one
        transaction, one round trip): the request log writes its records in batches."""
        ...

    async def recent_requests(self, team: str, limit: int) -> list[bytes]:
        """The team's newest records, newest first, at most ``limit``."""
        ...

    # -- deployment health (``proxy.routing``): shared by every replica ----------------------
    async def deployment_health(
        self, ids: Sequence[str], now: float
    ) -> dict[str, DeploymentHealth]:
        """The health of each of ``ids`` at unix time ``now``, in ONE round trip (the hot path
        of a routed request); a deployment never written reads as ``DeploymentHealth()``."""
        ...

    async def deployment_began(self, id: str, tokens: int, now: float) -> None:
        """An attempt sent: one more in flight, one request and ``tokens`` in ``now``'s minute."""
        ...

    async def deployment_ended(self, id: str, latency: float | None) -> None:
        """An attempt over: one fewer in flight (never below 0); ``latency``, when given, is the
        new latency average (the caller averages: a lost update only blurs an average)."""
        ...

    async def deployment_failed(
        self, id: str, kind: str, now: float
    ) -> tuple[tuple[float, str], ...]:
        """Record a failure of ``kind`` at ``now``; the failures within ``FAILURE_WINDOW``
        (this one last), as every replica recorded them, so the caller can decide a cooldown."""
        ...

    async def deployment_cool(self, id: str, until: float) -> None:
        """Cool the deployment down until unix time ``until`` (a later cooldown is kept)."""
        ...

    # -- lifecycle -------------------------------------------------------------------------
    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


class StoreObserver(Protocol):
    """Receives every store operation's outcome (``proxy.metrics.Metrics`` is one), so latency
    and errors per operation reach /metrics without the store knowing about Prometheus."""

    def store_op(self, op: str, seconds: float, error: str | None) -> None:
        """One call of ``op`` ended after ``seconds``; ``error`` names its failure, or None."""
        ...

    def store_retry(self, op: str, error: str) -> None:
        """One attempt of ``op`` failed with a transient ``error`` and is being retried."""
        ...


def check_response_args(response_id: str, ttl_seconds: int | None = None) -> None:
    """Reject what no store can honour: an empty id, a TTL below one second."""
    if not isinstance(response_id, str) or not response_id:
        raise ValueError("response_id must be a non-empty string")
    if ttl_seconds is not None and (
        isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or ttl_seconds < 1
    ):
        raise ValueError(f"ttl_seconds must be an integer >= 1, not {ttl_seconds!r}")


def check_team_bytes(team_bytes: int | None) -> None:
    """A bound on a team's stored bytes is a count (0: nothing stored) or None (unbounded)."""
    if team_bytes is not None and (
        isinstance(team_bytes, bool) or not isinstance(team_bytes, int) or team_bytes < 0
    ):
        raise ValueError(f"team_bytes must be an integer >= 0 or None, not {team_bytes!r}")


def route_tag(route: str) -> str:
    return "{rf:route:" + route + "}"


def deployment_tag(deployment: str) -> str:
    return "{rf:dep:" + deployment + "}"


def team_tag(team: str) -> str:
    return "{rf:team:" + team + "}"


def anchor_keys(route: str, keys: Sequence[bytes]) -> list[str]:
    tag = route_tag(route)
    return [f"{tag}:anchor:{k.hex()}" for k in keys]


def response_key(team: str, response_id: str) -> str:
    return f"{team_tag(team)}:resp:{response_id}"


def requests_key(team: str) -> str:
    return f"{team_tag(team)}:requests"


def check_request_cap(cap: int) -> None:
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError(f"the request log's cap must be an integer >= 1, not {cap!r}")


MONTH = "month"
PERIODS = {"minute": 60, "day": 86_400}


def window_bucket(kind: str, now: float) -> tuple[int, float]:
    """(bucket id, seconds until it ends) for a window kind at unix time ``now`` (UTC)."""
    if kind in PERIODS:
        period = PERIODS[kind]
        bucket = int(now // period)
        return bucket, (bucket + 1) * period - now
    if kind == MONTH:
        import datetime as dt

        t = dt.datetime.fromtimestamp(now, tz=dt.UTC)
        start_next = dt.datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=dt.UTC)
        return t.year * 12 + t.month - 1, start_next.timestamp() - now
    raise ValueError(f"unknown budget window kind {kind!r}")
