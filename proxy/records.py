"""The request log: one record per request, filled once by the gateway and handed to every sink.

A ``RequestRecord`` is a frozen value: who (team, key fingerprint — never the key), what (wire,
route, deployment, stream or not), how it ended (status, error code), what it cost (the
estimate, the provider's prompt, output and cached tokens, USD at the route's prices), what the
fit did (``FitReport.actions``) and how long it took (total, upstream, and the phases the traces
draw). The sinks read the same value: the ``routefit.access`` log line (JSON, one per request,
refusals included), the bounded per-team list in the store (``GET /routefit/requests``) and,
when configured, the traces (``proxy.tracing``).

Every sink runs after the response has gone (a background task of the response, or the end of a
stream), like the budget settlement: the client never waits for the log or the store. The store
takes the records in batches (``proxy.record_batches``: one write per 256 records or per 100 ms,
flushed when the app stops and before every read). Prompt
contents reach the log line only when the operator opts in (``request_log.contents``), redacted
by the same rule as provider errors; they never reach the store.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote_plus

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request

from proxy.config import RouteConfig
from proxy.config.settings import RequestLogSettings
from proxy.errors import ProxyError
from proxy.estimate import Estimate
from proxy.intake import query_of
from proxy.record_batches import Batches, Item
from proxy.store import Store, StoreUnavailable
from proxy.teams import MASTER_TEAM, Team, TeamDirectory, fingerprint, hash_key, presented_key
from proxy.transports.provider_errors import redact_value
from proxy.usage import Usage
from proxy.wires import Wire

__all__ = [
    "ACCESS",
    "ANONYMOUS",
    "Phase",
    "Records",
    "RequestRecord",
    "Sink",
    "Ticket",
    "cost_usd",
    "guard_access_log",
    "matches",
]

ACCESS = logging.getLogger("routefit.access")
log = logging.getLogger("routefit")

#: uvicorn's access log: one line per request, its path written with its query.
UVICORN_ACCESS = logging.getLogger("uvicorn.access")


class _QueryKeysRedacted(logging.Filter):
    """Google's clients put their key in the URL (``?key=``, the Gemini wire), and uvicorn's
    access log (``routefit serve --access-log``) writes each request's path with its query: the
    value of every ``key`` parameter is written as ``REDACTED`` instead, so a team's key (or a
    client's own provider key) never sits in the operator's logs. uvicorn logs a request's
    ``(client, method, path, version, status)`` as its arguments; the path is the third."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            path, sep, query = args[2].partition("?")
            if sep and "=" in query:
                record.args = (*args[:2], path + sep + _keys_redacted(query), *args[3:])
        return True


def _keys_redacted(query: str) -> str:
    pairs = query.split("&")
    for i, pair in enumerate(pairs):
        name, eq, _ = pair.partition("=")
        if eq and unquote_plus(name).strip().lower() == "key":
            pairs[i] = f"{name}=REDACTED"
    return "&".join(pairs)


def guard_access_log() -> None:
    """Install the access log's key redaction (``_QueryKeysRedacted``) once: by the app itself,
    whatever server or log config hosts it."""
    if not any(isinstance(f, _QueryKeysRedacted) for f in UVICORN_ACCESS.filters):
        UVICORN_ACCESS.addFilter(_QueryKeysRedacted())


#: Whose records have no team: routefit running open, or a key nobody owns (a 401).
ANONYMOUS = "-"
#: The most records one read returns.
MAX_LIMIT = 1000
#: How long the app's end waits for the last batch of records to reach the store.
FLUSH_SECONDS = 10.0


class _Ids:
    """Record ids as ``uuid4().hex`` is (32 hex digits, 128 random bits) for a fraction of its
    cost: the random bytes come from ``os.urandom`` 256 ids at a time, not one call and one
    ``UUID`` per request. Random, not a counter: a team reads its own records' ids, and a
    counter shared by every team would tell it how many requests the others made meanwhile."""

    _BLOCK = 256

    def __init__(self) -> None:
        self.reset()
        os.register_at_fork(after_in_child=self.reset)  # a worker never reuses its parent's

    def reset(self) -> None:
        self._pool = b""
        self._at = 0

    def __call__(self) -> str:
        at = self._at
        if at >= len(self._pool):
            self._pool, at = os.urandom(16 * self._BLOCK), 0
        self._at = at + 16
        return self._pool[at : at + 16].hex()


