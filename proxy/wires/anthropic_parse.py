"""An Anthropic Messages body as the conversation pricing and fitting reason about.

The fit core works on chat-shaped ``pricing.messages.Message`` values whose atoms are an
assistant message with ``tool_calls`` and the ``role="tool"`` messages answering it. Anthropic
keeps a turn's tool results inside the *next user message*, as ``tool_result`` blocks, so one
Anthropic message may become several internal messages (a *fragment* each):

* ``system`` (string or text blocks) → one internal ``system`` message (always kept);
* an assistant message → one internal message: its ``text`` and ``thinking`` /
  ``redacted_thinking`` blocks priced as text, its ``tool_use`` blocks as ``ToolCall`` values;
* a user message → one internal ``tool`` message per ``tool_result`` block (``tool_call_id`` =
  its ``tool_use_id``, so the fit keeps it with its call; ``is_error: true`` as its lead,
  ``TOOL_ERROR``), then one ``user`` message with the other blocks, if any;
* ``role: "system"`` entries inside ``messages`` (Claude Code sends them) → a ``system`` message.

Images (``base64`` or ``url`` sources) become ``ImagePart`` values priced by the route's image
rule; a ``base64`` image is priced from its header through a data URL. A ``document`` with a
base64 PDF becomes one too, a PDF data URL, priced as its text plus a picture per page
(``pricing.documents``); like an image it is sent whole or offloaded whole, never cut.

**Other block types** (a text or URL ``document``, ``search_result``, server-tool blocks, ...)
are accepted and priced by a stated fallback: the compact JSON of the block as text (for a text
document, its text plus a few tokens). They are forwarded verbatim while the fit leaves them be;
one the fit caps or masks is sent as the text it was priced as.

Every internal message remembers where it came from (``Fragment``), so the writer
(``proxy.wires.anthropic_render``) can send each unchanged Anthropic message as the very object
the client sent, and a field pricing names in chat's terms is named in the client's
(``client_field``: a part is the block it came from, inside its ``tool_result`` when there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pricing.documents import MEDIA_TYPE
from pricing.messages import (
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
from pricing.parsed import once
from proxy.wires.base import ChatField

__all__ = [
    "THINKING_MIN",
    "TOOL_ERROR",
    "AnthropicRequest",
    "Fragment",
    "client_field",
    "fallback_text",
    "image_url",
    "parse_anthropic",
    "thinking_on",
]

#: What a failed tool's result (``is_error: true``) begins with on a chat provider, whose tool
#: message has no such flag: one stable marker (the same bytes every turn, so a provider's
#: prompt cache still matches), in words the model reads as its tool having failed. The parse
#: makes it the result's lead (``Message.lead``): the parse cannot know the leg, and only a
#: translated one sends it (``proxy.wires.anthropic_chat``) and prices it (``Route.translated``);
#: a native Anthropic leg sends the client's block, its flag in it.
TOOL_ERROR = "[tool error]"

#: Extended thinking's smallest ``budget_tokens``; Anthropic also refuses a budget that is not
#: below ``max_tokens``, so a request with thinking on needs a cap of at least one more.
THINKING_MIN = 1024


def thinking_on(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The body's extended-thinking settings when thinking is on (``"type": "enabled"``)."""
    thinking = body.get("thinking")
    enabled = isinstance(thinking, Mapping) and thinking.get("type") == "enabled"
    return thinking if enabled else None


#: The fragment kinds: a whole message, one tool_result block, the rest of a user message.
WHOLE, TOOL, REST, SYSTEM = "whole", "tool", "rest", "system"
_MEDIA = ("image/jpeg", "image/png", "image/gif", "image/webp")


@dataclass(frozen=True, slots=True)
class Fragment:
    """Where an internal message came from: Anthropic message ``index`` (-1: the ``system``
    field), its role there, and the blocks of that message it carries."""

    index: int
    role: str
    kind: str
    blocks: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class AnthropicRequest(ChatRequest):
    """A ChatRequest that knows the Anthropic message each internal message came from."""

    fragments: tuple[Fragment, ...]
    #: ``id(message)`` → its position in ``messages`` (the fit keeps unchanged objects).
    positions: Mapping[int, int]
    #: Internal messages per Anthropic message (an unchanged message is reused whole).
    counts: Mapping[int, int]

    @property
    def least_output(self) -> int:
        """The smallest ``max_tokens`` this request can be sent with (0: any): with extended
        thinking on, ``THINKING_MIN`` + 1 (``strategies.output``: the fit never
        shrinks the reservation below it)."""
        return THINKING_MIN + 1 if thinking_on(self.body) is not None else 0

    def position(self, message: Message) -> int | None:
        i = self.positions.get(id(message))
        return i if i is not None and self.messages[i] is message else None


