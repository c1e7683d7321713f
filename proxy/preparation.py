"""Reading one request before it is estimated: authenticate → read → parse (its wire) → route →
the team's permission, then ``proxy.estimate.Estimator.estimate`` (price, fit, anchor).

A shim: the gateway's own intake (issue 28, "the gateway owns the per-wire plumbing") takes
this over and calls the estimator itself. A body over ``proxy.fairness.THREAD_ABOVE`` is decoded
and parsed in one of its caller's pricing threads (``proxy.fairness``).
"""

from __future__ import annotations

import time

from starlette.requests import Request

from pricing.messages import ChatRequest, RequestError
from pricing.route import Route
from proxy.body import read_json
from proxy.config import Config, RouteConfig
from proxy.errors import ProxyError
from proxy.estimate import Estimate, Estimator
from proxy.fairness import caller
from proxy.teams import Team, TeamDirectory
from proxy.wires import Wire

__all__ = ["Preparer"]


class Preparer:
    def __init__(self, config: Config, teams: TeamDirectory, estimator: Estimator) -> None:
        self.config = config
        self.teams = teams
        self.estimator = estimator
        self.fairness = estimator.fairness

    def route_for(self, request: ChatRequest) -> RouteConfig:
        rc = self.config.route(request.model)
        if rc is None:
            if not request.model:
                raise ProxyError(400, "model is required", param="model", code="missing_model")
            raise ProxyError(
                404,
                f"The model '{request.model}' does not exist or you do not have access to it.",
                param="model",
                code="model_not_found",
            )
        return rc

    def route_priced(self, rc: RouteConfig, team: Team | None) -> Route:
        """``Estimator.route_priced`` (for the Messages wire's ``count_tokens``)."""
        return self.estimator.route_priced(rc, team)

    async def prepare(
        self, request: Request, wire: Wire, bound: bool = True, rated: bool = False
    ) -> Estimate:
        """Read, priced and fitted; ``bound``: a big request may be proved to fit by an upper
        bound and counted exactly while it is forwarded (the dry run wants the exact figures);
        ``rated``: a dry run, held to its caller's count rate (``proxy.fairness``)."""
        try:
            return await self._prepare(request, wire, bound, rated)
        finally:
            self.estimator.metrics.sync_count_cache()

    async def _prepare(self, request: Request, wire: Wire, bound: bool, rated: bool) -> Estimate:
        started = time.perf_counter()
        team = self.teams.authenticate(request.headers)
        who = caller(team, request)
        if rated:
            self.fairness.admit_count(who)
        body, size = await read_json(request, self.config.settings.max_body_bytes)
        try:
            parsed = await self.fairness.run(who, size, wire.parse, body)
        except RequestError as exc:
            raise ProxyError(400, exc.message, param=exc.param) from None
        rc = self.route_for(parsed)
        if team is not None and not team.may_use(rc.route.alias):
            raise ProxyError(
                403,
                f"team {team.id!r} may not use model {rc.route.alias!r}",
                param="model",
                code="model_not_allowed",
            )
        return await self.estimator.estimate(
            wire, parsed, rc, team, who, size, started, bound=bound
        )