new_id = _Ids()


@dataclass(frozen=True, slots=True)
class Phase:
    """One step of a request, in milliseconds from its arrival: ``fit`` (intake, pricing and
    fitting), ``budget`` (the reservation), ``provider`` (forwarded until the provider's answer
    or its stream's headers)."""

    name: str
    start_ms: float
    duration_ms: float
    #: A ``provider`` phase is one attempt: the deployment it went to, its failure (the error
    #: code; None when it answered) and the ``traceparent`` it sent (its span's id).
    deployment: str | None = None
    error: str | None = None
    traceparent: str | None = None

    def as_list(self) -> list[Any]:
        """``[name, start ms, duration ms]``, and the attempt's facts when it has any."""
        out: list[Any] = [self.name, round(self.start_ms, 3), round(self.duration_ms, 3)]
        extra = {
            k: v
            for k, v in (
                ("deployment", self.deployment),
                ("error", self.error),
                ("traceparent", self.traceparent),
            )
            if v is not None
        }
        return [*out, extra] if extra else out

    @classmethod
    def from_list(cls, item: Sequence[Any]) -> Phase:
        extra = item[3] if len(item) > 3 and isinstance(item[3], Mapping) else {}
        return cls(
            str(item[0]),
            float(item[1]),
            float(item[2]),
            extra.get("deployment"),
            extra.get("error"),
            extra.get("traceparent"),
        )


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one request was and how it ended; the same value for every sink."""

    id: str
    #: Unix seconds at arrival.
    time: float
    #: ``serve`` (forwarded), ``count`` (a count endpoint), ``fit`` (the dry run).
    kind: str
    wire: str
    status: int
    latency_ms: float
    team: str | None = None
    #: The presented key's fingerprint (``proxy.teams.fingerprint``), never the key.
    key_id: str | None = None
    route: str | None = None
    #: Where it went: the deployment that answered (or refused), by the id the
    #: ``x-routefit-deployment`` header names, and that deployment's upstream model.
    deployment: str | None = None
    model: str | None = None
    #: The provider attempts it took (``x-routefit-attempts``): retries and failovers included
    #: (its ``provider`` phases; None when nothing was sent).
    attempts: int | None = None
    stream: bool = False
    error_code: str | None = None
    #: routefit's prompt estimate (what was reserved and fitted to) and the budget it fitted in.
    prompt_estimate: int | None = None
    budget: int | None = None
    #: What the provider reported (None: no usage, or not forwarded).
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    #: At the route's prices (``model_info`` or litellm's map), when it has any.
    cost_usd: float | None = None
    #: ``FitReport.actions`` that changed something: (name, count, tokens removed).
    actions: tuple[tuple[str, int, int], ...] = ()
    upstream_ms: float | None = None
    phases: tuple[Phase, ...] = ()
    #: The client's W3C ``traceparent`` header, as sent (the trace a span joins).
    traceparent: str | None = None
    #: The request body, redacted: only when the operator opted in, only in the log line.
    contents: Any = field(default=None, compare=False)

    def as_dict(self, contents: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "time": round(self.time, 3),
            "kind": self.kind,
            "team": self.team,
            "key_id": self.key_id,
            "wire": self.wire,
            "route": self.route,
            "deployment": self.deployment,
            "model": self.model,
            "stream": self.stream,
            "status": self.status,
            "error_code": self.error_code,
            "prompt_estimate": self.prompt_estimate,
            "budget": self.budget,
            "prompt_tokens": _figure(self.prompt_tokens),
            "output_tokens": _figure(self.output_tokens),
            "cached_tokens": _figure(self.cached_tokens),
            "cost_usd": self.cost_usd,
            "actions": {name: {"count": n, "tokens_removed": t} for name, n, t in self.actions},
            "latency_ms": round(self.latency_ms, 3),
            "upstream_ms": None if self.upstream_ms is None else round(self.upstream_ms, 3),
            "phases": [p.as_list() for p in self.phases],
            "traceparent": self.traceparent,
            "attempts": self.attempts,
        }
        if contents and self.contents is not None:
            out["contents"] = self.contents
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RequestRecord:
        """A record as the store keeps it (``as_dict`` without contents)."""
        actions = d.get("actions") or {}
        return cls(
            id=d["id"],
            time=float(d["time"]),
            kind=d["kind"],
            wire=d["wire"],
            status=int(d["status"]),
            latency_ms=float(d["latency_ms"]),
            team=d.get("team"),
            key_id=d.get("key_id"),
            route=d.get("route"),
            deployment=d.get("deployment"),
            model=d.get("model"),
            stream=bool(d.get("stream")),
            error_code=d.get("error_code"),
            prompt_estimate=d.get("prompt_estimate"),
            budget=d.get("budget"),
            prompt_tokens=d.get("prompt_tokens"),
            output_tokens=d.get("output_tokens"),
            cached_tokens=d.get("cached_tokens"),
            cost_usd=d.get("cost_usd"),
            actions=tuple(
                (name, int(a["count"]), int(a["tokens_removed"])) for name, a in actions.items()
            ),
            upstream_ms=d.get("upstream_ms"),
            phases=tuple(Phase.from_list(item) for item in d.get("phases") or ()),
            traceparent=d.get("traceparent"),
            attempts=d.get("attempts"),
        )


@dataclass(slots=True)
class Ticket:
    """One request's record while it is under way: what is known at arrival, and the phases
    as they end. The gateway holds it beside the request and turns it into a record once."""

    kind: str
    wire: str
    time: float
    started: float
    key_id: str | None
    traceparent: str | None
    #: The presented key, only to name a refused request's team (never recorded).
    key: str | None = field(default=None, repr=False)
    #: The phases as they ended, as ``Phase``'s fields (made ``Phase`` values once, by
    #: ``phases``: most requests' record is written once, and three frozen values a request
    #: cost more than the tuples).
    marks: list[tuple[str, float, float, str | None, str | None, str | None]] = field(
        default_factory=list
    )
    upstream_ms: float | None = None
    #: The ``traceparent`` the latest attempt sent the provider (``proxy.tracing``): its
    #: ``provider`` phase keeps it.
    provider_traceparent: str | None = None
    #: Once admitted: the route and the team (a refusal while pricing still names them).
    rc: RouteConfig | None = None
    team: Team | None = None

    def admitted(self, rc: RouteConfig, team: Team | None) -> None:
        self.rc, self.team = rc, team

    def attempts(self) -> int | None:
        """The provider attempts made: one ``provider`` phase each (None: nothing was sent)."""
        return sum(m[0] == "provider" for m in self.marks) or None

    @property
    def phases(self) -> tuple[Phase, ...]:
        return tuple(Phase(*m) for m in self.marks)

    def phase(
        self,
        name: str,
        start: float,
        end: float | None = None,
        *,
        deployment: str | None = None,
        error: str | None = None,
    ) -> None:
        """``name`` ran from ``start`` to ``end`` (``time.perf_counter()`` values; now); a
        provider attempt says its ``deployment``, its ``error`` and the traceparent it sent."""
        end = time.perf_counter() if end is None else end
        told = self.provider_traceparent if name == "provider" else None
        took = (end - start) * 1000
        self.marks.append((name, (start - self.started) * 1000, took, deployment, error, told))
        if name == "provider":
            self.upstream_ms = took


def _figure(value: int | None) -> int | str | None:
    """A provider's figure as recorded: a lying provider's integer past JSON's exact range (or
    orjson's 64 bits) is kept as its digits rather than failing the record."""
    if value is None or -(2**53) < value < 2**53:
        return value
    return str(value)