def _compact(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def image_url(block: Mapping[str, Any], where: str) -> str:
    """The URL pricing reads for an image block (a data URL for base64 data)."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise RequestError(f"{where}.source must be an object", f"{where}.source")
    kind = source.get("type")
    if kind == "base64":
        media, data = source.get("media_type"), source.get("data")
        if media not in _MEDIA:
            raise RequestError(
                f"{where}.source.media_type must be one of {list(_MEDIA)}", f"{where}.source"
            )
        if not isinstance(data, str):
            raise RequestError(f"{where}.source.data must be a string", f"{where}.source.data")
        return f"data:{media};base64,{data}"
    if kind == "url":
        url = source.get("url")
        if not isinstance(url, str):
            raise RequestError(f"{where}.source.url must be a string", f"{where}.source.url")
        return url
    raise RequestError(
        f"{where}.source.type must be 'base64' or 'url' (got {kind!r:.40})", f"{where}.source"
    )


def _blocks(content: Any, where: str) -> tuple[Mapping[str, Any], ...]:
    if isinstance(content, str):
        return ({"type": "text", "text": content},)
    if not isinstance(content, list):
        raise RequestError(f"{where} must be a string or a list of content blocks", where)
    for j, block in enumerate(content):
        if not is_object(block) or not isinstance(block.get("type"), str):
            raise RequestError(f"{where}[{j}] must be an object with a type", f"{where}[{j}]")
    return tuple(content)


def _at(where: str, j: int | None) -> str:
    """Block ``j`` of the content at ``where`` (``where`` itself for None). Paths are spelt
    out for an error (or an image) only: built for every block, they were a fifth of a long
    session's parse."""
    return where if j is None else f"{where}[{j}]"


def _part(block: Mapping[str, Any], where: str, j: int | None = None) -> Part | None:
    """The priced part of one non-tool block (None for a tool block, handled apart), block
    ``j`` of the content at ``where`` (``_at``)."""
    kind = block["type"]
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            at = _at(where, j)
            raise RequestError(f"{at}.text must be a string", f"{at}.text")
        return TextPart(text)
    if kind == "image":
        return ImagePart(image_url(block, _at(where, j)))
    if kind == "document":
        source = block.get("source")
        if (
            isinstance(source, Mapping)
            and source.get("type") == "base64"
            and source.get("media_type") == MEDIA_TYPE
            and isinstance(source.get("data"), str)
        ):
            return ImagePart(f"data:{MEDIA_TYPE};base64,{source['data']}")
    if kind == "thinking":
        return TextPart(str(block.get("thinking") or ""))
    if kind == "redacted_thinking":
        return TextPart(str(block.get("data") or ""))
    if kind in ("tool_use", "tool_result"):
        return None
    return TextPart(fallback_text(block))


def fallback_text(block: Mapping[str, Any]) -> str:
    """The text a block of another type is priced as (the stated fallback)."""
    return _compact(block)


def _result_parts(block: Mapping[str, Any], where: str, j: int | None = None) -> tuple[Part, ...]:
    """The parts of the tool result ``block``, block ``j`` of the content at ``where``."""
    content = block.get("content")
    if content is None or content == "":
        return ()
    if isinstance(content, str):
        return (TextPart(content),)
    where = _at(where, j)
    inner = _blocks(content, f"{where}.content")
    parts = []
    for k, sub in enumerate(inner):
        if sub["type"] in ("tool_use", "tool_result"):
            raise RequestError(
                f"{where}.content[{k}]: a tool_result cannot contain {sub['type']} blocks",
                f"{where}.content[{k}]",
            )
        part = _part(sub, f"{where}.content", k)
        assert part is not None
        parts.append(part)
    return tuple(parts)


def _assistant(
    raw: Mapping[str, Any], blocks: tuple[Mapping[str, Any], ...], where: str
) -> Message:
    parts: list[Part] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(blocks):
        if block["type"] == "tool_result":
            raise RequestError(
                f"{where}.content[{j}]: tool_result blocks belong in user messages",
                f"{where}.content[{j}]",
            )
        if block["type"] == "tool_use":
            name, use_id = block.get("name"), block.get("id")
            if not isinstance(name, str) or not isinstance(use_id, str):
                raise RequestError(
                    f"{where}.content[{j}]: tool_use needs a string id and name",
                    f"{where}.content[{j}]",
                )
            calls.append(ToolCall(use_id, name, _compact(block.get("input", {}))))
            continue
        part = _part(block, f"{where}.content", j)
        assert part is not None
        parts.append(part)
    return Message("assistant", tuple(parts), tool_calls=tuple(calls), wire=raw)


def _user(
    raw: Mapping[str, Any], blocks: tuple[Mapping[str, Any], ...], i: int, where: str
) -> list[tuple[Message, Fragment]]:
    out: list[tuple[Message, Fragment]] = []
    rest: list[Mapping[str, Any]] = []
    parts: list[Part] = []
    content = f"{where}.content"
    for j, block in enumerate(blocks):
        if block["type"] == "tool_use":
            at = _at(content, j)
            raise RequestError(f"{at}: tool_use blocks belong in assistant messages", at)
        if block["type"] == "tool_result":
            use_id = block.get("tool_use_id")
            if not isinstance(use_id, str):
                at = _at(content, j)
                raise RequestError(f"{at}.tool_use_id must be a string", f"{at}.tool_use_id")
            frag = {"role": "user", "content": [block]}
            lead = TOOL_ERROR if block.get("is_error") is True else ""
            parts_of = _result_parts(block, content, j)
            msg = Message("tool", parts_of, tool_call_id=use_id, wire=frag, lead=lead)
            out.append((msg, Fragment(i, "user", TOOL, (block,))))
            continue
        part = _part(block, content, j)
        assert part is not None
        parts.append(part)
        rest.append(block)
    if rest or not out:
        whole = not out
        wire = raw if whole else {"role": "user", "content": rest}
        kind = WHOLE if whole else REST
        out.append(
            (Message("user", tuple(parts), wire=wire), Fragment(i, "user", kind, tuple(rest)))
        )
    return out


def _message(raw: Any, i: int) -> list[tuple[Message, Fragment]]:
    where = f"messages[{i}]"
    if not is_object(raw):
        raise RequestError(f"{where} must be an object", where)
    role = raw.get("role")
    if role not in ("user", "assistant", "system"):
        raise RequestError(
            f"{where}.role must be 'user', 'assistant' or 'system' (got {role!r:.40})",
            f"{where}.role",
        )
    if "content" not in raw:
        raise RequestError(f"{where}.content is required", f"{where}.content")
    blocks = _blocks(raw["content"], f"{where}.content")
    if role == "assistant":
        return [(_assistant(raw, blocks, where), Fragment(i, role, WHOLE, blocks))]
    if role == "system":
        parts = []
        for j, block in enumerate(blocks):
            part = _part(block, f"{where}.content[{j}]")
            if part is None:
                raise RequestError(
                    f"{where}.content[{j}]: system messages cannot carry tool blocks",
                    f"{where}.content[{j}]",
                )
            parts.append(part)
        return [(Message("system", tuple(parts), wire=raw), Fragment(i, role, WHOLE, blocks))]
    return _user(raw, blocks, i, where)


def _placed(pairs: list[tuple[Message, Fragment]], i: int) -> list[tuple[Message, Fragment]]:
    """Message ``i``'s pairs; a memoised parse's were made where the message was then (the
    list is the memo's: read, never changed)."""
    if pairs[0][1].index == i:
        return pairs
    return [(m, Fragment(i, f.role, f.kind, f.blocks)) for m, f in pairs]


def _system(body: Mapping[str, Any]) -> list[tuple[Message, Fragment]]:
    system = body.get("system")
    if system is None or system == "" or system == []:
        return []
    blocks = _blocks(system, "system")
    parts = []
    for j, block in enumerate(blocks):
        if block["type"] != "text":
            raise RequestError(f"system[{j}] must be a text block", f"system[{j}]")
        part = _part(block, f"system[{j}]")
        assert part is not None
        parts.append(part)
    wire = {"role": "system", "content": list(blocks)}
    return [(Message("system", tuple(parts), wire=wire), Fragment(-1, "system", SYSTEM, blocks))]


def _tools(body: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """Tool definitions as pricing reads them: custom tools as ``{name, description,
    parameters}`` (one shape for every chat family), server tools as they are, and a JSON
    answer's format (``output_config.format``, the beta's ``output_format``) as its JSON."""
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, Mapping) else None
    answer = answer_format(body.get("output_format") if fmt is None else fmt)
    raw = body.get("tools")
    if raw is None:
        return answer
    if not isinstance(raw, list):
        raise RequestError("tools must be a list", "tools")
    out: list[Mapping[str, Any]] = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping):
            raise RequestError(f"tools[{i}] must be an object", f"tools[{i}]")
        if tool.get("type") in (None, "custom"):
            if not isinstance(tool.get("name"), str):
                raise RequestError(f"tools[{i}].name must be a string", f"tools[{i}].name")
            fn = {"name": tool["name"], "parameters": tool.get("input_schema") or {}}
            if tool.get("description") is not None:
                fn["description"] = tool["description"]
            out.append(fn)
        else:
            out.append(tool)
    return tuple(out) + answer


