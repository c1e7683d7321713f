"""An OpenAPI 3.1 description of routefit's endpoints, built from the config.

Served at ``GET /openapi.json``. It exists so that clients and schema-driven fuzzers
(schemathesis, in ``tests/reliability``) know what routefit accepts and answers:

- ``POST /v1/chat/completions`` with a faithful subset of OpenAI's request schema: messages by
  role with their content parts (text, image_url, refusal), assistant tool calls, tools,
  tool_choice, response_format, max_tokens / max_completion_tokens, stream and stream_options,
  the sampling parameters. ``model`` is one of the aliases this deployment routes.
- ``POST /routefit/fit`` (same body; the fitted request and its report),
  ``GET /v1/models``, ``GET /healthz``, ``GET /readyz``, ``GET /metrics``,
  ``GET /routefit/calibration`` (admin), ``GET /routefit/teams/{team}/usage`` (admin or that team).

Every error is documented in OpenAI's shape. The description holds no secret: aliases and
team ids only, never a provider key, an API key or an upstream URL.
"""

from __future__ import annotations

from typing import Any

from proxy.config import Config

__all__ = ["build_openapi"]

_ERROR_STATUSES = {
    "400": "Invalid request (OpenAI's invalid_request_error), or context_length_exceeded",
    "401": "Missing or invalid API key",
    "403": "The key may not use this model or endpoint",
    "404": "Unknown model, path or team",
    "405": "Method not allowed",
    "413": "Request body above the configured limit",
    "429": "Team quota exhausted, or the provider's rate limit (Retry-After)",
    "500": "routefit internal error (a bug: never expected)",
    "502": "The provider failed, answered malformed, or is unreachable",
    "503": "The provider is unavailable, or the budget store is down in fail-closed mode",
    "504": "The provider timed out",
}

