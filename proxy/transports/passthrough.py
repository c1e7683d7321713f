"""Native passthrough over one pooled aiohttp client: the provider speaks the client's wire.

The fitted body goes out with only ``model`` rewritten to the provider's model name; every other
field is kept, and the provider's bytes come back unchanged. No translation, no per-call cost.

Why aiohttp and not httpx: measured side by side on the benchmark machine
(bench/profile_proxy.py), the same proxy path did 958 requests/s with aiohttp's client and 232
with httpx's at concurrency 16 (0.61 vs 2.65 ms of CPU per request); httpcore scans its whole
pool on every request. The passthrough is the hot path, so it gets the faster client.

Which wires a route's provider speaks natively, where they live under its API base, and how it
wants its key are this module's table (``_NATIVE``, ``_PATHS``): OpenAI-compatible providers take
chat completions (OpenAI itself also responses), Anthropic takes messages.

What a provider sends back is bounded (``routefit_settings.max_provider_body_bytes`` for a
whole answer, ``max_sse_event_bytes`` for one event of a stream): a provider over the bound is a
502 ``upstream_too_large`` (or its wire's error event, once the stream started) and its
connection is dropped, never a process that grows with what a provider chooses to send. An
error body is read only as far as its message can matter (``_ERROR_BODY_BYTES``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

from proxy.config import Upstream
from proxy.errors import ProxyError
from proxy.transports.base import (
    CHAT,
    MESSAGES,
    RESPONSES,
    Completion,
    Outbound,
    StreamBroken,
    Transient,
)
from proxy.transports.provider_errors import upstream_error
from proxy.transports.sse import MAX_EVENT_BYTES, split_stream

__all__ = ["ANTHROPIC_BASE", "ANTHROPIC_VERSION", "Passthrough", "native_wires", "url_for"]

ANTHROPIC_BASE = "https://api.anthropic.com"
#: Sent when the client named none: the version Anthropic's SDKs send today.
ANTHROPIC_VERSION = "2023-06-01"
#: The default bound of a whole provider answer.
MAX_BODY_BYTES = 64 * 1024 * 1024
#: An error body past this is cut (its message is near the start); it is never an answer.
_ERROR_BODY_BYTES = 64 * 1024


class BodyTooLarge(Exception):
    """A provider's body ran past its bound."""


async def read_bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, or ``BodyTooLarge`` as soon as it (or its announced length) is over
    ``limit``: nothing past the bound is buffered."""
    if resp.content_length is not None and resp.content_length > limit:
        raise BodyTooLarge
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        parts.append(chunk)
    return b"".join(parts)


async def read_prefix(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """At most the first ``limit`` bytes of the body (the rest is dropped with the connection)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        parts.append(chunk[: limit - size])
        size += len(parts[-1])
        if size >= limit:
            break
    return b"".join(parts)


def native_wires(up: Upstream) -> frozenset[str]:
    """The provider wires ``up`` accepts as they are."""
    if up.provider == "anthropic":
        return frozenset({MESSAGES})
    if up.transport != "openai":
        return frozenset()
    if up.provider == "openai":
        return frozenset({CHAT, RESPONSES})
    return frozenset({CHAT})


def url_for(up: Upstream, wire: str) -> str:
    """The provider's endpoint for ``wire`` under the route's API base."""
    if wire == MESSAGES:
        base = (up.api_base or ANTHROPIC_BASE).rstrip("/")
        return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"
    base = (up.api_base or "").rstrip("/")
    return f"{base}/responses" if wire == RESPONSES else f"{base}/chat/completions"


def _headers(up: Upstream, out: Outbound) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json"}
    if out.wire == MESSAGES:
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if up.api_key:
            headers["x-api-key"] = up.api_key
    elif up.api_key:
        headers["authorization"] = f"Bearer {up.api_key}"
    headers.update(out.headers)
    return headers


class _Events:
    """A provider's SSE response as complete events; a break raises ``StreamBroken``."""

    def __init__(self, resp: aiohttp.ClientResponse, max_event: int = MAX_EVENT_BYTES) -> None:
        self._resp = resp
        self._max_event = max_event
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for event in split_stream(self._resp.content.iter_any(), self._max_event):
                yield event
            self._done = True
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise StreamBroken(type(exc).__name__) from None

    async def aclose(self) -> None:
        # A stream read to its end goes back to the pool; one cut short must not.
        if self._done:
            self._resp.release()
        else:
            self._resp.close()


class Passthrough:
    """The pooled HTTP client of one app (created on the running loop, as aiohttp requires)."""

    def __init__(
        self,
        max_connections: int = 512,
        max_body: int = MAX_BODY_BYTES,
        max_event: int = MAX_EVENT_BYTES,
    ) -> None:
        self.max_connections = max_connections
        self.max_body = max_body
        self.max_event = max_event
        self._session: aiohttp.ClientSession | None = None

    def speaks(self, up: Upstream) -> frozenset[str]:
        return native_wires(up)

    def start(self) -> None:
        return None

    @property
    def ready(self) -> bool:
        return True

    @property
    def session(self) -> aiohttp.ClientSession:
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

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def complete(self, up: Upstream, out: Outbound) -> Completion:
        resp = await self._send(up, out)
        try:
            content = await read_bounded(resp, self.max_body)
        except BodyTooLarge:
            resp.close()
            raise ProxyError(
                502,
                f"upstream {up.model} sent an answer over {self.max_body:,} bytes "
                "(routefit_settings.max_provider_body_bytes)",
                code="upstream_too_large",
            ) from None
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
        return Completion(content, data)

    async def stream(self, up: Upstream, out: Outbound) -> _Events:
        return _Events(await self._send(up, out), self.max_event)

    async def _send(self, up: Upstream, out: Outbound) -> aiohttp.ClientResponse:
        """The provider's response once its headers arrived (body unread) — 2xx only.

        Failures before the headers are ``Transient`` when nothing can have been processed (the
        connection failed or was reset); an error status raises ``upstream_error``.
        ``up.timeout`` bounds connecting and every wait for bytes (not the whole response: a
        long stream is fine as long as it keeps streaming)."""
        payload: dict[str, Any] = dict(out.body)
        payload["model"] = up.model_name
        timeout = aiohttp.ClientTimeout(
            total=None, connect=min(10.0, up.timeout), sock_read=up.timeout
        )
        try:
            resp = await self.session.post(
                url_for(up, out.wire),
                data=orjson.dumps(payload),
                headers=_headers(up, out),
                timeout=timeout,
                allow_redirects=False,
            )
        except aiohttp.ConnectionTimeoutError:
            raise Transient(
                504, f"upstream {up.model} timed out connecting", code="upstream_timeout"
            ) from None
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise ProxyError(
                504, f"upstream {up.model} timed out", code="upstream_timeout"
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise Transient(
                502,
                f"upstream {up.model} is unreachable: {type(exc).__name__}",
                code="upstream_unreachable",
            ) from None
        if resp.status >= 400:
            try:
                content = await read_prefix(resp, _ERROR_BODY_BYTES)
            except (aiohttp.ClientError, TimeoutError):
                content = b""
            finally:
                # read to its end: back to the pool; cut at the bound: dropped
                if resp.content.at_eof():
                    resp.release()
                else:
                    resp.close()
            raise upstream_error(resp.status, content, resp.headers, up.api_key)
        return resp
