"""OpenAI Responses: ``POST /v1/responses`` (Codex CLI's only wire).

OpenAI routes get the fitted body natively (the client's own body, byte for byte, when nothing
had to change; else the body with ``input`` rewritten from the fitted items); the provider's
bytes come back unchanged, and usage is read from ``response.completed``. Other routes are
translated to chat completions and back (``responses_translate``). Items map onto fitting's
units as ``responses_items`` describes; stored responses live in ``responses_store`` (its HTTP
endpoints in ``proxy.responses_api``).

Unknown item types: kept verbatim, priced as their JSON, grouped with the model-side items around
them (so removed only with their whole turn); an unknown ``*_call_output`` pairs with its
``call_id`` like a function output. Malformed known items are refused (400 naming the item).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any

import orjson
from starlette.responses import Response

from pricing.messages import ChatRequest
from proxy.errors import ProxyError, error_response
from proxy.exchange import CHAT, RESPONSES, Completion, EventStream, Outbound, StreamBroken
from proxy.exchange.sse import event_data
from proxy.usage import normalize_usage
from proxy.wires.base import Answer, Outcome, capped_output
from proxy.wires.responses_items import input_items, parse_responses, render_items
from proxy.wires.responses_store import Keeper
from proxy.wires.responses_translate import (
    ChatStreamToResponses,
    chat_body,
    chat_to_response,
    new_response_id,
    response_object,
    sse_event,
)
from strategies.fit import Fit, FitError
from strategies.output import OutputReserveError

__all__ = ["ResponsesWire"]

#: Events that end a Responses stream (the provider's own end marker).
_ENDS = frozenset({b"response.completed", b"response.incomplete", b"response.failed", b"error"})


def failed_event(request: ChatRequest, rid: str, seq: int, message: str, code: str) -> bytes:
    """``response.failed`` with ``code`` (how a Responses stream reports an error)."""
    response = response_object(request, rid, [], None, "failed")
    response["error"] = {"code": code, "message": message}
    return sse_event(
        "response.failed", {"type": "response.failed", "sequence_number": seq, "response": response}
    )


def _ends(event: bytes) -> bool:
    """Whether an event is the stream's last (by its ``event:`` line, else its data's type)."""
    if event.startswith(b"event:"):
        return event[6 : event.find(b"\n")].strip() in _ENDS
    head = event[:160]
    return any(b'"type":"' + kind + b'"' in head for kind in _ENDS)


class ResponsesWire:
    name = RESPONSES

    def __init__(self, keeper: Keeper | None = None) -> None:
        self.keeper = keeper

    def parse(self, body: Any) -> ChatRequest:
        request = parse_responses(body)
        if self.keeper is not None:
            self.keeper.enabled = request.body.get("store", True) is not False
            if self.keeper.enabled:
                self.keeper.input = input_items(request.body)
        return request

    def streams(self, request: ChatRequest) -> bool:
        return bool(request.body.get("stream"))

    def outbound(
        self, request: ChatRequest, fitted: Fit, wire: str, headers: Mapping[str, str]
    ) -> Outbound:
        stream = self.streams(request)
        if wire == CHAT:
            translated = chat_body(request, fitted.messages, stream)
            return Outbound(CHAT, capped_output(translated, fitted, ("max_tokens",)), stream=stream)
        body = request.body
        if fitted.body is not body:
            body = {**body, "input": render_items(request, fitted.messages)}
        return Outbound(
            RESPONSES, capped_output(body, fitted, ("max_output_tokens",)), stream=stream
        )

    def answer(self, request: ChatRequest, completion: Completion, wire: str) -> Answer:
        data = completion.data
        if wire == CHAT:
            response = chat_to_response(request, data, new_response_id())
            self._keep(response)
            return Answer(orjson.dumps(response), normalize_usage(response.get("usage")))
        if isinstance(data, dict):
            self._keep(data)
            return Answer(completion.body, normalize_usage(data.get("usage")))
        return Answer(completion.body, None)

    def _keep(self, response: dict[str, Any]) -> None:
        if self.keeper is not None:
            self.keeper.keep(response)

    async def _final(self, response: Any, outcome: Outcome) -> None:
        if not isinstance(response, dict):
            return
        outcome.usage = normalize_usage(response.get("usage")) or outcome.usage
        if self.keeper is not None and response.get("status") != "failed":
            await self.keeper.save(response)

    async def relay(
        self, request: ChatRequest, events: EventStream, wire: str, outcome: Outcome
    ) -> AsyncGenerator[bytes, None]:
        if wire == CHAT:
            async for out in self._translated(request, events, outcome):
                yield out
            return
        seq = 0
        try:
            async for event in events:
                seq += 1
                if _ends(event):
                    data = event_data(event)
                    try:
                        obj = orjson.loads(data) if data is not None else None
                    except orjson.JSONDecodeError:
                        obj = None
                    if isinstance(obj, dict):
                        await self._final(obj.get("response"), outcome)
                        outcome.completed = True
                yield event
        except StreamBroken as exc:
            message = f"the upstream stream broke off before it was complete: {exc}"
            yield failed_event(request, new_response_id(), seq, message, "upstream_error")
            return
        if not outcome.completed:
            message = "the upstream stream ended before it was complete"
            yield failed_event(request, new_response_id(), seq, message, "upstream_error")

    async def _translated(
        self, request: ChatRequest, events: EventStream, outcome: Outcome
    ) -> AsyncGenerator[bytes, None]:
        rid = new_response_id()
        t = ChatStreamToResponses(request, rid)
        for out in t.start():
            yield out
        done = False
        try:
            async for event in events:
                data = event_data(event)
                if data is None:
                    continue
                if data.strip() == b"[DONE]":
                    done = True
                    break
                try:
                    chunk = orjson.loads(data)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(chunk, dict):
                    for out in t.chunk(chunk):
                        yield out
        except StreamBroken as exc:
            message = f"the upstream stream broke off before it was complete: {exc}"
            yield failed_event(request, rid, t.seq, message, "upstream_error")
            return
        if not done:
            message = "the upstream stream ended before it was complete"
            yield failed_event(request, rid, t.seq, message, "upstream_error")
            return
        closing, final = t.finish_events()
        for out in closing:
            yield out
        await self._final(final, outcome)
        outcome.completed = True
        yield t.end_event(final)

    def overflow(self, exc: FitError) -> ProxyError:
        if isinstance(exc, OutputReserveError):  # the reply's reservation, not the input
            return ProxyError(
                400,
                f"Your input and max_output_tokens exceed the context window of this model "
                f"({exc.window:,} tokens): the output reservation (max_output_tokens) leaves "
                f"too little of it. {exc}",
                param="max_output_tokens",
                code="context_length_exceeded",
            )
        return ProxyError(
            400,
            (
                f"Your input exceeds your team's per-request prompt limit "
                f"({exc.team_limit:,} tokens). {exc}"
                if exc.team_limit is not None
                else f"Your input exceeds the context window of this model "
                f"({exc.window:,} tokens). {exc}"
            ),
            param="input",
            code="context_length_exceeded",
        )

    def error_response(self, err: ProxyError) -> Response:
        return error_response(err)
