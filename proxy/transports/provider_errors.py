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
from collections.abc import AsyncIterator, Mapping

import orjson

from proxy.errors import ProxyError
from proxy.exchange import CHAT, GEMINI, MESSAGES, RESPONSES, EventStream, Transient
from proxy.exchange.sse import encode, event_data, event_name

__all__ = [
    "RETRY_STATUSES",
    "Scrubbed",
    "account_figures_hidden",
    "client_status",
    "keepalive",
    "rate_limited",
    "redact",
    "redact_value",
    "retry_after",
    "stream_error",
    "upstream_error",
]

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


#: What a provider's rate-limit error says of the account routefit's key belongs to, which
#: every team of the route shares: its figures (OpenAI's "Limit 30000, Used 29000", earlier
#: "Limit: 150000 / min. Current: 149040 / min"; Google's "limit: 10"), i.e. the other teams'
#: volume. The request's own figure ("Requested 1500"), the kind of limit and the wait are the
#: team's and stay. Only a rate limit's message is read so
#: (``account_figures_hidden``): another error's figures are the request's own (Anthropic's
#: "context limit: 12345 + 4096 > 200000", which ``proxy.overflow.provider_count`` refits on).
_ACCOUNT_FIGURE = re.compile(
    r"\b(limit|used|usage|remaining|current)(\s*[:=]?\s*)\d(?:[\d_]|[,.](?=\d))*"
    # Anthropic's: "the rate limit for your organization ([redacted]) of 30,000 input tokens
    # per minute", "your organization's rate limit of 30,000 ..." (its id already redacted)
    r"|\b(limit\b[^\d.]{0,60}?\bof)(\s+)\d(?:[\d_]|[,.](?=\d))*",
    re.IGNORECASE,
)
#: The account's organization and project ids, in any provider message: OpenAI's (``org-…``,
#: ``proj_…``), Google's Cloud project (``project_number:696498078762``, the consumer its quota
#: message names), and Anthropic's, a UUID after "organization (" or "org: " (``_ORG_UUID``).
_ACCOUNT_ID = re.compile(r"\b(?:org|proj)[-_][A-Za-z0-9]{6,}|\bproject_number:\d+")
_ORG_UUID = re.compile(
    r"(\b(?:org|organization)(?::\s*|\s*\(\s*))[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}",
    re.IGNORECASE,
)


def redact(text: str, secret: str | None = None) -> str:
    """``text`` without ``secret``, without anything that looks like a key, and without the
    shared account's ids."""
    if secret:
        text = text.replace(secret, "[redacted]")
    text = _ORG_UUID.sub(r"\1[redacted]", _ACCOUNT_ID.sub("[redacted]", text))
    return _KEYLIKE.sub("[redacted]", text)


def account_figures_hidden(text: str) -> str:
    """A rate-limit message without the shared account's limit and usage figures (another
    team's volume is not this team's business: docs/security.md)."""
    return _ACCOUNT_FIGURE.sub(_figure_hidden, text)


def _figure_hidden(found: re.Match[str]) -> str:
    """An account figure's words kept, its number replaced (either form of ``_ACCOUNT_FIGURE``)."""
    words, space = (found[1], found[2]) if found[1] is not None else (found[3], found[4])
    return f"{words}{space}[redacted]"


def redact_value(value: object, secret: str | None = None, limited: bool = False) -> object:
    """A JSON value with every string in it (keys included) redacted, at any depth; and of a
    rate limit's (``limited``), without the shared account's figures too."""
    if isinstance(value, str):
        text = redact(value, secret)
        return account_figures_hidden(text) if limited else text
    if isinstance(value, dict):
        return {redact(str(k), secret): redact_value(v, secret, limited) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, secret, limited) for v in value]
    return value


def rate_limited(err: object) -> bool:
    """Whether a provider's error object (``{"message": ..., "code": ...}``) is a rate limit:
    its status, stated or by its kind, is 429."""
    return isinstance(err, dict) and _status_of(err) == 429


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
    message = redact(message, secret)
    err = cls(
        status,
        account_figures_hidden(message) if status == 429 else message,
        code=_field(code, secret),
        param=_field(param, secret),
        type=_field(kind, secret),
        headers={k: redact(v, secret) for k, v in passed.items()},
    )
    if isinstance(err, Transient):
        err.retry_after = wait
    return err


#: The HTTP status each provider's error kind is answered with when it comes as a status
#: (Anthropic's ``error.type``, OpenAI's ``type`` or ``code``, Google's ``status``): what a
#: provider's error inside a 200 stream is taken for.
_KIND_STATUS = {
    # Anthropic
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
    # OpenAI (chat and Responses; a Responses overflow streams only its ``code``)
    "invalid_prompt": 400,
    "context_length_exceeded": 400,
    "invalid_api_key": 401,
    "model_not_found": 404,
    "insufficient_quota": 429,
    "rate_limit_exceeded": 429,
    "server_error": 500,
    "service_unavailable": 503,
    "overloaded": 503,
    # Google
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}


