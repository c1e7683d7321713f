"""The Responses API's HTTP endpoints: create (through the gateway), retrieve, delete, list a
stored response's input items, and the dry run of a Responses body.

The shell around the Responses wire: it authenticates the team a stored response belongs to,
resolves ``previous_response_id`` from the store before the gateway sees the body
(``responses_store.resolve_chain``), and waits for the answer's write before its body goes out.
The wire modules (``proxy.wires.responses*``) never name the gateway; this module does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive

from proxy.body import read_body
from proxy.errors import ProxyError, error_response
from proxy.gateway import Gateway
from proxy.store import Store
from proxy.store.base import StoreUnavailable
from proxy.wires.responses import ResponsesWire
from proxy.wires.responses_store import Keeper, load_record, resolve_chain

__all__ = ["OPEN_TEAM", "create", "delete", "fit_only", "input_items_list", "retrieve"]

#: Team key of an open gateway (no teams configured).
OPEN_TEAM = "-"


def team_key(gateway: Gateway, request: Request) -> str:
    team = gateway.teams.authenticate(request.headers)
    return team.id if team is not None else OPEN_TEAM


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


async def _chained(gateway: Gateway, store: Store, request: Request) -> tuple[str, bytes]:
    """(the team, the body with its chain resolved)."""
    team = team_key(gateway, request)
    raw = (await read_body(request, gateway.config.settings.max_body_bytes))[0]
    return team, await resolve_chain(store, team, raw)


async def create(request: Request, gateway: Gateway, store: Store) -> Response:
    """POST /v1/responses: resolve the chain, serve through the gateway, store the answer."""
    try:
        team, raw = await _chained(gateway, store, request)
    except ProxyError as err:
        return error_response(err)
    keeper = Keeper(store, team, gateway.config.settings.responses_ttl_seconds)
    response = await gateway.serve(_replay(request, raw), ResponsesWire(keeper))
    if response.status_code == 200:  # an answer the client will see: kept before it goes out
        await keeper.saved()
    return response


async def fit_only(request: Request, gateway: Gateway, store: Store) -> Response:
    """POST /routefit/fit?wire=responses: the dry run of a Responses body, its
    ``previous_response_id`` resolved as ``create`` would (nothing is forwarded or stored)."""
    try:
        _, raw = await _chained(gateway, store, request)
    except ProxyError as err:
        return error_response(err)
    return await gateway.fit_only(_replay(request, raw), ResponsesWire())


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
        return _json((await load_record(store, team, rid, None)).get("response"))

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
        items = list((await load_record(store, team, rid, None)).get("input") or [])
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
