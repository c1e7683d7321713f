"""Responses ↔ chat completions, for routes whose provider does not speak Responses.

Our own mapping rather than litellm's Responses bridge: litellm is imported by exactly one
module (the litellm transport, which speaks chat), its bridge would add a second translation
layer on every request, and an OpenAI-compatible provider reached directly (deepseek, vllm, ...)
would have to go through litellm only for it. The mapping is a few dict rewrites per item.

What chat cannot carry, and is therefore lost on a translated route (docs/wires.md):
``reasoning`` items (their encrypted content is meaningful only to OpenAI), ``web_search_call``
and other server-side tool items, non-function tools (``web_search``, file search, ...; a
``custom`` tool becomes a function with one string parameter ``input``; a namespace's tools
are plain functions whose calls come back with their ``namespace``: ``ToolNames``), ``include``,
``reasoning`` / ``text.verbosity`` settings, ``store`` at the provider (routefit's own store
still answers ``previous_response_id``), images inside tool outputs (replaced by a note).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from pricing.messages import ChatRequest, ImagePart, Message, TextPart, media_part
from proxy.usage import cache_writes, normalize_usage
from proxy.wires.base import StreamedCalls, content_text
from proxy.wires.responses_items import GROUP, INSTRUCTIONS

__all__ = [
    "ChatStreamToResponses",
    "chat_body",
    "chat_to_response",
    "new_response_id",
    "response_object",
    "response_usage",
    "sse_event",
]

#: Carried over to chat. Not ``prompt_cache_key`` (Codex always sends it): translated routes are
#: never OpenAI's (those speak Responses natively), and other providers refuse it (litellm's
#: Anthropic adapter answers UnsupportedParamsError).
_SAMPLING = ("temperature", "top_p", "parallel_tool_calls", "user")


def new_response_id() -> str:
    return "resp_" + secrets.token_hex(24)


def _chat_content(parts: Sequence[Any], tool: bool) -> Any:
    if all(isinstance(p, TextPart) for p in parts):
        return "".join(p.text for p in parts)
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif tool:  # chat tool messages carry text only
            out.append({"type": "text", "text": "[image omitted: not supported in tool output]"})
        else:
            assert isinstance(p, ImagePart)
            out.append(media_part(p, detail=True))
    return "".join(o["text"] for o in out) if tool else out


def _said(part: Any) -> str | None:
    """An assistant message part's words: an ``output_text``'s text, or a ``refusal``'s (the
    model declining, which chat says as the turn's text, as the chat → Messages mapping does).
    A refusal was dropped, priced as its text: a turn of one went unsent, and the provider saw
    the question never answered (Claude: two user turns merged into one)."""
    if not isinstance(part, Mapping):
        return None
    said = part.get("refusal") if part.get("type") == "refusal" else part.get("text")
    return said if isinstance(said, str) else None


def _group_message(items: Sequence[Mapping[str, Any]], names: ToolNames) -> dict[str, Any]:
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            for part in item.get("content") or []:
                said = _said(part)
                if said is not None:
                    text.append(said)
            if isinstance(item.get("content"), str):
                text.append(item["content"])
        elif kind == "function_call":
            name = names.sent(item.get("namespace"), item.get("name"))
            fn = {"name": name, "arguments": item.get("arguments") or "{}"}
            calls.append({"id": item.get("call_id"), "type": "function", "function": fn})
        elif kind == "custom_tool_call":
            args = orjson.dumps({"input": item.get("input", "")}).decode()
            fn = {"name": names.sent(item.get("namespace"), item.get("name")), "arguments": args}
            calls.append({"id": item.get("call_id"), "type": "function", "function": fn})
    out: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        out["tool_calls"] = calls
    return out


def _messages(fitted: Sequence[Message], names: ToolNames) -> list[dict[str, Any]]:
    """The fitted conversation as chat messages. A call chat cannot make (``local_shell_call``,
    ``web_search_call``, other server-side ``*_call`` items) is not sent, and neither is its
    output: chat refuses a tool message that answers no call it was shown.

    Each output goes right after the assistant message with its call (with that message's other
    outputs), wherever the input had it: the Responses API pairs an output with its call by
    ``call_id`` alone, and Codex writes developer notes between them, while chat wants a call's
    tool messages right after it (a provider's 400 otherwise) and Anthropic its tool results
    first in the next user message. Messages that came between follow the outputs."""
    turns: list[list[dict[str, Any]]] = []  # each message, then the outputs answering it
    owner: dict[str, list[dict[str, Any]]] = {}  # call id → the turn of its assistant message
    for m in fitted:
        wire = m.wire
        if wire is not None and INSTRUCTIONS in wire:
            turns.append([{"role": "system", "content": wire[INSTRUCTIONS]}])
        elif wire is not None and GROUP in wire:
            message = _group_message(wire[GROUP], names)
            if message["content"] is not None or message.get("tool_calls"):
                turns.append([message])  # a turn of reasoning / server-side items only: nothing
                owner.update((str(call["id"]), turns[-1]) for call in message.get("tool_calls", ()))
        elif m.role == "tool":
            turn = owner.get(str(m.tool_call_id))
            if turn is None:
                continue
            content = _chat_content(m.parts, tool=True)
            turn.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": content})
        else:
            role = "system" if m.role == "developer" else m.role
            turns.append([{"role": role, "content": _chat_content(m.parts, tool=False)}])
    return [message for turn in turns for message in turn]


#: The tools chat is sent, as functions: function tools and custom ones (``input`` as a string).
_KINDS = ("function", "custom")


def _flat(tools: Any) -> Iterator[Mapping[str, Any]]:
    """The client's tools in order, a namespace's own tools in its place."""
    for tool in tools or []:
        if not isinstance(tool, Mapping):
            continue
        if tool.get("type") == "namespace":
            yield from _flat(tool.get("tools"))
        else:
            yield tool


def _tools(names: ToolNames) -> list[dict[str, Any]]:
    """The function and custom tools as chat functions, each under its name in ``names``, in
    the client's order."""
    out: list[dict[str, Any]] = []
    for named in names.tools:
        tool = named.spec
        fn: dict[str, Any] = {"name": named.sent}
        if named.kind == "function":
            fn |= {k: tool[k] for k in ("description", "parameters", "strict") if k in tool}
        else:
            fn["parameters"] = {"type": "object", "properties": {"input": {"type": "string"}}}
            if "description" in tool:
                fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any, names: ToolNames) -> Any:
    """The client's ``tool_choice`` in chat's words: a named function or custom tool as that
    function, ``allowed_tools`` by its mode (``_allowed``), a hosted tool (not sent) ``auto``."""
    if isinstance(choice, Mapping):
        if choice.get("type") in ("function", "custom") and isinstance(choice.get("name"), str):
            sent = names.sent(choice.get("namespace"), choice["name"])
            return {"type": "function", "function": {"name": sent}}
        if choice.get("type") == "allowed_tools":
            return _allowed(choice, names)
        return "auto"
    return choice