_NAME = {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(
    properties: dict[str, Any], required: list[str] | None = None, *, extra: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    if not extra:
        out["additionalProperties"] = False
    return out


def _schemas(aliases: list[str]) -> dict[str, Any]:
    text_part = _obj(
        {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}},
        ["type", "text"],
    )
    image_part = _obj(
        {
            "type": {"type": "string", "enum": ["image_url"]},
            "image_url": _obj(
                {
                    "url": {
                        "type": "string",
                        "description": "An http(s) URL or a data: URL (base64 PNG, JPEG, GIF, "
                        "WebP)",
                    },
                    "detail": {"type": "string", "enum": ["auto", "low", "high"]},
                },
                ["url"],
            ),
        },
        ["type", "image_url"],
    )
    refusal_part = _obj(
        {"type": {"type": "string", "enum": ["refusal"]}, "refusal": {"type": "string"}},
        ["type", "refusal"],
    )
    text_content = {
        "anyOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "items": _ref("TextPart")},
        ]
    }
    tool_call = _obj(
        {
            "id": {"type": "string"},
            "type": {"type": "string", "enum": ["function"]},
            "function": _obj(
                {"name": _NAME, "arguments": {"type": "string"}}, ["name", "arguments"]
            ),
        },
        ["id", "type", "function"],
    )
    messages = {
        "SystemMessage": _obj(
            {
                "role": {"type": "string", "enum": ["system"]},
                "content": text_content,
                "name": {"type": "string"},
            },
            ["role", "content"],
        ),
        "DeveloperMessage": _obj(
            {
                "role": {"type": "string", "enum": ["developer"]},
                "content": text_content,
                "name": {"type": "string"},
            },
            ["role", "content"],
        ),
        "UserMessage": _obj(
            {
                "role": {"type": "string", "enum": ["user"]},
                "content": {
                    "anyOf": [
                        {"type": "string"},
                        {
                            "type": "array",
                            "minItems": 1,
                            "items": {"anyOf": [_ref("TextPart"), _ref("ImagePart")]},
                        },
                    ]
                },
                "name": {"type": "string"},
            },
            ["role", "content"],
        ),
        "AssistantMessage": _obj(
            {
                "role": {"type": "string", "enum": ["assistant"]},
                "content": _nullable(
                    {
                        "anyOf": [
                            {"type": "string"},
                            {
                                "type": "array",
                                "minItems": 1,
                                "items": {"anyOf": [_ref("TextPart"), _ref("RefusalPart")]},
                            },
                        ]
                    }
                ),
                "name": {"type": "string"},
                "refusal": _nullable({"type": "string"}),
                "tool_calls": {"type": "array", "items": _ref("ToolCall")},
            },
            ["role"],
        ),
        "ToolMessage": _obj(
            {
                "role": {"type": "string", "enum": ["tool"]},
                "content": text_content,
                "tool_call_id": {"type": "string"},
            },
            ["role", "content", "tool_call_id"],
        ),
    }
    tool = _obj(
        {
            "type": {"type": "string", "enum": ["function"]},
            "function": _obj(
                {
                    "name": _NAME,
                    "description": {"type": "string"},
                    "parameters": {"type": "object"},
                    "strict": _nullable({"type": "boolean"}),
                },
                ["name"],
            ),
        },
        ["type", "function"],
    )
    tool_choice = {
        "anyOf": [
            {"type": "string", "enum": ["none", "auto", "required"]},
            _obj(
                {
                    "type": {"type": "string", "enum": ["function"]},
                    "function": _obj({"name": _NAME}, ["name"]),
                },
                ["type", "function"],
            ),
        ]
    }
    response_format = {
        "anyOf": [
            _obj({"type": {"type": "string", "enum": ["text", "json_object"]}}, ["type"]),
            _obj(
                {
                    "type": {"type": "string", "enum": ["json_schema"]},
                    "json_schema": _obj(
                        {
                            "name": _NAME,
                            "description": {"type": "string"},
                            "schema": {"type": "object"},
                            "strict": _nullable({"type": "boolean"}),
                        },
                        ["name"],
                    ),
                },
                ["type", "json_schema"],
            ),
        ]
    }
    model: dict[str, Any] = {"type": "string", "description": "A model alias of this deployment"}
    if aliases:
        model["enum"] = aliases
    request = _obj(
        {
            "model": model,
            "messages": {
                "type": "array",
                "minItems": 1,
                "items": {"anyOf": [_ref(name) for name in messages]},
            },
            "max_tokens": _nullable({"type": "integer", "minimum": 1}),
            "max_completion_tokens": _nullable({"type": "integer", "minimum": 1}),
            "stream": _nullable({"type": "boolean"}),
            "stream_options": _nullable(_obj({"include_usage": {"type": "boolean"}})),
            "temperature": _nullable({"type": "number", "minimum": 0, "maximum": 2}),
            "top_p": _nullable({"type": "number", "minimum": 0, "maximum": 1}),
            "n": _nullable({"type": "integer", "minimum": 1, "maximum": 8}),
            "stop": _nullable(
                {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "array", "items": {"type": "string"}, "maxItems": 4},
                    ]
                }
            ),
            "presence_penalty": _nullable({"type": "number", "minimum": -2, "maximum": 2}),
            "frequency_penalty": _nullable({"type": "number", "minimum": -2, "maximum": 2}),
            "seed": _nullable({"type": "integer"}),
            "user": {"type": "string"},
            "metadata": _nullable(
                {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 16}
            ),
            "tools": {"type": "array", "items": _ref("Tool")},
            "tool_choice": tool_choice,
            "parallel_tool_calls": {"type": "boolean"},
            "response_format": response_format,
        },
        ["model", "messages"],
    )
    error = _obj(
        {
            "error": _obj(
                {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": _nullable({"type": "string"}),
                    "code": _nullable({"type": "string"}),
                },
                ["message", "type", "param", "code"],
            )
        },
        ["error"],
    )
    completion = _obj(
        {
            "id": {"type": "string"},
            "object": {"type": "string"},
            "model": {"type": "string"},
            "choices": {"type": "array"},
            "usage": _nullable({"type": "object"}),
        },
        ["choices"],
        extra=True,
    )
    fit = _obj({"request": {"type": "object"}, "report": {"type": "object"}}, ["request", "report"])
    models = _obj(
        {
            "object": {"type": "string", "enum": ["list"]},
            "data": {
                "type": "array",
                "items": _obj(
                    {
                        "id": {"type": "string"},
                        "object": {"type": "string"},
                        "created": {"type": "integer"},
                        "owned_by": {"type": "string"},
                    },
                    ["id", "object"],
                    extra=True,
                ),
            },
        },
        ["object", "data"],
    )
    usage = _obj(
        {
            "team": {"type": "string"},
            "windows": {
                "type": "array",
                "items": _obj(
                    {
                        "name": {"type": "string"},
                        "limit": {"type": "integer"},
                        "used": {"type": "integer"},
                        "remaining": {"type": "integer"},
                        "reset_seconds": {"type": "number"},
                    },
                    ["name", "limit", "used", "remaining", "reset_seconds"],
                ),
            },
        },
        ["team", "windows"],
    )
    return {
        "TextPart": text_part,
        "ImagePart": image_part,
        "RefusalPart": refusal_part,
        "ToolCall": tool_call,
        **messages,
        "Tool": tool,
        "ChatCompletionRequest": request,
        "ChatCompletion": completion,
        "FitResult": fit,
        "ModelList": models,
        "TeamUsage": usage,
        "Error": error,
        "Health": _obj({"status": {"type": "string"}}, ["status"], extra=True),
        "StreamEvent": _obj(
            {
                "data": {
                    "type": "string",
                    "description": "A chat.completion.chunk as JSON, an error object as JSON "
                    "(the stream broke off), or [DONE]",
                },
                "event": {"type": "string"},
                "id": {"type": "string"},
                "retry": {"type": "integer"},
            },
            ["data"],
        ),
        "Object": {"type": "object"},
    }


