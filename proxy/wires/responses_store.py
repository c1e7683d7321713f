"""Stored responses: ``store`` / ``previous_response_id`` answered from routefit's own store.

Each stored record is one response with the WHOLE input it answered (the chain before it
included), per team, with a TTL: resolving ``previous_response_id`` is one store read, on any
replica (Redis) and after a restart (the embedded sqlite file). The price is storage that grows
with the chain (each record repeats its history); the TTL bounds it.

A response is written before the client can see that it is complete (before
``response.completed`` goes out on a stream, before the body of a whole answer), so a follow-up
request naming it always finds it — the read-your-writes that LiteLLM users miss (~10 s there).
That write is the one cost ``store: true`` adds on the response path. Starting it as soon as
the answer is read, to overlap the gateway's finishing work, was measured (interleaved, against
the embedded store) and made no difference: that work is ~0.1 ms of Python and the write goes
through the store's executor thread, which needs the same GIL. ``store`` defaults to true, as at
OpenAI; ``store: false`` (Codex CLI) writes nothing.

This module is the wire's side (what a request keeps, and the chain a request names); the HTTP
endpoints that create, read and delete stored responses are ``proxy.responses_api``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.errors import ProxyError
from proxy.store import Store
from proxy.store.base import StoreUnavailable
from proxy.wires.responses_items import input_items

__all__ = ["Keeper", "load_record", "resolve_chain"]

log = logging.getLogger("routefit")


@dataclass(slots=True)
class Keeper:
    """One request's storage: where to store, and what (set by the wire as it goes)."""

    store: Store
    team: str
    #: Seconds the record lives (``routefit_settings.responses_ttl_seconds``).
    ttl: int
    enabled: bool = False
    input: list[Any] = field(default_factory=list)
    #: A whole answer to store (``keep``) before its body goes out (``saved``).
    pending: dict[str, Any] | None = None

    def keep(self, response: dict[str, Any]) -> None:
        """A whole answer to store once the gateway has finished it (``saved``)."""
        if self.enabled:
            self.pending = response

    async def saved(self) -> None:
        """Store the answer ``keep`` was given (nothing when none was)."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            await self.save(pending)

    async def save(self, response: Mapping[str, Any]) -> None:
        """Store a finished response (a store outage is logged: the answer already exists)."""
        rid = response.get("id")
        if not self.enabled or not isinstance(rid, str) or not rid:
            return
        record = orjson.dumps({"response": response, "input": self.input})
        try:
            await self.store.put_response(self.team, rid, record, self.ttl)
        except StoreUnavailable as exc:
            log.warning("could not store response %s: %s", rid, exc)


async def load_record(store: Store, team: str, rid: str, param: str | None) -> dict[str, Any]:
    """The stored record ``rid`` of ``team``; a 404 naming ``param`` (or the id) when absent."""
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


async def resolve_chain(store: Store, team: str, raw: bytes) -> bytes:
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
    record = await load_record(store, team, previous, "previous_response_id")
    try:
        new = input_items(body)
    except ValueError:  # the gateway's parse names the problem
        return orjson.dumps(body)
    history = list(record.get("input") or []) + _output_items(record.get("response") or {})
    body["input"] = history + new
    return orjson.dumps(body)