def _allowed(choice: Mapping[str, Any], names: ToolNames) -> Any:
    """``allowed_tools`` as chat says it to any provider: ``required`` stays required (one
    allowed tool: that function), ``auto`` is ``auto``. It was ``auto`` whatever its mode, and
    the model could answer without the call the client required. (The set itself is chat's
    ``allowed_tools`` at OpenAI only, and translated routes are never OpenAI's: it is said by
    the tools offered, ``_allowed_names``.)"""
    if choice.get("mode") != "required":
        return "auto"
    tools = choice.get("tools")
    chosen = [t for t in tools if isinstance(t, Mapping)] if isinstance(tools, list) else []
    if len(chosen) == 1 and isinstance(chosen[0].get("name"), str):
        sent = names.sent(chosen[0].get("namespace"), chosen[0]["name"])
        return {"type": "function", "function": {"name": sent}}
    return "required"


def _allowed_names(choice: Any) -> set[str] | None:
    """The tools an ``allowed_tools`` choice lets the model use ("constrains the tools
    available to the model to a pre-defined set"), by name; None when it sets none. Chat says
    such a set only at OpenAI, so a translation says it by offering only those tools: every
    tool was offered, and the model could call one the client had ruled out. None too for a
    set that names no tool (OpenAI takes none)."""
    if not isinstance(choice, Mapping) or choice.get("type") != "allowed_tools":
        return None
    tools = choice.get("tools")
    if not isinstance(tools, list):
        return None
    names = {str(t["name"]) for t in tools if isinstance(t, Mapping) and "name" in t}
    return names or None