def cost_usd(rc: RouteConfig, usage: Usage | None) -> float | None:
    """The provider's usage at the route's prices, as the usd quotas charge it (prompt and
    output per token, what the provider's tools read as input); None without usage or without
    prices."""
    if usage is None or (rc.input_cost_per_token is None and rc.output_cost_per_token is None):
        return None
    cost = usage.billed_prompt * (rc.input_cost_per_token or 0.0)
    cost += usage.completion_tokens * (rc.output_cost_per_token or 0.0)
    return round(cost, 9)


def matches(
    record: RequestRecord,
    route: str | None = None,
    status: str | None = None,
    since: float | None = None,
) -> bool:
    """The endpoint's filters: the route, the status (``429`` or a class, ``4xx``), the time."""
    if route is not None and record.route != route:
        return False
    if since is not None and record.time < since:
        return False
    if status is not None:
        code = str(record.status)
        if status.lower().endswith("xx"):
            return code[:1] == status[:1]
        return code == status
    return True


Sink = Callable[[RequestRecord], Awaitable[None]]


class Records:
    """Tickets in, records out, to every sink: the log line, the store, any added (traces)."""

    def __init__(
        self, settings: RequestLogSettings, store: Store | None, teams: TeamDirectory
    ) -> None:
        self.settings = settings
        self.store = store
        self.teams = teams
        #: Further sinks (``proxy.tracing``), each told of every record after the log line.
        self.sinks: list[Sink] = []
        #: Traces are drawn: each attempt tells the provider its span (``proxy.tracing``).
        self.traced = False
        self._closers: list[Callable[[], None]] = []
        self._store_down = False
        #: The store's writes, batched (None without a store).
        self.batches = Batches(self._write) if store is not None else None
        #: (team, route) → whether that team is not told which deployment served it
        #: (``proxy.routing.Routing.hides_deployment``, set by the gateway): a team reading its
        #: own records then reads them without it, as its answers carry no deployment header.
        self.private: Callable[[str | None, str | None], bool] = _named

    def add(self, sink: Sink, close: Callable[[], None] | None = None) -> None:
        """Another sink (``proxy.tracing``), and how to flush it when the app stops."""
        self.sinks.append(sink)
        if close is not None:
            self._closers.append(close)

    def close(self) -> None:
        """Flush and stop every sink that batches (the lifespan's end, in a worker thread:
        the store's last batch is written on the event loop, which waits for this)."""
        if self.batches is not None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # not on a loop: the records' loop can be waited for
                try:
                    self.batches.flush_from_thread(FLUSH_SECONDS)
                except Exception:
                    log.exception("request log: the last records were not written")
            else:
                log.warning("request log: close() on the event loop; use aclose() to flush")
        self._close_sinks()

    async def aclose(self) -> None:
        """``close`` from the event loop: the store's last batch, then the sinks (in a thread:
        the traces' exporter blocks)."""
        if self.batches is not None:
            await self.batches.flush()
        await asyncio.to_thread(self._close_sinks)

    def _close_sinks(self) -> None:
        for close in self._closers:
            try:
                close()
            except Exception:
                log.exception("closing a request log sink failed")

    # -- filling ---------------------------------------------------------------------------
    def ticket(self, request: Request, wire: Wire, kind: str) -> Ticket:
        key = wire.keys.key(request.headers, query_of(request))
        return Ticket(
            kind=kind,
            wire=wire.name,
            time=time.time(),
            started=time.perf_counter(),
            key_id=fingerprint(hash_key(key)) if key else None,
            traceparent=request.headers.get("traceparent"),
            key=key or None,
        )

    def served(
        self,
        t: Ticket,
        e: Estimate,
        status: int,
        usage: Usage | None = None,
        *,
        stream: bool = False,
        error_code: str | None = None,
    ) -> RequestRecord:
        """The record of a request that was priced (answered, or refused after pricing)."""
        report = e.fitted.report
        seen = usage if usage is not None and not usage.invalid else None
        return RequestRecord(
            id=new_id(),
            time=t.time,
            kind=t.kind,
            wire=t.wire,
            status=status,
            latency_ms=(time.perf_counter() - t.started) * 1000,
            team=e.team.id if e.team is not None else None,
            key_id=t.key_id,
            route=e.rc.route.alias,
            deployment=e.rc.deployment_id,
            model=e.rc.upstream.model,
            stream=stream,
            error_code=error_code,
            prompt_estimate=e.tokens,
            budget=report.budget,
            prompt_tokens=None if seen is None else seen.prompt_tokens,
            output_tokens=None if seen is None else seen.completion_tokens,
            cached_tokens=None if seen is None else seen.cached_tokens,
            cost_usd=cost_usd(e.rc, seen),
            actions=tuple((a.name, a.count, a.tokens) for a in report.actions.taken()),
            upstream_ms=t.upstream_ms,
            phases=t.phases,
            traceparent=t.traceparent,
            attempts=t.attempts(),
            contents=redact_value(dict(e.request.body)) if self.settings.contents else None,
        )

    def refused(
        self, t: Ticket, err: ProxyError, e: Estimate | None = None, *, stream: bool = False
    ) -> RequestRecord:
        """The record of a refusal or a failure; ``e`` when the request had been priced."""
        code = err.code or err.type
        if e is not None:
            return self.served(t, e, err.status, stream=stream, error_code=code)
        team = t.team
        if team is None and t.key and not self.teams.open:
            team = self.teams.team_for(t.key)
        return RequestRecord(
            id=new_id(),
            time=t.time,
            kind=t.kind,
            wire=t.wire,
            status=err.status,
            latency_ms=(time.perf_counter() - t.started) * 1000,
            team=team.id if team is not None else None,
            key_id=t.key_id,
            route=t.rc.route.alias if t.rc is not None else None,
            deployment=t.rc.deployment_id if t.rc is not None else None,
            model=t.rc.upstream.model if t.rc is not None else None,
            stream=stream,
            error_code=code,
            phases=t.phases,
            traceparent=t.traceparent,
        )

    def counted(self, t: Ticket, rc: RouteConfig, team: str | None, tokens: int) -> RequestRecord:
        """The record of a count endpoint's answer (no fit, nothing forwarded)."""
        return RequestRecord(
            id=new_id(),
            time=t.time,
            kind=t.kind,
            wire=t.wire,
            status=200,
            latency_ms=(time.perf_counter() - t.started) * 1000,
            team=team,
            key_id=t.key_id,
            route=rc.route.alias,
            deployment=rc.deployment_id,
            model=rc.upstream.model,
            prompt_estimate=tokens,
            phases=t.phases,
            traceparent=t.traceparent,
        )

    # -- the sinks -------------------------------------------------------------------------
    def later(self, record: RequestRecord) -> BackgroundTask:
        """``emit`` as a response's background task: after the response is sent."""
        return BackgroundTask(self.emit, record)

    async def emit(self, record: RequestRecord) -> None:
        """Every sink, each one's failure its own (a store outage loses records, never a
        response, and is logged once per outage)."""
        data = orjson.dumps(record.as_dict())
        if ACCESS.isEnabledFor(logging.INFO):
            line = data
            if self.settings.contents and record.contents is not None:
                line = orjson.dumps(record.as_dict(contents=True))
            ACCESS.info("%s", line.decode())
        if self.batches is not None:
            self.batches.put(record.team or ANONYMOUS, data)
        for sink in self.sinks:
            try:
                await sink(record)
            except Exception:
                log.exception("a request log sink failed")

    async def _write(self, batch: Sequence[Item]) -> None:
        """One batch to the store; an outage loses it (logged once per outage)."""
        if self.store is None:
            return
        try:
            await self.store.record_requests(batch, self.settings.keep)
        except StoreUnavailable as exc:
            if not self._store_down:
                log.warning("request log: the store is unavailable, records lost: %s", exc)
            self._store_down = True
        else:
            self._store_down = False

    # -- reading ---------------------------------------------------------------------------
    def readable(
        self, headers: Mapping[str, str], team: str | None, client: str | None
    ) -> tuple[str, ...]:
        """Whose records the caller may read: the admin key any team's (every team's when none
        is named), a team key its own only (the rule of ``/routefit/teams/{team}/usage``)."""
        teams = self.teams
        if teams.open:
            return (team or ANONYMOUS,)
        if team is not None and team != ANONYMOUS:
            reader = teams.usage_reader(headers, team, client)
            key = presented_key(headers)
            view = (reader.id,)
            return Readable(view) if key and teams.is_admin(key) else Readable.own(view)
        key = presented_key(headers)
        # every key presented here may be a guess at the admin key: the admin doors' brake
        # (``proxy.throttle``) is checked first and told of every key that opens nothing
        if client is not None and key:
            teams.admin_throttle.check(client)
        if key and teams.is_admin(key):
            if client is not None:
                teams.admin_throttle.succeeded(client)
            master = (MASTER_TEAM,) if teams.master is not None else ()
            return Readable((team,) if team is not None else (*teams.teams, *master, ANONYMOUS))
        if team == ANONYMOUS:
            teams.authorize_admin(headers, client)  # a 401 or 403, counted as a failed guess
        try:
            caller = teams.authenticate(headers)
        except ProxyError:
            if client is not None and key:
                teams.admin_throttle.failed(client)
            raise
        return Readable.own((caller.id,) if caller is not None else (ANONYMOUS,))

    async def read(
        self,
        teams: Iterable[str],
        limit: int,
        route: str | None = None,
        status: str | None = None,
        since: float | None = None,
    ) -> list[RequestRecord]:
        """The newest ``limit`` records of ``teams`` that pass the filters, newest first."""
        if self.store is None:
            return []
        if self.batches is not None:
            await self.batches.flush()  # this process's records, read at once
        found: list[RequestRecord] = []
        # unfiltered, each team's newest ``limit`` are all that can be answered
        filtered = route is not None or status is not None or since is not None
        depth = self.settings.keep if filtered else limit
        for team in teams:
            for data in await self.store.recent_requests(team, depth):
                try:
                    record = RequestRecord.from_dict(orjson.loads(data))
                except (ValueError, KeyError, TypeError):
                    continue  # a record this version cannot read
                if matches(record, route, status, since):
                    found.append(self._as_seen(record, teams))
        found.sort(key=lambda r: r.time, reverse=True)
        return found[:limit]

    def _as_seen(self, record: RequestRecord, teams: Iterable[str]) -> RequestRecord:
        """``record`` as its reader sees it: a team reading its own, on a route whose answers do
        not name the deployment, reads no deployment in it either (the attempts' included)."""
        if not (isinstance(teams, Readable) and teams.as_team):
            return record
        if not self.private(record.team, record.route):
            return record
        phases = tuple(replace(p, deployment=None) for p in record.phases)
        return replace(record, deployment=None, phases=phases)


