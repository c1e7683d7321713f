"""Errors in each wire's shape.

OpenAI: ``{"error": {"message", "type", "param", "code"}}``.
Anthropic: ``{"type": "error", "error": {"type", "message"}, "request_id"}``.
Google (Gemini): ``{"error": {"code", "message", "status"}}``, ``SimError.type`` the status name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse

__all__ = ["SimError", "anthropic_error", "fault_error", "google_error", "openai_error"]


@dataclass
class SimError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.message}"


def openai_error(err: SimError, request_id: str = "") -> JSONResponse:
    body = {
        "error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}
    }
    headers = {"x-request-id": request_id, **err.headers} if request_id else dict(err.headers)
    return JSONResponse(body, status_code=err.status, headers=headers)


def anthropic_error(err: SimError, request_id: str = "") -> JSONResponse:
    body: dict[str, Any] = {
        "type": "error",
        "error": {"type": err.type, "message": err.message},
        "request_id": request_id or None,
    }
    headers = {"request-id": request_id, **err.headers} if request_id else dict(err.headers)
    return JSONResponse(body, status_code=err.status, headers=headers)


def google_error(err: SimError, request_id: str = "") -> JSONResponse:
    body = {"error": {"code": err.status, "message": err.message, "status": err.type}}
    return JSONResponse(body, status_code=err.status, headers=dict(err.headers))


_GOOGLE_FAULTS: dict[int, tuple[str, str]] = {
    400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
    401: ("UNAUTHENTICATED", "Request had invalid authentication credentials."),
    403: ("PERMISSION_DENIED", "The caller does not have permission"),
    404: ("NOT_FOUND", "Requested entity was not found."),
    429: ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."),
    500: ("INTERNAL", "An internal error has occurred. Please retry or report it."),
    503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
    504: ("DEADLINE_EXCEEDED", "The request timed out. Please try again."),
}


_OPENAI_FAULTS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Bad request (injected by the simulator)."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: (
        "invalid_request_error",
        "unsupported_country_region_territory",
        "Country, region, or territory not supported.",
    ),
    404: (
        "invalid_request_error",
        "model_not_found",
        "The model does not exist or you do not have access to it.",
    ),
    408: ("timeout", None, "Request timed out."),
    429: (
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests. Please try again in 1s.",
    ),
    500: (
        "server_error",
        None,
        "The server had an error while processing your request. Sorry about that!",
    ),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
    504: ("server_error", None, "Gateway timeout."),
}
_ANTHROPIC_FAULTS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Bad request (injected by the simulator)."),
    401: ("authentication_error", "invalid x-api-key"),
    403: (
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
    500: ("api_error", "Internal server error"),
    502: ("api_error", "Bad gateway"),
    503: ("api_error", "Service unavailable"),
    529: ("overloaded_error", "Overloaded"),
}


def fault_error(wire: str, status: int) -> SimError:
    """The error an injected ``status:N`` fault answers with."""
    headers = {"retry-after": "1"} if status == 429 else {}
    if status == 429 and wire == "openai":
        headers["retry-after-ms"] = "1000"
    if wire == "gemini":
        kind, message = _GOOGLE_FAULTS.get(
            status, ("INTERNAL" if status >= 500 else "FAILED_PRECONDITION", f"HTTP {status}")
        )
        return SimError(status, message, kind, headers=headers)
    if wire == "anthropic":
        kind, message = _ANTHROPIC_FAULTS.get(
            status, ("api_error" if status >= 500 else "invalid_request_error", f"HTTP {status}")
        )
        return SimError(status, message, kind, headers=headers)
    kind, code, message = _OPENAI_FAULTS.get(
        status,
        ("server_error" if status >= 500 else "invalid_request_error", None, f"HTTP {status}"),
    )
    return SimError(status, message, kind, None, code, headers)
