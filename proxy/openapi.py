"""An OpenAPI 3.1 description of routefit's endpoints, built from the config.

Served at ``GET /openapi.json``. It exists so that clients and schema-driven fuzzers
(schemathesis, in ``tests/reliability``) know what routefit accepts and answers. Paths are
described per concern, each wire's in its own module:

- ``POST /v1/chat/completions`` with a faithful subset of OpenAI's request schema: messages by
  role with their content parts (text, image_url, file with a PDF, refusal), assistant tool
  calls, tools, tool_choice, response_format, max_tokens / max_completion_tokens, stream and
  stream_options, the sampling parameters. ``model`` is one of the aliases this deployment routes.
- ``POST /v1/messages`` and ``/v1/messages/count_tokens`` (``proxy.openapi_messages``), errors in
  Anthropic's shape; ``POST /v1/responses`` and the stored responses
  (``proxy.openapi_responses``), and its count, ``POST /v1/responses/input_tokens`` (here),
  errors in OpenAI's shape; Gemini's ``generateContent``,
  ``streamGenerateContent`` and ``countTokens`` under ``/v1beta`` and ``/v1``
  (``proxy.openapi_gemini``), errors in Google's shape.
- ``POST /routefit/fit`` (any wire's body, ``?wire=``; the fitted request and its report),
  ``GET /v1/models``, ``GET /healthz``, ``GET /readyz``, ``GET /metrics``, ``HEAD``/``GET /``,
  ``GET /routefit/calibration`` (admin), ``GET /routefit/teams/{team}/usage`` (admin or that
  team), the dashboard under ``/routefit/ui``.
- LiteLLM's ``/health`` family, ``GET /routefit/requests``, ``POST /routefit/reload`` and
  ``POST /v1/embeddings`` (``proxy.openapi_ops``).

The description holds no secret: never a provider key, an API key or an upstream URL. The
shapes are public; which models exist is the operator's, and a route may be one team's: a
gateway with teams names in ``model`` only the aliases the caller's key may use (none without
a key: the admin key is not read here, where a guess would go unthrottled), and teams that may
use the same aliases share one document (``OpenAPIDocs``). Every alias was listed to anyone
before (2026-12-07).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from proxy.config import Config
from proxy.openapi_gemini import (
    GEMINI_SECURITY_SCHEMES,
    gemini_paths,
    gemini_schemas,
    gemini_security,
)
from proxy.openapi_messages import messages_paths, messages_schemas
from proxy.openapi_ops import ops_paths, ops_schemas
from proxy.openapi_parts import (
    NAME,
    Security,
    get,
    json_ok,
    nullable,
    obj,
    ref,
    responses,
    sse_ok,
)
from proxy.openapi_responses import responses_paths, responses_schemas

__all__ = ["OpenAPIDocs", "build_openapi"]


def _model(aliases: list[str]) -> dict[str, Any]:
    model: dict[str, Any] = {"type": "string", "description": "A model alias of this deployment"}
    if aliases:
        model["enum"] = aliases
    return model


def _schemas(aliases: list[str]) -> dict[str, Any]:
    text_part = obj(
        {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}},
        ["type", "text"],
    )
    image_part = obj(
        {
            "type": {"type": "string", "enum": ["image_url"]},
            "image_url": obj(
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
    file_part = obj(
        {
            "type": {"type": "string", "enum": ["file"]},
            "file": obj(
                {
                    "file_data": {
                        "type": "string",
                        "description": "A PDF as a data URL (data:application/pdf;base64,...), "
                        "priced from its pages",
                    },
                    "filename": {"type": "string"},
                },
                ["file_data"],
            ),
        },
        ["type", "file"],
    )
    audio_part = obj(
        {
            "type": {"type": "string", "enum": ["input_audio"]},
            "input_audio": obj(
                {
                    "data": {"type": "string", "description": "The audio, base64"},
                    "format": {
                        "type": "string",
                        "description": "Its format (wav, mp3), priced by its length where the "
                        "route takes audio",
                        "pattern": "^[a-z0-9][a-z0-9.+-]{0,15}$",
                    },
                },
                ["data", "format"],
            ),
        },
        ["type", "input_audio"],
    )
    refusal_part = obj(
        {"type": {"type": "string", "enum": ["refusal"]}, "refusal": {"type": "string"}},
        ["type", "refusal"],
    )
    text_content = {
        "anyOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "items": ref("TextPart")},
        ]
    }
    tool_call = obj(
        {
            "id": {"type": "string"},
            "type": {"type": "string", "enum": ["function"]},
            "function": obj({"name": NAME, "arguments": {"type": "string"}}, ["name", "arguments"]),
        },
        ["id", "type", "function"],
    )
    messages = {
        "SystemMessage": obj(
            {
                "role": {"type": "string", "enum": ["system"]},
                "content": text_content,
                "name": {"type": "string"},
            },
            ["role", "content"],
        ),
        "DeveloperMessage": obj(
            {
                "role": {"type": "string", "enum": ["developer"]},
                "content": text_content,
                "name": {"type": "string"},
            },
            ["role", "content"],
        ),
        "UserMessage": obj(
            {
                "role": {"type": "string", "enum": ["user"]},
                "content": {
                    "anyOf": [
                        {"type": "string"},
                        {
                            "type": "array",
                            "minItems": 1,
                            "items": {
                                "anyOf": [
                                    ref("TextPart"),
                                    ref("ImagePart"),
                                    ref("FilePart"),
                                    ref("AudioPart"),
                                ]
                            },
                        },
                    ]
                },
                "name": {"type": "string"},
            },
            ["role", "content"],
        ),
        "AssistantMessage": obj(
            {
                "role": {"type": "string", "enum": ["assistant"]},
                "content": nullable(
                    {
                        "anyOf": [
                            {"type": "string"},
                            {
                                "type": "array",
                                "minItems": 1,
                                "items": {"anyOf": [ref("TextPart"), ref("RefusalPart")]},
                            },
                        ]
                    }
                ),
                "name": {"type": "string"},
                "refusal": nullable({"type": "string"}),
                "tool_calls": {"type": "array", "items": ref("ToolCall")},
            },
            ["role"],
        ),
        "ToolMessage": obj(
            {
                "role": {"type": "string", "enum": ["tool"]},
                "content": text_content,
                "tool_call_id": {"type": "string"},
            },
            ["role", "content", "tool_call_id"],
        ),
    }
    tool = obj(
        {
            "type": {"type": "string", "enum": ["function"]},
            "function": obj(
                {
                    "name": NAME,
                    "description": {"type": "string"},
                    "parameters": {"type": "object"},
                    "strict": nullable({"type": "boolean"}),
                },
                ["name"],
            ),
        },
        ["type", "function"],
    )
    tool_choice = {
        "anyOf": [
            {"type": "string", "enum": ["none", "auto", "required"]},
            obj(
                {
                    "type": {"type": "string", "enum": ["function"]},
                    "function": obj({"name": NAME}, ["name"]),
                },
                ["type", "function"],
            ),
        ]
    }
    response_format = {
        "anyOf": [
            obj({"type": {"type": "string", "enum": ["text", "json_object"]}}, ["type"]),
            obj(
                {
                    "type": {"type": "string", "enum": ["json_schema"]},
                    "json_schema": obj(
                        {
                            "name": NAME,
                            "description": {"type": "string"},
                            "schema": {"type": "object"},
                            "strict": nullable({"type": "boolean"}),
                        },
                        ["name"],
                    ),
                },
                ["type", "json_schema"],
            ),
        ]
    }
    model = _model(aliases)
    request = obj(
        {
            "model": model,
            "messages": {
                "type": "array",
                "minItems": 1,
                "items": {"anyOf": [ref(name) for name in messages]},
            },
            "max_tokens": nullable({"type": "integer", "minimum": 1}),
            "max_completion_tokens": nullable({"type": "integer", "minimum": 1}),
            "stream": nullable({"type": "boolean"}),
            "stream_options": nullable(obj({"include_usage": {"type": "boolean"}})),
            "temperature": nullable({"type": "number", "minimum": 0, "maximum": 2}),
            "top_p": nullable({"type": "number", "minimum": 0, "maximum": 1}),
            "n": nullable({"type": "integer", "minimum": 1, "maximum": 8}),
            "stop": nullable(
                {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "array", "items": {"type": "string"}, "maxItems": 4},
                    ]
                }
            ),
            "presence_penalty": nullable({"type": "number", "minimum": -2, "maximum": 2}),
            "frequency_penalty": nullable({"type": "number", "minimum": -2, "maximum": 2}),
            "seed": nullable({"type": "integer"}),
            "user": {"type": "string"},
            "metadata": nullable(
                {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 16}
            ),
            "tools": {"type": "array", "items": ref("Tool")},
            "tool_choice": tool_choice,
            "parallel_tool_calls": {"type": "boolean"},
            "response_format": response_format,
        },
        ["model", "messages"],
    )
    error = obj(
        {
            "error": obj(
                {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": nullable({"type": "string"}),
                    "code": nullable({"type": "string"}),
                },
                ["message", "type", "param", "code"],
            )
        },
        ["error"],
    )
    completion = obj(
        {
            "id": {"type": "string"},
            "object": {"type": "string"},
            "model": {"type": "string"},
            "choices": {"type": "array"},
            "usage": nullable({"type": "object"}),
        },
        ["choices"],
        extra=True,
    )
    fit = obj({"request": {"type": "object"}, "report": {"type": "object"}}, ["request", "report"])
    models = obj(
        {
            "object": {"type": "string", "enum": ["list"]},
            "data": {
                "type": "array",
                "items": obj(
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
    usage = obj(
        {
            "team": {"type": "string"},
            "windows": {
                "type": "array",
                "items": obj(
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
        "FilePart": file_part,
        "AudioPart": audio_part,
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
        "Health": obj({"status": {"type": "string"}}, ["status"], extra=True),
        "StreamEvent": obj(
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


def _chat_paths(security: Security) -> dict[str, Any]:
    """The chat-completions wire."""
    chat_body = {
        "required": True,
        "content": {"application/json": {"schema": ref("ChatCompletionRequest")}},
    }
    chat_errors = ("400", "401", "403", "404", "413", "429", "502", "503", "504")
    return {
        "/v1/chat/completions": {
            "post": {
                "operationId": "createChatCompletion",
                "summary": "Price, fit and forward a chat completion (stream or not)",
                "security": security,
                "requestBody": chat_body,
                "responses": responses(
                    sse_ok(
                        "The provider's completion (JSON), or its SSE stream",
                        "ChatCompletion",
                        "StreamEvent",
                    ),
                    *chat_errors,
                ),
            }
        },
    }


def _fit_paths(security: Security) -> dict[str, Any]:
    """The dry run, for every wire: ``?wire=`` names the body's wire (chat by default); its
    errors come in that wire's shape."""
    wire = {
        "name": "wire",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": ["chat", "messages", "responses", "gemini"]},
    }
    body = {
        "anyOf": [
            ref("ChatCompletionRequest"),
            ref("MessagesRequest"),
            ref("ResponsesRequest"),
            ref("GeminiFitRequest"),
        ]
    }
    return {
        "/routefit/fit": {
            "post": {
                "operationId": "fitRequest",
                "summary": "Dry run: the fitted request and its report; nothing is forwarded",
                "security": security,
                "parameters": [wire],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": body}},
                },
                "responses": responses(
                    json_ok("The fitted request and its FitReport", "FitResult"),
                    *("400", "401", "403", "404", "413", "429", "503"),
                    error="AnyError",
                ),
            }
        },
    }


