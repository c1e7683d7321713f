"""Anthropic Messages ↔ chat completions, for routes whose provider does not speak Messages.

A thin mapping of our own rather than litellm's Anthropic adapter (docs/wires.md has the
measurement): the fitted conversation is already parsed into chat-shaped messages, so the request
side is a walk over them, and the answer side is one small state machine over chat chunks.

Lost in translation (documented for users): ``thinking`` / ``redacted_thinking`` blocks (a chat
provider cannot take them; they are dropped from the request), ``cache_control`` (chat providers
cache prefixes on their own), ``metadata``, ``context_management``, ``output_config`` but its
``format`` (a JSON schema: chat's ``response_format``), server
tools and unknown block types (sent as their JSON text), ``top_k``. Tool results are sent as
text, their images as user image parts right after them.

Refused rather than lost (``_choosable``): a ``tool_choice`` that requires a call of a tool the
translation does not send (a server or typed tool) or, as ``any``, of some tool when none is
sent — the client ruled out the answer the provider would give without it.

Carried in other words: a ``tool_result`` with ``is_error: true`` (chat's tool message has no
such flag) is sent with ``TOOL_ERROR`` before its text, so the model still learns the tool
failed; a chat provider's ``refusal`` is the answer's text with ``stop_reason: "refusal"``.
The marker is the result's lead (``Message.lead``, set by the parse, kept by every rewrite of
the fit), written by the rule the meter prices it by (``pricing.messages.led_text``), on this
leg only (``Route.translated``): the estimate prices what this module sends.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from pricing.messages import ImagePart, Message, RequestError, led_text, media_part
from proxy.exchange.anthropic_terms import ANTHROPIC_STOP as _STOP
from proxy.exchange.anthropic_terms import CHAT_TOOL_CHOICE, tool_input
from proxy.exchange.sse import encode
from proxy.usage import Usage, cache_writes
from proxy.wires.anthropic_parse import TOOL_ERROR, AnthropicRequest
from proxy.wires.base import StreamedCalls, chat_content, content_text, refusal_text

__all__ = [
    "TOOL_ERROR",
    "ChatToAnthropic",
    "call_id",
    "chat_body",
    "chat_to_message",
    "stop_reason",
    "usage_block",
]


def _assistant(message: Message, original: Mapping[str, Any] | None) -> dict[str, Any]:
    text = message.text
    if original is not None and isinstance(original.get("content"), list):
        # only text blocks: thinking cannot travel to a chat provider
        text = "".join(
            b.get("text", "")
            for b in original["content"]
            if isinstance(b, Mapping) and b.get("type") == "text"
        )
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    return out


def _tool_message(message: Message) -> dict[str, Any]:
    """A tool result as chat's tool message; a failed one says so before its text (its lead,
    ``TOOL_ERROR``: the parse's, so a result the fit masked or capped still says it failed)."""
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": led_text(message)}


def chat_messages(request: AnthropicRequest, fitted: Sequence[Message]) -> list[dict[str, Any]]:
    """The fitted conversation as chat messages: a tool result's images follow the results as a
    user message (chat tool messages carry text only); an assistant turn of thinking only is
    left out (a chat provider refuses an assistant message with neither text nor calls)."""
    out: list[dict[str, Any]] = []
    pending_images: list[dict[str, Any]] = []
    for message in fitted:
        if message.role != "tool" and pending_images:
            out.append({"role": "user", "content": pending_images})
            pending_images = []
        if message.role == "assistant":
            pos = request.position(message)
            original = None
            if pos is not None:
                original = request.body["messages"][request.fragments[pos].index]
            said = _assistant(message, original)
            if said["content"] is not None or "tool_calls" in said:
                out.append(said)  # a turn of thinking only: nothing a chat provider takes
        elif message.role == "tool":
            out.append(_tool_message(message))
            pending_images += [media_part(p) for p in message.parts if isinstance(p, ImagePart)]
        else:
            out.append({"role": message.role, "content": chat_content(message)})
    if pending_images:
        out.append({"role": "user", "content": pending_images})
    return out


def _tool_choice(choice: Any) -> Any:
    if not isinstance(choice, Mapping):
        return None
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return CHAT_TOOL_CHOICE.get(str(kind))


