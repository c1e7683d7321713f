"""Errors in OpenAI's shape, with the right status.

Clients (the openai SDK above all) map status codes to exception types and read
``{"error": {"message", "type", "param", "code"}}``; anything else surfaces as an opaque failure.
Every error routefit produces goes through here; nothing reaches a client as a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.responses import Response

__all__ = ["ProxyError", "error_body", "error_response"]

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}


class ProxyError(Exception):
    """A failure with a client-facing status and OpenAI-style body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type or _TYPES.get(status, "api_error")
        self.headers = dict(headers or {})
        #: "routefit" for routefit's own answers, "upstream" for what the provider said or
        #: failed to say (metrics count them apart).
        self.origin = "routefit"


def error_body(err: ProxyError) -> bytes:
    return orjson.dumps(
        {"error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}}
    )


def error_response(err: ProxyError, headers: Mapping[str, str] | None = None) -> Response:
    merged = {**err.headers, **(headers or {})}
    return Response(
        error_body(err), status_code=err.status, headers=merged, media_type="application/json"
    )