def _routefit_paths(security: Security) -> dict[str, Any]:
    """Models, calibration and team usage: what callers may read."""
    team = {
        "name": "team",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1},
    }
    return {
        "/v1/models": get(
            "listModels",
            "The model aliases the caller may use",
            responses(json_ok("The models", "ModelList"), "401"),
            security=security,
        ),
        "/routefit/calibration": get(
            "getCalibration",
            "What routefit has learnt per route (admin key)",
            responses(json_ok("Calibration per route", "Object"), "401", "403", "429"),
            security=security,
        ),
        "/routefit/teams/{team}/usage": get(
            "getTeamUsage",
            "A team's budget windows (admin key, or that team's own key)",
            responses(
                json_ok("The team's windows", "TeamUsage"), "401", "403", "404", "429", "503"
            ),
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
        "/healthz": get("healthz", "The process answers", {"200": json_ok("Alive", "Health")}),
        "/readyz": get(
            "readyz",
            "It can serve (route tokenizers loaded); store state in checks",
            {"200": json_ok("Ready", "Health"), "503": json_ok("Starting", "Health")},
        ),
        "/metrics": get("metrics", "Prometheus metrics", {"200": text}),
    }


def _root_paths() -> dict[str, Any]:
    """``HEAD /`` and ``GET /``: Claude Code probes the base URL before its first request."""
    return {
        "/": {
            **get("root", "The service answers", {"200": json_ok("routefit", "Service")}),
            "head": {
                "operationId": "rootHead",
                "summary": "The service answers (no body)",
                "responses": {"200": {"description": "routefit"}},
            },
        }
    }


def _ui_paths(security: Security) -> dict[str, Any]:
    """The operator's dashboard (``proxy.ui``): its page and files need no key, its figures the
    admin key (bearer) or the session cookie ``POST /routefit/ui/session`` sets."""
    name = {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]+[.][a-z]+$"},
    }
    text = {"schema": {"type": "string"}}
    files = {
        "description": "A file of the page",
        "content": {
            media: text
            for media in (
                "text/html; charset=utf-8",
                "text/javascript; charset=utf-8",
                "text/css; charset=utf-8",
                "image/svg+xml",
            )
        },
    }
    page = {"description": "The page", "content": {"text/html; charset=utf-8": text}}
    login = obj({"key": {"type": "string", "minLength": 1}}, ["key"])
    done = {"description": "Session cookie set (POST) or cleared (DELETE)"}
    session = get(
        "getDashboardSession",
        "Whether this browser may read the figures",
        {**responses({}, "503"), "200": json_ok("The session state", "DashboardSession")},
    )
    session["post"] = {
        "operationId": "openDashboardSession",
        "summary": "Exchange the admin key for the session cookie",
        "requestBody": {"required": True, "content": {"application/json": {"schema": login}}},
        # 429: too many failed admin-key attempts from this client; 503: the session store
        "responses": {"204": done, **responses({}, "400", "401", "403", "429", "503")},
    }
    del session["post"]["responses"]["200"]
    session["delete"] = {
        "operationId": "closeDashboardSession",
        "summary": "End the session (revoked server-side)",
        "responses": {"204": done, **responses({}, "503")},
    }
    return {
        "/routefit/ui": get("dashboard", "The dashboard page", {"200": page}),
        "/routefit/ui/static/{name}": get(
            "dashboardFile",
            "The page's script, style sheet and images",
            {"200": files, **responses({}, "404")},
            parameters=[name],
        ),
        "/routefit/ui/data": get(
            "dashboardData",
            "The dashboard's figures (admin key or session cookie)",
            responses(json_ok("The figures", "Object"), "401", "403", "429", "503"),
            security=security,
        ),
        "/routefit/ui/requests": get(
            "dashboardRequests",
            "The request log, newest first, filtered (admin key or session cookie)",
            responses(json_ok("The records", "Object"), "400", "401", "403", "429", "503"),
            parameters=_log_filters(),
            security=security,
        ),
        "/routefit/ui/session": session,
    }