def chat_body(request: ChatRequest, fitted: Sequence[Message], stream: bool) -> dict[str, Any]:
    """The fitted Responses request as a chat-completions body."""
    body = request.body
    names = tool_names(body)
    out: dict[str, Any] = {"model": request.model, "messages": _messages(fitted, names)}
    tools = _tools(names)
    allowed = _allowed_names(body.get("tool_choice"))
    if allowed is not None:
        tools = [t for t, named in zip(tools, names.tools, strict=True) if named.name in allowed]
    if tools:
        out["tools"] = tools
        if body.get("tool_choice") is not None:
            out["tool_choice"] = _tool_choice(body["tool_choice"], names)
    for key in _SAMPLING:
        if body.get(key) is not None:
            out[key] = body[key]
    if request.max_output_tokens is not None:
        out["max_tokens"] = request.max_output_tokens
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        schema = {k: v for k, v in fmt.items() if k != "type"}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    if stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def response_usage(chat_usage: Any) -> dict[str, Any] | None:
    """Chat usage in the Responses shape: the prompt's tokens read from the provider's cache
    and those written to it (Anthropic's cache writes, through ``messages_to_chat``)."""
    usage = normalize_usage(chat_usage)
    if usage is None:
        return None
    details = chat_usage.get("completion_tokens_details") if isinstance(chat_usage, dict) else None
    reasoning = details.get("reasoning_tokens", 0) if isinstance(details, Mapping) else 0
    cached: dict[str, int] = {"cached_tokens": usage.cached_tokens}
    written = min(cache_writes(chat_usage), usage.prompt_tokens - usage.cached_tokens)
    if written > 0:  # stated only when the provider wrote to its cache, as Gemini's count
        cached["cache_write_tokens"] = written
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": cached,
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning or 0},
        "total_tokens": usage.total_tokens,
    }


#: What a chat function name may hold, and how long it may be (OpenAI's
#: ``^[a-zA-Z0-9_-]{1,64}$``; Anthropic's allows 128).
_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_NAME_MOST = 64


@dataclass(frozen=True, slots=True)
class _Tool:
    """A tool ``_tools`` sends as a function: its namespace ("" for none), its own name, its
    kind (``function`` or ``custom``), the name chat knows it by, and the client's tool."""

    space: str
    name: str
    kind: str
    sent: str
    spec: Mapping[str, Any] = field(compare=False)


@dataclass(frozen=True, slots=True)
class ToolNames:
    """The client's function and custom tools, a namespace's in its place, under the names
    chat is sent: a tool's own name, unless another tool has it too (two namespaces' ``search``,
    or one beside a tool of that name of its own), when a namespace's tool goes as
    ``<namespace>__<name>`` (``_joined``) — chat has no namespaces, and the same name twice was
    refused (Anthropic: "Tool names must be unique") or one of them never reachable. A call
    comes back as the client named the tool: its own name, its ``namespace`` (OpenAI's
    ``function_call.namespace``, by which Codex dispatches its MCP tools), and as a
    ``custom_tool_call`` for a custom tool."""

    tools: tuple[_Tool, ...]
    #: The tools by (namespace, name), the first of each name by name alone, and by the name
    #: chat knows them by: a history of thousands of calls looks each up once, not by a walk.
    by_space: Mapping[tuple[str, str], _Tool] = field(init=False, repr=False)
    by_name: Mapping[str, _Tool] = field(init=False, repr=False)
    by_sent: Mapping[str, _Tool] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        by_space: dict[tuple[str, str], _Tool] = {}
        by_name: dict[str, _Tool] = {}
        by_sent: dict[str, _Tool] = {}
        for tool in self.tools:
            by_space.setdefault((tool.space, tool.name), tool)
            by_name.setdefault(tool.name, tool)
            by_sent.setdefault(tool.sent, tool)
        object.__setattr__(self, "by_space", by_space)
        object.__setattr__(self, "by_name", by_name)
        object.__setattr__(self, "by_sent", by_sent)

    def sent(self, space: Any, name: Any) -> str:
        """The chat name of the client's tool ``name`` (of namespace ``space``): a call in the
        history or a tool choice naming it. Without a namespace that tells it apart, the first
        tool of that name."""
        space = space if isinstance(space, str) else ""
        tool = self.by_space.get((space, str(name))) or self.by_name.get(str(name))
        return tool.sent if tool is not None else str(name)

    def called(self, sent: str) -> _Tool | None:
        """The client's tool a chat call names (None: none the client offered)."""
        return self.by_sent.get(sent)


