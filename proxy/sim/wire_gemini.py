"""Google's Gemini API: ``POST /v1beta/models/{model}:generateContent``,
``:streamGenerateContent`` (SSE with ``alt=sse``, else one JSON array) and ``:countTokens``, the
same under ``/v1/``; its validation, its count (``counting.gemini_prompt``), implicit prefix
caching and Google's errors.

As at Google: the model and the method are in the URL (the body has no ``model`` field, and an
unknown field anywhere is refused: "Invalid JSON payload received. Unknown name ..."); the key is
``x-goog-api-key`` or ``?key=`` (a missing key is 403 ``PERMISSION_DENIED``, a wrong one 400
``INVALID_ARGUMENT`` "API key not valid"); a prompt over the window is 400 ``INVALID_ARGUMENT``
"The input token count (N) exceeds the maximum number of tokens allowed (M)." — the prompt only:
Google does not add ``maxOutputTokens`` to it; function calling out of order is 400 too
(``check_turns``: Google's three "Please ensure that ..." messages). Every error is
``{"error": {"code", "message", "status"}}``. ``usageMetadata`` (``promptTokenCount`` including
``cachedContentTokenCount``, ``candidatesTokenCount``, ``totalTokenCount``) rides on every
streamed chunk, complete on the last.

Google's built-in tools read more than the prompt: what URL context fetched and what a search
returned is put before the model and stated apart, as ``toolUsePromptTokenCount`` (in
``totalTokenCount``, not in ``promptTokenCount``). The simulator reads nothing: a request
offering ``urlContext`` is said to have read ``PAGE_TOKENS`` per URL of its last user turn, one
offering ``googleSearch`` ``SEARCH_TOKENS`` (stand-ins, not Google's figures).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.sim.completion import Answer, answer
from proxy.sim.counting import URLSAFE, gemini_media, gemini_prompt
from proxy.sim.ctx import Ctx, Handler
from proxy.sim.documents import pdf_pages
from proxy.sim.errors import SimError, fault_error, google_error
from proxy.sim.images import ImageProblem, Picture, decode_base64, probe_bytes, resolve_url
from proxy.sim.models import SimModel
from proxy.sim.recordings import seconds
from proxy.sim.state import SimState
from proxy.sim.steps import chunk_delay, decode_body, log_request, plan_request_faults
from proxy.sim.streaming import CutBody, DropConnection, EventStream
from proxy.sim.tokens import digest

__all__ = ["gemini_routes", "validate_gemini"]

_TOP = frozenset(
    {
        "contents", "systemInstruction", "system_instruction", "tools", "toolConfig",
        "tool_config", "safetySettings", "safety_settings", "generationConfig",
        "generation_config", "cachedContent", "cached_content", "labels",
    }
)  # fmt: skip
_CONTENT = frozenset({"role", "parts"})
_DATA = (
    "text", "inlineData", "inline_data", "fileData", "file_data", "functionCall",
    "function_call", "functionResponse", "function_response", "executableCode",
    "executable_code", "codeExecutionResult", "code_execution_result",
)  # fmt: skip


def _check_media(media: Mapping[str, Any] | None) -> None:
    """Inline media Google cannot open is refused: a PDF without pages, audio or video it
    cannot read."""
    if media is None or not isinstance(media.get("data"), str):
        return
    mime = str(media.get("mimeType", media.get("mime_type", "")))
    data = str(media["data"]).translate(URLSAFE)
    if mime == "application/pdf" and pdf_pages(data) is None:
        raise _bad("The document has no pages.")
    if mime.startswith(("audio/", "video/")) and seconds(data) is None:
        raise _bad(f"Unable to process input {mime.partition('/')[0]}.")


_PART = frozenset({*_DATA, "thought", "thoughtSignature", "thought_signature", "videoMetadata",
                   "video_metadata", "partMetadata", "mediaResolution"})  # fmt: skip
_FINISH = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP"}
_MISSING_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)


def _bad(message: str) -> SimError:
    return SimError(400, message, "INVALID_ARGUMENT")


def _unknown(name: str) -> SimError:
    return _bad(f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.')


def _check_key(state: SimState, request: Request) -> None:
    keys = state.config.api_keys
    if keys is None:
        return
    key = request.headers.get("x-goog-api-key") or request.query_params.get("key")
    if not key:
        raise SimError(403, _MISSING_KEY, "PERMISSION_DENIED")
    if key not in keys:
        raise _bad("API key not valid. Please pass a valid API key.")


# ------------------------------------------------------------------------------- validation


def _part(part: Any, at: str) -> None:
    if not isinstance(part, Mapping):
        raise _bad(f"Invalid value at '{at}': expected an object")
    for key in part:
        if key not in _PART:
            raise _unknown(f"{at}.{key}")
    present = [k for k in _DATA if k in part]
    if len(present) != 1:
        raise _bad(f"* GenerateContentRequest.{at}.data: required oneof field 'data' must have "
                   "one initialized field")  # fmt: skip
    value = part[present[0]]
    if present[0] == "text" and not isinstance(value, str):
        raise _bad(f"Invalid value at '{at}.text': expected a string")
    media = gemini_media(part)
    if media is not None and not isinstance(media.get("mimeType", media.get("mime_type")), str):
        raise _bad(f"* GenerateContentRequest.{at}.{present[0]}.mime_type: must be specified")
    _check_media(media)
    for key in ("functionCall", "function_call", "functionResponse", "function_response"):
        fn = part.get(key)
        if fn is not None and (not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str)):
            raise _bad(f"* GenerateContentRequest.{at}.{key}.name: Name cannot be empty.")


def _content(content: Any, at: str) -> None:
    if not isinstance(content, Mapping):
        raise _bad(f"Invalid value at '{at}': expected an object")
    for key in content:
        if key not in _CONTENT:
            raise _unknown(f"{at}.{key}")
    role = content.get("role", "user")
    if role not in ("user", "model", "function", ""):
        raise _bad(f"Please use a valid role: user, model. (got {role!r} at {at})")
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        raise _bad(f"* GenerateContentRequest.{at}.parts: contents.parts must not be empty.")
    for j, part in enumerate(parts):
        _part(part, f"{at}.parts[{j}]")


def validate_gemini(body: Any, strict: bool = True) -> None:
    """Refuse what Google refuses: unknown fields (at the top only when ``strict``), empty
    contents, parts without data."""
    if not isinstance(body, Mapping):
        raise _bad("Invalid JSON payload received. Expected an object.")
    for key in body:
        if strict and key not in _TOP:
            raise _unknown(key)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise _bad("* GenerateContentRequest.contents: contents is not specified")
    for i, content in enumerate(contents):
        _content(content, f"contents[{i}]")
    system = body.get("systemInstruction", body.get("system_instruction"))
    if system is not None:
        _content(system, "system_instruction")
        _text_only(system)
    tools = body.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, Mapping) for t in tools)
    ):
        raise _bad("Invalid value at 'tools': expected a list of objects")
    for i, tool in enumerate(tools or []):
        _declarations(tool, f"tools[{i}]")
    _tool_config(body)
    for key in ("generationConfig", "generation_config"):
        config = body.get(key)
        if config is not None and not isinstance(config, Mapping):
            raise _bad(f"Invalid value at '{key}': expected an object")
        for name in ("maxOutputTokens", "max_output_tokens"):
            tokens = (config or {}).get(name)
            if tokens is not None and (
                isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0
            ):
                raise _bad(
                    f"Invalid value at '{key}.max_output_tokens': expected a positive integer"
                )


def _text_only(system: Mapping[str, Any]) -> None:
    """Google documents ``systemInstruction`` as text only ("Developer set system
    instruction(s). Currently, text only."; Vertex: "only text should be used in parts of
    Content"), so a media, function or code part there is refused (400 ``INVALID_ARGUMENT``)
    rather than priced as if the model read it: the simulator decides, it does not guess."""
    for j, part in enumerate(system.get("parts") or []):
        if "text" not in part:
            kind = next(k for k in _DATA if k in part)
            raise _bad(
                f"Invalid value at 'system_instruction.parts[{j}]': a system instruction takes "
                f"text parts only, not {kind}."
            )


def _proto(at: str, kind: str, value: Any) -> SimError:
    """Google's words for a value of the wrong JSON type at a field of a proto message."""
    return _bad(f"Invalid value at '{at}' ({kind}), {json.dumps(value)}")


_PROTO = "type.googleapis.com/google.ai.generativelanguage.v1beta."
#: ``FunctionCallingConfig.Mode``, by name and (as proto JSON also takes) by number.
_MODES = ("MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED")


def _declarations(tool: Mapping[str, Any], at: str) -> None:
    """A tool's ``functionDeclarations``: a list of objects, each named."""
    for key in ("functionDeclarations", "function_declarations"):
        decls = tool.get(key)
        if decls is None:
            continue
        if not isinstance(decls, list):
            raise _proto(f"{at}.function_declarations", _PROTO + "FunctionDeclaration", decls)
        for k, decl in enumerate(decls):
            where = f"{at}.function_declarations[{k}]"
            if not isinstance(decl, Mapping):
                raise _proto(where, _PROTO + "FunctionDeclaration", decl)
            if not isinstance(decl.get("name"), str) or not decl["name"]:
                raise _bad(f"* GenerateContentRequest.{where}.name: Name cannot be empty.")


def _mode(value: Any) -> str:
    """A mode's name, whether sent by name or by number; anything else refused."""
    at = "tool_config.function_calling_config.mode"
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(_MODES):
        return _MODES[value]
    if isinstance(value, str) and value in _MODES:
        return value
    raise _proto(at, _PROTO + "FunctionCallingConfig.Mode", value)


def _calling(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The request's ``toolConfig.functionCallingConfig`` (either spelling), {} when absent
    (or null); a level that is not an object refused."""
    config = body.get("toolConfig", body.get("tool_config"))
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise _proto("tool_config", _PROTO + "ToolConfig", config)
    calling = config.get("functionCallingConfig", config.get("function_calling_config"))
    if calling is None:
        return {}
    if not isinstance(calling, Mapping):
        at = "tool_config.function_calling_config"
        raise _proto(at, _PROTO + "FunctionCallingConfig", calling)
    return calling


def _allowed(calling: Mapping[str, Any]) -> list[str]:
    names = calling.get("allowedFunctionNames", calling.get("allowed_function_names"))
    at = "tool_config.function_calling_config.allowed_function_names"
    if names is None:
        return []
    if not isinstance(names, list):
        raise _proto(at, "TYPE_STRING", names)
    for k, name in enumerate(names):
        if not isinstance(name, str):
            raise _proto(f"{at}[{k}]", "TYPE_STRING", name)
    return names


def _tool_config(body: Mapping[str, Any]) -> None:
    calling = _calling(body)
    if calling.get("mode") is not None:
        _mode(calling["mode"])
    _allowed(calling)


_CALL_KEYS = ("functionCall", "function_call")
_RESPONSE_KEYS = ("functionResponse", "function_response")
_CALL_AFTER = (
    "Please ensure that function call turn comes immediately after a user turn or after a "
    "function response turn."
)
_RESPONSE_AFTER = (
    "Please ensure that function response turn comes immediately after a function call turn."
)
_RESPONSES_COUNT = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)


def _parts_with(content: Mapping[str, Any], keys: tuple[str, ...]) -> int:
    return sum(any(k in part for k in keys) for part in content.get("parts") or [])


def check_turns(contents: list[Mapping[str, Any]]) -> None:
    """Refuse a history whose function calling is out of order, as Google does (400
    ``INVALID_ARGUMENT``): a model turn with function calls must follow a user turn or a turn of
    function responses (never open the history, never follow another model turn); a turn of
    function responses must follow a turn of function calls and answer each of them (as many
    response parts as there were call parts). What a fit that elides turns must never break."""
    previous: Mapping[str, Any] | None = None
    for content in contents:
        calls = _parts_with(content, _CALL_KEYS)
        responses = _parts_with(content, _RESPONSE_KEYS)
        if calls and (previous is None or previous.get("role") == "model"):
            raise _bad(_CALL_AFTER)
        if responses:
            called = _parts_with(previous, _CALL_KEYS) if previous is not None else 0
            if not called:
                raise _bad(_RESPONSE_AFTER)
            if responses != called:
                raise _bad(_RESPONSES_COUNT)
        previous = content


# ---------------------------------------------------------------------------------- images


def _media_key(part: Mapping[str, Any]) -> str:
    media = gemini_media(part) or {}
    return str(media.get("data") or media.get("fileUri") or media.get("file_uri") or "")


async def _pictures(state: SimState, body: Mapping[str, Any], m: SimModel) -> dict[str, Picture]:
    """Every image part of the request, resolved (a non-image media part is priced flat)."""
    out: dict[str, Picture] = {}
    for content in body.get("contents") or []:
        for part in content.get("parts") or []:
            media = gemini_media(part)
            mime = str((media or {}).get("mimeType", (media or {}).get("mime_type", "")))
            if media is None or not mime.startswith("image/") or _media_key(part) in out:
                continue
            if m.image_rule is None:
                raise _bad("This model does not support image input.")
            out[_media_key(part)] = await _picture(state, media)
    return out


async def _picture(state: SimState, media: Mapping[str, Any]) -> Picture:
    try:
        if "data" in media:
            # Google takes the URL-safe alphabet too (the google-genai SDK sends it)
            data = decode_base64(str(media["data"]).replace("-", "+").replace("_", "/"))
            width, height, actual = probe_bytes(data, heif=True)
            return Picture(width, height, actual, digest(data))
        uri = str(media.get("fileUri", media.get("file_uri", "")))
        config = state.config
        return await resolve_url(
            uri, assumed=config.assumed_image_size, fetch_loopback=config.fetch_loopback_images
        )
    except ImageProblem as exc:
        raise _bad(f"Unable to process input image. Please retry or report it. ({exc})") from None


# ------------------------------------------------------------------------------------ answers


def _lowered(schema: Any) -> Any:
    """A Gemini (OpenAPI-subset) schema with JSON Schema's lower-case type names."""
    if isinstance(schema, list):
        return [_lowered(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {k: _lowered(v) for k, v in schema.items()}
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
    return out


def _offered(body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    offered = []
    for tool in body.get("tools") or []:
        for decl in tool.get("functionDeclarations", tool.get("function_declarations")) or []:
            if isinstance(decl, Mapping) and isinstance(decl.get("name"), str):
                params = decl.get("parametersJsonSchema", decl.get("parameters")) or {}
                offered.append((decl["name"], _lowered(params)))
    return offered


def _forced(body: Mapping[str, Any]) -> tuple[str | None, bool]:
    """(the call the tool config forces, or ``*`` for any; whether calls are off)."""
    calling = _calling(body)  # validated: each level an object, the names strings
    mode = _mode(calling["mode"]) if calling.get("mode") is not None else "AUTO"
    allowed = _allowed(calling)
    if mode == "ANY":
        return (allowed[0] if len(allowed) == 1 else "*"), False
    return None, mode == "NONE"


def _schema(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if config.get("responseMimeType") != "application/json":
        return None
    schema = config.get("responseJsonSchema", config.get("responseSchema"))
    return _lowered(schema) if isinstance(schema, Mapping) else {"type": "object"}


def _answer(body: Mapping[str, Any], m: SimModel, prompt_total: int) -> Answer:
    """The reply to the last content: a call only after a user's own words."""
    last = body["contents"][-1]
    parts = last["parts"]
    text = " ".join(str(p["text"]) for p in parts if "text" in p and p.get("thought") is not True)
    responded = any("functionResponse" in p or "function_response" in p for p in parts)
    forced, off = _forced(body)
    config = body.get("generationConfig", body.get("generation_config")) or {}
    return answer(
        m,
        last_user=text,
        tools=[] if off else _offered(body),
        forced=forced,
        wants_call=last.get("role", "user") == "user" and not responded,
        max_tokens=config.get("maxOutputTokens", config.get("max_output_tokens")) or None,
        room=m.context_window - prompt_total,
        id_prefix="",
        schema=_schema(config),
    )


def _parts(ans: Answer) -> list[dict[str, Any]]:
    if ans.tool_calls:
        return [
            {"functionCall": {"name": c.name, "args": json.loads(c.arguments)}}
            for c in ans.tool_calls
        ]
    return [{"text": ans.text}]


def _usage(prompt: int, cached: int, output: int, tool_use: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output + tool_use,
    }
    if cached:
        usage["cachedContentTokenCount"] = cached
    if tool_use:
        usage["toolUsePromptTokenCount"] = tool_use
    return usage


#: What the simulator says a built-in tool read: tokens per fetched URL, per search.
PAGE_TOKENS = 1_500
SEARCH_TOKENS = 600
_URL = re.compile(r"https?://[^\s\"'<>]+")


def _tool_use(body: Mapping[str, Any]) -> int:
    """The tokens the request's built-in tools are said to have read (``PAGE_TOKENS`` per URL
    of the last user turn for URL context, ``SEARCH_TOKENS`` for a search)."""
    kinds = {k for t in body.get("tools") or [] if isinstance(t, Mapping) for k in t}
    read = 0
    if kinds & {"urlContext", "url_context"}:
        users = [c for c in body["contents"] if c.get("role", "user") == "user"]
        words = [p.get("text") for p in (users[-1]["parts"] if users else [])]
        read += PAGE_TOKENS * sum(len(_URL.findall(w)) for w in words if isinstance(w, str))
    if kinds & {"googleSearch", "google_search", "googleSearchRetrieval"}:
        read += SEARCH_TOKENS
    return read


def _dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _chunks(response: dict[str, Any], ans: Answer, usage: dict[str, Any] | None) -> list[Any]:
    """The response as Google streams it: text a few words a chunk, calls whole, the finish
    reason on the last; the prompt's count on every chunk, the whole usage on the last."""
    head = {k: v for k, v in response.items() if k not in ("candidates", "usageMetadata")}
    pieces = re.findall(r"\s*\S+(?:\s+\S+){0,3}", ans.text) if not ans.tool_calls else []
    bodies: list[list[dict[str, Any]]] = [[{"text": p}] for p in pieces] or [_parts(ans)]
    out: list[Any] = []
    for i, parts in enumerate(bodies):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate], **head}
        if i == len(bodies) - 1:
            candidate["finishReason"] = response["candidates"][0]["finishReason"]
        if usage is not None:
            last = i == len(bodies) - 1
            chunk["usageMetadata"] = usage if last else _usage(usage["promptTokenCount"], 0, 0)
        out.append(chunk)
    return out


def _reply(ctx: Ctx, response: dict[str, Any], ans: Answer, mode: str) -> Response:
    """Whole, SSE (``alt=sse``) or a JSON array, bent by the request's faults."""
    plan = ctx.plan
    headers = {"x-sim-prompt-tokens": str(ctx.entry.get("prompt_tokens", 0))}
    usage = None if plan.no_usage else response["usageMetadata"]
    if plan.no_usage:
        response.pop("usageMetadata")
    if mode == "sse":
        events = [b"data: " + _dump(c) + b"\r\n\r\n" for c in _chunks(response, ans, usage)]
        if plan.malformed:
            events.insert(1, b'data: {"candidates": [{"content\r\n\r\n')
        return EventStream(
            ctx.state, events, delay=ctx.chunk_delay, cut_after=plan.cut_after, headers=headers
        )
    body = _dump(response)
    if mode == "array":
        body = b"[" + b",\r\n".join(_dump(c) for c in _chunks(response, ans, usage)) + b"]"
    if plan.malformed:
        return Response(body[:-7], 200, headers=headers, media_type="application/json")
    if plan.cut_after is not None:
        return CutBody(body)
    return Response(body, 200, headers=headers, media_type="application/json")


def _model(ctx: Ctx, method: str) -> SimModel:
    name = ctx.request.path_params["model"]
    m = ctx.state.model(name)
    if m is None or m.wire != "gemini":
        version = ctx.request.url.path.split("/")[1]
        raise SimError(
            404,
            f"models/{name} is not found for API version {version}, or is not supported for "
            f"{method}. Call ListModels to see the list of available models and their supported "
            "methods.",
            "NOT_FOUND",
        )
    return m


async def _generate(ctx: Ctx, mode: str) -> Response:
    m = _model(ctx, "generateContent")
    body = ctx.body
    validate_gemini(body, ctx.state.config.strict_params)
    check_turns(body["contents"])
    pictures = await _pictures(ctx.state, body, m)
    prompt = gemini_prompt(body, m, lambda part: pictures[_media_key(part)])
    if prompt.total > m.context_window:
        raise _bad(
            f"The input token count ({prompt.total}) exceeds the maximum number of tokens "
            f"allowed ({m.context_window})."
        )
    cached = ctx.state.prefix_caches[m.name].lookup_and_store(prompt.tokens)
    ctx.entry["prompt_tokens"] = prompt.total
    ctx.entry["cached_tokens"] = cached
    ans = _answer(body, m, prompt.total)
    usage = _usage(prompt.total, cached, ans.completion_tokens, _tool_use(body))
    if ctx.plan.lie is not None:
        usage["promptTokenCount"] = ctx.plan.lie
    candidate = {
        "content": {"role": "model", "parts": _parts(ans)},
        "finishReason": _FINISH[ans.finish],
        "index": 0,
    }
    response = {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": m.name,
        "responseId": f"sim{ctx.number:06d}",
    }
    return _reply(ctx, response, ans, mode)


async def generate_content(ctx: Ctx) -> Response:
    return await _generate(ctx, "whole")


async def stream_generate_content(ctx: Ctx) -> Response:
    sse = ctx.request.query_params.get("alt") == "sse"
    return await _generate(ctx, "sse" if sse else "array")


async def count_tokens(ctx: Ctx) -> Response:
    """``{"totalTokens": N}``: the count a generate request would bill, nothing cached."""
    m = _model(ctx, "countTokens")
    body = ctx.body
    if isinstance(body, Mapping) and isinstance(body.get("generateContentRequest"), Mapping):
        body = {k: v for k, v in body["generateContentRequest"].items() if k != "model"}
    validate_gemini(body, ctx.state.config.strict_params)
    pictures = await _pictures(ctx.state, body, m)
    prompt = gemini_prompt(body, m, lambda part: pictures[_media_key(part)])
    ctx.entry["prompt_tokens"] = prompt.total
    return JSONResponse({"totalTokens": prompt.total})


_METHODS: dict[str, Handler] = {
    "generateContent": generate_content,
    "streamGenerateContent": stream_generate_content,
    "countTokens": count_tokens,
}


def _endpoint(state: SimState) -> Callable[[Request], Awaitable[Response]]:
    """Every Gemini request goes through the simulator's common steps (logged, then the key,
    then injected faults, then the body's JSON), refused in Google's shape."""

    async def endpoint(request: Request) -> Response:
        number = state.next_id()
        raw = await request.body()
        watch = request.scope["sim.watch"]
        watch.start()  # the body is read: from now on receive() only reports a disconnect
        body, parse_error = decode_body(raw)
        entry = log_request(state, request, number, raw, body, parse_error)
        entry["model"] = request.path_params["model"]
        with state.lock:
            state.stats.by_model[entry["model"]] += 1
        try:
            _check_key(state, request)
            plan = plan_request_faults(state, request, entry)
            if plan.delay and await watch.sleep(plan.delay):
                return DropConnection()
            if plan.reset:
                return DropConnection()
            if plan.status is not None:
                raise fault_error("gemini", plan.status)
            if parse_error is not None:
                raise _bad(f"Invalid JSON payload received. {parse_error}")
            method = request.path_params["method"]
            handler = _METHODS.get(method)
            if handler is None:
                raise SimError(404, f"Method not found: {method}", "NOT_FOUND")
            delay = chunk_delay(state, request)
            return await handler(Ctx(state, request, body, number, plan, delay, entry))
        except SimError as exc:
            if exc.type == "invalid_request_error":  # a shared step's refusal: Google's words
                exc.type = "INVALID_ARGUMENT"
            return google_error(exc)

    return endpoint


def gemini_routes(state: SimState) -> list[Route]:
    """``/v1beta`` and ``/v1``: ``models/{model}:{method}`` (Starlette backtracks to the colon)."""
    endpoint = _endpoint(state)
    return [
        Route(f"/{version}/models/{{model}}:{{method}}", endpoint, methods=["POST"])
        for version in ("v1beta", "v1")
    ]
