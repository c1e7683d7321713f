"""The chat request as pricing sees it: validated once, then plain frozen values.

The wire body stays the source of truth for forwarding (unknown fields are kept byte for byte);
these values carry only what pricing and fitting reason about, plus a reference to the wire dict
each came from, so an unchanged message is forwarded as the very object the client sent.

Validation is strict about shape (a wrong type is a client mistake and gets a 400 naming the
field) and lenient about extra keys (providers add fields faster than gateways learn them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from pricing.digest import DIGEST_ABOVE
from pricing.documents import MEDIA_TYPE, file_data, is_document
from pricing.parsed import once
from pricing.recordings import input_audio_of, input_audio_url, is_recording
from pricing.recordings import note as recording_note

__all__ = [
    "ANSWER",
    "ROLES",
    "ChatRequest",
    "ImagePart",
    "Message",
    "Part",
    "RequestError",
    "TextPart",
    "ToolCall",
    "answer_format",
    "answer_schema",
    "is_object",
    "lead_text",
    "led_text",
    "media_part",
    "parse_request",
]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
#: The type of the entry a JSON answer's schema is among the tools (``answer_schema``).
ANSWER = "answer_schema"
DETAILS = frozenset({"auto", "low", "high", "original"})


class RequestError(ValueError):
    """A client mistake in the request body; ``param`` is the JSON path of the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str


@dataclass(frozen=True, slots=True)
class ImagePart:
    url: str
    detail: str = "auto"
    #: A chat ``input_audio`` part (its data and format are the data URL's): audio the client
    #: sent as such, priced and sent on as audio (``pricing.recordings``).
    input_audio: bool = False


