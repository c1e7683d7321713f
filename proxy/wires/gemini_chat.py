"""Gemini ↔ chat completions, for routes whose provider does not speak Gemini (every route but
``gemini/`` ones, which get the client's own wire: ``gemini_render``).

Carried across: the fitted contents (text, images as data URLs, function calls and responses
paired by id, ``gemini_parse``), ``systemInstruction``, function declarations (their schemas as
JSON Schema), ``toolConfig``'s calling mode (and its allowed functions, as the only ones
offered), and ``generationConfig``: ``maxOutputTokens``,
``temperature``, ``topP``, ``stopSequences``, ``candidateCount``, ``seed``, the penalties, and a
JSON answer (``responseMimeType: application/json`` with ``responseSchema`` or
``responseJsonSchema``) as the chat route's ``response_format``.

Lost (docs/wires.md): thought parts and ``thoughtSignature`` (no chat provider takes them),
``topK``, ``thinkingConfig``, ``safetySettings``, ``cachedContent``, non-function tools
(``googleSearch``, ``codeExecution``, ...), non-image media (a note stands in), images inside a
function response (sent as a user message after it, as on the Anthropic wire).

Back from chat, a ``refusal`` (Gemini has no field for one) is the candidate's text, and the
candidate ends ``SAFETY``.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from pricing.messages import ImagePart, Message, led_text, media_part
from proxy.usage import Usage
from proxy.wires.base import StreamedCalls, chat_content, content_text, refusal_text
from proxy.wires.gemini_parse import FUNCTION_RESPONSE, GeminiRequest, json_schema

__all__ = [
    "ChatToGemini",
    "chat_body",
    "chat_to_gemini",
    "finish_reason",
    "usage_metadata",
]

#: chat ``finish_reason`` → Gemini ``finishReason`` (function calls end with ``STOP`` there).
_FINISH = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
}

#: ``generationConfig`` settings chat takes under another name.
_SAMPLING = {
    "temperature": "temperature",
    "topP": "top_p",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
}

#: ``toolConfig.functionCallingConfig.mode`` → chat ``tool_choice``.
_MODES = {"AUTO": "auto", "ANY": "required", "VALIDATED": "auto", "NONE": "none"}


def finish_reason(chat: Any) -> str:
    return _FINISH.get(str(chat), "OTHER") if chat else "STOP"


def _assistant(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    return out


def _unannounced(message: Message) -> dict[str, Any]:
    """A tool result whose call is not in the fitted conversation, as user text with
    ``FUNCTION_RESPONSE`` before it (``led_text``, the rule the meter prices by). A response that
    answers no call of the client's conversation has that lead from the parse, and is priced
    with it on this leg; one whose call the fit elided apart from it (a response to a call of
    an earlier model turn than the one just before it) gets it here, unpriced: a few tokens,
    against the ``tool_call_id`` priced and no longer sent."""
    said = message if message.lead else replace(message, lead=FUNCTION_RESPONSE)
    return {"role": "user", "content": led_text(said)}


def chat_messages(fitted: Sequence[Message]) -> list[dict[str, Any]]:
    """The fitted conversation as chat messages: a tool result whose call is not in the
    conversation (Gemini pairs loosely) goes as user text; images in a tool result follow it
    as a user message (chat tool messages carry text only); a model turn of thoughts only is
    left out (a chat provider refuses an assistant message with neither text nor calls)."""
    out: list[dict[str, Any]] = []
    announced: set[str] = set()
    images: list[dict[str, Any]] = []
    for message in fitted:
        if message.role != "tool" and images:
            out.append({"role": "user", "content": images})
            images = []
        if message.role == "assistant":
            announced.update(c.id for c in message.tool_calls)
            if message.text or message.tool_calls:  # a turn of thoughts only: nothing to send
                out.append(_assistant(message))
        elif message.role == "tool" and message.tool_call_id in announced:
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
            )
            images += [media_part(p) for p in message.parts if isinstance(p, ImagePart)]
        elif message.role == "tool":
            out.append(_unannounced(message))
        else:
            out.append({"role": message.role, "content": chat_content(message)})
    if images:
        out.append({"role": "user", "content": images})
    return out


def _calling(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    config = body.get("toolConfig")
    calling = config.get("functionCallingConfig") if isinstance(config, Mapping) else None
    return calling if isinstance(calling, Mapping) else None


def _allowed(body: Mapping[str, Any]) -> set[str] | None:
    """The functions ``allowedFunctionNames`` lets the model call (Google: "model will predict
    a function call from only allowed function names", in ``ANY`` and ``VALIDATED`` modes), or
    None when it sets no limit. Chat has no such field (but OpenAI's own ``allowed_tools``), so
    the limit is said by offering only those functions: every declared one was offered, and
    the model could call a function the client had ruled out."""
    calling = _calling(body)
    if calling is None or calling.get("mode") not in ("ANY", "VALIDATED"):
        return None
    names = calling.get("allowedFunctionNames")
    if not isinstance(names, list) or not names:
        return None
    return {n for n in names if isinstance(n, str)}


def _tool_choice(body: Mapping[str, Any]) -> Any:
    calling = _calling(body)
    if calling is None:
        return None
    allowed = calling.get("allowedFunctionNames")
    if calling.get("mode") == "ANY" and isinstance(allowed, list) and len(allowed) == 1:
        return {"type": "function", "function": {"name": allowed[0]}}
    return _MODES.get(str(calling.get("mode")))


def _response_format(config: Mapping[str, Any]) -> dict[str, Any] | None:
    if config.get("responseMimeType") != "application/json":
        return None
    schema = json_schema(config.get("responseJsonSchema", config.get("responseSchema")))
    if not isinstance(schema, Mapping):
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def chat_body(request: GeminiRequest, fitted: Sequence[Message], stream: bool) -> dict[str, Any]:
    """The chat-completions request for a fitted Gemini conversation."""
    config = request.config or {}
    body: dict[str, Any] = {"model": request.model, "messages": chat_messages(fitted)}
    allowed = _allowed(request.body)
    tools = [
        {"type": "function", "function": dict(fn)}
        for fn in request.tools
        if "name" in fn and (allowed is None or fn["name"] in allowed)
    ]
    if tools:
        body["tools"] = tools
        choice = _tool_choice(request.body)
        if choice is not None:
            body["tool_choice"] = choice
    if request.max_output_tokens is not None:
        body["max_tokens"] = request.max_output_tokens
    for key, chat in _SAMPLING.items():
        if config.get(key) is not None:
            body[chat] = config[key]
    if config.get("stopSequences"):
        body["stop"] = config["stopSequences"]
    if request.choices > 1:
        body["n"] = request.choices
    response_format = _response_format(config)
    if response_format is not None:
        body["response_format"] = response_format
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def usage_metadata(usage: Usage | None, chat: Any = None) -> dict[str, Any]:
    """Provider usage in Gemini's ``usageMetadata`` shape (the cached count only when there is
    one, thoughts when the provider named reasoning tokens, as Google writes them)."""
    if usage is None:
        return {}
    out: dict[str, Any] = {
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": usage.completion_tokens,
        "totalTokenCount": usage.total_tokens,
    }
    if usage.cached_tokens:
        out["cachedContentTokenCount"] = usage.cached_tokens
    details = chat.get("completion_tokens_details") if isinstance(chat, Mapping) else None
    reasoning = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    if isinstance(reasoning, int) and reasoning > 0:
        out["thoughtsTokenCount"] = reasoning
        out["candidatesTokenCount"] = max(0, usage.completion_tokens - reasoning)
    return out


def _args(arguments: Any) -> dict[str, Any]:
    """A call's arguments as Gemini's ``args`` object (a provider's malformed JSON kept as
    text under one key, rather than lost)."""
    try:
        value = orjson.loads(arguments or "{}")
    except (orjson.JSONDecodeError, TypeError):
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def call_part(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """A chat call as Gemini's ``functionCall``: its id only when the provider gave one (Google's
    own calls often carry none, and its clients pair a response by name and order then)."""
    call: dict[str, Any] = {"name": str(name), "args": _args(arguments)}
    if isinstance(call_id, str) and call_id:
        call = {"id": call_id, **call}
    return {"functionCall": call}


def response_id() -> str:
    return secrets.token_urlsafe(16)


#: Where chat providers write their reasoning beside the content: DeepSeek's name, and vLLM's,
#: Groq's, OpenRouter's and Ollama's.
_REASONING = ("reasoning_content", "reasoning")


def _said(message: Mapping[str, Any]) -> tuple[str, str]:
    """A chat message's (or delta's) text and reasoning: ``reasoning_content`` or
    ``reasoning``, then the ``thinking`` chunks of a ``content`` list (Mistral's). A
    ``refusal`` is text too: the model's words declining, which Gemini has no field for."""
    text, thinking = content_text(message.get("content"))
    said = (message.get(key) for key in _REASONING)
    reasoning = next((r for r in said if isinstance(r, str) and r), "")
    return text + refusal_text(message), reasoning + thinking


def _finish(finish: Any, refused: bool) -> str:
    return _FINISH["content_filter"] if refused else finish_reason(finish)


def _candidate(choice: Mapping[str, Any]) -> dict[str, Any]:
    message = choice.get("message") or {}
    parts: list[dict[str, Any]] = []
    text, thought = _said(message)
    if thought:
        parts.append({"text": thought, "thought": True})
    if text:
        parts.append({"text": text})
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        parts.append(call_part(call.get("id"), fn.get("name"), fn.get("arguments")))
    return {
        "content": {"role": "model", "parts": parts},
        "finishReason": _finish(choice.get("finish_reason"), bool(refusal_text(message))),
        "index": int(choice.get("index", 0) or 0),
    }


def chat_to_gemini(data: Any, model: str, usage: Usage | None) -> dict[str, Any]:
    """A whole chat completion as a ``GenerateContentResponse``."""
    choices = data.get("choices") if isinstance(data, Mapping) else None
    out: dict[str, Any] = {
        "candidates": [_candidate(c) for c in choices or [] if isinstance(c, Mapping)],
        "modelVersion": model,
        "responseId": response_id(),
    }
    metadata = usage_metadata(usage, data.get("usage") if isinstance(data, Mapping) else None)
    if metadata:
        out["usageMetadata"] = metadata
    return out


def sse(data: Mapping[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\r\n\r\n"


class _Candidate:
    """One choice of a streamed chat answer, as a Gemini candidate assembles it."""

    __slots__ = ("calls", "finish", "refused")

    def __init__(self) -> None:
        self.calls = StreamedCalls()
        self.finish: Any = None
        self.refused = False  # a ``delta.refusal`` came: the candidate ends ``SAFETY``

    def parts(self) -> list[dict[str, Any]]:
        """Its function calls, whole (the last chunk's parts)."""
        return [call_part(*call) for call in self.calls.whole()] or [{"text": ""}]


class ChatToGemini:
    """Chat completion chunks in, Gemini's SSE chunks out (one stream): text as it comes, each
    function call whole once its arguments are (Google sends a call in one chunk), the finish
    reason and ``usageMetadata`` in the last chunk; each chat choice (``n``, a client's
    ``candidateCount``) its candidate of the same ``index``."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = response_id()
        self.candidates: dict[int, _Candidate] = {}
        self.chat_usage: Any = None

    def _data(self, candidates: list[dict[str, Any]]) -> dict[str, Any]:
        return {"candidates": candidates, "modelVersion": self.model, "responseId": self.id}

    def _chunk(self, index: int, parts: list[dict[str, Any]]) -> bytes:
        return sse(self._data([{"content": {"role": "model", "parts": parts}, "index": index}]))

    def chunk(self, data: Mapping[str, Any]) -> list[bytes]:
        if data.get("usage"):
            self.chat_usage = data["usage"]
        out: list[bytes] = []
        for choice in data.get("choices") or []:
            index = int(choice.get("index", 0) or 0)
            candidate = self.candidates.setdefault(index, _Candidate())
            delta = choice.get("delta") or {}
            text, thought = _said(delta)
            candidate.refused = candidate.refused or bool(refusal_text(delta))
            if thought:
                out.append(self._chunk(index, [{"text": thought, "thought": True}]))
            if text:
                out.append(self._chunk(index, [{"text": text}]))
            for call in delta.get("tool_calls") or []:
                candidate.calls.add(call)
            if choice.get("finish_reason"):
                candidate.finish = choice["finish_reason"]
        return out

    def held(self) -> list[str]:
        """Each call's arguments so far, held for the last chunk: a stream that stops before it
        is charged them (``proxy.wires.gemini._relay_chat``), as the chat client's stream would
        have carried them."""
        return [
            arguments
            for _, candidate in sorted(self.candidates.items())
            for _, _, arguments in candidate.calls.whole()
        ]

    def finish_chunk(self, usage: Usage | None) -> bytes:
        """The last chunk: each candidate's calls and finish reason, the usage."""
        candidates = self.candidates or {0: _Candidate()}
        data = self._data(
            [
                {
                    "content": {"role": "model", "parts": candidate.parts()},
                    "finishReason": _finish(candidate.finish, candidate.refused),
                    "index": index,
                }
                for index, candidate in sorted(candidates.items())
            ]
        )
        metadata = usage_metadata(usage, self.chat_usage)
        if metadata:
            data["usageMetadata"] = metadata
        return sse(data)
