"""Anthropic Messages ↔ chat completions: the words both directions share.

Two translations meet Anthropic: the Anthropic wire answering a client from a chat provider
(``proxy.wires.anthropic_chat``) and the chat wire reaching an Anthropic provider
(``proxy.transports.anthropic``). They read the same tables, so a stop reason or a tool choice
means the same thing whichever way it travels. Here, in the exchange both seams import, so
neither imports the other.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "ANTHROPIC_STOP",
    "ANTHROPIC_TOOL_CHOICE",
    "CHAT_FINISH",
    "CHAT_TOOL_CHOICE",
    "tool_input",
]

#: chat ``finish_reason`` → Anthropic ``stop_reason``.
ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}

#: Anthropic ``stop_reason`` → chat ``finish_reason`` (the inverse, plus Anthropic-only reasons).
CHAT_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

#: Anthropic ``tool_choice.type`` → chat ``tool_choice`` (``tool`` names a function instead).
CHAT_TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}

#: chat ``tool_choice`` string → Anthropic ``tool_choice.type``.
ANTHROPIC_TOOL_CHOICE = {v: k for k, v in CHAT_TOOL_CHOICE.items()}


def tool_input(arguments: str) -> dict[str, Any]:
    """A chat tool call's ``arguments`` string as Anthropic's ``input`` object.

    Anthropic wants an object; arguments that are not one travel wrapped rather than lost."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_value": value}
