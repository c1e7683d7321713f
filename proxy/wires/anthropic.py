"""Anthropic Messages: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Parsing lives in ``anthropic_parse`` (the body → the fit core's messages), writing the fitted
conversation back in ``anthropic_render`` (byte-stable, cache breakpoints), translation for
routes that do not speak Messages in ``anthropic_chat``. This module is the wire itself: which
provider body goes out, how answers and SSE come back, usage, and Anthropic's error shape
(``{"type": "error", "error": {"type", "message"}}``) for every failure on these routes.

Native passthrough (the route's provider speaks Messages): the client's own body goes out when
the fit left it alone — the same object, so the same bytes but ``model`` — with the client's
``anthropic-version`` and ``anthropic-beta`` headers; SSE events are relayed as the very bytes
that arrived, and only ``message_start`` / ``message_delta`` are read, for usage.

**Extended thinking and a lowered cap** (decided here): Anthropic counts thinking within
``max_tokens`` and refuses ``budget_tokens`` below 1,024 or not below ``max_tokens``. A cap
routefit lowers (clamped to the route's limit, shrunk to the room beside the prompt) takes a
larger thinking budget down with it, to the cap less one (``_thinking_within``). With thinking
on, the request states the least cap it can be sent with, 1,025
(``AnthropicRequest.least_output``), and the fit never shrinks the reservation below it
(``strategies.output``): such a request goes with at least 1,025 and a budget of at least 1,024,
or is refused — by the reservation (``input length and max_tokens exceed context limit``, the
cap named then being one thinking can use) when a cap of 1,025 or more would fit, else as a
prompt that is too long (a cap small enough to fit is one Anthropic refuses with thinking on:
the conversation is what must give; the figure includes the 1,025 reserved). A route whose
output limit clamps the cap under 1,025 refuses a thinking request, naming its limit
(``OutputFloorError``). Thinking is never dropped from the body: the client asked for it, and a
reply without it is not the answer it asked for. A client's own cap of 1,024 or less with
thinking on goes as it came; the provider's 400 is relayed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any

import orjson

from pricing.messages import ChatRequest
from proxy.errors import ProxyError
from proxy.exchange import CHAT, MESSAGES, Completion, EventStream, Outbound
from proxy.exchange.sse import encode, event_data, event_name
from proxy.teams import BEARER_OR_API_KEY
from proxy.usage import normalize_usage
from proxy.wires.anthropic_chat import ChatToAnthropic, chat_body, chat_to_message
from proxy.wires.anthropic_parse import (
    THINKING_MIN,
    AnthropicRequest,
    client_field,
    parse_anthropic,
    thinking_on,
)
from proxy.wires.anthropic_render import mark_head, render_messages, true_labels
from proxy.wires.base import (
    Answer,
    Outcome,
    RequestContext,
    capped_output,
    chat_chunks,
    chat_field,
    delta_fields,
)
from strategies.fit import Fit, FitError
from strategies.output import OutputFloorError, OutputReserveError

__all__ = ["AnthropicWire", "anthropic_error", "error_event"]

#: Client headers a Messages provider must see.
_FORWARDED = ("anthropic-version", "anthropic-beta")

#: Where the output cap goes, in a Messages body and in the chat body it is translated to.
_CAP = ("max_tokens",)

#: Anthropic's error types by status (docs.anthropic.com "Errors").
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_KNOWN_TYPES = frozenset(_TYPES.values()) | {"api_error", "billing_error", "timeout_error"}


def _type(err: ProxyError) -> str:
    """The provider's own type for its errors; by status for routefit's (whose ``type`` is
    OpenAI's vocabulary)."""
    if err.origin == "upstream" and err.type in _KNOWN_TYPES:
        return err.type
    return _TYPES.get(err.status, "invalid_request_error" if err.status < 500 else "api_error")


def anthropic_error(err: ProxyError) -> bytes:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    return orjson.dumps({"type": "error", "error": {"type": _type(err), "message": err.message}})


def error_event(message: str, kind: str = "api_error") -> bytes:
    """A stream's last event when it cannot end normally (Anthropic's ``error`` event)."""
    return encode({"type": "error", "error": {"type": kind, "message": message}}, "error")


def _request(request: ChatRequest) -> AnthropicRequest:
    assert isinstance(request, AnthropicRequest)
    return request


def native_body(request: AnthropicRequest, fitted: Fit) -> Mapping[str, Any]:
    """The fitted request as Anthropic JSON: the client's own object when nothing changed
    (each base64 image labelled as its bytes say: ``true_labels``)."""
    if fitted.messages is request.messages:
        return true_labels(request.body)
    messages, head = render_messages(request, fitted.messages, fitted.settled_mask)
    body = dict(request.body)
    if head is not None:
        mark_head(body, messages, head)
    body["messages"] = messages
    return true_labels(body)


def _usage_of(data: Any, key: str) -> Mapping[str, Any] | None:
    if not isinstance(data, Mapping):
        return None
    holder = data.get(key) if key else data
    usage = holder.get("usage") if isinstance(holder, Mapping) else None
    return usage if isinstance(usage, Mapping) else None


class AnthropicWire:
    name = MESSAGES
    paths: tuple[str, ...] = ("/v1/messages",)
    count_paths: tuple[str, ...] = ("/v1/messages/count_tokens",)
    stored = False
    keys = BEARER_OR_API_KEY
    generated = delta_fields("text", "partial_json", "thinking")

    def parse(self, ctx: RequestContext) -> ChatRequest:
        # a session's earlier messages as parsed the turn before (``pricing.parsed``)
        return parse_anthropic(ctx.body, count_only=ctx.counting, scope=ctx.scope)

    def streams(self, request: ChatRequest) -> bool:
        return bool(request.body.get("stream"))

    def outbound(
        self, request: ChatRequest, fitted: Fit, wire: str, headers: Mapping[str, str]
    ) -> Outbound:
        req = _request(request)
        stream = self.streams(request)
        if wire == CHAT:
            body = capped_output(chat_body(req, fitted.messages, stream), fitted, _CAP)
            return Outbound(CHAT, body, stream=stream)
        forwarded = {k: headers[k] for k in _FORWARDED if k in headers}
        native = native_body(req, fitted)
        body = capped_output(native, fitted, _CAP)
        if body is not native:  # the cap was lowered: a thinking budget goes under it
            body = _thinking_within(body)
        return Outbound(MESSAGES, body, forwarded, stream)

    def answer(self, request: ChatRequest, completion: Completion, wire: str) -> Answer:
        data = completion.data
        if wire == CHAT:
            usage = normalize_usage(data.get("usage")) if isinstance(data, Mapping) else None
            message = chat_to_message(data, request.model, usage)
            return Answer(orjson.dumps(message), usage)
        return Answer(completion.body, normalize_usage(_usage_of(data, "")))

    def relay(
        self, request: ChatRequest, events: EventStream, wire: str, outcome: Outcome
    ) -> AsyncGenerator[bytes, None]:
        if wire == CHAT:
            return _relay_chat(request.model, events, outcome)
        return _relay_native(events, outcome)

    def overflow(self, exc: FitError) -> ProxyError:
        if isinstance(exc, OutputFloorError):
            return ProxyError(
                400,
                f"max_tokens: extended thinking needs max_tokens of at least {exc.least:,} "
                f"(budget_tokens of at least {THINKING_MIN:,}, below max_tokens), but this "
                f"route's output limit is {exc.limit.route_limit:,} tokens; turn thinking off "
                f"or use a route with a larger output limit ({exc})",
                param="max_tokens",
                type="invalid_request_error",
            )
        if isinstance(exc, OutputReserveError):
            return ProxyError(
                400,
                _reserve_message(exc),
                code="context_length_exceeded",
                type="invalid_request_error",
            )
        # N is what the prompt needs in the window: routefit's estimate after every strategy,
        # plus the output reserve and safety margin it must leave (so N > M always holds, and
        # N - M is what a client's own compaction must free).
        needed = exc.estimate + (exc.window - exc.budget)
        message = f"prompt is too long: {needed} tokens > {exc.window} maximum"
        if exc.team_limit is not None:
            # The team's quota is the maximum here, not the window: N and M are the prompt's.
            message = (
                f"prompt is too long: {exc.estimate} tokens > {exc.team_limit} maximum "
                f"(your team's per-request prompt limit, max_prompt_tokens)"
            )
        return ProxyError(
            400,
            message,
            code="context_length_exceeded",
            type="invalid_request_error",
        )

    def stream_error(self, request: ChatRequest, outcome: Outcome, message: str) -> bytes:
        return error_event(message)

    def error_body(self, err: ProxyError) -> bytes:
        return anthropic_error(err)

    def where(self, request: ChatRequest, param: str) -> str:
        field = chat_field(param)
        return param if field is None else client_field(_request(request), field)

    def counted(self, tokens: int) -> bytes:
        return orjson.dumps({"input_tokens": tokens})


def _thinking_within(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """A thinking budget under the lowered cap: Anthropic counts thinking within
    ``max_tokens`` and refuses ``budget_tokens >= max_tokens``, so a cap routefit clamped or
    shrunk below the client's thinking budget takes the budget down with it (never below
    ``THINKING_MIN``: the fit lowers a thinking request's cap to no less than one more, see the
    module docstring)."""
    thinking = thinking_on(body)
    cap = body.get("max_tokens")
    if thinking is None:
        return body
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or not isinstance(cap, int) or budget < cap:
        return body
    return {**body, "thinking": {**thinking, "budget_tokens": cap - 1}}


def _reserve_message(exc: OutputReserveError) -> str:
    """The reservation's refusal in Anthropic's own words for it (``N + C > W``): N is what the
    prompt takes of the window (estimate and safety margin), so W − N is the largest cap that
    fits, and Claude Code, which parses this message, retries with a cap that fits rather than
    compacting a conversation that is not the problem."""
    asked = exc.limit.requested if exc.limit.requested is not None else exc.limit.reserve
    return (
        f"input length and `max_tokens` exceed context limit: {exc.window - exc.fits} + "
        f"{asked} > {exc.window}, decrease input length or `max_tokens` and try again ({exc})"
    )


async def _relay_native(events: EventStream, outcome: Outcome) -> AsyncGenerator[bytes, None]:
    usage: dict[str, Any] = {}
    async for event in events:
        name = event_name(event)
        if name in (b"message_start", b"message_delta"):
            data = event_data(event)
            try:
                parsed = orjson.loads(data) if data else None
            except orjson.JSONDecodeError:
                parsed = None
            found = _usage_of(parsed, "message" if name == b"message_start" else "")
            if found:
                usage.update({k: v for k, v in found.items() if v is not None})
                outcome.usage = normalize_usage(usage) or outcome.usage
        elif name == b"message_stop":
            outcome.completed = True
        elif name == b"error":
            outcome.failed = True  # the provider's own error event ends the stream
        yield event


async def _relay_chat(
    model: str, events: EventStream, outcome: Outcome
) -> AsyncGenerator[bytes, None]:
    out = ChatToAnthropic(model)
    finishing = False  # the closing events, holding what was held, are on their way
    try:
        async for obj in chat_chunks(events, outcome):
            if obj is None:
                finishing = True
                for chunk in out.finish(outcome.usage):
                    yield chunk
                outcome.completed = True
                return
            for chunk in out.chunk(obj):
                yield chunk
    finally:
        if not finishing:  # broken off, or the client left: what was held is charged
            for text in out.held():
                outcome.note(text)
