"""An Anthropic Messages answer as a chat completion, whole or streamed (the answer half of the
translated Anthropic path; ``proxy.transports.chat_to_messages`` is the request half).

The chat wire then reads it exactly as it reads an OpenAI-compatible provider's answer: usage in
OpenAI's shape (``prompt_tokens`` is the whole prompt — input plus cache reads and writes —
with ``cached_tokens`` the cache reads, as ``proxy.usage`` expects), a usage-only chunk and
``[DONE]`` at the end of a stream. ``thinking`` text becomes ``reasoning_content``, the field
OpenAI-compatible clients of Claude already read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson

from proxy.exchange.anthropic_terms import CHAT_FINISH

__all__ = ["MessagesToChat", "chat_completion", "chat_usage"]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _sum(*values: Any) -> Any:
    """Counts added up (absent: 0). The first value that is not a count is returned as it came
    instead: the provider's usage is a claim ``proxy.usage`` judges (and rejects), so a string,
    a fraction or a boolean must never be read here as 0 tokens and settled as such."""
    total = 0
    for value in values:
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 12.0: a count as some JSON encoders write it
        if isinstance(value, bool) or not isinstance(value, int):
            return value
        total += value
    return total


def chat_usage(usage: Any) -> dict[str, Any] | None:
    """Anthropic's usage in chat's shape, cache fields kept beside it."""
    if not isinstance(usage, Mapping):
        return None
    read = _sum(usage.get("cache_read_input_tokens"))
    written = _sum(usage.get("cache_creation_input_tokens"))
    prompt = _sum(usage.get("input_tokens"), read, written)
    output = _sum(usage.get("output_tokens"))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": _sum(prompt, output),
        "prompt_tokens_details": {"cached_tokens": read, "cache_write_tokens": written},
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": written,
    }


def chat_completion(data: Any) -> dict[str, Any]:
    """A whole Anthropic message as a chat completion."""
    blocks = data.get("content") if isinstance(data, Mapping) else None
    text: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks if isinstance(blocks, list) else []:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            text.append(str(block.get("text") or ""))
        elif kind == "thinking":
            thinking.append(str(block.get("thinking") or ""))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name") or ""),
                        "arguments": orjson.dumps(block.get("input") or {}).decode(),
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["reasoning_content"] = "".join(thinking)
    out: dict[str, Any] = {
        "id": str(data.get("id") or "msg_routefit") if isinstance(data, Mapping) else "",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(data.get("model") or "") if isinstance(data, Mapping) else "",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": CHAT_FINISH.get(str(data.get("stop_reason")), "stop"),
            }
        ],
    }
    usage = chat_usage(data.get("usage"))
    if usage is not None:
        out["usage"] = usage
    return out


class MessagesToChat:
    """Anthropic stream events in, chat chunks out (one instance per stream).

    ``event`` returns the chunks to send for one Anthropic event's data; ``error`` is set when
    the provider sent an ``error`` event (the stream then broke)."""

    def __init__(self) -> None:
        self.id = "msg_routefit"
        self.model = ""
        self.created = int(time.time())
        self.usage: dict[str, Any] = {}
        self.tools: dict[int, int] = {}  # Anthropic block index → chat tool call index
        #: The tool blocks whose input has begun (a fragment that is not empty was sent).
        self.argued: set[int] = set()
        self.error: str | None = None
        self.stopped = False
        #: The message began (``message_start``): an error now breaks an answer under way.
        self.started = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def event(self, data: Mapping[str, Any]) -> list[bytes]:
        kind = data.get("type")
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "message_start":
            self.started = True
            message = data.get("message") or {}
            self.id = str(message.get("id") or self.id)
            self.model = str(message.get("model") or "")
            self._usage(message.get("usage"))
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            return self._start(data)
        if kind == "content_block_stop":
            return self._stop(data)
        if kind == "message_delta":
            self._usage(data.get("usage"))
            reason = (data.get("delta") or {}).get("stop_reason")
            return [self._chunk({}, CHAT_FINISH.get(str(reason), "stop"))]
        if kind == "message_stop":
            self.stopped = True
            return [self._usage_chunk()] if self.usage else []
        if kind == "error":
            error = data.get("error")
            error = error if isinstance(error, Mapping) else {"type": "api_error"}
            if not self.started:
                # the provider's first word: its error as chat's error chunk, which the gateway
                # reads as the status it stands for (an overloaded_error a 503, a rate_limit_error
                # a 429 with its retry), as it reads a Messages client's (never a 502 break)
                return [b"data: " + orjson.dumps({"error": error}) + b"\n\n"]
            self.error = str(error.get("message") or error.get("type") or "provider error")
        return []

    def _usage(self, usage: Any) -> None:
        """The counts an event states (a null one is not stated: its SDK reads it so, and the
        native relay too), over those stated before; a usage that is not an object is an event
        of a shape the provider does not promise (``UNREADABLE``), as before."""
        if usage is not None:
            self.usage.update((k, v) for k, v in usage.items() if v is not None)

    def _start(self, data: Mapping[str, Any]) -> list[bytes]:
        block = data.get("content_block") or {}
        if block.get("type") != "tool_use":
            return []
        index = self.tools[_int(data.get("index"))] = len(self.tools)
        call = {
            "index": index,
            "id": str(block.get("id") or ""),
            "type": "function",
            "function": {"name": str(block.get("name") or ""), "arguments": ""},
        }
        return [self._chunk({"tool_calls": [call]})]

    def _arguments(self, index: int, arguments: str) -> bytes:
        call = {"index": index, "function": {"arguments": arguments}}
        return self._chunk({"tool_calls": [call]})

    def _stop(self, data: Mapping[str, Any]) -> list[bytes]:
        """A tool block's end: a call whose input came as no fragment but empty ones (Anthropic
        streams a call without input as one ``""``) gets the ``{}`` its whole answer says
        (``chat_completion``), so a client parsing the streamed arguments gets an object."""
        block = _int(data.get("index"))
        if block not in self.tools or block in self.argued:
            return []
        self.argued.add(block)
        return [self._arguments(self.tools[block], "{}")]

    def _delta(self, data: Mapping[str, Any]) -> list[bytes]:
        delta = data.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            return [self._chunk({"content": delta.get("text") or ""})]
        if kind == "input_json_delta":
            block = _int(data.get("index"))
            fragment = delta.get("partial_json") or ""
            if block not in self.tools or not fragment:
                return []  # not a tool call's (a server tool's input), or nothing yet
            self.argued.add(block)
            return [self._arguments(self.tools[block], str(fragment))]
        if kind == "thinking_delta":
            return [self._chunk({"reasoning_content": delta.get("thinking") or ""})]
        return []

    def _usage_chunk(self) -> bytes:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": chat_usage(self.usage),
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"