def _status_of(err: dict[str, object]) -> int:
    """The status a provider's error object stands for: a number it states (Google's
    ``code``; some OpenAI-compatible providers'), else its kind's (``_KIND_STATUS``), else 502
    (the provider failed, in words routefit does not know)."""
    for key in ("code", "status", "status_code"):
        value = err.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    for key in ("type", "code", "status"):
        value = err.get(key)
        if isinstance(value, str) and value in _KIND_STATUS:
            return _KIND_STATUS[value]
    return 502


def _error_object(wire: str, event: bytes) -> dict[str, object] | None:
    """The provider's own error object when ``event`` is its wire's error event: Anthropic's
    ``error`` event, an OpenAI chat or Gemini chunk that is ``{"error": {...}}``, a Responses
    ``error`` or ``response.failed`` event (its ``response.error``)."""
    data = event_data(event)
    if data is None or b"error" not in data:
        return None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    found: object = None
    if wire in (CHAT, GEMINI):
        found = obj.get("error")
    elif wire == MESSAGES:
        if event_name(event) == b"error" or obj.get("type") == "error":
            found = obj.get("error")
            found = found if isinstance(found, dict) else {"type": "api_error"}
    elif wire == RESPONSES:
        kind = event_name(event) or str(obj.get("type") or "").encode()
        if kind == b"error":  # its fields beside the event's own type
            found = {k: obj.get(k) for k in ("code", "message", "param")}
        elif kind == b"response.failed":
            response = obj.get("response")
            found = response.get("error") if isinstance(response, dict) else None
            found = found if isinstance(found, dict) else {"code": "server_error"}
    return found if isinstance(found, dict) else None


#: The 5xx statuses HTTP defines that a client's SDK reads for a failed upstream.
_HTTP_5XX = frozenset({500, 501, 502, 503, 504, 505})
#: Anthropic's own status for an overloaded API, which only its clients know.
OVERLOADED = 529


def client_status(status: int, wire: str) -> int:
    """The status a provider's failure is answered with to a client of ``wire``: its own, unless
    it is a provider's word outside HTTP's 5xx. Anthropic's 529 "overloaded" stays 529 for an
    Anthropic client (its SDK and Claude Code read it) and is a 503 for an OpenAI or Gemini
    client (what OpenAI and Google answer when overloaded: their SDKs' retryable "unavailable");
    any other such status (a CDN's 520-527, a 599) is a 502, the gateway's word for an
    upstream that failed."""
    if status < 500 or status in _HTTP_5XX:
        return status
    if status == OVERLOADED:
        return OVERLOADED if wire == MESSAGES else 503
    return 502


def keepalive(wire: str, event: bytes) -> bool:
    """Whether ``event`` (in provider ``wire``) only keeps the connection alive: an SSE comment
    (``: keep-alive``, OpenRouter's ``: OPENROUTER PROCESSING``) or an event with no data, and
    Anthropic's ``ping``. Such events before a stream's first real one say nothing of the
    answer: an error after them is still the stream's first word (``stream_error``)."""
    data = event_data(event)
    if not data:
        return True
    if wire != MESSAGES:
        return False
    if event_name(event) == b"ping":
        return True
    if b"ping" not in data:
        return False
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and obj.get("type") == "ping"


def stream_error(wire: str, event: bytes, secret: str | None = None) -> ProxyError | None:
    """The provider's failure when ``event``, a stream's first, is its provider ``wire``'s
    error event (None: it is not): what the same error as an HTTP status would have been
    (``upstream_error``: its status, message and kind, scrubbed of keys), and a ``Transient``
    when the provider is overloaded, rate-limited or failed (429 and every 5xx), so that
    another deployment may answer. Nothing of the stream has reached the client yet."""
    err = _error_object(wire, event)
    if err is None:
        return None
    status = _status_of(err)
    failure = upstream_error(status, orjson.dumps({"error": err}), {}, secret)
    if status == 429 or status >= 500:
        return Transient(
            failure.status,
            failure.message,
            code=failure.code,
            param=failure.param,
            type=failure.type,
            headers=failure.headers,
        )
    return failure


def scrub_event(wire: str, event: bytes, secret: str | None = None) -> bytes:
    """``event`` as the client may see it: when it is the provider's own error event (in its
    ``wire``), every string in it redacted (``redact_value``); any other event as it came."""
    err = _error_object(wire, event) if b"error" in event else None
    if err is None:
        return event
    data = event_data(event)
    assert data is not None  # an error object was read from it
    obj = orjson.loads(data)
    clean = redact_value(obj, secret, rate_limited(err))
    if clean == obj:
        return event
    name = event_name(event)
    return encode(clean, name.decode("utf-8", "replace") if name is not None else None)


class Scrubbed:
    """A provider's event stream whose error events are scrubbed of keys (``scrub_event``): a
    native route relays the provider's events as they came, so an error it sends mid-stream,
    after bytes went out, reached the client with the key it echoed."""

    def __init__(self, source: EventStream, wire: str, secret: str | None = None) -> None:
        self._source = source
        self._wire = wire
        self._secret = secret

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for event in self._source:
            yield scrub_event(self._wire, event, self._secret)

    async def aclose(self) -> None:
        await self._source.aclose()
