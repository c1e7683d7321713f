"""The upstream: the only module that knows litellm.

Two transports behind one interface:

``openai``
    For providers that already speak OpenAI's wire format (OpenAI, DeepSeek, vLLM, llama.cpp,
    OpenRouter, any ``api_base`` serving ``/chat/completions``): the client's body goes out over
    one pooled ``aiohttp.ClientSession`` with only ``model`` and ``messages`` rewritten and every
    other field kept; the provider's bytes come back unchanged. No translation, no per-call cost.
``litellm``
    For providers that need translation (Anthropic, Gemini, Bedrock, ...): ``litellm.acompletion``.
    litellm costs seconds to import, so it is imported in the background at start-up only when a
    configured route needs it, never on the passthrough path.

Both report the provider's usage (normalised by ``proxy.usage``) and map failures to
``ProxyError`` with the provider's status where it has one.

Why aiohttp and not httpx for the passthrough: measured side by side on the benchmark machine
(bench/profile_proxy.py), the same proxy path did 958 requests/s with aiohttp's client and 232
with httpx's at concurrency 16 (0.61 vs 2.65 ms of CPU per request); httpcore scans its whole
pool on every request. The passthrough is the hot path, so it gets the faster client.

Retries (``routefit_settings.upstream_retries``, default 0): a failure that happened before any
byte reached the client — a connection that could not be made or was reset before the response
headers, or a 429/502/503/504 answer — is tried again, at most that many times, with
exponential backoff and jitter (``RetryPolicy``). A ``Retry-After`` of at most
``RetryPolicy.max_retry_after`` seconds replaces the backoff; a longer one is not retried (the
client gets the 429 and decides). A response whose body broke off, a read timeout (the provider
may be working on it) and anything after the first relayed byte are never retried.

Provider keys never leave the process: upstream error messages are scrubbed of the route's key
and of anything that looks like a key (``sk-…``, masked ``abc***xyz`` forms) before they reach
a client.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import os
import random
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import orjson

from proxy.config import Upstream
from proxy.errors import ProxyError
from proxy.usage import Usage, normalize_usage

__all__ = ["RETRY_STATUSES", "Completion", "RetryPolicy", "UpstreamStream", "Upstreams"]

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

_DONE = b"data: [DONE]\n\n"

T = TypeVar("T")

#: Answers worth another attempt: the provider (or a hop before it) is overloaded or failed,
#: not the request.
RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and jitter.

    Attempt ``k`` (0-based) waits ``min(cap, base * 2**k) * (1 - jitter * u)`` for a uniform
    ``u`` in [0, 1): within known bounds, so a test can check the timing. A provider's
    Retry-After replaces the backoff when it is at most ``max_retry_after`` seconds; a longer
    one ends the retries.
    """

    retries: int = 0
    base: float = 0.1
    cap: float = 2.0
    jitter: float = 0.5
    max_retry_after: float = 2.0

    def delay(self, attempt: int, retry_after: float | None, u: float) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``; None: do not retry."""
        if attempt >= self.retries:
            return None
        if retry_after is not None:
            return max(0.0, retry_after) if retry_after <= self.max_retry_after else None
        return min(self.cap, self.base * 2.0**attempt) * (1.0 - self.jitter * u)


class _Transient(ProxyError):
    """A failure before any byte reached the client that another attempt may not meet."""

    def __init__(self, *args: Any, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after


def _retry_after(headers: Mapping[str, str]) -> float | None:
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


@dataclass(slots=True)
class Completion:
    body: bytes
    usage: Usage | None
    headers: dict[str, str] = field(default_factory=dict)


def _upstream_error(
    status: int, content: bytes, headers: Mapping[str, str], secret: str | None = None
) -> ProxyError:
    """The provider's error, passed through with its status, message and Retry-After.

    The message is scrubbed of the route's key (and anything key-like); a 429/502/503/504 is a
    ``_Transient`` the retry loop may try again."""
    message = f"upstream returned HTTP {status}"
    code = param = kind = None
    try:
        data = orjson.loads(content)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict):
            message = str(err.get("message") or message)
            code, param, kind = err.get("code"), err.get("param"), err.get("type")
        elif isinstance(err, str):
            message = err
        elif isinstance(data, dict) and isinstance(data.get("message"), str):
            message = data["message"]
    except orjson.JSONDecodeError:
        text = content[:300].decode("utf-8", "replace").strip()
        if text:
            message = f"{message}: {text}"
    passed = {k: v for k, v in headers.items() if k.lower() in ("retry-after", "x-request-id")}
    cls = _Transient if status in RETRY_STATUSES else ProxyError
    err = cls(
        status,
        redact(message, secret),
        code=str(code) if code is not None else None,
        param=str(param) if param is not None else None,
        type=str(kind) if kind is not None else None,
        headers=passed,
    )
    if isinstance(err, _Transient):
        err.retry_after = _retry_after(headers)
    return err


def _error_event(message: str, code: str = "upstream_error") -> bytes:
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return b"data: " + orjson.dumps(body) + b"\n\n"


class UpstreamStream:
    """An SSE stream being relayed; ``usage`` is known once it has been consumed.

    ``events`` is set by the transport right after construction: the generator needs the
    stream object to report usage and completion into.
    """

    def __init__(self, closer: Any = None) -> None:
        self.events: AsyncGenerator[bytes, None]
        self._closer = closer
        self.usage: Usage | None = None
        self.completed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.events

    async def aclose(self) -> None:
        if self._closer is not None:
            await self._closer()


def _split_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events (with their terminator) and the incomplete rest."""
    events: list[bytes] = []
    while True:
        a = buffer.find(b"\n\n")
        b = buffer.find(b"\r\n\r\n")
        if a < 0 and b < 0:
            return events, buffer
        end = b + 4 if b >= 0 and (a < 0 or b < a) else a + 2
        events.append(buffer[:end])
        buffer = buffer[end:]