def _choosable(body: Mapping[str, Any], sent: set[str]) -> None:
    """Refuses (400, naming it) a ``tool_choice`` that requires a call this leg cannot offer:
    ``tool`` naming a server tool (``web_search_20250305``, ``code_execution_...``) or a typed
    one (``bash_20250124``, ``text_editor_...``), which a chat provider is not sent, or ``any``
    when no tool of the request is sent. The choice went out naming a function the provider
    was not offered (its 400, in chat's words: "function 'web_search' is not one of the
    'tools'"), or, with no function left, was dropped with the tools, and the model answered
    unforced, in prose the client had ruled out (a search it never ran, reported as done)."""
    choice = body.get("tool_choice")
    if not isinstance(choice, Mapping) or choice.get("type") not in ("tool", "any"):
        return
    raw = body.get("tools")
    kinds = {
        str(t.get("name")): str(t.get("type"))
        for t in (raw if isinstance(raw, list) else [])
        if isinstance(t, Mapping) and t.get("type") not in (None, "custom")
    }
    if choice["type"] == "any":
        if sent or not kinds:
            return
        held = ", ".join(f"{name} ({kind})" for name, kind in sorted(kinds.items()))
        raise RequestError(
            "tool_choice 'any' requires a tool call, and none of this request's tools can be "
            f"sent to this route's provider, which runs function tools only: {held}",
            "tool_choice",
        )
    name = choice.get("name")
    if not isinstance(name, str):
        raise RequestError("tool_choice.name: Field required", "tool_choice.name")
    if name in sent:
        return
    if name in kinds:
        raise RequestError(
            f"tool_choice names {name!r}, a {kinds[name]} tool, which this route's provider "
            "cannot be sent: it runs function tools only (an Anthropic route runs Anthropic's "
            "own tools)",
            "tool_choice.name",
        )
    raise RequestError(f"tool_choice names {name!r}, which is not one of the tools", "tool_choice")


def chat_body(request: AnthropicRequest, fitted: Sequence[Message], stream: bool) -> dict[str, Any]:
    """The chat-completions request for a fitted Anthropic conversation."""
    src = request.body
    body: dict[str, Any] = {"model": request.model, "messages": chat_messages(request, fitted)}
    if request.max_output_tokens is not None:
        body["max_tokens"] = request.max_output_tokens
    for key in ("temperature", "top_p"):
        if src.get(key) is not None:
            body[key] = src[key]
    if src.get("stop_sequences"):
        body["stop"] = src["stop_sequences"]
    functions = [
        dict(fn) for fn in request.tools if isinstance(fn.get("name"), str) and "parameters" in fn
    ]
    _choosable(src, {str(fn["name"]) for fn in functions})
    tools = [{"type": "function", "function": fn} for fn in functions]
    if tools:
        body["tools"] = tools
        choice = src.get("tool_choice")
        steer = _tool_choice(choice)
        if steer is not None:
            body["tool_choice"] = steer
        if isinstance(choice, Mapping) and choice.get("disable_parallel_tool_use") is True:
            body["parallel_tool_calls"] = False  # one call at most, in chat's words
    response_format = _response_format(src)
    if response_format is not None:
        body["response_format"] = response_format
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _response_format(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """Claude's structured outputs (``output_config.format``, the beta's ``output_format``: a
    JSON schema the answer's text must match) as chat's ``response_format``, as the Gemini and
    Responses wires send theirs. Dropped, the provider was free to answer in prose, which the
    anthropic SDK's ``messages.parse`` refuses, and the schema was priced (``answer_format``)
    but never sent. The schema goes as Claude was given it; chat names it, Claude does not."""
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, Mapping) else None
    fmt = body.get("output_format") if fmt is None else fmt
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
        return None
    schema = fmt.get("schema")
    if not isinstance(schema, Mapping):
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def stop_reason(finish: Any, called: bool) -> str:
    """Anthropic's ``stop_reason`` for a chat ``finish_reason``. An answer that calls tools and
    stopped on its own is ``tool_use`` whatever the provider's word for it: OpenAI (and vLLM,
    and others) end a call ``tool_choice`` forced with ``stop``, and Anthropic says
    ``tool_use`` whenever it calls tools (the stop reason an agent loop reads to run them).
    And only then: a ``tool_calls`` finish without a call (a provider whose call parser gave up)
    is ``end_turn``, not a ``tool_use`` an agent loop looks in vain for the calls of."""
    stop = _STOP.get(str(finish), "end_turn")
    if stop == "tool_use" and not called:
        return "end_turn"
    return "tool_use" if called and stop == "end_turn" else stop


