"""Google Gemini: ``POST /v1beta/models/{model}:generateContent``, ``:streamGenerateContent``
and ``:countTokens`` (and the same under ``/v1/``, the ``google-genai`` SDK's default) — Gemini
CLI's wire.

The model and the stream flag come from the URL: ``{model}`` is a routefit alias (any route, so
the CLI's model names are mapped by config like any alias), ``:streamGenerateContent?alt=sse``
streams SSE events; without ``alt=sse`` Google streams one JSON array, and routefit answers that
array with a single element, the whole response (a client reading the array incrementally sees
one chunk). Team keys: ``x-goog-api-key``, ``?key=``, or ``Authorization: Bearer``.

Parsing is ``gemini_parse``. A route whose provider speaks Gemini (``gemini/`` models:
``proxy.providers``) gets the client's body as it came when the fit changed nothing (byte for
byte), else with its contents rebuilt (``gemini_render``), and ``maxOutputTokens`` lowered when
the fit settled a smaller cap; its answer and its SSE events come back as the provider sent them
(usage read from ``usageMetadata``, the array form answered as a one-element array of the whole
answer). Every other route is translated to chat completions and back (``gemini_chat``). Every
refusal is in Google's shape, ``{"error": {"code", "message", "status"}}``, an overflow in
Google's words for it, and a stream that cannot end normally ends with one more SSE data line
holding that error object, as Google's do.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any

import orjson

from pricing.messages import ChatRequest
from proxy.errors import ProxyError
from proxy.exchange import CHAT, GEMINI, Completion, EventStream, Outbound
from proxy.exchange.sse import event_data
from proxy.teams import KeyPlaces
from proxy.usage import normalize_usage
from proxy.wires.base import (
    Answer,
    Outcome,
    RequestContext,
    call_objects,
    capped_output,
    chat_chunks,
    chat_field,
    delta_fields,
)
from proxy.wires.gemini_chat import ChatToGemini, chat_body, chat_to_gemini, sse
from proxy.wires.gemini_parse import GeminiRequest, client_field, parse_gemini
from proxy.wires.gemini_render import native_body
from strategies.fit import Fit, FitError
from strategies.output import OutputReserveError

__all__ = ["GEMINI", "GeminiWire", "google_error", "google_status"]

#: Where a model's resource name starts: a base model's (``models/``) and a tuned one's, as the
#: ``google-genai`` SDK calls them (``t_model``).
_TUNED = ("/v1beta/tunedModels/", "/v1/tunedModels/")
_PREFIXES = ("/v1beta/models/", "/v1/models/", *_TUNED)
#: The model's name in the path: Starlette's ``path`` convertor, since a name may hold ``/``
#: (an alias ``a/b``, a percent-encoded ``models%2FNAME`` decoded before routing).
_MODEL = "{model:path}"
_GENERATE = ":generateContent"
_STREAM = ":streamGenerateContent"
_COUNT = ":countTokens"

#: Google's canonical status names by HTTP status (cloud.google.com/apis/design/errors).
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def google_status(status: int) -> str:
    return _STATUS.get(status, "FAILED_PRECONDITION" if status < 500 else "INTERNAL")


def _error(status: int, message: str) -> dict[str, dict[str, object]]:
    return {"error": {"code": status, "message": message, "status": google_status(status)}}


def google_error(err: ProxyError) -> bytes:
    """Google's error body: ``{"error": {"code", "message", "status"}}``."""
    return orjson.dumps(_error(err.status, err.message))


def _request(request: ChatRequest) -> GeminiRequest:
    assert isinstance(request, GeminiRequest)
    return request


def _model(ctx: RequestContext) -> str:
    """The alias the URL names: its model's name (``models/NAME``: ``NAME``, slashes and all,
    since the ``google-genai`` SDK writes an alias ``a/b`` into the path as it is), or a tuned
    model's whole resource name (``tunedModels/NAME``), which only an alias of that name
    routes. A dry run (``/routefit/fit?wire=gemini``) has no URL model and names it in the
    body, as ``models/NAME`` or ``NAME``."""
    model = ctx.path.get("model")
    if isinstance(model, str) and ctx.url_path.startswith(_TUNED):
        return "tunedModels/" + model
    if model is None and isinstance(ctx.body, Mapping):
        model = ctx.body.get("model")
    model = model if isinstance(model, str) else ""
    return model.removeprefix("models/")