def _joined(space: str, name: str) -> str:
    """A namespace's tool under a name of its own, ``<namespace>__<name>`` (Codex's own
    spelling of an MCP tool on chat), in chat's alphabet and length: another character is
    ``_``, and a name too long is cut with a digest of the whole after it."""
    joined = f"{space}__{name}"
    if _NAME.fullmatch(joined) and len(joined) <= _NAME_MOST:
        return joined
    digest = hashlib.blake2s(joined.encode(), digest_size=4).hexdigest()
    return f"{_NOT_NAME.sub('_', joined)[: _NAME_MOST - 9]}_{digest}"


def tool_names(body: Mapping[str, Any]) -> ToolNames:
    """The function and custom tools of a Responses body as chat is sent them."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping):
            continue
        space = tool.get("name") if tool.get("type") == "namespace" else ""
        for inner in _flat([tool]):
            if inner.get("type") in _KINDS:
                found.append((space if isinstance(space, str) else "", inner))
    count: dict[str, int] = {}
    for _, inner in found:
        count[str(inner.get("name"))] = count.get(str(inner.get("name")), 0) + 1
    out = []
    for space, inner in found:
        name = str(inner.get("name"))
        sent = _joined(space, name) if space and count[name] > 1 else name
        out.append(_Tool(space, name, str(inner.get("type")), sent, inner))
    return ToolNames(tuple(out))


#: Why a chat answer stopped short → the Response's ``incomplete_details.reason`` (OpenAI's
#: two); any other finish reason completes it.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _ended(out: dict[str, Any], finish: Any) -> dict[str, Any]:
    """``out`` (a Response) with the status and details a chat finish reason gives it."""
    reason = _INCOMPLETE.get(finish) if isinstance(finish, str) else None
    if reason is not None:
        out["status"] = "incomplete"
        out["incomplete_details"] = {"reason": reason}
    return out


def _call_id(given: Any, rid: str, n: int) -> str:
    """A call's id as the client gets it: the provider's, else one derived from the response's
    and the call's place in it. Some OpenAI-compatible providers send none, and a Responses
    client answers a call by its ``call_id`` ("None" for every call of every turn was no id)."""
    return given if isinstance(given, str) and given else f"call_{rid[5:]}_{n}"


def _call_item(call_id: str, sent: str, arguments: str, names: ToolNames) -> dict[str, Any]:
    """A chat call as the Responses item of the client's tool it names (``ToolNames``)."""
    tool = names.called(sent)
    if tool is None:
        return _tool_call(call_id, sent, arguments, False)
    item = _tool_call(call_id, tool.name, arguments, tool.kind == "custom")
    if tool.space:
        item["namespace"] = tool.space
    return item


def _tool_call(call_id: str, name: str, arguments: str, custom: bool) -> dict[str, Any]:
    if custom:
        try:
            value = orjson.loads(arguments or "{}")
            text = value.get("input", "") if isinstance(value, dict) else arguments
        except orjson.JSONDecodeError:
            text = arguments
        return {
            "type": "custom_tool_call",
            "id": "ctc_" + call_id,
            "call_id": call_id,
            "name": name,
            "input": text if isinstance(text, str) else orjson.dumps(text).decode(),
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": "fc_" + call_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def _part(kind: str, text: str) -> dict[str, Any]:
    """An assistant message's content part: ``output_text``, or a ``refusal`` (chat's
    ``message.refusal``)."""
    if kind == "refusal":
        return {"type": "refusal", "refusal": text}
    return {"type": "output_text", "text": text, "annotations": []}


def _message_id(rid: str) -> str:
    """The id of a Response's message item: ``msg_`` and the response id's random part."""
    return "msg_" + rid[5:]


def _message_item(text: str, item_id: str, kind: str = "output_text") -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [_part(kind, text)],
    }


def response_object(
    request: ChatRequest,
    rid: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    status: str = "completed",
) -> dict[str, Any]:
    body = request.body
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": request.model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "temperature": body.get("temperature"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p"),
        "usage": usage,
        "metadata": body.get("metadata") or {},
    }


def chat_to_response(request: ChatRequest, data: Any, rid: str) -> dict[str, Any]:
    """A whole chat completion as a Response object."""
    choice = (data.get("choices") or [{}])[0] if isinstance(data, dict) else {}
    message = choice.get("message") or {}
    names = tool_names(request.body)
    output: list[dict[str, Any]] = []
    text, _ = content_text(message.get("content"))
    if text:
        output.append(_message_item(text, _message_id(rid)))
    elif message.get("refusal"):
        output.append(_message_item(str(message["refusal"]), _message_id(rid), "refusal"))
    for n, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {}
        call_id = _call_id(call.get("id"), rid, n)
        arguments = fn.get("arguments") or ""
        output.append(_call_item(call_id, str(fn.get("name")), arguments, names))
    usage = response_usage(data.get("usage")) if isinstance(data, dict) else None
    return _ended(response_object(request, rid, output, usage), choice.get("finish_reason"))


