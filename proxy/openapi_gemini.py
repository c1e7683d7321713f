"""OpenAPI description of the Gemini wire: ``POST /v1beta/models/{model}:generateContent``,
``:streamGenerateContent`` (SSE with ``alt=sse``, else a JSON array) and ``:countTokens``, the
same under ``/v1/``; a faithful subset of Google's request schema (contents of text, inline
images, function calls and responses; ``systemInstruction``, function declarations, the
generation settings), every error in Google's shape (``{"error": {"code", "message",
"status"}}``). ``{model}`` is one of this deployment's aliases; the key goes in
``x-goog-api-key``, ``?key=`` or a bearer token."""

from __future__ import annotations

from typing import Any

from proxy.openapi_parts import Security, json_ok, obj, ref, responses, sse_ok

__all__ = ["GEMINI_SECURITY_SCHEMES", "gemini_paths", "gemini_schemas", "gemini_security"]

#: Where Gemini clients put their key, beside the bearer every wire takes.
GEMINI_SECURITY_SCHEMES = {
    "googApiKey": {"type": "apiKey", "in": "header", "name": "x-goog-api-key"},
    "googKey": {"type": "apiKey", "in": "query", "name": "key"},
}
_VERSIONS = ("v1beta", "v1")
_IMAGES = ["image/png", "image/jpeg", "image/gif", "image/webp"]


def gemini_security(secured: bool) -> Security:
    return [{"bearer": []}, {"googApiKey": []}, {"googKey": []}] if secured else []