def _max_tokens(body: Mapping[str, Any], required: bool) -> int | None:
    value = body.get("max_tokens")
    if value is None:
        if required:
            raise RequestError("max_tokens is required", "max_tokens")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError("max_tokens must be a positive integer", "max_tokens")
    return value


def parse_anthropic(
    body: Any, *, count_only: bool = False, scope: bytes | None = None
) -> AnthropicRequest:
    """Validate a Messages body (``count_only``: a count_tokens body, no ``max_tokens``).
    ``scope``: the tenant whose body it is, whose messages parsed before are taken from the
    memo of parsed messages (``pricing.parsed``); None: every message parsed afresh."""
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise RequestError("model must be a string", "model")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise RequestError("messages must be a non-empty list", "messages")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError("stream must be a boolean", "stream")
    pairs = _system(body)
    parse = _message if scope is None else once(_message, b"m", scope)
    for i, raw in enumerate(raw_messages):
        pairs.extend(_placed(parse(raw, i), i))
    messages = tuple(m for m, _ in pairs)
    counts: dict[int, int] = {}
    for _, frag in pairs:
        counts[frag.index] = counts.get(frag.index, 0) + 1
    return AnthropicRequest(
        model=model,
        messages=messages,
        tools=_tools(body),
        max_output_tokens=_max_tokens(body, not count_only),
        body=body,
        fragments=tuple(f for _, f in pairs),
        positions={id(m): i for i, m in enumerate(messages)},
        counts=counts,
    )


