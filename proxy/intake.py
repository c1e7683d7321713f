"""The gateway's intake: one request read, authenticated, parsed, routed and permitted — once,
the same way for every wire and every endpoint (served, dry run, count).

In order: the team, from the key where the wire's clients present it (``Wire.keys``); a count or
dry run held to its caller's rate (``proxy.fairness``); the body, within the size limit
(``proxy.body``) and the caller's share of body bytes in flight (``body_share``); a stateful
API's session resolved from that body and team (Responses' ``previous_response_id``:
``proxy.responses_store.Keeper``); the wire's parse of the ``RequestContext`` (in one of the
caller's pricing threads when the body is big); the route; the team's permission for it.
Pricing starts where this ends (``Estimator.estimate``), from the ``Admitted`` request.

A client's mistake in the body surfaces as ``pricing.messages.RequestError``, and every refusal
as ``proxy.errors.ProxyError``: the gateway turns both into the wire's error shape, in one place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from pricing.messages import ChatRequest
from proxy.body import read_json
from proxy.config import Config, RouteConfig
from proxy.errors import ProxyError
from proxy.fairness import BodyShare, Fairness, caller
from proxy.middleware import at_end
from proxy.teams import Team, TeamDirectory
from proxy.wires.base import RequestContext, Wire

__all__ = ["Admitted", "Intake", "Session", "query_of"]

#: What a request without a query string has: shared, it is immutable.
_NO_QUERY = QueryParams("")


class Session(Protocol):
    """What a stateful API keeps across requests for one request (Responses' stored
    conversation): resolved from the read body and the authenticated team before the wire
    parses, and told when a whole answer is about to go out."""

    async def resolve(self, ctx: RequestContext) -> RequestContext:
        """The context with what the session adds (``RequestContext.stored``)."""

    async def answered(self, response: Response) -> Response:
        """A 200 answer is about to go out: keep what it kept for it, and answer what goes out
        (the same, unless it promised what could not be kept)."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request read, authenticated, parsed, routed and permitted: what pricing starts from."""

    wire: Wire
    ctx: RequestContext
    request: ChatRequest
    rc: RouteConfig
    #: Whose pricing threads and count rate it spends (``proxy.fairness.caller``).
    who: str
    #: ``time.perf_counter()`` when routefit began with it (its overhead is measured from here).
    started: float

    @property
    def team(self) -> Team | None:
        return self.ctx.team

    @property
    def size(self) -> int:
        return self.ctx.size

    @property
    def work(self) -> int:
        """The size its work is judged by (``proxy.fairness.json_work``), stored chain included."""
        return self.ctx.judged


class Intake:
    def __init__(self, config: Config, teams: TeamDirectory, fairness: Fairness) -> None:
        self.config = config
        self.teams = teams
        self.fairness = fairness

    async def admit(
        self,
        request: Request,
        wire: Wire,
        session: Session | None = None,
        *,
        rated: bool = False,
        counting: bool = False,
    ) -> Admitted:
        """``request`` as ``wire`` reads it, for its team, on its route. ``rated``: a count or dry
        run, held to its caller's count rate; ``counting``: a count endpoint's body."""
        started = time.perf_counter()
        query = query_of(request)
        team = self.teams.authenticate(request.headers, query, wire.keys)
        who = caller(team, request)
        if rated:
            self.fairness.admit_count(who)
        limit = self.config.settings.max_body_bytes
        share = body_share(self.fairness, self.config, who, request)
        body, size, work = await read_json(request, limit, share)
        ctx = RequestContext(
            body,
            request.path_params,
            query,
            request.headers,
            team,
            request.scope["path"],
            size,
            counting,
            work=work,
        )
        if session is not None:
            ctx = await session.resolve(ctx)
            if share is not None:  # the stored conversation is held as a body would be
                share.grow_to(ctx.size)
        # threaded at the conversation's work: a stored chain is parsed with the body
        parsed = await self.fairness.run(who, ctx.judged, wire.parse, ctx)
        rc = self.route_for(parsed)
        permit(team, rc)
        return Admitted(wire, ctx, parsed, rc, who, started)

    def route_for(self, request: ChatRequest) -> RouteConfig:
        rc = self.config.route(request.model)
        if rc is None:
            if not request.model:
                raise ProxyError(400, "model is required", param="model", code="missing_model")
            raise unknown_model(request.model)
        return rc


def query_of(request: Request) -> QueryParams:
    """The request's query; without parsing one that is not there (nearly every request: only
    Google's clients put anything in it), which Starlette would do on every access."""
    if not request.scope.get("query_string"):
        return _NO_QUERY
    return request.query_params


def body_share(fairness: Fairness, config: Config, who: str, request: Request) -> BodyShare | None:
    """The share of ``who``'s body bytes in flight ``request``'s body is held in until the
    request is done (``proxy.fairness``); a lone body up to ``max_body_bytes`` always fits.
    None outside ``proxy.middleware.Guard``, which is what lets it go."""
    settings = config.settings
    cap = max(settings.limits.body_bytes_in_flight_per_team, settings.max_body_bytes)
    share = fairness.body_share(who, cap)
    return share if at_end(request.scope, share.release) else None


def permit(team: Team | None, rc: RouteConfig) -> None:
    """The unknown model's 404 when ``team`` may not use the route (every endpoint refuses it
    alike): a 403 naming the route told another team that it exists (docs/security.md)."""
    if team is not None and not team.may_use(rc.route.alias):
        raise unknown_model(rc.route.alias)


def unknown_model(model: str) -> ProxyError:
    """A model that is not there, or not the caller's to use: one answer for both."""
    return ProxyError(
        404,
        f"The model '{model}' does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )
