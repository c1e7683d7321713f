"""OpenAPI description of the Anthropic Messages wire: ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``, a faithful subset of Anthropic's request schema (content
blocks by type, tools, thinking), every error in Anthropic's shape
(``{"type": "error", "error": {"type", "message"}}``)."""

from __future__ import annotations

from typing import Any

from proxy.openapi_parts import NAME, Security, json_ok, nullable, obj, ref, responses, sse_ok

__all__ = ["messages_paths", "messages_schemas"]

_CACHE = {"cache_control": nullable(obj({"type": {"type": "string", "enum": ["ephemeral"]}}))}


def _block(kind: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return obj(
        {"type": {"type": "string", "enum": [kind]}, **properties, **_CACHE}, ["type", *required]
    )


def _blocks() -> dict[str, Any]:
    base64 = obj(
        {
            "type": {"type": "string", "enum": ["base64"]},
            "media_type": {
                "type": "string",
                "enum": ["image/png", "image/jpeg", "image/gif", "image/webp"],
            },
            "data": {"type": "string"},
        },
        ["type", "media_type", "data"],
    )
    url = obj({"type": {"type": "string", "enum": ["url"]}, "url": {"type": "string"}}, ["type"])
    text_or_image = {"anyOf": [ref("AnthropicTextBlock"), ref("AnthropicImageBlock")]}
    return {
        "AnthropicTextBlock": _block("text", {"text": {"type": "string"}}, ["text"]),
        "AnthropicImageBlock": _block("image", {"source": {"anyOf": [base64, url]}}, ["source"]),
        "AnthropicToolUseBlock": _block(
            "tool_use",
            {"id": {"type": "string"}, "name": NAME, "input": {"type": "object"}},
            ["id", "name", "input"],
        ),
        "AnthropicToolResultBlock": _block(
            "tool_result",
            {
                "tool_use_id": {"type": "string"},
                "content": {
                    "anyOf": [{"type": "string"}, {"type": "array", "items": text_or_image}]
                },
                "is_error": {"type": "boolean"},
            },
            ["tool_use_id"],
        ),
        "AnthropicThinkingBlock": obj(
            {
                "type": {"type": "string", "enum": ["thinking"]},
                "thinking": {"type": "string"},
                "signature": {"type": "string"},
            },
            ["type", "thinking", "signature"],
        ),
        "AnthropicRedactedThinkingBlock": obj(
            {"type": {"type": "string", "enum": ["redacted_thinking"]}, "data": {"type": "string"}},
            ["type", "data"],
        ),
    }


def _messages() -> dict[str, Any]:
    def content(*blocks: str) -> dict[str, Any]:
        items = {"anyOf": [ref(name) for name in blocks]}
        return {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": items}]}

    user = content("AnthropicTextBlock", "AnthropicImageBlock", "AnthropicToolResultBlock")
    assistant = content(
        "AnthropicTextBlock",
        "AnthropicToolUseBlock",
        "AnthropicThinkingBlock",
        "AnthropicRedactedThinkingBlock",
    )
    return {
        "AnthropicUserMessage": obj(
            {"role": {"type": "string", "enum": ["user"]}, "content": user}, ["role", "content"]
        ),
        "AnthropicAssistantMessage": obj(
            {"role": {"type": "string", "enum": ["assistant"]}, "content": assistant},
            ["role", "content"],
        ),
        "AnthropicTool": obj(
            {
                "name": NAME,
                "description": {"type": "string"},
                "input_schema": {"type": "object"},
                **_CACHE,
            },
            ["name", "input_schema"],
        ),
    }


def _request(model: dict[str, Any], *, count: bool) -> dict[str, Any]:
    """The body of ``/v1/messages`` (``count``: of ``count_tokens``, without output settings)."""
    tool_choice = {
        "anyOf": [
            obj({"type": {"type": "string", "enum": ["auto", "any", "none"]}}, ["type"]),
            obj({"type": {"type": "string", "enum": ["tool"]}, "name": NAME}, ["type", "name"]),
        ]
    }
    thinking = {
        "anyOf": [
            obj(
                {
                    "type": {"type": "string", "enum": ["enabled"]},
                    "budget_tokens": {"type": "integer", "minimum": 1024},
                },
                ["type", "budget_tokens"],
            ),
            obj({"type": {"type": "string", "enum": ["disabled", "adaptive"]}}, ["type"]),
        ]
    }
    properties: dict[str, Any] = {
        "model": model,
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {"anyOf": [ref("AnthropicUserMessage"), ref("AnthropicAssistantMessage")]},
        },
        "system": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": ref("AnthropicTextBlock")},
            ]
        },
        "tools": {"type": "array", "items": ref("AnthropicTool")},
        "tool_choice": tool_choice,
        "thinking": thinking,
        **_CACHE,  # automatic caching: a breakpoint on the last block, one of the 4
    }
    if count:
        return obj(properties, ["model", "messages"])
    properties |= {
        "max_tokens": {"type": "integer", "minimum": 1},
        "stream": {"type": "boolean"},
        "metadata": obj({"user_id": nullable({"type": "string"})}),
        "stop_sequences": {"type": "array", "items": {"type": "string"}},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "top_k": {"type": "integer", "minimum": 0},
    }
    return obj(properties, ["model", "max_tokens", "messages"])


