"""Responses input items as the conversation fitting reasons about, and back.

The fit core works on ``pricing.messages.Message`` values grouped into units by
``strategies.units``: an assistant message with ``tool_calls`` and the ``tool`` messages that
answer it form one unit. Responses items map onto that shape like this:

* A run of consecutive model-side items — ``reasoning``, assistant ``message``, ``function_call``,
  ``custom_tool_call``, ``web_search_call``, any other ``*_call``, and unknown item types — is ONE
  assistant message whose ``wire`` holds the items verbatim (``GROUP`` key). Its tool calls are
  the ``*_call`` items with a ``call_id``. So a reasoning item always travels with the items it
  precedes, is removed only together with them, and is never rewritten (its ``encrypted_content``
  is opaque to routefit and to the model's server alike).
* ``function_call_output`` / ``custom_tool_call_output`` / any ``*_call_output`` is a ``tool``
  message answering its ``call_id``: capped when oversized, and rendered back with the capped
  text in the item's own type.
* ``message`` items of role user / system / developer are messages of that role (images are
  priced by the route's rule and offloadable); ``instructions`` is a system message that is
  rendered back as the ``instructions`` field, never as an item.

A field pricing names in chat's terms is named in the client's (``client_field``): a part is
the item and the content (``output``, ``summary``) entry it came from, counted in the client's
own ``input``; an item of the stored chain before it is ``previous_response_id``.

Pricing of what the model never sees as text: a reasoning item costs its summary text (the
encrypted part is not priced: OpenAI drops earlier turns' reasoning from the context, and what
it keeps is learnt by calibration); unknown items cost their compact JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from pricing.documents import is_document
from pricing.messages import (
    DETAILS,
    ChatRequest,
    ImagePart,
    Message,
    Part,
    RequestError,
    TextPart,
    ToolCall,
    answer_format,
    is_object,
)
from proxy.wires.base import ChatField

__all__ = [
    "GROUP",
    "INSTRUCTIONS",
    "client_field",
    "input_items",
    "parse_responses",
    "render_items",
    "response_tools",
]

#: Key of a model-side group's wire: the items, verbatim, in order.
GROUP = "routefit_items"
#: Key of the wire of the system message made from ``instructions``.
INSTRUCTIONS = "routefit_instructions"

_INPUT_ROLES = frozenset({"user", "system", "developer"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})


def _compact(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _str(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise RequestError(f"{param} must be a string", param)
    return value


def input_items(body: Mapping[str, Any]) -> list[Any]:
    """The request's ``input`` as a list of items (a string is one user message)."""
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RequestError("input must be a string or a list of items", "input")
    return raw


def _content_parts(content: Any, where: str) -> tuple[Part, ...]:
    if content is None:
        return ()
    if isinstance(content, str):
        return (TextPart(content),) if content else ()
    if not isinstance(content, list):
        raise RequestError(f"{where} must be a string or a list of content parts", where)
    parts: list[Part] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if not is_object(part):
            raise RequestError(f"{at} must be an object", at)
        kind = part.get("type")
        if not isinstance(kind, str):
            raise RequestError(f"{at}.type must be a string", f"{at}.type")
        if kind in _TEXT_PARTS:
            parts.append(TextPart(_str(part.get("text"), f"{at}.text")))
        elif kind == "refusal":
            parts.append(TextPart(_str(part.get("refusal"), f"{at}.refusal")))
        elif kind == "input_image":
            parts.append(_image(part, at))
        elif kind == "input_file" and is_document(str(part.get("file_data") or "")):
            parts.append(ImagePart(part["file_data"]))  # a PDF: priced from its pages
        else:
            parts.append(TextPart(_compact(part)))  # input_file, audio, ...: priced as JSON
    return tuple(parts)


def _image(part: Mapping[str, Any], at: str) -> ImagePart:
    url = part.get("image_url")
    if url is None and isinstance(part.get("file_id"), str):
        url = "file_id:" + part["file_id"]  # not a data URL: priced at the rule's worst case
    url = _str(url, f"{at}.image_url")
    detail = part.get("detail") or "auto"
    if not isinstance(detail, str) or detail not in DETAILS:
        raise RequestError(f"{at}.detail must be one of {sorted(DETAILS)}", f"{at}.detail")
    return ImagePart(url, detail)