class GeminiWire:
    name = GEMINI
    paths: tuple[str, ...] = tuple(
        p + _MODEL + kind for p in _PREFIXES for kind in (_GENERATE, _STREAM)
    )
    count_paths: tuple[str, ...] = tuple(p + _MODEL + _COUNT for p in _PREFIXES)
    stored = False
    keys = KeyPlaces(headers=("x-goog-api-key",), query="key")
    generated = delta_fields("text")

    def parse(self, ctx: RequestContext) -> ChatRequest:
        stream = ctx.url_path.endswith(_STREAM)
        sse = stream and ctx.query.get("alt") == "sse"
        return parse_gemini(
            ctx.body, _model(ctx), sse=sse, array=stream and not sse, counting=ctx.counting
        )

    def streams(self, request: ChatRequest) -> bool:
        return _request(request).sse

    def outbound(
        self, request: ChatRequest, fitted: Fit, wire: str, headers: Mapping[str, str]
    ) -> Outbound:
        stream = self.streams(request)
        req = _request(request)
        if wire == GEMINI:
            body = _capped(native_body(req, fitted.body, fitted.messages), fitted)
            return Outbound(GEMINI, body, stream=stream)
        body = chat_body(req, fitted.messages, stream)
        return Outbound(CHAT, capped_output(body, fitted, ("max_tokens",)), stream=stream)

    def answer(self, request: ChatRequest, completion: Completion, wire: str) -> Answer:
        data = completion.data
        if wire == GEMINI:
            found = data.get("usageMetadata") if isinstance(data, Mapping) else None
            usage, body = normalize_usage(found), completion.body
        else:
            usage = normalize_usage(data.get("usage")) if isinstance(data, Mapping) else None
            body = orjson.dumps(chat_to_gemini(data, request.model, usage))
        return Answer(b"[" + body + b"]" if _request(request).array else body, usage)

    def relay(
        self, request: ChatRequest, events: EventStream, wire: str, outcome: Outcome
    ) -> AsyncGenerator[bytes, None]:
        if wire == GEMINI:
            return _relay_native(events, outcome)
        return _relay_chat(request.model, events, outcome)

    def stream_error(self, request: ChatRequest, outcome: Outcome, message: str) -> bytes:
        return sse(_error(500, message))

    def overflow(self, exc: FitError) -> ProxyError:
        """Google's words for a prompt over the window (``The input token count (N) exceeds
        the maximum number of tokens allowed (M).``, 400 INVALID_ARGUMENT), routefit's reason
        after them. N is what the prompt needs of the window after every strategy (estimate,
        output reserve, safety margin), so N > M and N − M is what the client must free."""
        if isinstance(exc, OutputReserveError):
            asked = exc.limit.requested if exc.limit.requested is not None else exc.limit.reserve
            message = (
                f"The input token count ({exc.window - exc.fits}) plus maxOutputTokens "
                f"({asked}) exceeds the maximum number of tokens allowed ({exc.window}). {exc}"
            )
        elif exc.team_limit is not None:
            message = (
                f"The input token count ({exc.estimate}) exceeds the maximum number of tokens "
                f"allowed ({exc.team_limit}): your team's per-request prompt limit. {exc}"
            )
        else:
            needed = exc.estimate + (exc.window - exc.budget)
            message = (
                f"The input token count ({needed}) exceeds the maximum number of tokens "
                f"allowed ({exc.window}). {exc}"
            )
        return ProxyError(400, message, code="context_length_exceeded")

    def error_body(self, err: ProxyError) -> bytes:
        return google_error(err)

    def where(self, request: ChatRequest, param: str) -> str:
        field = chat_field(param)
        return param if field is None else client_field(_request(request), field)

    def counted(self, tokens: int) -> bytes:
        return orjson.dumps({"totalTokens": tokens})


def _capped(body: Mapping[str, Any], fitted: Fit) -> Mapping[str, Any]:
    """``body`` with ``generationConfig.maxOutputTokens`` at the cap the fit settled when it
    lowered the client's (the very same object otherwise: byte-stable)."""
    output = fitted.report.output
    if output is None or not output.lowered:
        return body
    key = "generation_config" if "generation_config" in body else "generationConfig"
    config = body.get(key)
    config = config if isinstance(config, Mapping) else {}
    return {**body, key: {**config, "maxOutputTokens": output.sent}}


async def _relay_native(events: EventStream, outcome: Outcome) -> AsyncGenerator[bytes, None]:
    """Google's events as they came; the usage of the latest ``usageMetadata`` (complete on the
    last chunk), finished once a chunk states its ``finishReason`` and the stream then ends, an
    ``error`` object the provider's own end. Each ``functionCall``'s ``args`` is noted as
    generated output (``call_objects``) before its event goes out: the ``text`` pattern of
    ``GeminiWire.generated`` cannot find an object, and a stream that breaks after a call is
    charged the call, as chat's ``arguments`` and Messages' ``partial_json`` are."""
    finished = False
    async for event in events:
        data = event_data(event)
        try:
            parsed = orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, Mapping):
            if "error" in parsed:
                outcome.failed = True
            usage = normalize_usage(parsed.get("usageMetadata"))
            outcome.usage = usage or outcome.usage
            candidates = parsed.get("candidates")
            if isinstance(candidates, list):
                for args in call_objects(candidates):
                    outcome.note(args)
                if any(isinstance(c, Mapping) and c.get("finishReason") for c in candidates):
                    finished = True
        yield event
    outcome.completed = finished and not outcome.failed


async def _relay_chat(
    model: str, events: EventStream, outcome: Outcome
) -> AsyncGenerator[bytes, None]:
    out = ChatToGemini(model)
    finishing = False  # the last chunk, holding the calls, is on its way: they count there
    try:
        async for obj in chat_chunks(events, outcome):
            if obj is None:
                finishing = True
                # each call goes out whole in the last chunk, its args an object no ``text``
                # pattern finds: noted as held, not read back from the chunk just written
                for arguments in out.held():
                    outcome.note(arguments)
                yield out.finish_chunk(outcome.usage)
                outcome.completed = True
                return
            for chunk in out.chunk(obj):
                yield chunk
    finally:
        if not finishing:  # broken off, or the client left: the held calls are charged
            for arguments in out.held():
                outcome.note(arguments)