def _parts() -> dict[str, Any]:
    text = obj({"text": {"type": "string"}, "thought": {"type": "boolean"}}, ["text"], extra=True)
    inline = obj(
        {
            "inlineData": obj(
                {"mimeType": {"type": "string", "enum": _IMAGES}, "data": {"type": "string"}},
                ["mimeType", "data"],
            )
        },
        ["inlineData"],
    )
    fn = {"name": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$"}}
    call = obj(
        {
            "functionCall": obj(
                {**fn, "id": {"type": "string"}, "args": {"type": "object"}}, ["name"]
            )
        },
        ["functionCall"],
        extra=True,
    )
    response = obj(
        {
            "functionResponse": obj(
                {**fn, "id": {"type": "string"}, "response": {"type": "object"}},
                ["name", "response"],
            )
        },
        ["functionResponse"],
    )
    return {"GeminiPart": {"anyOf": [text, inline, call, response]}}


def _request(model: dict[str, Any]) -> dict[str, Any]:
    content = obj(
        {
            "role": {"type": "string", "enum": ["user", "model"]},
            "parts": {"type": "array", "items": ref("GeminiPart"), "minItems": 1},
        },
        ["parts"],
    )
    declaration = obj(
        {
            "name": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$"},
            "description": {"type": "string"},
            "parameters": {"type": "object"},
            "parametersJsonSchema": {"type": "object"},
        },
        ["name"],
    )
    config = obj(
        {
            "maxOutputTokens": {"type": "integer", "minimum": 1, "maximum": 65536},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "topP": {"type": "number", "minimum": 0, "maximum": 1},
            "topK": {"type": "integer", "minimum": 1},
            "candidateCount": {"type": "integer", "minimum": 1, "maximum": 1},
            "stopSequences": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
            "responseMimeType": {"type": "string", "enum": ["text/plain", "application/json"]},
            "responseJsonSchema": {"type": "object"},
            "seed": {"type": "integer"},
        },
        extra=True,
    )
    tools = {
        "type": "array",
        "items": obj({"functionDeclarations": {"type": "array", "items": declaration}}),
    }
    body = obj(
        {
            "contents": {"type": "array", "items": content, "minItems": 1},
            "systemInstruction": obj({"parts": {"type": "array", "items": ref("GeminiPart")}}),
            "tools": tools,
            "toolConfig": {"type": "object"},
            "safetySettings": {"type": "array", "items": {"type": "object"}},
            "generationConfig": config,
        },
        ["contents"],
    )
    count = {
        "anyOf": [
            body,
            obj(
                {"generateContentRequest": ref("GenerateContentRequest")},
                ["generateContentRequest"],
            ),
        ]
    }
    # routefit's dry run (POST /routefit/fit?wire=gemini) has no URL to carry the model: the
    # body names it, as the alias
    fit = {
        **body,
        "properties": {**body["properties"], "model": {"type": "string", "minLength": 1}},
        "required": ["contents", "model"],
    }
    return {
        "GeminiModel": model,
        "GenerateContentRequest": body,
        "GeminiCountRequest": count,
        "GeminiFitRequest": fit,
    }


def gemini_schemas(model: dict[str, Any]) -> dict[str, Any]:
    """The request, answer, event, count and error schemas of the Gemini wire."""
    answer = obj(
        {
            "candidates": {"type": "array", "items": {"type": "object"}},
            "usageMetadata": {"type": "object"},
            "modelVersion": {"type": "string"},
            "responseId": {"type": "string"},
        },
        extra=True,
    )
    error = obj(
        {
            "error": obj(
                {
                    "code": {"type": "integer"},
                    "message": {"type": "string"},
                    "status": {"type": "string"},
                },
                ["code", "message", "status"],
                extra=True,
            )
        },
        ["error"],
    )
    return {
        **_parts(),
        **_request(model),
        "GenerateContentResponse": answer,
        "GenerateContentChunks": {"type": "array", "items": ref("GenerateContentResponse")},
        "GeminiStreamEvent": {"anyOf": [ref("GenerateContentResponse"), ref("GoogleError")]},
        "GeminiTokenCount": obj(
            {"totalTokens": {"type": "integer", "minimum": 0}}, ["totalTokens"]
        ),
        "GoogleError": error,
    }


def _operation(
    op: str, summary: str, body: str, ok: dict[str, Any], security: Security, *errors: str
) -> dict[str, Any]:
    model = {"name": "model", "in": "path", "required": True, "schema": ref("GeminiModel")}
    alt = {"name": "alt", "in": "query", "required": False, "schema": {"enum": ["sse"]}}
    return {
        "post": {
            "operationId": op,
            "summary": summary,
            "security": security,
            "parameters": [model, alt] if op.startswith("stream") else [model],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref(body)}},
            },
            "responses": responses(ok, *errors, error="GoogleError"),
        }
    }


def gemini_paths(security: Security) -> dict[str, Any]:
    """The three methods under ``/v1beta`` (the default of Gemini CLI and the REST docs) and
    ``/v1`` (the ``google-genai`` SDK's ``api_version="v1"``)."""
    errors = ("400", "401", "403", "404", "413", "429", "502", "503", "504")
    out: dict[str, Any] = {}
    for version in _VERSIONS:
        base = f"/{version}/models/{{model}}"
        tail = "" if version == "v1beta" else "V1"
        out[base + ":generateContent"] = _operation(
            "generateContent" + tail,
            "Price, fit and forward a Gemini generateContent request",
            "GenerateContentRequest",
            json_ok("The provider's answer in Gemini's shape", "GenerateContentResponse"),
            security,
            *errors,
        )
        out[base + ":streamGenerateContent"] = _operation(
            "streamGenerateContent" + tail,
            "The same, streamed: SSE with alt=sse, else one JSON array",
            "GenerateContentRequest",
            sse_ok("The answer's chunks", "GenerateContentChunks", "GeminiStreamEvent"),
            security,
            *errors,
        )
        out[base + ":countTokens"] = _operation(
            "countTokens" + tail,
            "routefit's calibrated estimate of the request on its route (answered locally)",
            "GeminiCountRequest",
            json_ok("The estimate the fit acts on", "GeminiTokenCount"),
            security,
            *("400", "401", "403", "404", "413", "429"),
        )
    return out
