"""OpenAPI description of the OpenAI Responses wire: ``POST /v1/responses`` (a faithful subset of
OpenAI's input items and tools) and the stored responses (``GET``/``DELETE /v1/responses/{id}``,
``GET /v1/responses/{id}/input_items``). Errors in OpenAI's shape."""

from __future__ import annotations

from typing import Any

from proxy.openapi_parts import NAME, Security, get, json_ok, nullable, obj, ref, responses, sse_ok

__all__ = ["responses_paths", "responses_schemas"]

_STR = {"type": "string"}


def _typed(kind: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return obj({"type": {"type": "string", "enum": [kind]}, **properties}, ["type", *required])


def _items() -> dict[str, Any]:
    image = _typed(
        "input_image",
        {
            "image_url": {"type": "string", "description": "An http(s) or data: URL"},
            "file_id": _STR,
            "detail": {"type": "string", "enum": ["auto", "low", "high"]},
        },
        [],
    )
    parts = {"anyOf": [ref("InputTextPart"), ref("InputImagePart")]}
    output_text = _typed("output_text", {"text": _STR, "annotations": {"type": "array"}}, ["text"])
    return {
        "InputTextPart": _typed("input_text", {"text": _STR}, ["text"]),
        "InputImagePart": image,
        "InputMessageItem": obj(
            {
                "type": {"type": "string", "enum": ["message"]},
                "role": {"type": "string", "enum": ["user", "system", "developer"]},
                "content": {"anyOf": [_STR, {"type": "array", "items": parts}]},
            },
            ["role", "content"],
        ),
        "OutputMessageItem": _typed(
            "message",
            {
                "id": _STR,
                "role": {"type": "string", "enum": ["assistant"]},
                "status": _STR,
                "content": {"type": "array", "items": output_text},
            },
            ["role", "content"],
        ),
        "FunctionCallItem": _typed(
            "function_call",
            {"id": _STR, "call_id": _STR, "name": NAME, "arguments": _STR, "status": _STR},
            ["call_id", "name", "arguments"],
        ),
        "FunctionCallOutputItem": _typed(
            "function_call_output", {"id": _STR, "call_id": _STR, "output": _STR}, ["call_id"]
        ),
        "ReasoningItem": _typed(
            "reasoning",
            {
                "id": _STR,
                "summary": {
                    "type": "array",
                    "items": _typed("summary_text", {"text": _STR}, ["text"]),
                },
                "encrypted_content": nullable(_STR),
            },
            ["summary"],
        ),
    }


_ITEM_NAMES = (
    "InputMessageItem",
    "OutputMessageItem",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "ReasoningItem",
)


def _request(model: dict[str, Any]) -> dict[str, Any]:
    tool = _typed(
        "function",
        {
            "name": NAME,
            "description": _STR,
            "parameters": {"type": "object"},
            "strict": nullable({"type": "boolean"}),
        },
        ["name"],
    )
    tool_choice = {
        "anyOf": [
            {"type": "string", "enum": ["none", "auto", "required"]},
            _typed("function", {"name": NAME}, ["name"]),
        ]
    }
    items = {"type": "array", "items": {"anyOf": [ref(name) for name in _ITEM_NAMES]}}
    return obj(
        {
            "model": model,
            "input": {"anyOf": [_STR, items]},
            "instructions": nullable(_STR),
            "tools": {"type": "array", "items": tool},
            "tool_choice": tool_choice,
            "parallel_tool_calls": {"type": "boolean"},
            "stream": {"type": "boolean"},
            "store": {"type": "boolean"},
            "previous_response_id": nullable(_STR),
            "max_output_tokens": nullable({"type": "integer", "minimum": 16}),
            "temperature": nullable({"type": "number", "minimum": 0, "maximum": 2}),
            "top_p": nullable({"type": "number", "minimum": 0, "maximum": 1}),
            "metadata": nullable(
                {"type": "object", "additionalProperties": _STR, "maxProperties": 16}
            ),
            "prompt_cache_key": _STR,
            "user": _STR,
            "include": {"type": "array", "items": _STR},
            "reasoning": obj(
                {"effort": {"type": "string", "enum": ["minimal", "low", "medium", "high"]}}
            ),
        },
        ["model", "input"],
    )


def responses_schemas(model: dict[str, Any]) -> dict[str, Any]:
    """Components for the Responses wire; ``model`` is the alias schema of this deployment."""
    response = obj(
        {
            "id": _STR,
            "object": {"type": "string", "enum": ["response"]},
            "status": _STR,
            "model": _STR,
            "output": {"type": "array"},
            "usage": nullable({"type": "object"}),
        },
        ["id", "output"],
        extra=True,
    )
    items = obj(
        {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array"},
            "first_id": nullable(_STR),
            "last_id": nullable(_STR),
            "has_more": {"type": "boolean"},
        },
        ["object", "data", "has_more"],
    )
    event = obj(
        {
            "event": _STR,
            "data": {
                "type": "string",
                "description": "A Responses stream event as JSON (response.created … "
                "response.completed, or response.failed)",
            },
        },
        ["data"],
    )
    deleted = obj(
        {"id": _STR, "object": _STR, "deleted": {"type": "boolean"}}, ["id", "object", "deleted"]
    )
    return {
        **_items(),
        "ResponsesRequest": _request(model),
        "Response": response,
        "ResponseStreamEvent": event,
        "ResponseDeleted": deleted,
        "InputItemList": items,
    }


def responses_paths(security: Security) -> dict[str, Any]:
    rid = {
        "name": "response_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1},
    }
    order = {
        "name": "order",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": ["asc", "desc"], "default": "desc"},
    }
    limit = {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
    }
    cursors = [
        {"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
        for name in ("after", "before")
    ]
    stored = ("401", "404", "503")
    create = {
        "operationId": "createResponse",
        "summary": "Price, fit and forward a Responses request; store it unless store: false",
        "security": security,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref("ResponsesRequest")}},
        },
        "responses": responses(
            sse_ok("The response, or its SSE stream", "Response", "ResponseStreamEvent"),
            *("400", "401", "403", "404", "413", "429", "502", "503", "504"),
        ),
    }
    one = get(
        "getResponse",
        "A stored response (the caller's team's)",
        responses(json_ok("The stored response", "Response"), *stored),
        security=security,
        parameters=[rid],
    )
    one["delete"] = {
        "operationId": "deleteResponse",
        "summary": "Delete a stored response",
        "security": security,
        "parameters": [rid],
        "responses": responses(json_ok("Deleted", "ResponseDeleted"), *stored),
    }
    return {
        "/v1/responses": {"post": create},
        "/v1/responses/{response_id}": one,
        "/v1/responses/{response_id}/input_items": get(
            "listResponseInputItems",
            "The input a stored response answered, a page at a time (newest first by default)",
            responses(json_ok("The input items", "InputItemList"), "400", *stored),
            security=security,
            parameters=[rid, limit, order, *cursors],
        ),
    }
