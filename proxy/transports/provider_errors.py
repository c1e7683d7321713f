"""A provider's failure as a ``ProxyError``: its status, message and Retry-After, never its keys.

Provider keys never leave the process: upstream error messages are scrubbed of the route's key
and of anything that looks like a key (``sk-…``, masked ``abc***xyz`` forms) before they reach a
client.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping

import orjson

from proxy.errors import ProxyError
from proxy.transports.base import Transient

__all__ = ["RETRY_STATUSES", "redact", "retry_after", "upstream_error"]

#: Answers worth another attempt: the provider (or a hop before it) is overloaded or failed,
#: not the request.
RETRY_STATUSES = frozenset({429, 502, 503, 504})

#: Things that look like credentials in a provider's error text: ``sk-…``-style keys and the
#: masked forms providers echo (``sk-abc*****wxyz``).
_KEYLIKE = re.compile(
    r"\b(?:sk|pk|rk)[-_][A-Za-z0-9_\-*]{6,}|\S{0,12}\*{3,}\S{0,12}",
    re.IGNORECASE,
)


def redact(text: str, secret: str | None = None) -> str:
    """``text`` without ``secret`` and without anything that looks like a key."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms`` (OpenAI) or ``Retry-After`` (seconds or an HTTP date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return float(when.timestamp()) - time.time()


def _message_fields(content: bytes, status: int) -> tuple[str, object, object, object]:
    """(message, code, param, type) from any provider's error body (OpenAI's, Anthropic's, text)."""
    message = f"upstream returned HTTP {status}"
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        text = content[:300].decode("utf-8", "replace").strip()
        return (f"{message}: {text}" if text else message), None, None, None
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        return (
            str(err.get("message") or message),
            err.get("code"),
            err.get("param"),
            err.get("type"),
        )
    if isinstance(err, str):
        return err, None, None, None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return data["message"], None, None, None
    return message, None, None, None


def upstream_error(
    status: int, content: bytes, headers: Mapping[str, str], secret: str | None = None
) -> ProxyError:
    """The provider's error, passed through with its status, message and Retry-After.

    The message is scrubbed of the route's key (and anything key-like); a 429/502/503/504 is a
    ``Transient`` the retry wrapper may try again."""
    message, code, param, kind = _message_fields(content, status)
    passed = {k: v for k, v in headers.items() if k.lower() in ("retry-after", "x-request-id")}
    cls = Transient if status in RETRY_STATUSES else ProxyError
    err = cls(
        status,
        redact(message, secret),
        code=str(code) if code is not None else None,
        param=str(param) if param is not None else None,
        type=str(kind) if kind is not None else None,
        headers=passed,
    )
    if isinstance(err, Transient):
        err.retry_after = retry_after(headers)
    return err