def _log_filters() -> list[dict[str, Any]]:
    """The dashboard's request-log filters (``proxy.records.query`` plus team and key)."""
    schemas = {
        "limit": {"type": "integer", "minimum": 1},
        "route": {"type": "string"},
        "status": {"type": "string", "pattern": "^([0-9]+|[1-5]xx)$"},
        "since": {"type": "number"},
        "team": {"type": "string"},
        "key": {"type": "string"},
    }
    return [
        {"name": name, "in": "query", "required": False, "schema": schema}
        for name, schema in schemas.items()
    ]


#: Fields of a Responses body that its count's does not take: the output settings (OpenAI's
#: count takes none), and the stored conversation the count path refuses (it does not resolve
#: one: ``proxy.wires.responses``).
_NOT_COUNTED = ("stream", "store", "max_output_tokens", "previous_response_id")


def _input_tokens_schemas(request: dict[str, Any]) -> dict[str, Any]:
    """The count's body, derived from the Responses request's (``request``) so the two never
    drift apart, and its answer."""
    kept = {k: v for k, v in request["properties"].items() if k not in _NOT_COUNTED}
    answer = obj(
        {
            "object": {"type": "string", "enum": ["response.input_tokens"]},
            "input_tokens": {"type": "integer", "minimum": 0},
        },
        ["object", "input_tokens"],
    )
    return {
        "ResponsesInputTokensRequest": {**request, "properties": kept},
        "ResponsesInputTokens": answer,
    }


