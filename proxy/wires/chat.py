"""OpenAI Chat Completions: ``POST /v1/chat/completions``.

Every route speaks it, directly (OpenAI-compatible providers) or through litellm, so this wire
never translates. Streams ask the provider for usage (``stream_options.include_usage``) and drop
that usage-only chunk again when the client did not ask for it: the client sees exactly what it
would have seen from the provider.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import orjson

from pricing.messages import ChatRequest, parse_request
from proxy.errors import ProxyError, error_body
from proxy.exchange import CHAT, Completion, EventStream, Outbound
from proxy.exchange.sse import event_data
from proxy.teams import BEARER_OR_API_KEY
from proxy.usage import normalize_usage
from proxy.wires.base import (
    CHAT_CAPS,
    Answer,
    Outcome,
    RequestContext,
    capped_output,
    chat_field,
    delta_fields,
)
from strategies.fit import Fit, FitError
from strategies.output import OutputReserveError

__all__ = ["ChatWire", "Renamer", "as_alias", "error_event"]

#: The first ``"model": "..."`` member of a JSON text (a key: a quote inside a string is escaped).
_MODEL = re.compile(rb'"model"\s*:\s*"(?:[^"\\]|\\.)*"')


def as_alias(data: bytes, alias: str) -> bytes:
    """``data`` answering as the client's alias: the provider names its own model (litellm's
    upstream name, a dated snapshot), the client asked for the route's alias and gets it back."""
    return Renamer(alias)(data)


class Renamer:
    """The first ``"model"`` member of each of a stream's events (or of one whole answer:
    ``as_alias``) made the alias, at a byte comparison per event: the provider's own member is
    learnt from the first event that has one, and an event whose first ``"model"`` key is that
    same member is rewritten by slicing (a regex search per event cost ~5 µs, ~0.3 ms over a
    64-token stream). Anything else is found by the regex."""

    __slots__ = ("alias", "member", "seen")

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.member = b'"model":' + orjson.dumps(alias) if alias else b""
        self.seen: bytes | None = None

    def __call__(self, data: bytes) -> bytes:
        if not self.alias:
            return data
        seen = self.seen
        at = data.find(b'"model"')
        if at < 0:
            return data  # no model key: as_alias would not change it either
        if seen is not None and data.startswith(seen, at):
            if seen == self.member:
                return data
            return data[:at] + self.member + data[at + len(seen) :]
        found = _MODEL.search(data)
        if found is None:
            return data
        self.seen = found.group(0)
        return data[: found.start()] + self.member + data[found.end() :]


def error_event(message: str, code: str = "upstream_error") -> bytes:
    """A stream's last event when it cannot end normally (OpenAI's error object as data)."""
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _wants_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, Mapping) and bool(options.get("include_usage"))


def inspect(event: bytes, outcome: Outcome, wants_usage: bool) -> bytes:
    """Capture usage and completion from one event; drop or trim the usage the client did not
    ask for. Events without usage pass through as the very same bytes."""
    if b'"usage"' not in event and b"[DONE]" not in event:
        return event  # the usual content chunk: nothing to read or change
    data = event_data(event)
    if data is None:
        return event
    if data.strip() == b"[DONE]":
        outcome.completed = True
        return event
    if b'"usage"' not in data:
        return event
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return event
    if not isinstance(obj, dict) or obj.get("usage") is None:
        return event
    outcome.usage = normalize_usage(obj["usage"]) or outcome.usage
    if wants_usage:
        return event
    if not obj.get("choices"):
        return b""  # the usage-only chunk the client did not ask for
    del obj["usage"]
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class ChatWire:
    name = CHAT
    paths: tuple[str, ...] = ("/v1/chat/completions", "/chat/completions")
    stored = False
    keys = BEARER_OR_API_KEY
    #: ``reasoning``: vLLM's, Groq's, OpenRouter's and Ollama's name for ``reasoning_content``
    #: A custom tool call's ``custom.input`` is generated as a function call's ``arguments`` is.
    generated = delta_fields(
        "content", "reasoning_content", "reasoning", "refusal", "arguments", "input"
    )

    def parse(self, ctx: RequestContext) -> ChatRequest:
        # a session's earlier messages as parsed the turn before (``pricing.parsed``)
        return parse_request(ctx.body, ctx.scope)

    def streams(self, request: ChatRequest) -> bool:
        return bool(request.body.get("stream"))

    def outbound(
        self, request: ChatRequest, fitted: Fit, wire: str, headers: Mapping[str, str]
    ) -> Outbound:
        stream = self.streams(request)
        body = capped_output(fitted.body, fitted, CHAT_CAPS)
        if stream and not _wants_usage(body):
            body = dict(body)
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return Outbound(CHAT, body, stream=stream)

    def answer(self, request: ChatRequest, completion: Completion, wire: str) -> Answer:
        data = completion.data
        usage = normalize_usage(data.get("usage")) if isinstance(data, dict) else None
        return Answer(as_alias(completion.body, request.model), usage)

    async def relay(
        self, request: ChatRequest, events: EventStream, wire: str, outcome: Outcome
    ) -> AsyncGenerator[bytes, None]:
        wants_usage = _wants_usage(request.body)
        rename = Renamer(request.model)
        async for event in events:
            out = inspect(event, outcome, wants_usage)
            if out:
                yield rename(out)

    def stream_error(self, request: ChatRequest, outcome: Outcome, message: str) -> bytes:
        return error_event(message)

    def overflow(self, exc: FitError) -> ProxyError:
        if isinstance(exc, OutputReserveError):  # the reply's reservation, not the prompt
            return ProxyError(
                400,
                f"This model's maximum context length is {exc.window:,} tokens, and the "
                f"output reservation (max_tokens) leaves too little of it: {exc}",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return ProxyError(
            400,
            (
                f"This request exceeds your team's per-request prompt limit of "
                f"{exc.team_limit:,} tokens. {exc}"
                if exc.team_limit is not None
                else f"This model's maximum context length is {exc.window:,} tokens. {exc}"
            ),
            param="messages",
            code="context_length_exceeded",
        )

    def error_body(self, err: ProxyError) -> bytes:
        return error_body(err)

    def where(self, request: ChatRequest, param: str) -> str:
        """Chat's own terms, one message and one part per the client's (``parse_request``):
        only a media part's field is the one its client used — a ``file``'s ``file_data``, an
        ``input_audio``'s ``data``, an ``image_url`` given as a bare string."""
        field = chat_field(param)
        if field is None or not field.media:
            return param
        part = _part(request.body, field.message, field.part)
        if part is None:
            return param
        at = param.removesuffix(field.rest)
        kind = part.get("type")
        if kind == "file":
            return f"{at}.file.file_data"
        if kind == "input_audio":
            return f"{at}.input_audio.data"
        if kind == "image_url" and isinstance(part.get("image_url"), str):
            return f"{at}.image_url"
        return param


def _part(body: Mapping[str, Any], i: int, j: int | None) -> Mapping[str, Any] | None:
    """Content part ``j`` of message ``i`` of a chat body, if there is one."""
    messages = body.get("messages")
    message = messages[i] if isinstance(messages, list) and i < len(messages) else None
    content = message.get("content") if isinstance(message, Mapping) else None
    if j is None or not isinstance(content, list) or j >= len(content):
        return None
    part = content[j]
    return part if isinstance(part, Mapping) else None
