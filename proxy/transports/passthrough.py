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
from proxy.transports.sse import split_stream

__all__ = ["ANTHROPIC_BASE", "ANTHROPIC_VERSION", "Passthrough", "native_wires", "url_for"]

ANTHROPIC_BASE = "https://api.anthropic.com"
#: Sent when the client named none: the version Anthropic's SDKs send today.
ANTHROPIC_VERSION = "2023-06-01"


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

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for event in split_stream(self._resp.content.iter_any()):
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

    def __init__(self, max_connections: int = 512) -> None:
        self.max_connections = max_connections
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
        return Completion(content, data)

    async def stream(self, up: Upstream, out: Outbound) -> _Events:
        return _Events(await self._send(up, out))

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
                content = await resp.read()
            except (aiohttp.ClientError, TimeoutError):
                content = b""
            finally:
                resp.release()
            raise upstream_error(resp.status, content, resp.headers, up.api_key)
        return resp
