"""A chat-completions request as an Anthropic Messages request (the request half of the
translated Anthropic path; ``proxy.transports.messages_to_chat`` is the answer half).

Our own mapping rather than litellm's ``AnthropicConfig.transform_request``: litellm costs
seconds and ~80 MiB to import, and its transformation costs more per request than the proxy's
whole added time (bench/REPORT.md). The mapping covers what chat clients send to Claude —
system and developer messages, text and image parts, PDFs as data (``file`` parts become
``document`` blocks), audio parts as their note (Anthropic takes no audio), tool definitions,
tool calls and their results, tool choice, sampling and stop parameters, the end user
(``user``, ``safety_identifier``) — drops OpenAI's hints that mean nothing to Anthropic
(``_HINTS``, and fields at OpenAI's default: ``_DEFAULTS``) — and raises ``Unmapped`` for
anything else (``response_format``, ``reasoning_effort``, files by id, ...), which the
transport then hands to litellm, the one that knows it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from pricing.documents import MEDIA_TYPE, file_data
from pricing.probe import media_type_of
from pricing.recordings import input_audio_url
from pricing.recordings import note as recording_note
from proxy.exchange.anthropic_terms import ANTHROPIC_TOOL_CHOICE, tool_input

__all__ = ["Unmapped", "messages_body"]

#: chat fields the mapping carries (or, like ``stream_options``, knows it may drop: Anthropic's
#: stream always reports usage).
_KNOWN = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "n",
        "response_format",
    }
)


#: OpenAI's hints that change nothing of the answer and mean nothing to Anthropic: dropped,
#: not handed to litellm (whose Anthropic adapter refuses them: one SDK option would make every
#: request a 400). Prompt caching by key (Anthropic caches at breakpoints, which routefit
#: places), OpenAI's stored completions and their tags.
_HINTS = frozenset({"prompt_cache_key", "prompt_cache_retention", "store", "metadata"})
#: Fields whose value here is OpenAI's default, which is Anthropic's behaviour too: dropped.
#: Any other value changes the answer and is litellm's to translate or refuse.
_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "logprobs": (False, None),
    "frequency_penalty": (0, None),
    "presence_penalty": (0, None),
    "modalities": (["text"], None),
    "service_tier": ("auto", "default", None),
}


class Unmapped(Exception):
    """The request uses something this mapping does not translate (litellm may)."""


def _image(part: Mapping[str, Any]) -> dict[str, Any]:
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, Mapping) else ref
    if not isinstance(url, str):
        raise Unmapped("image_url without a url")
    if url[:5].lower() == "data:":
        # RFC 2397: the media type and ``;base64`` in any case; Anthropic takes it lowercase.
        head, _, data = url.partition(",")
        head = head.lower()
        media = head[5:].split(";", 1)[0]
        if not head.endswith(";base64") or not media:
            raise Unmapped("a data URL that is not base64")
        # labelled as its bytes say, as the native Messages leg does (proxy.wires.
        # anthropic_render, "Image labels"): Anthropic refuses a label the bytes contradict
        media = media_type_of(data) or media
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _document(part: Mapping[str, Any]) -> dict[str, Any]:
    """A chat ``file`` part's PDF as a ``document`` block (a file by id has no mapping)."""
    url = file_data(part.get("file"))
    if url is None:
        raise Unmapped("a file part that is not a PDF as data")
    source = {"type": "base64", "media_type": MEDIA_TYPE, "data": url.partition(",")[2]}
    return {"type": "document", "source": source}


def _audio_note(part: Mapping[str, Any]) -> dict[str, Any]:
    """Anthropic takes no audio: an ``input_audio`` part goes as the note it was priced as
    (``pricing.recordings``)."""
    url = input_audio_url(part.get("input_audio"))
    if url is None:
        raise Unmapped("an input_audio part without its data and format")
    return {"type": "text", "text": recording_note(url)}


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A chat message's content as Anthropic blocks (empty text dropped: Anthropic refuses it)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise Unmapped("content that is neither text nor a list of parts")
    out: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            if part.get("text"):
                block: dict[str, Any] = {"type": "text", "text": str(part["text"])}
                if isinstance(part.get("cache_control"), Mapping):
                    block["cache_control"] = dict(part["cache_control"])
                out.append(block)
        elif kind == "refusal":  # an assistant's refusal part: its words, as Anthropic's text
            if part.get("refusal"):
                out.append({"type": "text", "text": str(part["refusal"])})
        elif kind == "image_url":
            out.append(_image(part))
        elif kind == "file":
            out.append(_document(part))
        elif kind == "input_audio":
            out.append(_audio_note(part))
        else:
            raise Unmapped(f"content part {kind!r}")
    return out


#: What Anthropic takes as a ``tool_use`` id (and so as a ``tool_result``'s ``tool_use_id``).
_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")
_NOT_ID = re.compile(r"[^a-zA-Z0-9_-]")


def _tool_id(given: Any) -> str:
    """A chat call id as an id Anthropic takes (``^[a-zA-Z0-9_-]+$``, else 400 "String should
    match pattern"). Other providers' ids need not be: Kimi's servers write
    ``functions.now:0``, and a conversation carries them to a Claude route (a model switch, a
    fallback), which refused it whole. Any other id is its characters outside that alphabet
    made ``_`` and a digest of the whole id after them: the same for a call and the result
    naming it (they still pair), the same every turn (a cached prefix stays the same bytes),
    never two ids made one."""
    text = str(given or "")
    if _TOOL_ID.fullmatch(text):
        return text
    digest = hashlib.blake2s(text.encode(), digest_size=6).hexdigest()
    return f"{_NOT_ID.sub('_', text)}_{digest}"


