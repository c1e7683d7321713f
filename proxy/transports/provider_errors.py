"""A provider's failure as a ``ProxyError``: its status, message and Retry-After, never its keys.

Provider keys never leave the process: every field of an upstream error that reaches a client
(message, code, param, type — whatever their nesting) is scrubbed of the route's key and of
anything that looks like a key (``sk-…``, ``Bearer …``, masked ``abc***xyz`` forms). A provider
that echoes the key it was sent in ``param`` or ``code`` (some do, on a 401) must not hand it to
every client of the route.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping

import orjson

from proxy.errors import ProxyError
from proxy.exchange import Transient

__all__ = ["RETRY_STATUSES", "redact", "redact_value", "retry_after", "upstream_error"]

#: Answers worth another attempt: the provider (or a hop before it) is overloaded or failed,
#: not the request.
RETRY_STATUSES = frozenset({429, 502, 503, 504})

#: Things that look like credentials in a provider's error text: ``sk-…``-style keys and the
#: masked forms providers echo (``sk-abc*****wxyz``), and bearer credentials.
_KEYLIKE = re.compile(
    r"\b(?:sk|pk|rk)[-_][A-Za-z0-9_\-*]{6,}|\S{0,12}\*{3,}\S{0,12}"
    r"|\bBearer\s+[A-Za-z0-9._~+/=\-]{6,}",
    re.IGNORECASE,
)


def redact(text: str, secret: str | None = None) -> str:
    """``text`` without ``secret`` and without anything that looks like a key."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)


def redact_value(value: object, secret: str | None = None) -> object:
    """A JSON value with every string in it (keys included) redacted, at any depth."""
    if isinstance(value, str):
        return redact(value, secret)
    if isinstance(value, dict):
        return {redact(str(k), secret): redact_value(v, secret) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, secret) for v in value]
    return value


def _field(value: object, secret: str | None) -> str | None:
    """One error field as the client gets it: a string, redacted (nested values as JSON)."""
    if value is None:
        return None
    clean = redact_value(value, secret)
    if isinstance(clean, str):
        return clean
    if isinstance(clean, dict | list):
        return orjson.dumps(clean).decode()
    return str(clean)


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

    Every field is scrubbed of the route's key (and anything key-like); a 429/502/503/504 is a
    ``Transient`` the retry wrapper may try again."""
    message, code, param, kind = _message_fields(content, status)
    passed = {
        k: v
        for k, v in headers.items()
        if k.lower() in ("retry-after", "retry-after-ms", "x-request-id")
    }
    wait = retry_after(headers)
    if (
        wait is not None
        and math.isfinite(wait)
        and "retry-after" not in {k.lower() for k in passed}
    ):
        # said only in milliseconds (``retry-after-ms``): in seconds too, the header every
        # client reads
        passed["retry-after"] = str(max(0, math.ceil(wait)))
    cls = Transient if status in RETRY_STATUSES else ProxyError
    err = cls(
        status,
        redact(message, secret),
        code=_field(code, secret),
        param=_field(param, secret),
        type=_field(kind, secret),
        headers={k: redact(v, secret) for k, v in passed.items()},
    )
    if isinstance(err, Transient):
        err.retry_after = wait
    return err