def _input_tokens_paths(security: Security) -> dict[str, Any]:
    """OpenAI's ``POST /v1/responses/input_tokens`` (the gateway's count path)."""
    return {
        "/v1/responses/input_tokens": {
            "post": {
                "operationId": "countResponseInputTokens",
                "summary": "routefit's calibrated estimate of a Responses request's input on "
                "its route, the number the fit acts on (answered locally)",
                "security": security,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ref("ResponsesInputTokensRequest")}},
                },
                "responses": responses(
                    json_ok("The estimate the fit acts on", "ResponsesInputTokens"),
                    *("400", "401", "403", "404", "413", "429"),
                ),
            }
        }
    }


def _wire_schemas(aliases: list[str]) -> dict[str, Any]:
    model = _model(aliases)
    wire_responses = responses_schemas(model)
    return {
        **ops_schemas(model),
        **messages_schemas(model),
        **wire_responses,
        **_input_tokens_schemas(wire_responses["ResponsesRequest"]),
        **gemini_schemas(model),
        "AnyError": {"anyOf": [ref("Error"), ref("AnthropicError"), ref("GoogleError")]},
        "Service": obj({"service": {"type": "string"}}, ["service"]),
        "DashboardSession": obj(
            {
                "authorized": {"type": "boolean"},
                "open": {"type": "boolean"},
                "session": {"type": "boolean"},
            },
            ["authorized", "open", "session"],
        ),
    }


