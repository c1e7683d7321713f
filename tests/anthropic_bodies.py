"""Messages API request bodies as clients send them, for the Anthropic wire's unit tests."""

from __future__ import annotations

from typing import Any

import pytest

from pricing.messages import RequestError
from proxy.wires.anthropic_parse import parse_anthropic

__all__ = ["SEARCHED", "messages_body", "refusal_of", "tool_round"]


def messages_body(messages: list[Any], **fields: Any) -> dict[str, Any]:
    return {"model": "claude", "max_tokens": 100, "messages": messages, **fields}


def refusal_of(body: Any) -> RequestError:
    """The client's mistake ``parse_anthropic`` finds in ``body`` (it must find one)."""
    with pytest.raises(RequestError) as caught:
        parse_anthropic(body)
    return caught.value


def tool_round(content: Any) -> list[dict[str, Any]]:
    """A task, one tool call and its result (``content``), as a client sends them."""
    return [
        {"role": "user", "content": "Task: look."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content}],
        },
    ]


#: A web search run by Anthropic (its call and result in the assistant's turn), then a user's
#: ``search_result`` block, as a client sends them back.
SEARCHED = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
             "input": {"query": "weather Paris"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
                {"type": "web_search_result", "url": "https://example.org/paris",
                 "title": "Paris weather", "encrypted_content": "abc" * 40}]},
            {"type": "text", "text": "It is sunny."},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "search_result", "source": "https://example.org/notes", "title": "Notes",
             "content": [{"type": "text", "text": "Bring an umbrella on Friday."}]},
            {"type": "text", "text": "And on Friday?"},
        ],
    },
]  # fmt: skip
