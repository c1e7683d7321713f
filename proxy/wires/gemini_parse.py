"""Gemini ``generateContent`` bodies as the conversation fitting reasons about.

Gemini's ``contents`` map onto fitting's units like this:

* ``systemInstruction`` is a system message (its text parts).
* A ``model`` content is one assistant message: its text parts are its text, its
  ``functionCall`` parts its tool calls. Thought parts (``thought: true``) and
  ``thoughtSignature`` fields stay in the content object as they came and are never edited nor
  priced: a native Gemini route gets the model content back whole (Google does not count an
  earlier turn's thoughts as input), and the chat translation cannot carry them.
* A ``user`` (or ``function``) content's ``functionResponse`` parts are ``tool`` messages, each
  answering one call of the model turn before it; its other parts (text, ``inlineData`` /
  ``fileData`` images, priced by the route's image rule, and PDFs sent as data, priced from
  their pages) are one user message after them.

Gemini pairs a response with its call by name and order, and ``id`` only when the client sent
one; fitting pairs by id. A call without an ``id`` gets a derived one, stable for as long as the
conversation grows at its end (``gc<content>_<part>``); a response takes its call's id when it
names it, else that of the first unanswered call of the same name, else of the first unanswered
call. A response that answers no call (``gr<content>_<part>``, or an ``id`` no earlier call
has) is still a tool message; the translation sends it as user text (a chat provider refuses
an unannounced tool result), ``FUNCTION_RESPONSE`` before it: its lead (``Message.lead``), so
the estimate of a translated leg prices the words that leg sends (``Route.translated``).

A field pricing names in chat's terms is named in the client's (``client_field``): a part is the
content's part it came from (its ``inlineData.data``, ``fileData.fileUri``), inside its
``functionResponse`` when there, under ``generateContentRequest`` when a count wraps the body.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from pricing.documents import is_document
from pricing.messages import (
    ChatRequest,
    ImagePart,
    Message,
    Part,
    RequestError,
    TextPart,
    ToolCall,
    answer_schema,
    is_object,
)
from pricing.recordings import is_recording
from proxy.wires.base import ChatField

__all__ = [
    "FUNCTION_RESPONSE",
    "SYSTEM",
    "GeminiRequest",
    "client_field",
    "compact",
    "declarations",
    "generation",
    "json_schema",
    "parse_gemini",
]

#: What a response that answers no call begins with on a chat provider, where it goes as user
#: text (``proxy.wires.gemini_chat``): the lead the parse gives it (a native leg sends the
#: ``functionResponse`` as it came, and neither sends nor prices it).
FUNCTION_RESPONSE = "[function response]"

#: Key of the wire of the system message made from ``systemInstruction``.
SYSTEM = "routefit_system_instruction"

_ROLES = frozenset({"user", "model", "function"})


@dataclass(frozen=True, slots=True)
class GeminiRequest(ChatRequest):
    """A Gemini request: the model and the stream flag come from the URL called."""

    #: ``:streamGenerateContent`` with ``alt=sse``: answered as SSE events.
    sse: bool = False
    #: ``:streamGenerateContent`` without ``alt=sse``: Google streams a JSON array; routefit
    #: answers the whole response as a one-element array.
    array: bool = False
    #: The generation settings as given (``generationConfig``), for the translation.
    config: Mapping[str, Any] | None = None
    #: Where the generate request sits in the client's body: ``generateContentRequest.`` when
    #: a count wraps it, else nothing (``client_field``).
    root: str = ""


def compact(value: Any) -> str:
    """A JSON value as compact text (how a function's arguments or response are priced)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def json_schema(schema: Any) -> Any:
    """A Gemini (OpenAPI-subset) schema as JSON Schema: ``type`` names in lower case
    (``OBJECT`` → ``object``: Gemini CLI writes them so even in ``responseJsonSchema``),
    ``nullable`` as a null type; everything else as it is."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key in ("properties", "$defs", "definitions") and isinstance(value, Mapping):
            out[key] = {k: json_schema(v) for k, v in value.items()}
        elif key in ("items", "anyOf", "oneOf", "allOf", "not", "additionalProperties"):
            out[key] = json_schema(value)
        elif key != "nullable":
            out[key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _image(mime: Any, url: str, at: str, level: str = "auto") -> Part:
    """An image part priced by the route's rule (at its part's media_resolution ``level``), a
    PDF's data priced from its pages (``pricing.documents``), audio and video data by their
    length (``pricing.recordings``); other media as a note (a chat route cannot carry them)."""
    if not isinstance(mime, str):
        raise RequestError(f"{at}.mimeType must be a string", f"{at}.mimeType")
    if mime.startswith("image/") or is_document(url) or is_recording(url):
        return ImagePart(url, level)
    return TextPart(f"[{mime} content omitted: this route takes text and images]")


#: Google's media_resolution levels as the detail pricing reads (``pricing.images.kinds``:
#: ``GeminiFixed``); unspecified is the model's default, as no level is.
_LEVELS = {
    "MEDIA_RESOLUTION_UNSPECIFIED": "auto",
    "MEDIA_RESOLUTION_LOW": "low",
    "MEDIA_RESOLUTION_MEDIUM": "medium",
    "MEDIA_RESOLUTION_HIGH": "high",
    "MEDIA_RESOLUTION_ULTRA_HIGH": "ultra_high",
}


def media_level(value: Any, at: str) -> str:
    """A ``mediaResolution`` — the request's (``generationConfig``: the level's name) or a
    part's (``{"level": name}``, Gemini 3) — as a detail; ``auto`` when absent. A level this
    version does not know is priced at the dearest (a new level must not be priced under
    Google's count); a value that is no level's name is the client's 400, as Google's."""
    if value is None:
        return "auto"
    name = value.get("level") if isinstance(value, Mapping) else value
    if not isinstance(name, str) or not name.startswith("MEDIA_RESOLUTION_"):
        raise RequestError(f"{at} must name a level, e.g. MEDIA_RESOLUTION_HIGH", at)
    return _LEVELS.get(name, "ultra_high")


_URLSAFE = str.maketrans("-_", "+/")


def _standard(data: str) -> str:
    """Base64 in the standard alphabet: the ``google-genai`` SDK sends the URL-safe one (Google
    takes both), while a data URL, which pricing probes and chat providers read, takes only
    the standard one."""
    return data.translate(_URLSAFE) if "-" in data or "_" in data else data


def _sampling(part: Mapping[str, Any], at: str) -> str:
    """The frame rate a video part asks Google to sample it at, as the data URL's ``fps``
    parameter that pricing reads (``pricing.recordings``); empty when it sets none."""
    meta = part.get("videoMetadata", part.get("video_metadata"))
    if meta is None:
        return ""
    fps = meta.get("fps") if isinstance(meta, Mapping) else None
    if fps is None:
        return ""
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not 0 < fps <= 24:
        raise RequestError(f"{at}.videoMetadata.fps must be a number in (0, 24]", at)
    return f";fps={float(fps)!r}"


def _media(part: Mapping[str, Any], at: str) -> Part | None:
    inline = part.get("inlineData") or part.get("inline_data")
    if is_object(inline):
        data = inline.get("data")
        if not isinstance(data, str):
            raise RequestError(f"{at}.inlineData.data must be a base64 string", f"{at}.inlineData")
        mime = inline.get("mimeType", inline.get("mime_type"))
        url = f"data:{mime}{_sampling(part, at)};base64,{_standard(data)}"
        return _image(mime, url, f"{at}.inlineData", _part_level(part, at))
    file = part.get("fileData") or part.get("file_data")
    if is_object(file):
        uri = file.get("fileUri", file.get("file_uri"))
        if not isinstance(uri, str):
            raise RequestError(f"{at}.fileData.fileUri must be a string", f"{at}.fileData")
        mime = file.get("mimeType", file.get("mime_type"))
        return _image(mime, uri, f"{at}.fileData", _part_level(part, at))
    return None


def _part_level(part: Mapping[str, Any], at: str) -> str:
    value = part.get("mediaResolution", part.get("media_resolution"))
    return media_level(value, f"{at}.mediaResolution")


def _at_level(messages: list[Message], level: str) -> list[Message]:
    """``messages`` with the request's media_resolution ``level`` on every media part that
    sets none of its own (a part's level overrides the request's, as Google reads them)."""
    if level == "auto":
        return messages
    return [
        replace(
            m,
            parts=tuple(
                replace(p, detail=level) if isinstance(p, ImagePart) and p.detail == "auto" else p
                for p in m.parts
            ),
        )
        if m.images
        else m
        for m in messages
    ]


def _either(part: Mapping[str, Any], camel: str, snake: str) -> Any:
    """A part's field in either spelling Google reads (``functionCall`` / ``function_call``):
    its JSON parser takes the proto's own field names as well as their camel case."""
    value = part.get(camel)
    return part.get(snake) if value is None else value


def _part(part: Any, at: str) -> Mapping[str, Any]:
    if not is_object(part):
        raise RequestError(f"{at} must be an object", at)
    return part


def _plain(part: Mapping[str, Any], at: str) -> Part | None:
    """A part that is neither a call nor a response: its text (None for a thought), its image,
    or (code execution, unknown kinds) its JSON."""
    if "text" in part:
        text = part["text"]
        if not isinstance(text, str):
            raise RequestError(f"{at}.text must be a string", f"{at}.text")
        return None if part.get("thought") is True or not text else TextPart(text)
    media = _media(part, at)
    if media is not None:
        return media
    rest = {k: v for k, v in part.items() if k not in ("thought", "thoughtSignature")}
    return TextPart(compact(rest)) if rest else None


class _Pairing:
    """Ids for calls and responses across the contents (see the module docstring).

    The unanswered calls are kept in call order with an index by id and by name, each a queue
    of call numbers whose answered entries are dropped when they reach its front: a response
    finds its call in constant time (amortised), whatever the turn holds. A scan of the open
    calls per response (and a ``list.remove``) made a turn of N calls and N responses cost N²:
    one model content of 16,000 ``functionCall`` parts answered by one of 16,000
    ``functionResponse`` parts (1.6 MB) took 8.3 s of CPU to parse, the GIL held against the
    event loop in every slice of it."""

    def __init__(self) -> None:
        #: The unanswered calls, by call number.
        self._open: dict[int, ToolCall] = {}
        #: Call numbers in call order, by id and by name (answered ones dropped lazily).
        self._order: deque[int] = deque()
        self._by_id: dict[str, deque[int]] = {}
        self._by_name: dict[str, deque[int]] = {}
        self._numbered = 0
        #: The id of every call so far: a response with another answers no call.
        self.announced: set[str] = set()

    def _add(self, call: ToolCall) -> None:
        n = self._numbered = self._numbered + 1
        self._open[n] = call
        self._order.append(n)
        self._by_id.setdefault(call.id, deque()).append(n)
        self._by_name.setdefault(call.name, deque()).append(n)

    def _first(self, queue: deque[int] | None) -> int | None:
        """The number of the first unanswered call of ``queue`` (None: none is)."""
        if queue is None:
            return None
        while queue and queue[0] not in self._open:
            queue.popleft()
        return queue[0] if queue else None

    def reopen(self, calls: list[ToolCall]) -> None:
        """A model turn ended: its own calls are the only unanswered ones (an unanswered call
        of an earlier turn answers nothing now)."""
        self._open.clear()
        self._order.clear()
        self._by_id.clear()
        self._by_name.clear()
        for call in calls:
            self._add(call)

    def call(self, fn: Mapping[str, Any], where: tuple[int, int], at: str) -> ToolCall:
        name = fn.get("name")
        if not isinstance(name, str):
            raise RequestError(f"{at}.functionCall.name must be a string", f"{at}.functionCall")
        given = fn.get("id")
        call_id = given if isinstance(given, str) and given else f"gc{where[0]}_{where[1]}"
        call = ToolCall(call_id, name, compact(fn.get("args") or {}))
        self._add(call)
        self.announced.add(call_id)
        return call

    def answer(self, fn: Mapping[str, Any], where: tuple[int, int], at: str) -> str:
        name = fn.get("name")
        if not isinstance(name, str):
            raise RequestError(
                f"{at}.functionResponse.name must be a string", f"{at}.functionResponse"
            )
        given = fn.get("id")
        found = self._first(self._by_id.get(given)) if isinstance(given, str) else None
        if found is None:
            found = self._first(self._by_name.get(name))
        if found is None and not given:
            found = self._first(self._order)
        if found is None:
            return given if isinstance(given, str) and given else f"gr{where[0]}_{where[1]}"
        return self._open.pop(found).id


def _response_parts(fn: Mapping[str, Any], at: str) -> tuple[Part, ...]:
    parts: list[Part] = [TextPart(compact(fn.get("response") or {}))]
    raw = fn.get("parts") or []
    if not isinstance(raw, list):
        where = f"{at}.functionResponse.parts"
        raise RequestError(f"{where} must be a list", where)
    for j, inner in enumerate(raw):
        media = _media(_part(inner, f"{at}.parts[{j}]"), f"{at}.parts[{j}]")
        if media is not None:
            parts.append(media)
    return tuple(parts)


def _content(content: Any, i: int, pairing: _Pairing) -> list[Message]:
    at = f"contents[{i}]"
    if not is_object(content):
        raise RequestError(f"{at} must be an object", at)
    role = content.get("role", "user")
    role = "user" if role == "" else role  # Google reads an empty role as the user's
    if not isinstance(role, str) or role not in _ROLES:
        raise RequestError(f"{at}.role must be 'user' or 'model'", f"{at}.role")
    raw = content.get("parts")
    if not isinstance(raw, list):
        raise RequestError(f"{at}.parts must be a list", f"{at}.parts")
    parts: list[Part] = []
    calls: list[ToolCall] = []
    answers: list[Message] = []
    for j, item in enumerate(raw):
        pat = f"{at}.parts[{j}]"
        part = _part(item, pat)
        call = _either(part, "functionCall", "function_call")
        response = _either(part, "functionResponse", "function_response")
        if is_object(call) and role == "model":
            calls.append(pairing.call(call, (i, j), pat))
        elif is_object(response):
            call_id = pairing.answer(response, (i, j), pat)
            lead = "" if call_id in pairing.announced else FUNCTION_RESPONSE
            said = _response_parts(response, pat)
            answers.append(Message("tool", said, tool_call_id=call_id, wire=part, lead=lead))
        else:
            found = _plain(part, pat)
            if found is not None:
                parts.append(found)
    if role == "model":
        pairing.reopen(calls)
        return [Message("assistant", tuple(parts), tool_calls=tuple(calls), wire=content)]
    user = [Message("user", tuple(parts), wire=content)] if parts or not answers else []
    return [*answers, *user]


def _system(value: Any) -> Message | None:
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    elif isinstance(value, Mapping) and isinstance(value.get("parts"), list):
        at = "systemInstruction.parts"
        found = [_plain(_part(p, at), at) for p in value["parts"]]
        text = "\n".join(p.text for p in found if isinstance(p, TextPart))
    else:
        raise RequestError("systemInstruction must be a content with parts", "systemInstruction")
    return Message("system", (TextPart(text),), wire={SYSTEM: value})


def declarations(body: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """Function declarations as pricing reads them (``{name, description, parameters}``, the
    parameters as JSON Schema), other tools (``googleSearch``, ``codeExecution``) as they are,
    and a JSON answer's schema as its JSON (``answer_schema``)."""
    raw = body.get("tools")
    answer = answer_schema(_answer_schema(body))
    if raw is None:
        return answer
    if not isinstance(raw, list):
        raise RequestError("tools must be a list", "tools")
    out: list[Mapping[str, Any]] = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping):
            raise RequestError(f"tools[{i}] must be an object", f"tools[{i}]")
        decls = tool.get("functionDeclarations", tool.get("function_declarations"))
        if decls is None:
            out.append(tool)
            continue
        if not isinstance(decls, list):
            at = f"tools[{i}].functionDeclarations"
            raise RequestError(f"{at} must be a list", at)
        for j, decl in enumerate(decls):
            out.append(_declaration(decl, f"tools[{i}].functionDeclarations[{j}]"))
    return tuple(out) + answer


def _answer_schema(body: Mapping[str, Any]) -> Any:
    """A JSON answer's schema (``generationConfig.responseJsonSchema`` or ``responseSchema``):
    Google counts it as prompt."""
    config = body.get("generationConfig", body.get("generation_config"))
    if not isinstance(config, Mapping):
        return None
    for key in ("responseJsonSchema", "response_json_schema", "responseSchema", "response_schema"):
        if config.get(key) is not None:
            return config[key]
    return None


def _declaration(decl: Any, at: str) -> Mapping[str, Any]:
    if not isinstance(decl, Mapping) or not isinstance(decl.get("name"), str):
        raise RequestError(f"{at}.name must be a string", f"{at}.name")
    params = decl.get("parametersJsonSchema", decl.get("parameters_json_schema"))
    params = json_schema(decl.get("parameters") if params is None else params)
    fn: dict[str, Any] = {"name": decl["name"]}
    if isinstance(decl.get("description"), str):
        fn["description"] = decl["description"]
    fn["parameters"] = params if isinstance(params, Mapping) else {"type": "object"}
    return fn


def _positive(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        at = f"generationConfig.{key}"
        raise RequestError(f"{at} must be a positive integer", at)
    return value


def generation(body: Mapping[str, Any]) -> Mapping[str, Any]:
    config = body.get("generationConfig", body.get("generation_config")) or {}
    if not isinstance(config, Mapping):
        raise RequestError("generationConfig must be an object", "generationConfig")
    stops = config.get("stopSequences")
    if stops is not None and not (
        isinstance(stops, list) and all(isinstance(s, str) for s in stops)
    ):
        at = "generationConfig.stopSequences"
        raise RequestError(f"{at} must be a list of strings", at)
    return config


def request_body(body: Any, counting: bool) -> Mapping[str, Any]:
    """The generate request a body holds: ``countTokens`` may wrap it in
    ``generateContentRequest``."""
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object")
    inner = body.get("generateContentRequest")
    if counting and isinstance(inner, Mapping):
        return inner
    return body


def parse_gemini(body: Any, model: str, *, sse: bool, array: bool, counting: bool) -> GeminiRequest:
    """Validate a Gemini body; raise RequestError naming the bad field."""
    outer, body = body, request_body(body, counting)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise RequestError("contents must be a non-empty list", "contents")
    pairing = _Pairing()
    messages: list[Message] = []
    system = _system(body.get("systemInstruction", body.get("system_instruction")))
    if system is not None:
        messages.append(system)
    for i, content in enumerate(contents):
        messages += _content(content, i, pairing)
    config = generation(body)
    level = media_level(config.get("mediaResolution"), "generationConfig.mediaResolution")
    return GeminiRequest(
        model=model,
        messages=tuple(_at_level(messages, level)),
        tools=declarations(body),
        max_output_tokens=None if counting else _positive(config, "maxOutputTokens"),
        body=body,
        choices=(None if counting else _positive(config, "candidateCount")) or 1,
        sse=sse,
        array=array,
        config=config,
        root="" if body is outer else "generateContentRequest.",
    )


# -- naming a field in the client's terms ---------------------------------------------------

#: Where a part sits in the client's body, and the Gemini part it came from.
_Place = tuple[str, Mapping[str, Any]]


def client_field(request: GeminiRequest, field: ChatField) -> str:
    """``field`` (chat's terms of ``request.messages``) as the client's body names it: the
    part a media part came from (its ``inlineData.data``, ``fileData.fileUri``), else the
    content (or ``functionResponse`` part, or ``systemInstruction``) a message came from."""
    root = request.root
    if not 0 <= field.message < len(request.messages):
        return root + "contents"
    wire = request.messages[field.message].wire or {}
    body = request.body
    if SYSTEM in wire:
        return root + ("systemInstruction" if "systemInstruction" in body else "system_instruction")
    home, places = _places(body["contents"], wire, root)
    if field.part is None or not 0 <= field.part < len(places):
        return home
    at, part = places[field.part]
    if not field.media:
        return at
    for key, uri in (
        ("inlineData", "data"),
        ("inline_data", "data"),
        ("fileData", ""),
        ("file_data", ""),
    ):
        media = part.get(key)
        if media and isinstance(media, Mapping):
            uri = uri or ("fileUri" if "fileUri" in media else "file_uri")
            return f"{at}.{key}.{uri}"
    return at


def _places(contents: list[Any], wire: Mapping[str, Any], root: str) -> tuple[str, list[_Place]]:
    """Where a message's wire (a content, or a ``functionResponse`` part) sits, and where each
    of its parts does, in the order ``parse_gemini`` made them."""
    for k, content in enumerate(contents):
        at = f"{root}contents[{k}]"
        parts = content["parts"]
        if content is wire:
            role = content.get("role", "user")
            return at, [
                (f"{at}.parts[{j}]", part)
                for j, part in enumerate(parts)
                if not (
                    isinstance(_either(part, "functionCall", "function_call"), Mapping)
                    and role == "model"
                )
                and not isinstance(_either(part, "functionResponse", "function_response"), Mapping)
                and _plain(part, at) is not None
            ]
        for j, part in enumerate(parts):
            if part is wire:
                home = f"{at}.parts[{j}]"
                key = "functionResponse" if "functionResponse" in part else "function_response"
                fn = part[key]
                inner = f"{home}.{key}"
                return home, [
                    (inner, fn),  # the response itself, priced as its JSON
                    *(
                        (f"{inner}.parts[{q}]", p)
                        for q, p in enumerate(fn.get("parts") or [])
                        if _media(p, inner) is not None
                    ),
                ]
    return f"{root}contents", []
