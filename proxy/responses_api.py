"""The Responses API's endpoints for stored responses: retrieve, delete, and list a stored
response's input items, each for the team whose key the request carries.

Creating a response (``POST /v1/responses``) and its dry run are the gateway's, like every other
wire's requests: the stored chain a request continues is resolved in its intake
(``proxy.responses_store.Keeper``), from the body it read and the team it authenticated once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from proxy.errors import ProxyError, error_response
from proxy.responses_store import delete_record, load_record, team_key
from proxy.store import Store
from proxy.teams import TeamDirectory

__all__ = ["delete", "input_items_list", "retrieve"]


async def _guarded(
    request: Request, teams: TeamDirectory, op: Callable[[str], Awaitable[Response]]
) -> Response:
    try:
        return await op(team_key(teams.authenticate(request.headers)))
    except ProxyError as err:
        return error_response(err)


def _json(data: Any) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


async def retrieve(request: Request, teams: TeamDirectory, store: Store) -> Response:
    rid = request.path_params["response_id"]

    async def op(team: str) -> Response:
        return _json((await load_record(store, team, rid, None)).get("response"))

    return await _guarded(request, teams, op)


async def delete(request: Request, teams: TeamDirectory, store: Store) -> Response:
    rid = request.path_params["response_id"]

    async def op(team: str) -> Response:
        await delete_record(store, team, rid)
        return _json({"id": rid, "object": "response.deleted", "deleted": True})

    return await _guarded(request, teams, op)


async def input_items_list(request: Request, teams: TeamDirectory, store: Store) -> Response:
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

    return await _guarded(request, teams, op)