# -- naming a field in the client's terms ---------------------------------------------------

#: The blocks that are not parts of the message they sit in (``_part`` gives them none).
_TOOL_BLOCKS = ("tool_use", "tool_result")


def client_field(request: AnthropicRequest, field: ChatField) -> str:
    """``field`` (chat's terms of ``request.messages``) as the client's body names it: the
    block a part came from (an image's or PDF's ``source.data``, ``source.url``), else the
    fragment's own place (its message; a tool result's block; ``system``)."""
    if not 0 <= field.message < len(request.fragments):
        return "messages"
    frag = request.fragments[field.message]
    home, parts = _places(request.body, frag)
    if field.part is None or not 0 <= field.part < len(parts):
        return home
    at, block = parts[field.part]
    if not field.media or block is None or block.get("type") not in ("image", "document"):
        return at
    source = block.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    return at + {"base64": ".source.data", "url": ".source.url"}.get(str(kind), ".source")


def _places(
    body: Mapping[str, Any], frag: Fragment
) -> tuple[str, list[tuple[str, Mapping[str, Any] | None]]]:
    """Where a fragment sits in the client's body, and where each of its parts does (with the
    block it came from; None for a string content), in the order ``parse_anthropic`` made
    them."""
    if frag.kind == SYSTEM:
        system = body.get("system")
        if not isinstance(system, list):
            return "system", [("system", None)]
        return "system", [(f"system[{j}]", b) for j, b in enumerate(system)]
    home = f"messages[{frag.index}]"
    content = body["messages"][frag.index].get("content")
    if frag.kind == TOOL:
        block = frag.blocks[0]
        b = next(b for b, found in enumerate(content) if found is block)
        home = f"{home}.content[{b}]"
        content = block.get("content")
        if content is None or content == "":
            return home, []
    if not isinstance(content, list):
        return home, [(f"{home}.content", None)]
    if frag.kind == TOOL:
        return home, [(f"{home}.content[{k}]", sub) for k, sub in enumerate(content)]
    return home, [
        (f"{home}.content[{j}]", block)
        for j, block in enumerate(content)
        if block["type"] not in _TOOL_BLOCKS
    ]
