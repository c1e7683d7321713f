"""The OpenAPI description (``proxy.openapi``) of what operators and LiteLLM users call beside
the chat wires: LiteLLM's health family (``proxy.health``), the request log
(``GET /routefit/requests``), the config reload (``POST /routefit/reload``, ``proxy.reload``) and
OpenAI's embeddings (``POST /v1/embeddings``, ``proxy.embeddings``). ``/v1/completions`` is not
served (a 404 naming what is), so it is not described."""

from __future__ import annotations

from typing import Any

from proxy.openapi_parts import Security, get, json_ok, obj, ref, responses

__all__ = ["ops_paths", "ops_schemas"]

_TEXT = {"type": "string"}
_TEXT_IN = {"type": "string", "minLength": 1}
_TOKENS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _health_paths(security: Security) -> dict[str, Any]:
    """LiteLLM's probes: liveliness and readiness for orchestrators (no key), ``/health`` for
    a caller's routes (its key; no provider is called)."""
    alive = {
        "description": "Alive",
        "content": {"application/json": {"schema": {"type": "string"}}},
    }
    stopping = json_ok("Draining after SIGTERM", "Object")
    model = _query("model", {"type": "string"}, "One route alias only (503 when not served)")
    live = get("healthLiveliness", "The process answers", {"200": alive, "503": stopping})
    return {
        "/health": get(
            "health",
            "The caller's routes and whether routefit can forward to each (no provider call)",
            {
                **responses(json_ok("Healthy and unhealthy routes", "HealthEndpoints"), "401"),
                "404": responses({}, "404")["404"],
                "503": json_ok("The one route asked for cannot be served", "HealthEndpoints"),
            },
            security=security,
            parameters=[model],
        ),
        "/health/liveliness": live,
        "/health/liveness": {"get": {**live["get"], "operationId": "healthLiveness"}},
        "/health/readiness": get(
            "healthReadiness",
            "It can serve (LiteLLM's answer; db is routefit's store)",
            {"200": json_ok("Healthy", "Object"), "503": json_ok("Not ready", "Object")},
        ),
    }


def _requests_paths(security: Security) -> dict[str, Any]:
    params = [
        _query("team", {"type": "string"}, "One team's records (admin key; a team key: its own)"),
        _query("limit", {"type": "integer", "minimum": 1}, "At most this many, newest first"),
        _query("route", {"type": "string"}, "One route alias"),
        _query(
            "status",
            {"type": "string", "pattern": "^([0-9]{3}|[1-5]xx)$"},
            "A status code or class (4xx)",
        ),
        _query("since", {"type": "number"}, "Records from this time on (unix seconds)"),
    ]
    return {
        "/routefit/requests": get(
            "listRequests",
            "The request log: one record per request (admin key, or a team's own)",
            responses(
                json_ok("The records", "RequestLog"), "400", "401", "403", "404", "429", "503"
            ),
            security=security,
            parameters=params,
        ),
    }


def _reload_paths(security: Security) -> dict[str, Any]:
    refused = {
        "description": "The config file was refused (invalid_config: the loader's message); "
        "the running config stays",
        "content": {"application/json": {"schema": ref("Error")}},
    }
    every = json_ok("--workers N: the file checked, every worker reloads", "Object")
    return {
        "/routefit/reload": {
            "post": {
                "operationId": "reloadConfig",
                "summary": "Read the config file again and serve it from now on (admin key)",
                "security": security,
                "responses": {
                    **responses(json_ok("Reloaded", "ReloadResult"), "401", "403", "429"),
                    "202": every,
                    "422": refused,
                },
            }
        },
    }


def _embeddings_paths(security: Security) -> dict[str, Any]:
    errors = ("400", "401", "403", "404", "413", "429", "502", "503", "504")
    return {
        "/v1/embeddings": {
            "post": {
                "operationId": "createEmbedding",
                "summary": "Embed the inputs on the route, counted against the team's budget",
                "security": security,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ref("EmbeddingRequest")}},
                },
                "responses": responses(json_ok("The embeddings", "EmbeddingList"), *errors),
            }
        },
    }


def ops_paths(security: Security) -> dict[str, Any]:
    return {
        **_health_paths(security),
        **_requests_paths(security),
        **_reload_paths(security),
        **_embeddings_paths(security),
    }


def ops_schemas(model: dict[str, Any]) -> dict[str, Any]:
    """The schemas of these paths; ``model`` is the alias schema of the deployment."""
    endpoint = obj(
        {
            "model": {"type": "string"},
            "litellm_model": {"type": "string"},
            "transport": {"type": "string"},
            "provider_key": {"type": "string", "enum": ["set", "client", "none", "unset"]},
            "error": {"type": "string"},
        },
        ["model", "litellm_model", "transport", "provider_key"],
    )
    endpoints = {"type": "array", "items": endpoint}
    embedding = obj(
        {
            "object": {"type": "string"},
            "index": {"type": "integer"},
            # floats, or base64 of little-endian float32 (encoding_format)
            "embedding": {"anyOf": [{"type": "array", "items": {"type": "number"}}, _TEXT]},
        },
        ["index", "embedding"],
        extra=True,
    )
    return {
        "HealthEndpoints": obj(
            {
                "healthy_endpoints": endpoints,
                "unhealthy_endpoints": endpoints,
                "healthy_count": {"type": "integer"},
                "unhealthy_count": {"type": "integer"},
                "probed": {"type": "boolean"},
            },
            ["healthy_endpoints", "unhealthy_endpoints", "healthy_count", "unhealthy_count"],
        ),
        "RequestLog": obj(
            {"object": {"type": "string"}, "data": {"type": "array", "items": ref("Object")}},
            ["object", "data"],
        ),
        "ReloadResult": obj(
            {
                "reloaded": {"type": "boolean"},
                "generation": {"type": "integer", "minimum": 1},
                "config": {"type": "string"},
                "routes": {"type": "array", "items": {"type": "string"}},
                "teams": {"type": "integer", "minimum": 0},
                "warnings": {"type": "array", "items": {"type": "string"}},
            },
            ["reloaded", "generation", "routes"],
        ),
        "EmbeddingRequest": obj(
            {
                "model": model,
                "input": {
                    "anyOf": [
                        _TEXT_IN,
                        {"type": "array", "items": _TEXT_IN, "minItems": 1},
                        _TOKENS,
                        {"type": "array", "items": _TOKENS, "minItems": 1},
                    ]
                },
                "encoding_format": {"type": "string", "enum": ["float", "base64"]},
                "dimensions": {"type": "integer", "minimum": 1},
                "user": {"type": "string"},
            },
            ["model", "input"],
        ),
        "EmbeddingList": obj(
            {
                "object": {"type": "string"},
                "data": {"type": "array", "items": embedding},
                "model": {"type": "string"},
                "usage": obj(
                    {"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}},
                    extra=True,
                ),
            },
            ["data"],
            extra=True,
        ),
    }