class OpenAPIDocs:
    """One config's documents, one per set of aliases its callers may use, each built at its
    first request (at most one per team, and one for callers without a key)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._built: dict[tuple[str, ...], bytes] = {}

    def for_aliases(self, aliases: Sequence[str]) -> bytes:
        key = tuple(sorted(aliases))
        found = self._built.get(key)
        if found is None:
            found = self._built[key] = orjson.dumps(build_openapi(self.config, key))
        return found


def build_openapi(config: Config, aliases: Sequence[str] | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of a routefit deployment with this config; ``model`` names
    ``aliases`` (every route's by default; none: any string)."""
    secured = not config.open
    # Anthropic clients send their key as x-api-key (or a bearer): both name the team.
    security: Security = [{"bearer": []}, {"apiKey": []}] if secured else []
    paths = {
        **_chat_paths(security),
        **messages_paths(security),
        **responses_paths(security),
        **_input_tokens_paths(security),
        **gemini_paths(gemini_security(secured)),
        **_fit_paths(security),
        **_routefit_paths(security),
        **_ui_paths(security),
        **_probe_paths(),
        **_root_paths(),
        **ops_paths(security),
    }
    aliases = sorted(config.routes) if aliases is None else list(aliases)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "routefit",
            "version": "0.1.0",
            "description": "LLM gateway (OpenAI chat and Responses, Anthropic Messages) that "
            "prices each request the way its route counts it and fits it to the route's "
            "context budget.",
        },
        "paths": paths,
        "components": {"schemas": {**_schemas(aliases), **_wire_schemas(aliases)}},
    }
    if secured:
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            **GEMINI_SECURITY_SCHEMES,
        }
    return doc