def sse_event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class ChatStreamToResponses:
    """Chat completion chunks in, the Responses event sequence out (stateful, one stream)."""

    def __init__(self, request: ChatRequest, rid: str) -> None:
        self.request = request
        self.rid = rid
        self.seq = 0
        self.text: list[str] = []
        #: The kind of the message part being streamed (``output_text`` or ``refusal``: chat
        #: sends one or the other in an answer, never both), None before the first delta.
        self.part: str | None = None
        self.calls = StreamedCalls()
        self.output: list[dict[str, Any]] = []
        self.usage: dict[str, Any] | None = None
        self.finish: str | None = None
        self.names = tool_names(request.body)
        self.item_id = _message_id(rid)

    def event(self, kind: str, **data: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return sse_event(kind, payload)

    def start(self) -> list[bytes]:
        shell = response_object(self.request, self.rid, [], None, "in_progress")
        return [
            self.event("response.created", response=shell),
            self.event("response.in_progress", response=shell),
        ]

    def _open(self, kind: str) -> list[bytes]:
        self.part = kind
        item = {**_message_item("", self.item_id), "status": "in_progress", "content": []}
        index = len(self.output)
        return [
            self.event("response.output_item.added", output_index=index, item=item),
            self.event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=_part(kind, ""),
            ),
        ]

    def _close(self, kind: str) -> list[bytes]:
        text = "".join(self.text)
        item = _message_item(text, self.item_id, kind)
        index = len(self.output)
        self.output.append(item)
        common = {"item_id": item["id"], "output_index": index, "content_index": 0}
        done = {"text": text} if kind == "output_text" else {"refusal": text}
        return [
            self.event(f"response.{kind}.done", **done, **common),
            self.event("response.content_part.done", part=item["content"][0], **common),
            self.event("response.output_item.done", output_index=index, item=item),
        ]

    def chunk(self, data: Mapping[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        if data.get("usage"):
            self.usage = response_usage(data["usage"])
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text, _ = content_text(delta.get("content"))
            piece = text or delta.get("refusal")
            if piece:
                if self.part is None:
                    out += self._open("output_text" if text else "refusal")
                self.text.append(piece)
                out.append(
                    self.event(
                        f"response.{self.part}.delta",
                        item_id=self.item_id,
                        output_index=len(self.output),
                        content_index=0,
                        delta=piece,
                    )
                )
            for call in delta.get("tool_calls") or []:
                self.calls.add(call)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return out

    def held(self) -> list[str]:
        """Each call's arguments so far, held for the closing events: a stream that stops
        before them is charged them (``ResponsesWire._translated``), as the chat client's
        stream would have carried them."""
        return [arguments for _, _, arguments in self.calls.whole()]

    def finish_events(self) -> tuple[list[bytes], dict[str, Any]]:
        """The closing events and the final Response object."""
        out: list[bytes] = []
        if self.part is not None:
            out += self._close(self.part)
        for n, (given, name, arguments) in enumerate(self.calls.whole()):
            call_id = _call_id(given, self.rid, n)
            item = _call_item(call_id, str(name), arguments, self.names)
            index = len(self.output)
            pending = {**item, "status": "in_progress"}
            if item["type"] == "function_call":
                pending["arguments"] = ""
            out.append(self.event("response.output_item.added", output_index=index, item=pending))
            if item["type"] == "function_call":
                common = {"item_id": item["id"], "output_index": index}
                out.append(
                    self.event(
                        "response.function_call_arguments.delta", delta=item["arguments"], **common
                    )
                )
                out.append(
                    self.event(
                        "response.function_call_arguments.done",
                        arguments=item["arguments"],
                        **common,
                    )
                )
            self.output.append(item)
            out.append(self.event("response.output_item.done", output_index=index, item=item))
        final = _ended(
            response_object(self.request, self.rid, self.output, self.usage), self.finish
        )
        return out, final

    def end_event(self, final: dict[str, Any]) -> bytes:
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return self.event(kind, response=final)