def _responses(ok: dict[str, Any], *errors: str) -> dict[str, Any]:
    out: dict[str, Any] = {"200": ok}
    for status in errors:
        out[status] = {
            "description": _ERROR_STATUSES[status],
            "content": {"application/json": {"schema": _ref("Error")}},
        }
    return out


def _json_ok(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


def _chat_paths(security: list[dict[str, list[str]]]) -> dict[str, Any]:
    """The chat-completions wire and its dry run."""
    chat_body = {
        "required": True,
        "content": {"application/json": {"schema": _ref("ChatCompletionRequest")}},
    }
    answer = {
        "description": "The provider's completion (JSON), or its SSE stream",
        "content": {
            "application/json": {"schema": _ref("ChatCompletion")},
            # one server-sent event (OpenAPI 3.2's itemSchema; schemathesis reads a 3.1
            # event-stream schema the same way)
            "text/event-stream": {"schema": _ref("StreamEvent")},
        },
    }
    chat_errors = ("400", "401", "403", "404", "413", "429", "502", "503", "504")
    return {
        "/v1/chat/completions": {
            "post": {
                "operationId": "createChatCompletion",
                "summary": "Price, fit and forward a chat completion (stream or not)",
                "security": security,
                "requestBody": chat_body,
                "responses": _responses(answer, *chat_errors),
            }
        },
        "/routefit/fit": {
            "post": {
                "operationId": "fitChatCompletion",
                "summary": "Dry run: the fitted request and its report; nothing is forwarded",
                "security": security,
                "requestBody": chat_body,
                "responses": _responses(
                    _json_ok("The fitted request and its FitReport", "FitResult"),
                    *("400", "401", "403", "404", "413"),
                ),
            }
        },
    }


def _get(operation: str, summary: str, responses: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"get": {"operationId": operation, "summary": summary, **more, "responses": responses}}


def _routefit_paths(security: list[dict[str, list[str]]]) -> dict[str, Any]:
    """Models, calibration and team usage: what callers may read."""
    team = {
        "name": "team",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1},
    }
    return {
        "/v1/models": _get(
            "listModels",
            "The model aliases the caller may use",
            _responses(_json_ok("The models", "ModelList"), "401"),
            security=security,
        ),
        "/routefit/calibration": _get(
            "getCalibration",
            "What routefit has learnt per route (admin key)",
            _responses(_json_ok("Calibration per route", "Object"), "401", "403"),
            security=security,
        ),
        "/routefit/teams/{team}/usage": _get(
            "getTeamUsage",
            "A team's budget windows (admin key, or that team's own key)",
            _responses(_json_ok("The team's windows", "TeamUsage"), "401", "403", "404", "503"),
            security=security,
            parameters=[team],
        ),
    }


def _probe_paths() -> dict[str, Any]:
    """Health, readiness and metrics: for orchestrators and Prometheus, never authenticated."""
    text = {
        "description": "Prometheus text format",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
    return {
        "/healthz": _get("healthz", "The process answers", {"200": _json_ok("Alive", "Health")}),
        "/readyz": _get(
            "readyz",
            "It can serve (route tokenizers loaded); store state in checks",
            {"200": _json_ok("Ready", "Health"), "503": _json_ok("Starting", "Health")},
        ),
        "/metrics": _get("metrics", "Prometheus metrics", {"200": text}),
    }


def build_openapi(config: Config) -> dict[str, Any]:
    """The OpenAPI 3.1 document of a routefit deployment with this config."""
    secured = bool(config.teams) or config.settings.admin_key_hash is not None
    security: list[dict[str, list[str]]] = [{"bearer": []}] if secured else []
    paths = {**_chat_paths(security), **_routefit_paths(security), **_probe_paths()}
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "routefit",
            "version": "0.1.0",
            "description": "OpenAI-compatible LLM gateway that prices each request the way its "
            "route counts it and fits it to the route's context budget.",
        },
        "paths": paths,
        "components": {"schemas": _schemas(sorted(config.routes))},
    }
    if secured:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc
