"""Each client wire's own error shape: Anthropic's under ``/v1/messages`` (its SDK and Claude
Code read ``{"type": "error", "error": {"type", "message"}}``), Google's under the Gemini
methods (``{"error": {"code", "message", "status"}}``), OpenAI's everywhere else."""

from __future__ import annotations

import json
import re

from relkit import check_error_shape

ANTHROPIC_PREFIX = "/v1/messages"
#: ``/v1beta/models/NAME:method`` and ``/v1/models/NAME:method``.
_GEMINI = re.compile(r"^/v1(beta)?/models/[^/]+:[A-Za-z]+$")


def check_google_error_shape(
    status: int, body: bytes, what: str = "", allow_5xx: bool = False
) -> None:
    """Raise AssertionError unless the answer is a non-5xx (unless ``allow_5xx``: a provider
    fault passed on) and, when an error, Google's."""
    text = body.decode("utf-8", "replace")
    assert allow_5xx or status < 500, f"{what}: HTTP {status}: {text[:500]}"
    assert "Traceback" not in text, f"{what}: traceback in the answer: {text[:500]}"
    if status < 400:
        return
    try:
        data = json.loads(body)
    except ValueError:
        raise AssertionError(f"{what}: HTTP {status} answer is not JSON: {text[:300]}") from None
    assert isinstance(data, dict) and set(data) == {"error"}, f"{what}: {text[:300]}"
    err = data["error"]
    assert isinstance(err, dict) and set(err) == {"code", "message", "status"}, text[:300]
    assert err["code"] == status and isinstance(err["status"], str), f"{what}: {text[:300]}"
    assert isinstance(err["message"], str) and err["message"], f"{what}: {text[:300]}"


def check_anthropic_error_shape(
    status: int, body: bytes, what: str = "", allow_5xx: bool = False
) -> None:
    """Raise AssertionError unless the answer is a non-5xx (unless ``allow_5xx``: a provider
    fault passed on) and, when an error, Anthropic's."""
    text = body.decode("utf-8", "replace")
    assert allow_5xx or status < 500, f"{what}: HTTP {status}: {text[:500]}"
    assert "Traceback" not in text, f"{what}: traceback in the answer: {text[:500]}"
    if status < 400:
        return
    try:
        data = json.loads(body)
    except ValueError:
        raise AssertionError(f"{what}: HTTP {status} answer is not JSON: {text[:300]}") from None
    assert isinstance(data, dict) and set(data) == {"type", "error"}, f"{what}: {text[:300]}"
    assert data["type"] == "error", f"{what}: {text[:300]}"
    err = data["error"]
    assert isinstance(err, dict) and set(err) == {"type", "message"}, f"{what}: {text[:300]}"
    assert isinstance(err["type"], str) and err["type"], f"{what}: {text[:300]}"
    assert isinstance(err["message"], str) and err["message"], f"{what}: {text[:300]}"


def wire_of(path: str, wire: object = None) -> str:
    """``messages`` when the answer to ``path`` is Anthropic-shaped, ``gemini`` when Google's
    (``wire``: the dry run's ``?wire=`` parameter)."""
    if path.startswith(ANTHROPIC_PREFIX):
        return "messages"
    if _GEMINI.match(path):
        return "gemini"
    if path.startswith("/routefit/fit") and wire in ("messages", "gemini"):
        return str(wire)
    return "openai"


def check_wire_error_shape(
    path: str,
    status: int,
    body: bytes,
    what: str = "",
    wire: object = None,
    allow_5xx: bool = False,
) -> None:
    """The error shape of the wire ``path`` belongs to."""
    kind = wire_of(path, wire)
    if kind == "messages":
        check_anthropic_error_shape(status, body, what or path, allow_5xx)
    elif kind == "gemini":
        check_google_error_shape(status, body, what or path, allow_5xx)
    else:
        check_error_shape(status, body, what or path, allow_5xx)