def _call(item: Mapping[str, Any], kind: str, at: str) -> ToolCall | None:
    """The tool call an item opens (``function_call``, ``custom_tool_call``, ``*_call``)."""
    call_id = item.get("call_id")
    if kind == "function_call":
        return ToolCall(
            _str(call_id, f"{at}.call_id"),
            _str(item.get("name"), f"{at}.name"),
            _str(item.get("arguments", ""), f"{at}.arguments"),
        )
    if kind == "custom_tool_call":
        return ToolCall(
            _str(call_id, f"{at}.call_id"),
            _str(item.get("name"), f"{at}.name"),
            _str(item.get("input", ""), f"{at}.input"),
        )
    if isinstance(call_id, str):  # local_shell_call, computer_call, ...: paired by call_id
        rest = {k: v for k, v in item.items() if k not in ("id", "call_id", "status")}
        return ToolCall(call_id, kind, _compact(rest))
    return None


def _model_side_parts(item: Mapping[str, Any], kind: str, at: str) -> tuple[Part, ...]:
    if kind == "message":
        return _content_parts(item.get("content"), f"{at}.content")
    if kind == "reasoning":
        summary = item.get("summary")
        if summary is not None and not isinstance(summary, list):
            raise RequestError(f"{at}.summary must be a list", f"{at}.summary")
        return _content_parts(summary or [], f"{at}.summary")
    if kind in ("function_call", "custom_tool_call"):
        return ()  # priced as the tool call
    return (TextPart(_compact(item)),)  # web_search_call, unknown kinds: their JSON


def _kind(item: Any, at: str) -> str:
    if not is_object(item):
        raise RequestError(f"{at} must be an object", at)
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    if not isinstance(kind, str):
        raise RequestError(f"{at}.type is required", f"{at}.type")
    return kind


def _is_output(kind: str) -> bool:
    return kind.endswith("_call_output")


def _input_message(item: Mapping[str, Any], at: str) -> Message | None:
    """A user / system / developer message, or None for an assistant one."""
    role = item.get("role")
    if role == "assistant":
        return None
    if not isinstance(role, str) or role not in _INPUT_ROLES:
        raise RequestError(
            f"{at}.role must be one of ['assistant', 'developer', 'system', 'user']", f"{at}.role"
        )
    if "content" not in item:
        raise RequestError(f"{at}.content is required", f"{at}.content")
    parts = _content_parts(item.get("content"), f"{at}.content")
    return Message(role=role, parts=parts, wire=item)


def _output_message(item: Mapping[str, Any], at: str) -> Message:
    call_id = _str(item.get("call_id"), f"{at}.call_id")
    output = item.get("output", "")
    parts = _content_parts(output, f"{at}.output") if isinstance(output, list) else ()
    if isinstance(output, str):
        parts = (TextPart(output),) if output else ()
    elif not isinstance(output, list):
        parts = (TextPart(_compact(output)),)
    return Message(role="tool", parts=parts, tool_call_id=call_id, wire=item)


def _group(items: list[Mapping[str, Any]], parts: list[Part], calls: list[ToolCall]) -> Message:
    return Message(
        role="assistant", parts=tuple(parts), tool_calls=tuple(calls), wire={GROUP: tuple(items)}
    )


def parse_items(raw: Sequence[Any], first: int = 0) -> list[Message]:
    """Items as messages (see the module docstring); ``first`` numbers the error paths."""
    out: list[Message] = []
    items: list[Mapping[str, Any]] = []
    parts: list[Part] = []
    calls: list[ToolCall] = []
    for i, item in enumerate(raw, first):
        at = f"input[{i}]"
        kind = _kind(item, at)
        single = None
        if kind == "message":
            single = _input_message(item, at)
        elif _is_output(kind):
            single = _output_message(item, at)
        if single is not None:
            if items:
                out.append(_group(items, parts, calls))
                items, parts, calls = [], [], []
            out.append(single)
            continue
        items.append(item)
        parts.extend(_model_side_parts(item, kind, at))
        call = _call(item, kind, at)
        if call is not None:
            calls.append(call)
    if items:
        out.append(_group(items, parts, calls))
    return out


