"""Stored responses: ``store`` / ``previous_response_id`` answered from routefit's own store.

Each stored record is one response with the WHOLE input it answered (the chain before it
included), per team, with a TTL: resolving ``previous_response_id`` is one store read, on any
replica (Redis) and after a restart (the embedded sqlite file). The price is storage that grows
with the chain (each record repeats its history); the TTL bounds it.

A response is written before the client can see that it is complete (before
``response.completed`` goes out on a stream, before the body of a whole answer), so a follow-up
request naming it always finds it — the read-your-writes that LiteLLM users miss (~10 s there).
``store`` defaults to true, as at OpenAI; ``store: false`` (Codex CLI) writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive

from proxy.body import read_body
from proxy.errors import ProxyError, error_response
from proxy.store import Store
from proxy.store.base import StoreUnavailable
from proxy.wires.responses_items import input_items

if TYPE_CHECKING:
    from proxy.gateway import Gateway
    from proxy.wires.responses import ResponsesWire

__all__ = ["Keeper", "create", "delete", "fit_only", "input_items_list", "retrieve"]

log = logging.getLogger("routefit")

#: Team key of an open gateway (no teams configured).
OPEN_TEAM = "-"


@dataclass(slots=True)
class Keeper:
    """One request's storage: where to store, and what (set by the wire as it goes)."""

    store: Store
    team: str
    #: Seconds the record lives (``routefit_settings.responses_ttl_seconds``).
    ttl: int
    enabled: bool = False
    input: list[Any] = field(default_factory=list)
    pending: dict[str, Any] | None = None

    async def save(self, response: Mapping[str, Any]) -> None:
        """Store a finished response (a store outage is logged: the answer already exists)."""
        self.pending = None
        rid = response.get("id")
        if not self.enabled or not isinstance(rid, str) or not rid:
            return
        record = orjson.dumps({"response": response, "input": self.input})
        try:
            await self.store.put_response(self.team, rid, record, self.ttl)
        except StoreUnavailable as exc:
            log.warning("could not store response %s: %s", rid, exc)


def team_key(gateway: Gateway, request: Request) -> str:
    team = gateway.teams.authenticate(request.headers)
    return team.id if team is not None else OPEN_TEAM


async def _record(store: Store, team: str, rid: str, param: str | None) -> dict[str, Any]:
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
    record: dict[str, Any] = orjson.loads(raw)
    return record


def _output_items(response: Mapping[str, Any]) -> list[Any]:
    output = response.get("output")
    return list(output) if isinstance(output, list) else []


async def _read(request: Request, limit: int) -> bytes:
    return (await read_body(request, limit))[0]


def _replay(request: Request, raw: bytes) -> Request:
    """The request again, its body ``raw`` — decoded, so its headers lose any content-encoding —
    (later receives report the client's disconnect)."""
    sent = False
    scope = dict(request.scope)
    scope["headers"] = [
        (k, v)
        for k, v in request.scope["headers"]
        if k.lower() not in (b"content-encoding", b"content-length")
    ] + [(b"content-length", str(len(raw)).encode())]
    receive: Receive = request.receive

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return Request(scope, replay)


async def _chained(store: Store, team: str, raw: bytes) -> bytes:
    """The body with ``previous_response_id`` resolved into the whole chain plus the new input
    (unchanged when it names none, or is not JSON: the gateway reports that)."""
    if b'"previous_response_id"' not in raw:
        return raw
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    if not isinstance(body, dict) or body.get("previous_response_id") is None:
        return raw
    previous = body.pop("previous_response_id")
    if not isinstance(previous, str):
        raise ProxyError(400, "previous_response_id must be a string", param="previous_response_id")
    record = await _record(store, team, previous, "previous_response_id")
    try:
        new = input_items(body)
    except ValueError:  # the gateway's parse names the problem
        return orjson.dumps(body)
    history = list(record.get("input") or []) + _output_items(record.get("response") or {})
    body["input"] = history + new
    return orjson.dumps(body)


async def create(
    request: Request,
    gateway: Gateway,
    store: Store,
    make_wire: Callable[[Keeper], ResponsesWire],
) -> Response:
    """POST /v1/responses: resolve the chain, serve through the gateway, store the answer."""
    ttl = gateway.config.settings.responses_ttl_seconds
    probe = make_wire(Keeper(store, OPEN_TEAM, ttl))
    try:
        team = team_key(gateway, request)
        raw = await _read(request, gateway.config.settings.max_body_bytes)
        raw = await _chained(store, team, raw)
    except ProxyError as err:
        return probe.error_response(err)
    wire = make_wire(Keeper(store, team, ttl))
    response = await gateway.serve(_replay(request, raw), wire)
    keeper = wire.keeper
    if keeper is not None and keeper.pending is not None and response.status_code == 200:
        await keeper.save(keeper.pending)
    return response


async def fit_only(
    request: Request, gateway: Gateway, store: Store, wire: ResponsesWire
) -> Response:
    """POST /routefit/fit?wire=responses: the dry run of a Responses body, its
    ``previous_response_id`` resolved as ``create`` would (nothing is forwarded or stored)."""
    try:
        team = team_key(gateway, request)
        raw = await _read(request, gateway.config.settings.max_body_bytes)
        raw = await _chained(store, team, raw)
    except ProxyError as err:
        return wire.error_response(err)
    return await gateway.fit_only(_replay(request, raw), wire)


async def _guarded(request: Request, gateway: Gateway, op: Callable[[str], Awaitable[Any]]) -> Any:
    try:
        return await op(team_key(gateway, request))
    except ProxyError as err:
        return error_response(err)


def _json(data: Any) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


async def retrieve(request: Request, gateway: Gateway, store: Store) -> Response:
    rid = request.path_params["response_id"]

    async def op(team: str) -> Response:
        return _json((await _record(store, team, rid, None)).get("response"))

    result: Response = await _guarded(request, gateway, op)
    return result


async def delete(request: Request, gateway: Gateway, store: Store) -> Response:
    rid = request.path_params["response_id"]

    async def op(team: str) -> Response:
        try:
            gone = await store.delete_response(team, rid)
        except StoreUnavailable:
            raise ProxyError(
                503, "the response store is unavailable", code="store_unavailable"
            ) from None
        if not gone:
            raise ProxyError(404, f"No response found with id '{rid}'.", code="not_found")
        return _json({"id": rid, "object": "response.deleted", "deleted": True})

    result: Response = await _guarded(request, gateway, op)
    return result


async def input_items_list(request: Request, gateway: Gateway, store: Store) -> Response:
    """GET /v1/responses/{id}/input_items: the whole input the response answered, in order
    (``order=desc`` reverses it); items without an id get one derived from their position."""
    rid = request.path_params["response_id"]

    async def op(team: str) -> Response:
        items = list((await _record(store, team, rid, None)).get("input") or [])
        data = [
            {"id": f"item_{rid}_{i}", **item}
            if isinstance(item, dict) and "id" not in item
            else item
            for i, item in enumerate(items)
        ]
        if request.query_params.get("order") == "desc":
            data.reverse()
        first = data[0].get("id") if data and isinstance(data[0], dict) else None
        last = data[-1].get("id") if data and isinstance(data[-1], dict) else None
        return _json(
            {"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": False}
        )

    result: Response = await _guarded(request, gateway, op)
    return result
