"""Stored responses: ``store`` / ``previous_response_id`` answered from routefit's own store.

Each stored record is one response with the WHOLE input it answered (the chain before it
included), per team, with a TTL: resolving ``previous_response_id`` is one store read, on any
replica (Redis) and after a restart (the embedded sqlite file). The price is storage that grows
with the chain (each record repeats its history); the TTL bounds it in time, and
``max_body_bytes`` in size: a request may not continue a record that, with its own body, is more
than a body could carry (``previous_response_id`` is shorthand for sending that input again, not
a way around the body limit), so no record grows past one body and one answer. What a team
keeps in all is bounded too (``responses_store_bytes_per_team``, counted atomically in the store
on every replica): at the bound its oldest records are evicted, like a cache's, so a team with a
generous quota cannot fill the Redis that holds every team's budgets, and a conversation in
progress (its newest record) is the last to go.

A response is written before the client can see that it is complete (before
``response.completed`` goes out on a stream, before the body of a whole answer), so a follow-up
request naming it always finds it — the read-your-writes that LiteLLM users miss (~10 s there).
That write is the one cost ``store: true`` adds on the response path. Starting it as soon as
the answer is read, to overlap the gateway's finishing work, was measured (interleaved, against
the embedded store) and made no difference: that work is ~0.1 ms of Python and the write goes
through the store's executor thread, which needs the same GIL. ``store`` defaults to true, as at
OpenAI; ``store: false`` (Codex CLI) writes nothing.

This module is the shell's side of the Responses wire (``proxy.wires.responses`` never touches
the store): ``Keeper`` is one request's stored conversation, the ``Session`` the gateway's intake
resolves after it has read the body and authenticated the team (``previous_response_id`` →
``RequestContext.stored.prior``: one body parse, one authentication), and where the wire hands
its finished answers. The HTTP endpoints that read and delete stored responses are
``proxy.responses_api``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson
from starlette.responses import Response

from proxy.errors import ProxyError
from proxy.fairness import json_work
from proxy.store import Store
from proxy.store.base import StoreUnavailable
from proxy.teams import Team
from proxy.wires.base import RequestContext
from proxy.wires.responses import unkept

__all__ = ["OPEN_TEAM", "Keeper", "delete_record", "load_record", "team_key"]

log = logging.getLogger("routefit")

#: Team key of an open gateway (no teams configured).
OPEN_TEAM = "-"


def team_key(team: Team | None) -> str:
    """Whose stored responses these are (every record is one team's)."""
    return team.id if team is not None else OPEN_TEAM


@dataclass(slots=True)
class Keeper:
    """One request's stored conversation (``proxy.wires.base.Stored``, and the intake's
    ``Session``): the chain it continues, and the answer to store."""

    store: Store
    #: Seconds the record lives (``routefit_settings.responses_ttl_seconds``).
    ttl: int
    #: Bytes a continued request may carry, the record it continues and its body together
    #: (``routefit_settings.max_body_bytes``); None: unbounded.
    limit: int | None = None
    team: str = OPEN_TEAM
    #: What ``previous_response_id`` stands for (None: the request names none).
    prior: list[Any] | None = None
    #: A whole answer's id and record, measured by ``keep`` and stored by ``answered`` before
    #: its body goes out.
    pending: tuple[str, bytes] | None = None
    #: Bytes the team's stored responses may hold together
    #: (``routefit_settings.responses_store_bytes_per_team``): its oldest are evicted to make
    #: room, so one team never fills the store every team's budgets share; 0 stores nothing.
    team_bytes: int | None = None
    #: The answer handed over was not kept after all (larger than ``team_bytes`` by itself, or
    #: the store was out): its ``store`` flag must say false (``keeping``).
    missed: bool = False

    @property
    def keeping(self) -> bool:
        """Whether the answer handed over is kept (``proxy.wires.base.Stored``): not with a
        bound of 0, nor once it was missed."""
        return self.team_bytes != 0 and not self.missed

    async def resolve(self, ctx: RequestContext) -> RequestContext:
        """The request's context with its chain resolved from the already-read body, for the
        already-authenticated team (a 404 when it names a response the team does not have).
        Its size is the body's and the record's: what is priced, routed and held to the body
        limit is the whole conversation, as if the client had sent it."""
        self.team = team_key(ctx.team)
        rid = _previous_id(ctx.body)
        if rid is None:
            return replace(ctx, stored=self)
        raw = await _fetch(self.store, self.team, rid, "previous_response_id")
        size = ctx.size + len(raw)
        if self.limit is not None and size > self.limit:
            raise _too_large(rid, len(raw), ctx.size, self.limit)
        self.prior = _items(orjson.loads(raw))
        work = ctx.judged + json_work(raw)  # its items are parsed with the body's
        return replace(ctx, stored=self, size=size, work=work)

    def keep(self, response: dict[str, Any], input: list[Any]) -> None:
        """A whole answer to store once the gateway has finished it (``answered``). Measured
        now, before its body is written: one the bound cannot hold is missed here, so the body
        can say ``store: false`` (the store would refuse it by its size alone)."""
        record = self._record(response, input)
        if record is not None:
            self.pending = record

    async def answered(self, response: Response) -> Response:
        """Store the answer ``keep`` was given (nothing when none was): ``response``, its whole
        body, saying ``store: false`` when the store was out — its body, written before the
        write could be tried, said true, and ``previous_response_id`` naming it would be a
        404. Rewritten only then: the write needs the body's record, and an answer that is
        kept goes out as it was written."""
        if self.pending is None:
            return response
        (rid, record), self.pending = self.pending, None
        await self._put(rid, record)
        if self.missed:
            response.body = unkept(bytes(response.body))
            response.headers["content-length"] = str(len(response.body))
        return response

    async def save(self, response: Mapping[str, Any], input: list[Any]) -> None:
        """Store a finished response (a store outage is logged: the answer already exists)."""
        record = self._record(response, input)
        if record is not None:
            await self._put(*record)

    def _record(self, response: Mapping[str, Any], input: list[Any]) -> tuple[str, bytes] | None:
        """The response's id and record bytes; None when it is not to be kept (no id, a bound
        of 0, or a record larger than the bound by itself: missed, logged)."""
        rid = response.get("id")
        if not isinstance(rid, str) or not rid or self.team_bytes == 0:
            return None
        record = orjson.dumps({"response": response, "input": input})
        if self.team_bytes is not None and len(record) > self.team_bytes:
            self._too_big(rid, len(record))
            return None
        return rid, record

    async def _put(self, rid: str, record: bytes) -> None:
        try:
            kept = await self.store.put_response(self.team, rid, record, self.ttl, self.team_bytes)
        except StoreUnavailable as exc:
            self.missed = True
            log.warning("could not store response %s: %s", rid, exc)
            return
        if not kept:
            self._too_big(rid, len(record))

    def _too_big(self, rid: str, size: int) -> None:
        self.missed = True
        log.warning(
            "response %s of team %s not stored: its %d bytes exceed "
            "responses_store_bytes_per_team (%s); previous_response_id cannot name it",
            rid,
            self.team,
            size,
            self.team_bytes,
        )


async def load_record(store: Store, team: str, rid: str, param: str | None) -> dict[str, Any]:
    """The stored record ``rid`` of ``team``; a 404 naming ``param`` (or the id) when absent."""
    record: dict[str, Any] = orjson.loads(await _fetch(store, team, rid, param))
    return record


async def _fetch(store: Store, team: str, rid: str, param: str | None) -> bytes:
    """The stored record's bytes (sized before they are parsed); a 404 as ``load_record``."""
    try:
        raw = await store.get_response(team, rid) if rid else None
    except StoreUnavailable:
        raise ProxyError(
            503, "the response store is unavailable", code="store_unavailable"
        ) from None
    if raw is None:
        if param is not None:
            raise ProxyError(
                404,
                f"Previous response with id '{rid}' not found.",
                param=param,
                code="previous_response_not_found",
            )
        raise ProxyError(404, f"No response found with id '{rid}'.", code="not_found")
    return raw


def _too_large(rid: str, stored: int, body: int, limit: int) -> ProxyError:
    """The body limit's 413 for a continuation: the client may start the conversation anew."""
    return ProxyError(
        413,
        f"Previous response '{rid}' continues a conversation of {stored:,} bytes; with this "
        f"request's {body:,} bytes it exceeds the limit of {limit:,} bytes a request may carry. "
        f"Start a new conversation, or send the input it needs without previous_response_id.",
        param="previous_response_id",
        code="request_too_large",
    )


def _output_items(response: Mapping[str, Any]) -> list[Any]:
    output = response.get("output")
    return list(output) if isinstance(output, list) else []


def _previous_id(body: Any) -> str | None:
    """The response a body continues (None when it names none, or is not an object: the wire's
    parse reports that)."""
    if not isinstance(body, Mapping) or body.get("previous_response_id") is None:
        return None
    previous = body["previous_response_id"]
    if not isinstance(previous, str):
        raise ProxyError(400, "previous_response_id must be a string", param="previous_response_id")
    return previous


def _items(record: Mapping[str, Any]) -> list[Any]:
    """The items a stored record stands for: its whole input and its output."""
    return list(record.get("input") or []) + _output_items(record.get("response") or {})


async def delete_record(store: Store, team: str, rid: str) -> None:
    """Delete ``team``'s stored response ``rid``; a 404 when it has none."""
    try:
        gone = await store.delete_response(team, rid)
    except StoreUnavailable:
        raise ProxyError(
            503, "the response store is unavailable", code="store_unavailable"
        ) from None
    if not gone:
        raise ProxyError(404, f"No response found with id '{rid}'.", code="not_found")
