"""OpenAI Responses: ``POST /v1/responses`` (Codex CLI's only wire) and its count endpoint,
``POST /v1/responses/input_tokens`` (routefit's calibrated estimate, answered locally).

OpenAI routes get the fitted body natively (the client's own body, byte for byte, when nothing
had to change; else the body with ``input`` rewritten from the fitted items); the provider's
bytes come back unchanged (but for a ``store`` that promises what routefit will not keep:
``_promise``, and a continuation's ``previous_response_id``: ``_named``), and usage is read
from ``response.completed``. Other routes are translated to chat completions and back
(``responses_translate``). Items map onto fitting's units as ``responses_items`` describes.
Stored responses (``store``, ``previous_response_id``) are the shell's
(``proxy.responses_store``): it resolves the chain a request names before this wire parses it
(``RequestContext.stored``), and this wire hands it the finished answers to keep.

Unknown item types: kept verbatim, priced as their JSON, grouped with the model-side items around
them (so removed only with their whole turn); an unknown ``*_call_output`` pairs with its
``call_id`` like a function output. Malformed known items are refused (400 naming the item).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from pricing.messages import ChatRequest
from proxy.errors import ProxyError, error_body
from proxy.exchange import CHAT, RESPONSES, Completion, EventStream, Outbound
from proxy.exchange.sse import event_data
from proxy.teams import BEARER_OR_API_KEY
from proxy.usage import Usage, normalize_usage
from proxy.wires.base import (
    Answer,
    Outcome,
    RequestContext,
    Stored,
    capped_output,
    chat_chunks,
    chat_field,
    delta_fields,
)
from proxy.wires.responses_items import client_field, input_items, parse_responses, render_items
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

__all__ = ["ResponsesRequest", "ResponsesWire", "unkept"]

#: Events that end a Responses stream (the provider's own end marker).
_ENDS = frozenset({b"response.completed", b"response.incomplete", b"response.failed", b"error"})
#: Of those, the provider's failure: the stream ends in the client's words, but it is no answer
#: (charged like a stream that broke: its prompt and the text relayed).
_FAILS = frozenset({b"response.failed", b"error"})
#: The event that announces the provider's id for the answer.
_CREATED = frozenset({b"response.created"})
#: The events that carry the response object (and so its ``store`` flag).
_CARRIERS = frozenset(
    {
        b"response.created",
        b"response.queued",
        b"response.in_progress",
        b"response.completed",
        b"response.incomplete",
        b"response.failed",
    }
)


def failed_event(request: ChatRequest, rid: str, seq: int, message: str, code: str) -> bytes:
    """``response.failed`` with ``code`` (how a Responses stream reports an error)."""
    response = response_object(request, rid, [], None, "failed")
    response["error"] = {"code": code, "message": message}
    return sse_event(
        "response.failed", {"type": "response.failed", "sequence_number": seq, "response": response}
    )


def _kind(event: bytes, kinds: frozenset[bytes]) -> bytes | None:
    """Which of ``kinds`` an event is, if any (by its ``event:`` line, else its data's type)."""
    if event.startswith(b"event:"):
        # its first line, whichever of LF, CRLF or a bare CR ends it (``proxy.exchange.sse``)
        name = event[6 : event.find(b"\n")].partition(b"\r")[0].strip()
        return name if name in kinds else None
    head = event[:160]
    return next((kind for kind in kinds if b'"type":"' + kind + b'"' in head), None)


def _data(event: bytes) -> Any:
    """An event's data as JSON (None when it has none, or none that parses)."""
    data = event_data(event)
    try:
        return orjson.loads(data) if data is not None else None
    except orjson.JSONDecodeError:
        return None


def _announced(event: bytes) -> str | None:
    """The provider's id for the answer, when ``event`` is its ``response.created``."""
    if _kind(event, _CREATED) is None:
        return None
    obj = _data(event)
    response = obj.get("response") if isinstance(obj, dict) else None
    rid = response.get("id") if isinstance(response, dict) else None
    return rid if isinstance(rid, str) and rid else None


#: The smallest ``max_output_tokens`` OpenAI's Responses API takes.
LEAST_OUTPUT = 16


@dataclass(frozen=True, slots=True)
class ResponsesRequest(ChatRequest):
    """A Responses request, with where its answer is kept (None: a dry run, nothing kept)."""

    stored: Stored | None = None
    #: The ``previous_response_id`` the client named: the provider never sees it (it is sent
    #: the whole chain), so every response object routefit returns or keeps echoes it
    #: (``_named``), as OpenAI's does.
    previous: str | None = None

    @property
    def least_output(self) -> int:
        """OpenAI refuses a ``max_output_tokens`` below 16 (``integer_below_min_value``), so
        the fit never shrinks a client's cap below it (``strategies.output``): a request
        whose prompt leaves less room is refused by routefit naming the reservation, not sent
        to a refusal that names a cap the client never wrote."""
        return LEAST_OUTPUT

    @property
    def keeps(self) -> Stored | None:
        """Where to keep the answer, when the client asked for it to be stored (``store``
        defaults to true, as at OpenAI) and routefit keeps it (``Stored.keeping``). None: the
        answer is not kept, and says ``store: false`` (``_promise``)."""
        stored = self.stored
        if stored is None or self.body.get("store", True) is False or not stored.keeping:
            return None
        return stored


def continued(body: Any, prior: Sequence[Any]) -> Any:
    """The body with the stored chain ``prior`` before its own input, and without
    ``previous_response_id`` (the provider is sent the whole conversation, not the id)."""
    if not isinstance(body, Mapping):
        return body
    out = {k: v for k, v in body.items() if k != "previous_response_id"}
    out["input"] = [*prior, *input_items(body)]
    return out


def _request(request: ChatRequest) -> ResponsesRequest:
    assert isinstance(request, ResponsesRequest)
    return request


class ResponsesWire:
    name = RESPONSES
    paths: tuple[str, ...] = ("/v1/responses", "/responses")
    #: OpenAI's ``POST /v1/responses/input_tokens`` (the SDK's ``responses.input_tokens.count``).
    count_paths: tuple[str, ...] = ("/v1/responses/input_tokens", "/responses/input_tokens")
    stored = True
    keys = BEARER_OR_API_KEY
    generated = delta_fields("delta")

    def parse(self, ctx: RequestContext) -> ChatRequest:
        body = ctx.body
        stored = ctx.stored
        prior = stored.prior if stored is not None else None
        if prior is not None:
            body = continued(body, prior)
        p = parse_responses(body, len(prior) if prior is not None else 0)
        previous = ctx.body.get("previous_response_id") if prior is not None else None
        return ResponsesRequest(
            p.model,
            p.messages,
            p.tools,
            p.max_output_tokens,
            p.body,
            stored,
            previous,
            choices=p.choices,
        )

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
            _named(request, response)
            _keep(request, response)
            _promise(request, response)
            return Answer(orjson.dumps(response), normalize_usage(response.get("usage")))
        if isinstance(data, dict):
            # the provider's own bytes, unless its ``store`` promises what routefit will not keep
            # or it does not name the response the client continued (it was never sent one)
            named = _named(request, data)
            _keep(request, data)
            body = orjson.dumps(data) if _promise(request, data) or named else completion.body
            return Answer(body, provider_usage(data))
        return Answer(completion.body, None)

    async def relay(
        self, request: ChatRequest, events: EventStream, wire: str, outcome: Outcome
    ) -> AsyncGenerator[bytes, None]:
        # Either leg's events, each response object's ``store`` held to what routefit keeps
        # (``_promise``): read anew per event, since a stream's answer can be missed at its end.
        relayed = (
            self._translated(request, events, outcome)
            if wire == CHAT
            else self._relayed(request, events, outcome)
        )
        try:
            async for event in relayed:
                r = _request(request)
                if (r.keeps is None or r.previous is not None) and _kind(
                    event, _CARRIERS
                ) is not None:
                    event = _promised(request, event)
                yield event
        finally:
            await relayed.aclose()  # a client gone mid-stream closes the provider's stream too

    async def _relayed(
        self, request: ChatRequest, events: EventStream, outcome: Outcome
    ) -> AsyncGenerator[bytes, None]:
        async for event in events:
            if outcome.answer_id is None:
                # the provider's own id: the error event that may end the stream names it too
                outcome.answer_id = _announced(event)
            end = _kind(event, _ENDS)
            if end is not None:
                obj = _data(event)
                if isinstance(obj, dict):
                    await _final(request, obj.get("response"), outcome)
                    if end in _FAILS:
                        outcome.failed = True  # the provider's own failure: no answer
                    else:
                        outcome.completed = True
            yield event

    async def _translated(
        self, request: ChatRequest, events: EventStream, outcome: Outcome
    ) -> AsyncGenerator[bytes, None]:
        rid = outcome.answer_id = new_response_id()
        t = ChatStreamToResponses(request, rid)
        for out in t.start():
            yield out
        done = False
        try:
            async for chunk in chat_chunks(events, outcome):
                if chunk is None:
                    done = True
                    break
                for out in t.chunk(chunk):
                    yield out
            else:
                return  # no [DONE]: the gateway ends the stream (``stream_error``)
        finally:
            if not done:  # stopped before the closing events: the calls they hold are charged
                for arguments in t.held():
                    outcome.note(arguments)
        closing, final = t.finish_events()
        for out in closing:
            yield out
        await _final(request, final, outcome)
        outcome.completed = True
        yield t.end_event(final)

    def stream_error(self, request: ChatRequest, outcome: Outcome, message: str) -> bytes:
        rid = outcome.answer_id or new_response_id()
        return failed_event(request, rid, outcome.sent, message, "upstream_error")

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

    def error_body(self, err: ProxyError) -> bytes:
        return error_body(err)

    def counted(self, tokens: int) -> bytes:
        return orjson.dumps({"object": "response.input_tokens", "input_tokens": tokens})

    def where(self, request: ChatRequest, param: str) -> str:
        field = chat_field(param)
        if field is None:
            return param
        stored = _request(request).stored
        prior = stored.prior if stored is not None else None
        return client_field(request, field, len(prior) if prior is not None else 0)


def _promise(request: ChatRequest, response: dict[str, Any]) -> bool:
    """An answer's ``store`` held to what routefit keeps: false when it does not keep it (a
    bound of 0, the client's ``store: false``, an answer the bound cannot hold), whatever the
    provider's answer or the request's default said, since ``previous_response_id`` naming it
    would be a 404. True when it was changed (a passthrough body is then written anew)."""
    return _request(request).keeps is None and _not_kept(response)


def _named(request: ChatRequest, response: dict[str, Any]) -> bool:
    """An answer's ``previous_response_id`` the one the client named (the provider, sent the
    whole chain instead, answers null), as the client is told and as it is kept; True when
    that changed it."""
    previous = _request(request).previous
    if previous is None or response.get("previous_response_id") == previous:
        return False
    response["previous_response_id"] = previous
    return True


def _not_kept(response: dict[str, Any]) -> bool:
    """The one place an answer's ``store`` is set (false); True when that changed it."""
    if response.get("store") is False:
        return False
    response["store"] = False
    return True


def unkept(body: bytes) -> bytes:
    """A whole answer's body saying ``store: false``: one handed over to be kept, which its
    store write then missed (``proxy.responses_store.Keeper.answered``)."""
    response = orjson.loads(body)
    return orjson.dumps(response) if _not_kept(response) else body


def _promised(request: ChatRequest, event: bytes) -> bytes:
    """A response-carrying event with its response's ``store`` held to ``_promise`` and its
    ``previous_response_id`` to ``_named`` (its other lines as they were; the data on one
    line)."""
    obj = _data(event)
    response = obj.get("response") if isinstance(obj, dict) else None
    if not isinstance(response, dict):
        return event
    named = _named(request, response)
    if not _promise(request, response) and not named:
        return event
    data = b"data: " + orjson.dumps(obj)
    lines: list[bytes] = []
    for line in event.splitlines():
        if line.startswith(b"data:"):
            if data:  # the first data line carries it all
                lines.append(data)
                data = b""
        elif line:
            lines.append(line)
    return b"\n".join(lines) + b"\n\n"


def _keep(request: ChatRequest, response: dict[str, Any]) -> None:
    """A whole answer, kept by the shell before its body goes out (when it is to be stored)."""
    stored = _request(request).keeps
    if stored is not None:
        stored.keep(response, input_items(request.body))


#: Output items of tools OpenAI runs itself within the response, whose results the model read
#: before answering: web search's "search content tokens", a file search's chunks, the code
#: interpreter's output, a remote MCP server's answer — billed as input tokens, inside
#: ``usage.input_tokens`` with no count of their own.
_SERVER_RUN = frozenset(
    {"web_search_call", "file_search_call", "code_interpreter_call", "mcp_call"}
)


def provider_usage(response: Mapping[str, Any]) -> Usage | None:
    """A native Response's usage, marked ``tools_read`` when OpenAI's own tools ran in it
    (``_SERVER_RUN``): its input count then holds what they read, charged as stated and never
    learnt as the prompt's (a prompt of a few hundred tokens anchored at thousands, as an
    Anthropic web search did: ``proxy.usage.Usage.tools_read``)."""
    usage = normalize_usage(response.get("usage"))
    output = response.get("output")
    ran = isinstance(output, list) and any(
        isinstance(item, Mapping) and item.get("type") in _SERVER_RUN for item in output
    )
    return replace(usage, tools_read=True) if usage is not None and ran else usage


async def _final(request: ChatRequest, response: Any, outcome: Outcome) -> None:
    """A stream's final response: its usage noted, and stored before its last event goes out."""
    if not isinstance(response, dict):
        return
    outcome.usage = provider_usage(response) or outcome.usage
    _named(request, response)  # kept as the client is told
    stored = _request(request).keeps
    if stored is not None and response.get("status") != "failed":
        await stored.save(response, input_items(request.body))