def response_tools(body: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """Tools as the meter prices them: function tools as functions (a namespace's too),
    every other kind (custom with its grammar, web_search, ...) as its whole JSON, and a JSON
    answer's ``text.format`` as its JSON too (``answer_format``)."""
    text = body.get("text")
    answer = answer_format(text.get("format") if isinstance(text, Mapping) else None)
    raw = body.get("tools")
    if raw is None:
        return answer
    if not isinstance(raw, list):
        raise RequestError("tools must be a list", "tools")
    out: list[Mapping[str, Any]] = []

    def add(tool: Any, at: str) -> None:
        if not isinstance(tool, Mapping) or not isinstance(tool.get("type"), str):
            raise RequestError(f"{at} must be an object with a type", at)
        kind = tool["type"]
        if kind == "function":
            if not isinstance(tool.get("name"), str):
                raise RequestError(f"{at}.name must be a string", f"{at}.name")
            out.append(tool)
        elif kind == "namespace":
            inner_tools = tool.get("tools")
            if not isinstance(inner_tools, list):
                raise RequestError(f"{at}.tools must be a list", f"{at}.tools")
            for j, inner in enumerate(inner_tools):
                add(inner, f"{at}.tools[{j}]")
        else:
            out.append({"type": kind, kind: tool})  # no top-level name: priced as JSON

    for i, tool in enumerate(raw):
        add(tool, f"tools[{i}]")
    return tuple(out) + answer


def _max_output(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_output_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError("max_output_tokens must be a positive integer", "max_output_tokens")
    return value


def parse_responses(body: Any, prior: int = 0) -> ChatRequest:
    """Validate a Responses body; raise RequestError naming the bad parameter as the client
    wrote it: the first ``prior`` items of ``input`` are the stored chain its
    ``previous_response_id`` names (``proxy.wires.responses.continued``), so an item of the
    client's own input is numbered in that input, and one of the chain is the id."""
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise RequestError("model must be a string", "model")
    messages: list[Message] = []
    instructions = body.get("instructions")
    if instructions is not None:
        text = _str(instructions, "instructions")
        messages.append(Message(role="system", parts=(TextPart(text),), wire={INSTRUCTIONS: text}))
    items = input_items(body)
    if not items:
        raise RequestError("input must not be empty", "input")
    try:
        messages += parse_items(items, -prior)
    except RequestError as err:
        if prior and err.param is not None and err.param.startswith("input[-"):
            raise RequestError(
                f"the stored conversation previous_response_id names is malformed: {err}",
                "previous_response_id",
            ) from None
        raise
    for key in ("stream", "store", "background"):
        if body.get(key) is not None and not isinstance(body.get(key), bool):
            raise RequestError(f"{key} must be a boolean", key)
    if body.get("background") is True:
        # OpenAI would answer "queued" with no usage and go on working: routefit could neither
        # charge the team what the provider then bills nor hand it the answer (the provider's
        # GET needs its key; routefit's GET reads its own store, which never saw it)
        raise RequestError(
            "background responses are not served through routefit: send the request without "
            "background (stream it to keep a long one alive)",
            "background",
        )
    return ChatRequest(
        model=model,
        messages=tuple(messages),
        tools=response_tools(body),
        max_output_tokens=_max_output(body),
        body=body,
    )


# -- rendering the fitted conversation back as items ----------------------------------------


def _render_parts(
    parts: Sequence[Part], role: str, wire: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Content parts for ``parts``: the client's own part where the fit left it (an image, a
    file, a part priced as its JSON), else one rendered from the part."""
    text = "output_text" if role == "assistant" else "input_text"
    content = (wire or {}).get("content")
    originals: Sequence[Any] = [None] * len(parts)
    if isinstance(content, list) and len(content) == len(parts):
        originals = content
    out: list[dict[str, Any]] = []
    for p, original in zip(parts, originals, strict=True):
        kind = original.get("type") if isinstance(original, Mapping) else None
        if isinstance(p, ImagePart) and kind in ("input_image", "input_file"):
            out.append(original)
        elif isinstance(p, TextPart) and kind not in (None, *_TEXT_PARTS, "refusal"):
            out.append(original if p.text == _compact(original) else {"type": text, "text": p.text})
        elif isinstance(p, TextPart):
            out.append({"type": text, "text": p.text})
        elif is_document(p.url):
            out.append({"type": "input_file", "filename": "document.pdf", "file_data": p.url})
        else:
            detail = p.detail if p.detail in DETAILS else "auto"  # a Gemini client's level
            out.append({"type": "input_image", "image_url": p.url, "detail": detail})
    return out


def _output_kinds(request: ChatRequest) -> dict[str, str]:
    """call_id → the output item type the client used (function_call_output, ...)."""
    kinds: dict[str, str] = {}
    for m in request.messages:
        if m.tool_call_id is not None and m.wire is not None:
            kind = m.wire.get("type")
            if isinstance(kind, str):
                kinds[m.tool_call_id] = kind
    return kinds


def render_items(request: ChatRequest, messages: Sequence[Message]) -> list[Any]:
    """The fitted conversation as Responses input items.

    Messages fitting left alone are the client's own items (the very objects); capped tool
    outputs keep their item type, call id and other fields with the capped text; offloaded
    messages and elision markers are rendered from their parts."""
    out: list[Any] = []
    kinds: dict[str, str] | None = None
    originals = {id(o.wire) for o in request.messages if o.wire is not None}
    for m in messages:
        wire = m.wire
        if wire is not None and INSTRUCTIONS in wire:
            continue
        if wire is not None and GROUP in wire:
            out.extend(wire[GROUP])
            continue
        if wire is not None and id(wire) in originals:
            out.append(wire)
            continue
        if m.role == "tool" and m.tool_call_id is not None:
            if kinds is None:
                kinds = _output_kinds(request)
            kind = kinds.get(m.tool_call_id, "function_call_output")
            base = {k: v for k, v in (wire or {}).items() if k not in ("content", "output")}
            output: Any = m.text if not m.images else _render_parts(m.parts, "user")
            out.append({**base, "type": kind, "call_id": m.tool_call_id, "output": output})
            continue
        content = _render_parts(m.parts, m.role, wire)
        out.append({"type": "message", "role": m.role, "content": content})
    return out


# -- naming a field in the client's terms ---------------------------------------------------

#: Where a part sits in the client's body, and the content part it came from (None: a string).
_Place = tuple[str, Mapping[str, Any] | None]


def client_field(request: ChatRequest, field: ChatField, prior: int = 0) -> str:
    """``field`` (chat's terms of ``request.messages``) as the client's body names it: the item
    and content entry a part came from (an image's ``image_url``, a PDF's ``file_data``), else
    the item a message came from; ``previous_response_id`` for what the stored chain (its first
    ``prior`` items of ``input``) holds; ``input`` where no item can be named rightly (a
    string input, a group of several items)."""
    if not 0 <= field.message < len(request.messages):
        return "input"
    wire = request.messages[field.message].wire
    if wire is not None and INSTRUCTIONS in wire:
        return "instructions"
    group: Sequence[Any] = (wire or {}).get(GROUP) or (wire,)
    items = input_items(request.body)
    first = next((k for k, item in enumerate(items) if item is group[0]), None)
    if first is None:
        return "input"

    def named(k: int) -> str:
        return "previous_response_id" if k < prior else f"input[{k - prior}]"

    places: list[_Place] = []
    for k, item in enumerate(group, first):
        places += _places(item, named(k))
    home = named(first) if len(group) == 1 or first + len(group) <= prior else "input"
    if field.part is None or not 0 <= field.part < len(places):
        return home
    at, part = places[field.part]
    if at.startswith("previous_response_id"):
        return "previous_response_id"
    if not field.media or part is None:
        return at
    if part.get("type") == "input_image":
        return at + (".image_url" if part.get("image_url") is not None else ".file_id")
    return at + ".file_data" if part.get("type") == "input_file" else at


def _places(item: Mapping[str, Any], at: str) -> list[_Place]:
    """Where each part ``parse_items`` made of one item sits, in its order."""
    kind = _kind(item, at)
    if _is_output(kind):
        output = item.get("output", "")
        if isinstance(output, list) or (isinstance(output, str) and output):
            return _entries(output, f"{at}.output")
        return [] if isinstance(output, str) else [(f"{at}.output", None)]
    if kind == "message":
        return _entries(item.get("content"), f"{at}.content")
    if kind == "reasoning":
        return _entries(item.get("summary") or [], f"{at}.summary")
    if kind in ("function_call", "custom_tool_call"):
        return []
    return [(at, None)]


def _entries(content: Any, at: str) -> list[_Place]:
    """``_content_parts``' parts' places: one per entry of a list, one for a non-empty string."""
    if isinstance(content, list):
        return [
            (f"{at}[{j}]", p if isinstance(p, Mapping) else None) for j, p in enumerate(content)
        ]
    return [(at, None)] if isinstance(content, str) and content else []