def _event_data(event: bytes) -> bytes | None:
    lines = [line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


class Upstreams:
    """The transports of one app: a pooled HTTP client and, when needed, litellm."""

    def __init__(
        self,
        needs_litellm: bool,
        max_connections: int = 512,
        *,
        retry: RetryPolicy | None = None,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        #: Called with the reason ("429", "503", "connect", ...) before each retry.
        self.on_retry = on_retry
        self._rng = random.Random()
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self.needs_litellm = needs_litellm
        self._litellm: Any = None
        self._loading: asyncio.Task[Any] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def session(self) -> aiohttp.ClientSession:
        """The pooled HTTP client (created on the running loop, as aiohttp requires)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self.max_connections, limit_per_host=0, ttl_dns_cache=300
                ),
                timeout=aiohttp.ClientTimeout(total=None),
                trust_env=False,
                auto_decompress=True,
            )
        return self._session

    def start(self) -> None:
        """Begin importing litellm in a thread when a route needs it (start-up stays fast)."""
        if self.needs_litellm and self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(
                asyncio.to_thread(_import_litellm)
            )

    @property
    def ready(self) -> bool:
        return (
            not self.needs_litellm
            or self._litellm is not None
            or (
                self._loading is not None and self._loading.done() and not self._loading.exception()
            )
        )

    async def litellm(self) -> Any:
        if self._litellm is None:
            if self._loading is None:
                self._loading = asyncio.get_running_loop().create_task(
                    asyncio.to_thread(_import_litellm)
                )
            self._litellm = await self._loading
        return self._litellm

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    # -- OpenAI-compatible passthrough -----------------------------------------------------

    async def _attempts(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, tried again on a transient failure as the retry policy allows."""
        attempt = 0
        while True:
            try:
                return await call()
            except _Transient as err:
                wait = self.retry.delay(attempt, err.retry_after, self._rng.random())
                if wait is None:
                    raise
                if self.on_retry is not None:
                    self.on_retry(err.code if err.status == 502 and err.code else str(err.status))
                attempt += 1
                await asyncio.sleep(wait)

    async def _send(self, up: Upstream, body: Mapping[str, Any]) -> aiohttp.ClientResponse:
        """The provider's response once its headers arrived (body unread) — 2xx only.

        Failures before the headers are ``_Transient`` when nothing can have been processed
        (the connection failed or was reset); an error status raises ``_upstream_error``.
        ``up.timeout`` bounds connecting and every wait for bytes (not the whole response: a
        long stream is fine as long as it keeps streaming)."""
        headers = {"content-type": "application/json", "accept": "application/json"}
        if up.api_key:
            headers["authorization"] = f"Bearer {up.api_key}"
        payload = dict(body)
        payload["model"] = up.model_name
        timeout = aiohttp.ClientTimeout(
            total=None, connect=min(10.0, up.timeout), sock_read=up.timeout
        )
        try:
            resp = await self.session.post(
                f"{up.api_base}/chat/completions",
                data=orjson.dumps(payload),
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            )
        except aiohttp.ConnectionTimeoutError:
            raise _Transient(
                504, f"upstream {up.model} timed out connecting", code="upstream_timeout"
            ) from None
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise ProxyError(
                504, f"upstream {up.model} timed out", code="upstream_timeout"
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise _Transient(
                502,
                f"upstream {up.model} is unreachable: {type(exc).__name__}",
                code="upstream_unreachable",
            ) from None
        if resp.status >= 400:
            try:
                content = await resp.read()
            except (aiohttp.ClientError, TimeoutError):
                content = b""
            finally:
                resp.release()
            raise _upstream_error(resp.status, content, resp.headers, up.api_key)
        return resp

    async def complete(self, up: Upstream, body: Mapping[str, Any]) -> Completion:
        if up.transport == "litellm":
            return await self._attempts(lambda: self._litellm_complete(up, body))
        resp = await self._attempts(lambda: self._send(up, body))
        try:
            content = await resp.read()
        except (TimeoutError, aiohttp.ServerTimeoutError):
            resp.close()
            raise ProxyError(
                504, f"upstream {up.model} timed out", code="upstream_timeout"
            ) from None
        except aiohttp.ClientError as exc:  # the response started: never retried
            resp.close()
            raise ProxyError(
                502,
                f"upstream {up.model} broke off its response: {type(exc).__name__}",
                code="upstream_incomplete",
            ) from None
        resp.release()
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError:
            raise ProxyError(
                502, f"upstream {up.model} returned a malformed response", code="upstream_malformed"
            ) from None
        usage = normalize_usage(data.get("usage")) if isinstance(data, dict) else None
        return Completion(content, usage)

    async def stream(
        self, up: Upstream, body: Mapping[str, Any], client_wants_usage: bool
    ) -> UpstreamStream:
        """Open a stream; errors before the first byte raise ProxyError (a proper status)."""
        if up.transport == "litellm":
            return await self._litellm_stream(up, body, client_wants_usage)
        payload = dict(body)
        options = dict(payload.get("stream_options") or {})
        options["include_usage"] = True
        payload["stream_options"] = options
        # Retried only up to here: once the stream is returned, its bytes go to the client.
        resp = await self._attempts(lambda: self._send(up, payload))

        async def close() -> None:
            resp.close()  # a stream cut short must not go back to the pool half-read

        stream = UpstreamStream(close)
        stream.events = self._relay(resp, stream, client_wants_usage)
        return stream

    async def _relay(
        self, resp: aiohttp.ClientResponse, stream: UpstreamStream, client_wants_usage: bool
    ) -> AsyncGenerator[bytes, None]:
        buffer = b""
        try:
            async for chunk in resp.content.iter_any():
                buffer += chunk
                events, buffer = _split_events(buffer)
                for event in events:
                    out = self._inspect(event, stream, client_wants_usage)
                    if out:
                        yield out
            if not stream.completed:
                yield _error_event("the upstream stream ended before it was complete")
        except (aiohttp.ClientError, TimeoutError) as exc:
            yield _error_event(
                f"the upstream stream broke off before it was complete: {type(exc).__name__}"
            )
        finally:
            if stream.completed:
                resp.release()
            else:
                resp.close()

    @staticmethod
    def _inspect(event: bytes, stream: UpstreamStream, client_wants_usage: bool) -> bytes:
        """Capture usage from an event; drop or trim it when the client did not ask for it."""
        data = _event_data(event)
        if data is None:
            return event
        if data.strip() == b"[DONE]":
            stream.completed = True
            return event
        if b'"usage"' not in data:
            return event
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return event
        if not isinstance(obj, dict) or obj.get("usage") is None:
            return event
        stream.usage = normalize_usage(obj["usage"]) or stream.usage
        if client_wants_usage:
            return event
        if not obj.get("choices"):
            return b""  # the usage-only chunk the client did not ask for
        del obj["usage"]
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    # -- litellm ---------------------------------------------------------------------------

    def _litellm_kwargs(self, up: Upstream, body: Mapping[str, Any]) -> dict[str, Any]:
        kwargs = {k: v for k, v in body.items() if k not in ("model", "stream", "stream_options")}
        kwargs.update(up.extra)
        kwargs["model"] = up.model
        if up.api_base:
            kwargs["api_base"] = up.api_base
        if up.api_key:
            kwargs["api_key"] = up.api_key
        kwargs["timeout"] = up.timeout
        kwargs.setdefault("num_retries", 0)
        return kwargs

    async def _litellm_complete(self, up: Upstream, body: Mapping[str, Any]) -> Completion:
        litellm = await self.litellm()
        try:
            resp = await litellm.acompletion(**self._litellm_kwargs(up, body))
        except Exception as exc:  # litellm raises its own exception tree; map it
            raise _litellm_error(exc, up) from None
        data = resp.model_dump(exclude_none=True)
        return Completion(orjson.dumps(data), normalize_usage(data.get("usage")))

    async def _litellm_stream(
        self, up: Upstream, body: Mapping[str, Any], client_wants_usage: bool
    ) -> UpstreamStream:
        litellm = await self.litellm()
        kwargs = self._litellm_kwargs(up, body)
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}

        async def start() -> Any:
            try:
                return await litellm.acompletion(**kwargs)
            except Exception as exc:
                raise _litellm_error(exc, up) from None

        resp = await self._attempts(start)
        # Closing litellm's stream wrapper closes its HTTP response: without it, a client that
        # goes away would leave the provider's connection streaming into nothing.
        stream = UpstreamStream(getattr(resp, "aclose", None))

        async def events() -> AsyncGenerator[bytes, None]:
            try:
                async for chunk in resp:
                    data = chunk.model_dump(exclude_none=True)
                    usage = data.get("usage")
                    if usage:
                        stream.usage = normalize_usage(usage) or stream.usage
                        if not client_wants_usage:
                            if not data.get("choices"):
                                continue
                            del data["usage"]
                    yield b"data: " + orjson.dumps(data) + b"\n\n"
                stream.completed = True
                yield _DONE
            except Exception as exc:  # a failure mid-stream ends the stream with an error event
                yield _error_event(f"the upstream stream failed: {_litellm_error(exc, up).message}")

        stream.events = events()
        return stream


def _import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = importlib.import_module("litellm")
    setattr(litellm, "telemetry", False)  # noqa: B010 - no network calls of its own
    setattr(litellm, "suppress_debug_info", True)  # noqa: B010
    return litellm


def _litellm_error(exc: Exception, up: Upstream) -> ProxyError:
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    message = redact(str(getattr(exc, "message", None) or exc), up.api_key)
    if name == "ContextWindowExceededError":
        return ProxyError(400, message, code="context_length_exceeded")
    if name == "Timeout" or "Timeout" in name:
        return ProxyError(504, f"upstream {up.model} timed out", code="upstream_timeout")
    if name in ("APIConnectionError", "ServiceUnavailableError") and not isinstance(status, int):
        return _Transient(
            502, f"upstream {up.model} is unreachable: {message}", code="upstream_unreachable"
        )
    if isinstance(status, int) and 400 <= status < 600:
        headers = {}
        response = getattr(exc, "response", None)
        found = getattr(response, "headers", None) if response is not None else None
        upstream_headers: Mapping[str, str] = found if isinstance(found, Mapping) else {}
        retry = upstream_headers.get("retry-after")
        if retry:
            headers["retry-after"] = str(retry)
        if status in RETRY_STATUSES:
            return _Transient(
                status, message, headers=headers, retry_after=_retry_after(upstream_headers)
            )
        return ProxyError(status, message, headers=headers)
    return ProxyError(502, f"upstream {up.model} failed: {name}: {message}")