Part = TextPart | ImagePart


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    parts: tuple[Part, ...]
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    #: The wire dict this message was parsed from (or will be rendered as). Never mutated.
    wire: Mapping[str, Any] | None = None
    #: An assistant's ``audio: {"id": ...}``: an earlier audio answer the provider re-reads
    #: (priced by ``pricing.recordings.audio_reference_tokens``).
    audio: str | None = None
    #: Words a translation to chat completions writes before the message's text, for what the
    #: client's wire says in a field chat has no twin for (a failed tool result: Anthropic's
    #: ``is_error``; a Gemini response that answers no call). Set by the wire's parse, which
    #: runs before the route, and so the leg, is known: not a part, because a native leg carries
    #: the field itself and must not be sent the words too. Sent (``led_text``), and priced
    #: (``pricing.framing.frame_message``), only on a leg the request is translated on
    #: (``Route.translated``). Kept by every rewrite (masked, capped, offloaded: ``replace``),
    #: so a result the fit rewrote still says it failed.
    lead: str = ""
    #: The image parts, in order (derived once: fitting asks for them often).
    images: tuple[ImagePart, ...] = field(init=False, repr=False, compare=False)
    #: Whether a text or a call's arguments is over ``pricing.digest.DIGEST_ABOVE``: keyed with
    #: those digested apart (``MessageCache.key``, the anchors' prefix keys).
    long: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = self.parts
        if len(parts) < 2:  # most messages: one text, or nothing (a generator costs ~0.5 µs)
            first = parts[0] if parts else None
            images: tuple[ImagePart, ...] = (first,) if isinstance(first, ImagePart) else ()
            long = isinstance(first, TextPart) and len(first.text) > DIGEST_ABOVE
        else:
            images = tuple(p for p in parts if isinstance(p, ImagePart))
            long = any(isinstance(p, TextPart) and len(p.text) > DIGEST_ABOVE for p in parts)
        if self.tool_calls and not long:
            long = any(len(c.arguments) > DIGEST_ABOVE for c in self.tool_calls)
        object.__setattr__(self, "images", images)
        object.__setattr__(self, "long", long)

    @property
    def text(self) -> str:
        """All text parts joined (what a text-only reader of the message sees)."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    tools: tuple[Mapping[str, Any], ...]
    #: The client's output reservation (``max_completion_tokens`` or ``max_tokens``), if any.
    max_output_tokens: int | None
    body: Mapping[str, Any]
    #: How many completions the request asks for (chat's ``n``): each may use the whole output
    #: reservation, so a quota must hold ``choices × max_output_tokens``.
    choices: int = field(default=1, kw_only=True)

    @property
    def least_output(self) -> int:
        """The smallest output cap this request can be sent with (0: any): a wire's own rule
        (Anthropic's extended thinking, ``proxy.wires.anthropic_parse``); the fit never shrinks
        the reservation below it (``strategies.output``)."""
        return 0


def lead_text(message: Message) -> str:
    """What a translation to chat writes before ``message``'s text: its ``lead`` and a space,
    the lead alone when the message has no text, nothing without a lead. The one rule the
    translations write (``led_text``) and the meter prices (``pricing.framing.frame_message``):
    what is priced is what is sent."""
    if not message.lead:
        return ""
    if any(isinstance(p, TextPart) and p.text for p in message.parts):
        return f"{message.lead} "
    return message.lead


def led_text(message: Message) -> str:
    """``message``'s text as a translation to chat sends it: its lead (``lead_text``) first."""
    return lead_text(message) + message.text


def answer_schema(schema: Any) -> tuple[Mapping[str, Any], ...]:
    """A JSON answer's schema as the meter prices it: one nameless entry among the tools, so
    it is priced as its compact JSON (the provider puts the schema in the prompt and counts it:
    structured outputs' ``json_schema``, Gemini's ``responseSchema``) and no translation
    mistakes it for a function (they take only named ones). Empty when there is none."""
    if not isinstance(schema, Mapping) or not schema:
        return ()
    return ({"type": ANSWER, ANSWER: schema},)


def answer_format(fmt: Any) -> tuple[Mapping[str, Any], ...]:
    """``answer_schema`` of an answer format that asks for a JSON schema (``{"type":
    "json_schema", ...}``: chat's ``response_format``, the Responses API's ``text.format``,
    Claude's ``output_config.format``), priced whole; empty for any other format."""
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        return answer_schema(fmt)
    return ()


def _show(value: Any) -> str:
    """A client's value in an error message: short, and never a deep ``repr``."""
    if isinstance(value, str):
        return repr(value[:64])
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    return f"of type {type(value).__name__}"


def _str(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise RequestError(f"{param} must be a string", param)
    return value


def _parts(content: Any, param: str) -> tuple[Part, ...]:
    if content is None:
        return ()
    if isinstance(content, str):
        return (TextPart(content),) if content else ()
    if not isinstance(content, list):
        raise RequestError(f"{param} must be a string, a list of content parts or null", param)
    parts: list[Part] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        if not isinstance(part, Mapping):
            raise RequestError(f"{where} must be an object", where)
        kind = part.get("type")
        if kind in ("text", "refusal"):
            parts.append(TextPart(_str(part.get(kind), f"{where}.{kind}")))
        elif kind == "image_url":
            image = part.get("image_url")
            if isinstance(image, str):
                image = {"url": image}
            if not isinstance(image, Mapping):
                raise RequestError(f"{where}.image_url must be an object with a url", where)
            url = _str(image.get("url"), f"{where}.image_url.url")
            detail = image.get("detail") or "auto"
            if not isinstance(detail, str) or detail not in DETAILS:
                raise RequestError(
                    f"{where}.image_url.detail must be one of {sorted(DETAILS)}",
                    f"{where}.image_url.detail",
                )
            parts.append(ImagePart(url, detail))
        elif kind == "file":
            parts.append(_file(part.get("file"), f"{where}.file"))
        elif kind == "input_audio":
            parts.append(_input_audio(part.get("input_audio"), f"{where}.input_audio"))
        else:
            raise RequestError(
                f"{where}.type {_show(kind)} is not a supported content part type", where
            )
    return tuple(parts)


def _file(file: Any, where: str) -> ImagePart:
    """A ``file`` part: a PDF sent as data, priced from its pages (``pricing.documents``). A file
    uploaded beforehand (``file_id``) is refused: routefit prices what it can read, and an
    unread file could be any size (a quota charged for its id alone would be a free ride)."""
    data = file_data(file)
    if data is None:
        raise RequestError(
            f"{where} must carry file_data, a PDF as a data URL "
            f"('data:{MEDIA_TYPE};base64,...'); uploaded files (file_id) are not accepted",
            where,
        )
    return ImagePart(data)


def _input_audio(value: Any, where: str) -> ImagePart:
    """An ``input_audio`` part: base64 audio and its format, priced by its length
    (``pricing.recordings``)."""
    url = input_audio_url(value)
    if url is None:
        raise RequestError(
            f"{where} must be an object with data (the audio, base64) and format "
            "(its format's short name: wav, mp3)",
            where,
        )
    return ImagePart(url, input_audio=True)


def is_object(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """A JSON object: a decoded body's are dicts, checked first (``isinstance`` against
    ``Mapping`` is an ABC's check, three of them a message: ~12% of a long session's parse;
    every wire's parse reads its messages with it)."""
    return type(value) is dict or isinstance(value, Mapping)


def _tool_calls(value: Any, param: str) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RequestError(f"{param} must be a list", param)
    calls = []
    for j, call in enumerate(value):
        fn = call.get("function") if is_object(call) else None
        if not is_object(fn):
            where = f"{param}[{j}]"
            raise RequestError(f"{where} must be an object with a function", where)
        call_id, name, arguments = call.get("id", ""), fn.get("name"), fn.get("arguments", "")
        if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
            where = f"{param}[{j}]"  # the path spelt out only when a field is wrong
            call_id = _str(call_id, f"{where}.id")
            name = _str(name, f"{where}.function.name")
            arguments = _str(arguments, f"{where}.function.arguments")
        calls.append(ToolCall(call_id, name, arguments))
    return tuple(calls)


def parse_message(raw: Any, index: int) -> Message:
    """One chat message. A field's path (``messages[i].content``) is spelt out only for an
    error: built for every message, the paths were a fifth of a 400-message request's parse."""
    if not is_object(raw):
        raise RequestError(f"messages[{index}] must be an object", f"messages[{index}]")
    role = raw.get("role")
    if not isinstance(role, str) or role not in ROLES:
        where = f"messages[{index}].role"
        raise RequestError(f"{where} {_show(role)} is not one of {sorted(ROLES)}", where)
    name = raw.get("name")
    if name is not None:
        name = _str(name, f"messages[{index}].name")
    calls = _message_calls(raw, index)
    if calls and role != "assistant":
        where = f"messages[{index}]"
        raise RequestError(f"{where}: only assistant messages carry tool_calls", where)
    tool_call_id = raw.get("tool_call_id")
    if role == "tool":
        tool_call_id = _str(tool_call_id, f"messages[{index}].tool_call_id")
    elif tool_call_id is not None:
        tool_call_id = None  # harmless stray field; forwarded, ignored for grouping
    content = raw.get("content")
    if isinstance(content, str):
        parts: tuple[Part, ...] = (TextPart(content),) if content else ()
    elif content is None and "content" not in raw and role != "assistant":
        where = f"messages[{index}].content"
        raise RequestError(f"{where} is required for role {role!r}", where)
    else:
        parts = _parts(content, f"messages[{index}].content")
    return Message(
        role=role,
        parts=parts,
        name=name,
        tool_calls=calls,
        tool_call_id=tool_call_id,
        wire=raw,
        audio=_audio_reference(raw, role, index),
    )


def _audio_reference(raw: Mapping[str, Any], role: str, index: int) -> str | None:
    """The id of the earlier audio answer an assistant message stands for: it must be read,
    not skipped, because the provider counts that answer's audio (a reference priced at nothing
    let a conversation of spoken answers overflow the window). Other roles' ``audio`` is no
    OpenAI field and is forwarded unread, as before."""
    value = raw.get("audio")
    if role != "assistant" or value is None:
        return None
    ref = value.get("id") if isinstance(value, Mapping) else None
    if not isinstance(ref, str):
        where = f"messages[{index}].audio"
        raise RequestError(
            f"{where} must be an object with the id of an earlier audio answer", where
        )
    return ref


def _message_calls(raw: Mapping[str, Any], index: int) -> tuple[ToolCall, ...]:
    """An assistant's ``tool_calls``, and a legacy ``function_call`` as one more."""
    calls = raw.get("tool_calls")
    out = () if calls is None else _tool_calls(calls, f"messages[{index}].tool_calls")
    legacy = raw.get("function_call")
    if isinstance(legacy, Mapping):
        out += _tool_calls([{"function": legacy}], f"messages[{index}].function_call")
    return out


def _max_output(body: Mapping[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RequestError(f"{key} must be a positive integer", key)
        return value
    return None


def _check_options(body: Mapping[str, Any]) -> None:
    """The request options routefit itself reads or rewrites on the way out, in the types
    OpenAI accepts (it refuses others with a 400 too): ``stream`` a boolean (``"yes"`` or
    ``[false]`` would be read as a stream), ``stream_options`` an object (the wire adds
    ``include_usage`` to it), ``stop`` a string or a list of strings (an Anthropic route sends it
    as ``stop_sequences``)."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(f"stream must be a boolean, not {_show(stream)}", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise RequestError(
            f"stream_options must be an object, not {_show(options)}", "stream_options"
        )
    stop = body.get("stop")
    if not (
        stop is None
        or isinstance(stop, str)
        or (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        raise RequestError(f"stop must be a string or a list of strings, not {_show(stop)}", "stop")


def _choices(body: Mapping[str, Any]) -> int:
    value = body.get("n")
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(f"n must be a positive integer, not {_show(value)}", "n")
    return value


def _tools(body: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    tools: list[Mapping[str, Any]] = []
    raw_tools = body.get("tools")
    if raw_tools is not None:
        if not isinstance(raw_tools, list):
            raise RequestError("tools must be a list", "tools")
        for i, tool in enumerate(raw_tools):
            if not isinstance(tool, Mapping):
                raise RequestError(f"tools[{i}] must be an object", f"tools[{i}]")
            fn = tool.get("function")
            if tool.get("type", "function") == "function":
                if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                    raise RequestError(
                        f"tools[{i}].function must be an object with a name", f"tools[{i}]"
                    )
                tools.append(fn)
            else:
                tools.append(tool)  # custom / built-in tool kinds are priced as their JSON
    legacy = body.get("functions")
    if legacy is not None and not isinstance(legacy, list):
        raise RequestError("functions must be a list", "functions")
    if isinstance(legacy, list):
        for i, fn in enumerate(legacy):
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                raise RequestError(f"functions[{i}] must be an object with a name", "functions")
            tools.append(fn)
    return (*tools, *answer_format(body.get("response_format")))


def parse_request(body: Any, scope: bytes | None = None) -> ChatRequest:
    """Validate an OpenAI chat-completions body; raise RequestError naming the bad field.
    ``scope``: the tenant whose body it is, whose messages parsed before are taken from the
    memo of parsed messages (``pricing.parsed``); None: every message parsed afresh."""
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise RequestError("model must be a string", "model")
    _check_options(body)
    parse = parse_message if scope is None else once(parse_message, b"c", scope)
    return ChatRequest(
        model=model,
        messages=tuple(parse(m, i) for i, m in enumerate(messages)),
        tools=_tools(body),
        max_output_tokens=_max_output(body),
        body=body,
        choices=_choices(body),
    )


def message_wire(message: Message) -> Mapping[str, Any]:
    """The wire dict for a message: the client's own when unchanged, else rendered from parts."""
    if message.wire is not None:
        return message.wire
    out: dict[str, Any] = {"role": message.role}
    out["content"] = render_content(message.parts)
    if message.name is not None:
        out["name"] = message.name
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.audio is not None:
        out["audio"] = {"id": message.audio}
    return out


def render_content(
    parts: Sequence[Part], keep_list: bool = False
) -> str | list[dict[str, Any]] | None:
    """Content in wire form: a string when all parts are text, unless ``keep_list``.

    ``keep_list`` keeps one wire part per part, so re-parsing the rendered message gives back the
    same parts (and the same price: parts are priced one by one).
    """
    if not keep_list and all(isinstance(p, TextPart) for p in parts):
        return "".join(p.text for p in parts if isinstance(p, TextPart))
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        else:
            out.append(media_part(p, detail=True))
    return out


def media_part(part: ImagePart, detail: bool = False) -> dict[str, Any]:
    """An image part as a chat request carries it: a PDF as a ``file`` part (chat takes
    documents only so), audio the client sent as ``input_audio`` as that part, other audio and
    video as their note, an image as ``image_url`` (with its ``detail`` when asked)."""
    if is_document(part.url):
        return {"type": "file", "file": {"filename": "document.pdf", "file_data": part.url}}
    if part.input_audio:
        return {"type": "input_audio", "input_audio": input_audio_of(part.url)}
    if is_recording(part.url):  # another wire's media: its note, priced so (pricing.recordings)
        return {"type": "text", "text": recording_note(part.url)}
    if detail and part.detail in DETAILS:  # a Gemini client's level has no chat name
        image = {"url": part.url, "detail": part.detail}
    else:
        image = {"url": part.url}
    return {"type": "image_url", "image_url": image}