def messages_schemas(model: dict[str, Any]) -> dict[str, Any]:
    """Components for the Messages wire; ``model`` is the alias schema of this deployment."""
    error = obj(
        {
            "type": {"type": "string", "enum": ["error"]},
            "error": obj(
                {"type": {"type": "string"}, "message": {"type": "string"}}, ["type", "message"]
            ),
        },
        ["type", "error"],
    )
    answer = obj(
        {
            "id": {"type": "string"},
            "type": {"type": "string", "enum": ["message"]},
            "role": {"type": "string", "enum": ["assistant"]},
            "content": {"type": "array"},
            "model": {"type": "string"},
            "stop_reason": nullable({"type": "string"}),
            "usage": {"type": "object"},
        },
        ["type", "role", "content"],
        extra=True,
    )
    event = obj(
        {
            "event": {"type": "string"},
            "data": {
                "type": "string",
                "description": "A Messages stream event as JSON (message_start … message_stop), "
                "or an error event when the stream broke off",
            },
        },
        ["data"],
    )
    return {
        **_blocks(),
        **_messages(),
        "MessagesRequest": _request(model, count=False),
        "CountTokensRequest": _request(model, count=True),
        "AnthropicMessage": answer,
        "AnthropicStreamEvent": event,
        "TokenCount": obj({"input_tokens": {"type": "integer", "minimum": 0}}, ["input_tokens"]),
        "AnthropicError": error,
    }


def messages_paths(security: Security) -> dict[str, Any]:
    """``/v1/messages`` and its ``count_tokens`` (``?beta=true`` as Claude Code sends it)."""
    beta = {"name": "beta", "in": "query", "required": False, "schema": {"type": "string"}}
    errors = ("400", "401", "403", "404", "413", "429", "502", "503", "504")

    def body(schema: str) -> dict[str, Any]:
        return {"required": True, "content": {"application/json": {"schema": ref(schema)}}}

    return {
        "/v1/messages": {
            "post": {
                "operationId": "createMessage",
                "summary": "Price, fit and forward an Anthropic Messages request (stream or not)",
                "security": security,
                "parameters": [beta],
                "requestBody": body("MessagesRequest"),
                "responses": responses(
                    sse_ok(
                        "The provider's message, or its SSE stream",
                        "AnthropicMessage",
                        "AnthropicStreamEvent",
                    ),
                    *errors,
                    error="AnthropicError",
                ),
            }
        },
        "/v1/messages/count_tokens": {
            "post": {
                "operationId": "countMessageTokens",
                "summary": "routefit's calibrated estimate of the request on its route "
                "(answered locally)",
                "security": security,
                "parameters": [beta],
                "requestBody": body("CountTokensRequest"),
                "responses": responses(
                    json_ok("The estimate the fit acts on", "TokenCount"),
                    *("400", "401", "403", "404", "413", "429"),
                    error="AnthropicError",
                ),
            }
        },
    }
