"""The building blocks of routefit's OpenAPI document (``proxy.openapi``): JSON Schema and
OpenAPI fragments shared by every wire's description, so each wire's schemas read as data."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ERROR_STATUSES",
    "NAME",
    "Security",
    "get",
    "json_ok",
    "nullable",
    "obj",
    "ref",
    "responses",
    "sse_ok",
]

#: An operation's ``security`` list.
Security = list[dict[str, list[str]]]

ERROR_STATUSES = {
    "400": "Invalid request (OpenAI's invalid_request_error), or context_length_exceeded",
    "401": "Missing or invalid API key",
    "403": "The key may not use this model or endpoint",
    "404": "Unknown model, path, team or stored response",
    "405": "Method not allowed",
    "413": "Request body above the configured limit",
    "429": "Team quota exhausted, or the provider's rate limit (Retry-After)",
    "500": "routefit internal error (a bug: never expected)",
    "502": "The provider failed, answered malformed, or is unreachable",
    "503": "The provider is unavailable, its key is unset, or the store is down",
    "504": "The provider timed out",
}

NAME = {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def obj(
    properties: dict[str, Any], required: list[str] | None = None, *, extra: bool = False
) -> dict[str, Any]:
    """An object schema; closed (``additionalProperties: false``) unless ``extra``."""
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    if not extra:
        out["additionalProperties"] = False
    return out


def responses(ok: dict[str, Any], *errors: str, error: str = "Error") -> dict[str, Any]:
    """200 ``ok`` plus the listed error statuses, each in the ``error`` schema (the wire's
    own error shape)."""
    out: dict[str, Any] = {"200": ok}
    for status in errors:
        out[status] = {
            "description": ERROR_STATUSES[status],
            "content": {"application/json": {"schema": ref(error)}},
        }
    return out


def json_ok(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref(schema)}}}


def sse_ok(description: str, schema: str, event: str) -> dict[str, Any]:
    """A JSON answer or its stream: ``event`` is one server-sent event (OpenAPI 3.2's
    itemSchema; schemathesis reads a 3.1 event-stream schema the same way)."""
    return {
        "description": description,
        "content": {
            "application/json": {"schema": ref(schema)},
            "text/event-stream": {"schema": ref(event)},
        },
    }


def get(operation: str, summary: str, answers: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"get": {"operationId": operation, "summary": summary, **more, "responses": answers}}