def _named(team: str | None, route: str | None) -> bool:
    """No route's deployment is kept from its team (a ``Records`` without routing)."""
    return False


class Readable(tuple[str, ...]):
    """Whose records a caller may read (``Records.readable``), and whether it reads them as a
    team reading its own (``as_team``) rather than with the admin key."""

    as_team: bool = False

    @classmethod
    def own(cls, teams: tuple[str, ...]) -> Readable:
        """A team key's view of its own records."""
        view = cls(teams)
        view.as_team = True
        return view


_CLASSES = frozenset({"1xx", "2xx", "3xx", "4xx", "5xx"})


def query(params: Mapping[str, str]) -> tuple[int, str | None, str | None, float | None]:
    """(limit, route, status, since) from the endpoint's query; a bad value is a 400."""
    try:
        limit = int(params.get("limit", "100"))
    except ValueError:
        raise ProxyError(400, "limit must be an integer", param="limit") from None
    since_raw = params.get("since")
    try:
        since = float(since_raw) if since_raw is not None else None
    except ValueError:
        raise ProxyError(400, "since must be unix seconds", param="since") from None
    status = params.get("status")
    if status is not None and not (
        status.isdigit() or status.lower() in ("1xx", "2xx", "3xx", "4xx", "5xx")
    ):
        raise ProxyError(400, "status must be a status code or a class (4xx)", param="status")
    return max(1, min(limit, MAX_LIMIT)), params.get("route"), status, since


def page(records: Sequence[RequestRecord]) -> bytes:
    return orjson.dumps({"object": "list", "data": [r.as_dict() for r in records]})