def matched_stop(choice: Mapping[str, Any]) -> str | None:
    """The stop sequence a chat provider says it cut the answer at: vLLM's choice
    ``stop_reason`` ("the stop string or token id that caused the completion to stop"; a token
    id is no sequence) or SGLang's ``matched_stop``. OpenAI says ``stop`` alone."""
    for key in ("stop_reason", "matched_stop"):
        said = choice.get(key)
        if isinstance(said, str) and said:
            return said
    return None


def _ended(reason: str, matched: str | None) -> tuple[str, str | None]:
    """(``stop_reason``, ``stop_sequence``): an answer that ended on its own at a sequence the
    provider names ended at that stop sequence, as Anthropic says it (``stop_sequence``, the
    sequence beside it); chat's ``stop`` says the same of both, and a Messages client read
    every answer its ``stop_sequences`` cut as finished (``end_turn``)."""
    if reason == "end_turn" and matched is not None:
        return "stop_sequence", matched
    return reason, None


def usage_block(usage: Usage | None, chat: Any = None) -> dict[str, int]:
    """Anthropic's usage object for a normalised usage: cached tokens read from the cache, and
    those the provider's chat usage (``chat``) says it wrote to it (they were input tokens)."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    uncached = usage.prompt_tokens - usage.cached_tokens
    written = min(cache_writes(chat), max(0, uncached))
    return {
        "input_tokens": uncached - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
    }


def call_id(given: Any) -> str:
    """A call's ``tool_use`` id: the provider's, else one of its own. Some OpenAI-compatible
    providers send a call's id as null; Anthropic requires one, unique in the conversation (a
    client pairs each ``tool_result`` with its call by it, as the fit does), so every call of
    every turn was ``""``."""
    return given if isinstance(given, str) and given else "toolu_rf" + secrets.token_hex(12)


def chat_to_message(data: Any, model: str, usage: Usage | None) -> dict[str, Any]:
    """A chat completion as an Anthropic message."""
    choices = data.get("choices") if isinstance(data, Mapping) else None
    choice = choices[0] if isinstance(choices, list) and choices else {}
    msg = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    text, _ = content_text(msg.get("content"))  # reasoning cannot travel: unsigned
    refusal = refusal_text(msg)
    for said in (text, refusal):
        if said:
            content.append({"type": "text", "text": said})
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call_id(call.get("id")),
                "name": str(fn.get("name") or ""),
                "input": tool_input(str(fn.get("arguments") or "")),
            }
        )
    called = any(b["type"] == "tool_use" for b in content)
    reason, sequence = _ended(
        "refusal" if refusal else stop_reason(choice.get("finish_reason"), called),
        matched_stop(choice),
    )
    return {
        "id": "msg_" + str(data.get("id") or "routefit"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_block(usage, data.get("usage")),
    }


class ChatToAnthropic:
    """Chat chunks in, Anthropic SSE events out (one instance per stream)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.started = False
        self.index = -1
        self.open: str | None = None  # "text" or the chat index of the open tool call
        self.reason: Any = None  # the provider's finish reason
        self.matched: str | None = None  # the stop sequence it names (``matched_stop``)
        self.called = False  # a call began (its tool_use block sent, or held for the finish)
        self.refused = False  # the provider's answer was a refusal (``delta.refusal``)
        self.chat_usage: Any = None  # the provider's usage as it stated it (cache writes)
        #: Numbers the calls; gathers those held (``add``): every call but the one streamed.
        self.calls = StreamedCalls()
        self.live: tuple[int, int] | None = None  # the call streamed as it comes
        self.late: list[str] = []  # text that came while the live call was open, held

    def start(self, chunk_id: str) -> list[bytes]:
        self.started = True
        message: dict[str, Any] = {
            "id": "msg_" + chunk_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [
            encode({"type": "message_start", "message": message}, "message_start"),
            encode({"type": "ping"}, "ping"),
        ]

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [encode({"type": "content_block_stop", "index": self.index}, "content_block_stop")]

    def _open(self, key: str, block: dict[str, Any]) -> list[bytes]:
        out = self._close()
        self.index += 1
        self.open = key
        start = {"type": "content_block_start", "index": self.index, "content_block": block}
        return [*out, encode(start, "content_block_start")]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        event = {"type": "content_block_delta", "index": self.index, "delta": delta}
        return encode(event, "content_block_delta")

    def _text(self, text: str) -> list[bytes]:
        """A piece of the answer's text, in the text block (opened when it is not); held once a
        call is streamed (its block stays open: its next fragment may come after this)."""
        if not text:
            return []
        if self.live is not None:
            self.late.append(text)
            return []
        out = [] if self.open == "text" else self._open("text", {"type": "text", "text": ""})
        return [*out, self._delta({"type": "text_delta", "text": text})]

    def _call(self, call: Mapping[str, Any]) -> list[bytes]:
        """A ``tool_calls`` fragment. The first call is streamed as it comes, its block open
        until the answer ends: chat numbers each fragment with its call, and a provider may
        interleave parallel calls' fragments (or text between them), so no call is known to be
        over before the finish, and a closed block cannot take more. Every other call is
        gathered and sent whole at the finish (``_held``)."""
        slot = self.calls.slot(call)
        self.called = True
        fn = call.get("function") or {}
        if self.live is None:
            self.live = slot
            return self._tool_use(
                f"tool{slot}", call.get("id"), fn.get("name"), fn.get("arguments")
            )
        if slot == self.live:
            return self._arguments(fn.get("arguments"))
        self.calls.add(call)
        return []

    def _tool_use(self, key: str, given: Any, name: Any, arguments: Any) -> list[bytes]:
        """A ``tool_use`` block opened (the provider's id, or one of its own: ``call_id``) with
        the arguments it has so far."""
        block = {"type": "tool_use", "id": call_id(given), "name": str(name or ""), "input": {}}
        return [*self._open(key, block), *self._arguments(arguments)]

    def _arguments(self, arguments: Any) -> list[bytes]:
        if not arguments:
            return []
        return [self._delta({"type": "input_json_delta", "partial_json": arguments})]

    def _held(self) -> list[bytes]:
        """What came while the live call was streamed: its text, then the other calls whole."""
        out: list[bytes] = []
        if self.late:
            out += self._open("text", {"type": "text", "text": ""})
            out.append(self._delta({"type": "text_delta", "text": "".join(self.late)}))
        for n, (given, name, arguments) in enumerate(self.calls.whole()):
            out += self._tool_use(f"held{n}", given, name, arguments)
        return out

    def held(self) -> list[str]:
        """What the translation holds for the finish (``_held``) and the client has not had:
        the text that came while the live call was open, each other call's arguments. A stream
        that stops before its finish is charged them (``_relay_chat``): the provider generated
        them, as the chat client's stream would have carried them."""
        text = "".join(self.late)
        return ([text] if text else []) + [arguments for _, _, arguments in self.calls.whole()]

    def chunk(self, data: Mapping[str, Any]) -> list[bytes]:
        out = [] if self.started else self.start(str(data.get("id") or "routefit"))
        if data.get("usage"):
            self.chat_usage = data["usage"]
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            text, _ = content_text(delta.get("content"))
            refusal = refusal_text(delta)
            self.refused = self.refused or bool(refusal)
            for said in (text, refusal):
                out += self._text(said)
            for call in delta.get("tool_calls") or []:
                out += self._call(call)
            if choice.get("finish_reason"):
                self.reason = choice["finish_reason"]
                self.matched = matched_stop(choice)
        return out

    def _stop_reason(self) -> tuple[str, str | None]:
        reason = "refusal" if self.refused else stop_reason(self.reason, self.called)
        return _ended(reason, self.matched)

    def finish(self, usage: Usage | None) -> list[bytes]:
        out = [] if self.started else self.start("routefit")
        out += self._held()
        out += self._close()
        reason, sequence = self._stop_reason()
        final = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage_block(usage, self.chat_usage),
        }
        out.append(encode(final, "message_delta"))
        out.append(encode({"type": "message_stop"}, "message_stop"))
        return out
