"""The Responses API's endpoints for stored responses: retrieve, delete, and list a stored
response's input items, each for the team whose key the request carries.

Creating a response (``POST /v1/responses``) and its dry run are the gateway's, like every other
wire's requests: the stored chain a request continues is resolved in its intake
(``proxy.responses_store.Keeper``), from the body it read and the team it authenticated once.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from proxy.errors import ProxyError, error_response
from proxy.responses_store import delete_record, load_record, team_key
from proxy.store import Store
from proxy.teams import TeamDirectory

__all__ = ["delete", "input_items_list", "retrieve"]

#: A ``limit`` that may be in range: anything else is refused without being converted.
_LIMIT = re.compile(r"[0-9]{1,3}")


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
    """GET /v1/responses/{id}/input_items: the input the response answered, a page at a time as
    OpenAI pages it (``limit`` 1-100, default 20; ``order`` ``desc`` by default, or ``asc``;
    ``after`` / ``before`` an item id of this list); items without an id get one derived from
    their position. A query OpenAI refuses is a 400 naming the parameter."""
    rid = request.path_params["response_id"]

    async def op(team: str) -> Response:
        limit, order, after, before = _paging(request.query_params)
        items = list((await load_record(store, team, rid, None)).get("input") or [])
        data = [
            {"id": f"item_{rid}_{i}", **item}
            if isinstance(item, dict) and "id" not in item
            else item
            for i, item in enumerate(items)
        ]
        if order == "desc":
            data.reverse()
        ids = [item.get("id") if isinstance(item, dict) else None for item in data]
        start, end = 0, len(data)
        if after is not None:
            start = _cursor(ids, after, "after") + 1
        if before is not None:
            end = _cursor(ids, before, "before")
        page = data[start:end][:limit]
        return _json(
            {
                "object": "list",
                "data": page,
                "first_id": ids[start] if page else None,
                "last_id": ids[start + len(page) - 1] if page else None,
                "has_more": start + len(page) < end,
            }
        )

    return await _guarded(request, teams, op)


def _paging(query: Mapping[str, str]) -> tuple[int, str, str | None, str | None]:
    """(limit, order, after, before) of a list query, or OpenAI's 400 for a value it refuses."""
    raw = query.get("limit", "20")
    # ASCII digits, at most three: ``int`` refuses other digits ``isdigit`` accepts ("²") and
    # strings past 4,300 digits, and a refusal there would be a 500, not OpenAI's 400
    limit = int(raw) if _LIMIT.fullmatch(raw) else 0
    if not 1 <= limit <= 100:
        raise ProxyError(
            400,
            f"Invalid 'limit': {raw!r}; expected an integer from 1 to 100.",
            code="invalid_value",
            param="limit",
        )
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ProxyError(
            400,
            f"Invalid 'order': {order!r}; expected one of 'asc', 'desc'.",
            code="invalid_value",
            param="order",
        )
    return limit, order, query.get("after"), query.get("before")


def _cursor(ids: list[Any], item: str, param: str) -> int:
    """The position of item ``item`` in the list: a cursor that names no item of it is a 400."""
    try:
        return ids.index(item)
    except ValueError:
        raise ProxyError(
            400,
            f"Invalid '{param}': no input item {item!r} in this response's input.",
            code="invalid_value",
            param=param,
        ) from None