def _assistant(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An assistant turn's blocks; a turn the model refused (chat's ``refusal``, content null)
    is its refusal's text, as Anthropic writes a refusal: dropped, the next user turn was
    merged into the one before, and Claude read the request as never answered."""
    blocks = _blocks(msg.get("content"))
    refusal = msg.get("refusal")
    if not blocks and isinstance(refusal, str) and refusal:
        blocks = [{"type": "text", "text": refusal}]
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping):
            raise Unmapped("a tool call that is not a function call")
        blocks.append(
            {
                "type": "tool_use",
                "id": _tool_id(call.get("id")),
                "name": str(fn.get("name") or ""),
                "input": tool_input(str(fn.get("arguments") or "")),
            }
        )
    return blocks


def _spoken(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An assistant turn's (or the system's) blocks without their text when that text is
    whitespace only. Anthropic refuses a message whose text blocks hold nothing but whitespace
    (400 "text content blocks must contain non-whitespace text"), beside a ``tool_use`` too,
    and Claude writes such a block before a call ("\\n\\n"): a chat client sends it back as
    the turn's ``content``, and every later request of its session was refused. Whitespace
    beside words is kept (Anthropic takes it, and it is part of the text the blocks make
    together). A user's whitespace is the user's to send (left out, the turn before it would
    end the conversation: Claude would continue it), and Anthropic's to refuse."""
    texts = [b["text"] for b in blocks if b["type"] == "text"]
    if not texts or any(t.strip() for t in texts):
        return blocks
    return [b for b in blocks if b["type"] != "text"]


def _tool_result(msg: Mapping[str, Any]) -> dict[str, Any]:
    content = msg.get("content")
    use_id = _tool_id(msg.get("tool_call_id"))
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": use_id}
    if isinstance(content, list):
        result["content"] = _blocks(content)
    elif content:
        result["content"] = str(content)
    return result


def _conversation(messages: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages): system and developer messages lifted out, wherever they were;
    consecutive messages of one role merged, so every tool result sits in the one user message
    that follows its tool calls (Anthropic's pairing rule); an assistant's or the system's
    whitespace said alone left out (``_spoken``), and a message left with nothing not sent."""
    if not isinstance(messages, list):
        raise Unmapped("messages is not a list")
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for msg in messages:
        role = msg.get("role") if isinstance(msg, Mapping) else None
        if role in ("system", "developer"):
            system += _spoken(_blocks(msg.get("content")))
            continue
        if role == "tool":
            role, blocks = "user", [_tool_result(msg)]
        elif role == "assistant":
            blocks = _assistant(msg)
        elif role == "user":
            blocks = _blocks(msg.get("content"))
        else:
            raise Unmapped(f"role {role!r}")
        if role == "assistant":
            blocks = _spoken(blocks)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"] += blocks
        else:
            out.append({"role": role, "content": blocks})
    return system, out


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if tool.get("type") != "function" or not isinstance(fn, Mapping):
            raise Unmapped("a tool that is not a function")
        out: dict[str, Any] = {
            "name": str(fn.get("name")),
            "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
        }
        if fn.get("description"):
            out["description"] = fn["description"]
        tools.append(out)
    return tools


def _tool_choice(body: Mapping[str, Any]) -> dict[str, Any] | None:
    choice = body.get("tool_choice")
    out: dict[str, Any] | None = None
    if isinstance(choice, str) and choice in ANTHROPIC_TOOL_CHOICE:
        out = {"type": ANTHROPIC_TOOL_CHOICE[choice]}
    elif isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        out = {"type": "tool", "name": str(choice["function"].get("name"))}
    elif choice is not None:
        raise Unmapped("tool_choice")
    if body.get("parallel_tool_calls") is False:
        out = out or {"type": "auto"}
        if out["type"] != "none":
            out["disable_parallel_tool_use"] = True
    return out


def _check(body: Mapping[str, Any]) -> None:
    unknown = set(body) - _KNOWN - _HINTS - {"safety_identifier"}
    unknown -= {k for k in unknown & _DEFAULTS.keys() if body[k] in _DEFAULTS[k]}
    if unknown:
        raise Unmapped(", ".join(sorted(unknown)))
    if body.get("n") not in (None, 1):
        raise Unmapped("n")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, Mapping) and fmt.get("type") == "text"):
        raise Unmapped("response_format")


def messages_body(body: Mapping[str, Any], default_max_tokens: int) -> dict[str, Any]:
    """The Anthropic Messages body for a chat body (``model`` is set by the transport).

    ``default_max_tokens`` is used when the client named no limit (Anthropic requires one)."""
    _check(body)
    system, messages = _conversation(body.get("messages"))
    limit = body.get("max_completion_tokens") or body.get("max_tokens") or default_max_tokens
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages, "max_tokens": limit}
    if system:
        out["system"] = system
    for key in ("temperature", "top_p", "top_k"):
        if body.get(key) is not None:
            out[key] = body[key]
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    tools = _tools(body)
    if tools:
        out["tools"] = tools
    choice = _tool_choice(body)
    if choice is not None and tools:
        out["tool_choice"] = choice
    user = body.get("user") if isinstance(body.get("user"), str) else body.get("safety_identifier")
    if isinstance(user, str):  # who the end user is: Anthropic's metadata.user_id, either way
        out["metadata"] = {"user_id": user}
    if body.get("stream"):
        out["stream"] = True
    return out
